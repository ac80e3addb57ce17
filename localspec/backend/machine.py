"""What the machine is: CPU model and the vector extensions llama.cpp's kernels can use.

The cost of a verification pass relative to one token differs a lot between CPUs (with
and without AVX-512), so every benchmark and calibration names the CPU it ran on.
Linux reads ``/proc/cpuinfo``; elsewhere :func:`platform.processor` and no flags.
"""

from __future__ import annotations

import functools
import os
import platform

#: CPU flags (``/proc/cpuinfo``) that matter for llama.cpp's matrix kernels, in this order
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
                "asimd", "asimddp", "asimdhp", "i8mm", "sve", "sve2", "bf16")


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
