"""What every class holding a llama.cpp handle shares: closing it (the model, the grammar sampler),
and llama.cpp's last warning and error lines, which the error messages quote.

One class per native resource, closed by a context manager (the style of llama-cpp-python's
``_internals.py``); imports nothing of llama.cpp itself (its log callback, in
:mod:`localspec.backend.llama`, fills :data:`recent_errors`).
"""

from __future__ import annotations

#: llama.cpp's last warning and error log lines (at most 8, the newest last)
recent_errors: list[str] = []


def last_error() -> str:
    """``" (llama.cpp: <the newest error line>)"``, or ``""`` when llama.cpp logged none."""
    return f" (llama.cpp: {recent_errors[-1]})" if recent_errors else ""


class NativeResource:
    """A native handle freed by ``close()``: at the end of a ``with`` block, or by the garbage
    collector as a last resort. Subclasses free their handle in ``close()`` and make it safe to
    call twice."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
