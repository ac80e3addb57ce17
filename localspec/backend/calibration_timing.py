"""Calibration's timing steps: filler tokens, a cache filled to a length, the median time of a decode.

Why these hold together: every sample calibration takes is made by these few steps, on any model
with ``decode``/``truncate``/``n_cached`` (a :class:`~localspec.backend.llama.LlamaModel` or its
isolated proxy), with the progress ticks and the CPU meter that say how a measurement went;
:mod:`localspec.backend.calibration` decides what to time and keeps the result.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from localspec.backend.load import CpuMeter

#: (what is measured, steps done, steps in all) -> None: calibration progress for a front-end
StepFn = Callable[[str, int, int], None]


def ticker(progress: "StepFn | None", what: str, total: int) -> Callable[[], None]:
    """``tick()`` for one measurement of ``total`` steps: reports ``progress(what, done, total)``
    (0 at once, then after each step)."""
    done = [0]
    if progress:
        progress(what, 0, total)

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(what, min(done[0], total), total)

    return tick


def model_name(model) -> str:
    return Path(str(getattr(model, "path", "model"))).name


def cpu_meter(model) -> CpuMeter:
    """The meter of other processes' CPU share while ``model`` is timed: its own child process
    (:class:`~localspec.backend.isolated.IsolatedModel`) counts as this process. RPC workers on this
    machine (loopback) do the passes' work, so no share can be told apart: the meter then reports
    nothing (None) and the curve is not judged disturbed."""
    loopback = any(ep.startswith(("127.", "localhost:")) for ep in getattr(model, "rpc", ()))
    return CpuMeter(also=getattr(model, "child_pids", ()), blind=loopback)


def filler_tokens(model, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    hi = max(2, min(model.n_vocab, 30000))
    toks = [int(t) for t in rng.integers(1, hi, size=n)]
    return [t if not model.is_eog(t) else 1 for t in toks]


#: a batch size whose first samples differ by more than this fraction is timed once more (median of 3):
#: for a disturbed sample, not this VM's minute-to-minute variation of ~15 % (at 10 %, half the points
#: of a quiet calibration were timed a third time)
SPREAD = 0.20


def time_points(model, toks: Sequence[int], base: int, points: Sequence[int], repeats: int,
                 tick: Callable[[], None] | None = None, given: dict[int, list[float]] | None = None) -> list[float]:
    """Median seconds of a decode of b tokens (logits for all) with ``base`` cached, for each b in
    ``points`` (each <= len(toks)); ``tick`` is called after each repetition.

    ``repeats`` repetitions, alternating forwards and backwards over the points; then each point
    whose samples differ by more than :data:`SPREAD` is timed once more, so that one disturbed
    sample does not decide a median of two. ``given[b]``: samples of b already timed the same
    way (same model, settings and ``base``; :func:`~localspec.backend.calibration.compare_flash_attn`'s); each counts as one of
    b's repetitions.
    """
    samples: list[list[float]] = [list((given or {}).get(b, ())) for b in points]
    if any(len(s) < max(1, repeats) for s in samples):
        model.decode(toks[:1], logits_for="all")  # warm up
        model.truncate(base)

    def once(j: int) -> None:
        t0 = time.perf_counter()
        model.decode(toks[: points[j]], logits_for="all")
        samples[j].append(time.perf_counter() - t0)
        model.truncate(base)

    for r in range(max(1, repeats)):
        for j in (range(len(points)) if r % 2 == 0 else range(len(points) - 1, -1, -1)):
            if len(samples[j]) <= r:
                once(j)
        if tick:
            tick()
    for j, s in enumerate(samples):
        if len(s) >= 2 and max(s) > (1.0 + SPREAD) * min(s):
            once(j)
    return [float(np.median(s)) for s in samples]


def fill_to(model, c: int, seed: int) -> tuple[int, float]:
    """Make the model's cache hold exactly ``c`` tokens: cut a longer one, or decode filler tokens.

    Returns:
        (tokens decoded, seconds they took); (0, 0.0) when the cache was cut or already held ``c``.
    """
    base = model.n_cached
    if base >= c:
        model.truncate(c)
        return 0, 0.0
    t0 = time.perf_counter()
    model.decode(filler_tokens(model, c - base, seed=seed), logits_for=())
    return c - base, time.perf_counter() - t0
