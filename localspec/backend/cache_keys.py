"""What the backend's cached measurements are keyed by: the model file, this machine, the llama.cpp build.

The cost curves (:mod:`localspec.backend.calibration`) and the repack verdicts
(:mod:`localspec.backend.repack`) are measured once and kept under ``$LOCALSPEC_CACHE``; their
keys hold :func:`file_key` and :func:`machine_key`, so a measurement is taken again when the
model file, the machine or the llama.cpp build changes.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

from localspec.backend.llama import llama_cpp_version
from localspec.backend.machine import cpu_model


def file_key(path: str | os.PathLike) -> dict:
    """A file's identity for a cache key: ``{"path": resolved path, "size": bytes (-1 if missing),
    "mtime": seconds (0 if missing)}``."""
    p = Path(path)
    try:
        st = p.stat()
        size, mtime = st.st_size, int(st.st_mtime)
    except OSError:
        size, mtime = -1, 0
    return {"path": str(p.resolve()), "size": size, "mtime": mtime}


def machine_key() -> dict:
    """This machine and llama.cpp build, for cache keys: ``hostname``, ``cpu`` (model name),
    ``cpu_count``, ``platform`` and ``llama_cpp_python`` (the build, ``"?"`` where llama_cpp
    cannot be imported)."""
    try:
        build = llama_cpp_version()
    except Exception:  # pragma: no cover - llama_cpp missing (fake models in tests)
        build = "?"
    return {"hostname": socket.gethostname(), "cpu": cpu_model(), "cpu_count": os.cpu_count() or 0,
            "platform": platform.platform(), "llama_cpp_python": build}
