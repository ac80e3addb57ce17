"""What the machine is: CPU model and the vector extensions llama.cpp's kernels can use.

The cost of a verification pass relative to one token differs a lot between CPUs (with
and without AVX-512), so every benchmark and calibration names the CPU it ran on.
Linux reads ``/proc/cpuinfo``; elsewhere :func:`platform.processor` and no flags.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from typing import Sequence, TypeVar

T = TypeVar("T")

#: CPU flags (``/proc/cpuinfo``) that matter for llama.cpp's matrix kernels, in this order
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
                "asimd", "asimddp", "asimdhp", "i8mm", "sve", "sve2", "bf16")


def run_order(items: Sequence[T], repeat: int) -> list[T]:
    """Who goes first in repetition ``repeat`` (0-based): ``items`` in order on even
    repetitions, reversed on odd ones, so that over a pair of repetitions no mode (no race
    side) always runs first, with warm caches and CPU clocks favouring none. The bench
    (:func:`localspec.bench.run_bench`) and the TUI's race use this one rule."""
    return list(items) if repeat % 2 == 0 else list(reversed(items))


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (runnable processes), or None where the platform has none."""
    try:
        return list(os.getloadavg())
    except (OSError, AttributeError):  # pragma: no cover - not on every platform
        return None


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "hardware", "cpu model") and not model:
                    model = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor() or platform.machine() or "unknown", frozenset(flags)


def cpu_model() -> str:
    """The CPU's model name, e.g. ``"AMD EPYC 7763 64-Core Processor"``."""
    return _cpuinfo()[0]


def vector_extensions() -> list[str]:
    """The CPU's vector extensions among :data:`VECTOR_FLAGS` (empty where flags are unknown)."""
    flags = _cpuinfo()[1]
    return [f for f in VECTOR_FLAGS if f in flags]


def has_avx512() -> bool | None:
    """Whether the CPU has AVX-512 (None where the flags are unknown)."""
    flags = _cpuinfo()[1]
    return None if not flags else "avx512f" in flags


def machine_info() -> dict:
    """CPU model, vector extensions, CPU count and llama.cpp's own system info, for JSON reports."""
    from localspec.backend.llama import llama_cpp_version, system_info
    from localspec.backend.hugepages import thp_mode

    return {"cpu": cpu_model(), "vector_extensions": vector_extensions(), "avx512": has_avx512(),
            "cpu_count": os.cpu_count(), "llama_cpp": llama_cpp_version(), "llama_cpp_system_info": system_info(),
            "transparent_huge_pages": thp_mode()}


def describe() -> str:
    """One line for table headers: ``CPU <model> (<n> CPUs; avx2 fma ...; no AVX-512)``."""
    ext = vector_extensions()
    avx = has_avx512()
    tail = "" if avx is None else ("; AVX-512" if avx else "; no AVX-512")
    return f"CPU {cpu_model()} ({os.cpu_count()} CPUs; {' '.join(ext) or 'flags unknown'}{tail})"


#: share of all CPUs that other processes may use while timings are taken; above it they are
#: disturbed (a 2-core machine running one more busy process decodes at half speed)
BUSY_THRESHOLD = 0.15


class CpuMeter:
    """CPU time used by *other* processes (Linux ``/proc``): the machine's busy time minus ours.

    ``other_fraction()`` is the share of all CPUs other processes used since the last
    ``start()``; None where ``/proc`` is not available.
    """

    def __init__(self) -> None:
        self._t0 = self._state()

    @staticmethod
    def _state():
        try:
            with open("/proc/stat") as f:
                parts = f.readline().split()[1:]
            vals = [int(x) for x in parts[:8]]
            busy = sum(vals) - vals[3] - vals[4]  # minus idle and iowait
            with open("/proc/self/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            mine = int(st[11]) + int(st[12])  # utime + stime of every thread, clock ticks
            return busy, mine, time.monotonic()
        except (OSError, ValueError, IndexError):
            return None

    def start(self) -> None:
        self._t0 = self._state()

    def other_fraction(self) -> float | None:
        t1 = self._state()
        if t1 is None or self._t0 is None:
            return None
        busy, mine, wall = (a - b for a, b in zip(t1, self._t0))
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        total = wall * hz * (os.cpu_count() or 1)
        # /proc/stat counts in clock ticks (10 ms): over a short interval the share can round past 1
        return min(1.0, max(0.0, (busy - mine) / total)) if total > 0 else None


def machine_is_quiet(seconds: float = 1.0, threshold: float = BUSY_THRESHOLD) -> bool:
    """Whether other processes use under ``threshold`` of the CPUs over the next ``seconds`` (True where unknown)."""
    meter = CpuMeter()
    time.sleep(seconds)
    f = meter.other_fraction()
    return f is None or f < threshold


def file_key(path) -> dict:
    """A file's identity for a cache key: resolved path, size (bytes, -1 if missing) and mtime (seconds)."""
    from pathlib import Path

    p = Path(path)
    try:
        st = p.stat()
        size, mtime = st.st_size, int(st.st_mtime)
    except OSError:
        size, mtime = -1, 0
    return {"path": str(p.resolve()), "size": size, "mtime": mtime}


def machine_key() -> dict:
    """This machine and llama.cpp build, for cache keys: measurements are redone when either changes."""
    try:
        from localspec.backend.llama import llama_cpp_version

        build = llama_cpp_version()
    except Exception:  # pragma: no cover - llama_cpp missing (fake models in tests)
        build = "?"
    import socket

    return {"hostname": socket.gethostname(), "cpu": cpu_model(), "cpu_count": os.cpu_count() or 0,
            "platform": platform.platform(), "llama_cpp_python": build}
