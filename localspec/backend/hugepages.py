"""Model weights in transparent huge pages (Linux).

Decoding one token streams every weight of the model through the CPU once. Mapped from
the GGUF file (llama.cpp's default, ``mmap``), the weights sit in 4 KiB pages: a 1.1 GB
model is some 270,000 pages, far more than the TLB holds, so the stream also walks page
tables. Read into anonymous memory instead (llama.cpp's ``LLAMA_LOAD_MODE_NONE``) and
collapsed into 2 MiB transparent huge pages, the same weights need about 530 TLB entries.

Measured side by side in one process (``scripts/bench_huge_pages.py``; AMD EPYC, 2 vCPUs,
AVX2, no AVX-512, Qwen2.5-Coder-1.5B Q4_K_M, one token per ``llama_decode``): time per token
in huge pages / mapped from the file, medians of alternating blocks of 48 tokens, 0.93, 0.96
and 0.94 in three runs; read into memory but left in small pages, 1.00, 0.95 and 0.97. So
part of the gain may come from the copy in anonymous memory itself, the rest from the page
size; both are what this module asks for.

How: the regions llama.cpp allocates while loading are found by comparing
``/proc/self/smaps`` before and after (new regions, and old ones that gained resident
memory), then ``madvise(MADV_HUGEPAGE)`` marks them and
``madvise(MADV_COLLAPSE)`` (Linux 6.1) moves them into huge pages at once. Nothing here
raises: where the kernel, its settings (``/sys/kernel/mm/transparent_hugepage/enabled`` =
``never``) or the platform do not allow it, the weights simply stay in small pages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from contextlib import contextmanager
from typing import Iterator

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
HUGE_PAGE = 2 << 20  #: bytes in one x86-64 / arm64 (4 KiB base pages) transparent huge page
THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode() -> str | None:
    """The kernel's transparent-huge-page mode: ``"always"``, ``"madvise"``, ``"never"``, or None off Linux."""
    try:
        with open(THP_SETTING, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def available() -> bool:
    """Whether huge pages can be asked for here (Linux, THP mode ``always`` or ``madvise``)."""
    return sys.platform.startswith("linux") and thp_mode() in ("always", "madvise")


def anonymous_regions() -> dict[tuple[int, int], int]:
    """This process's private anonymous read-write mappings: (start, end) address -> resident bytes.

    The ``[heap]`` counts as one: malloc may serve a large request from it (growing it, or
    from free space already there), so a region counts as new when it appears, changes its
    bounds, or gains resident memory (see :func:`new_regions`). Read from ``/proc/self/smaps``.
    """
    regions: dict[tuple[int, int], int] = {}
    current: tuple[int, int] | None = None
    try:
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
            for line in f:
                head = line.split(maxsplit=5)
                if head and "-" in head[0] and len(head) >= 5 and head[0][0] in "0123456789abcdef":
                    current = None
                    name = head[5].strip() if len(head) == 6 else ""
                    if head[1].startswith("rw") and head[4] == "0" and name in ("", "[heap]"):
                        lo, _, hi = head[0].partition("-")
                        current = (int(lo, 16), int(hi, 16))
                        regions[current] = 0
                elif current is not None and line.startswith("Rss:"):
                    regions[current] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return regions


def _madvise():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def collapse(regions: set[tuple[int, int]] | list[tuple[int, int]], min_bytes: int = 4 * HUGE_PAGE) -> int:
    """Ask the kernel to back ``regions`` with huge pages now.

    Each region of at least ``min_bytes`` is trimmed to whole huge pages, marked
    ``MADV_HUGEPAGE`` and collapsed with ``MADV_COLLAPSE``. Never raises.

    Returns:
        bytes of the regions whose collapse the kernel reported done (0 where not supported).
    """
    if not available():
        return 0
    try:
        madvise = _madvise()
    except (OSError, AttributeError):  # pragma: no cover - no libc madvise
        return 0
    done = 0
    for lo, hi in sorted(regions):
        start = -(-lo // HUGE_PAGE) * HUGE_PAGE
        end = hi // HUGE_PAGE * HUGE_PAGE
        if end - start < min_bytes:
            continue
        if madvise(start, end - start, MADV_HUGEPAGE) != 0:
            continue
        if madvise(start, end - start, MADV_COLLAPSE) == 0:
            done += end - start
    return done


@contextmanager
def new_regions(min_growth: int = 4 * HUGE_PAGE) -> Iterator[list[tuple[int, int]]]:
    """Collect the anonymous regions that appear, change bounds, or gain at least ``min_growth``
    resident bytes while the ``with`` block runs.

    Yields a list that is filled when the block ends.
    """
    before = anonymous_regions()
    found: list[tuple[int, int]] = []
    try:
        yield found
    finally:
        after = anonymous_regions()
        found.extend(sorted(r for r, rss in after.items() if r not in before or rss - before[r] >= min_growth))


def huge_page_bytes() -> int | None:
    """Bytes of this process's memory in transparent huge pages (``AnonHugePages``), None if unknown."""
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
