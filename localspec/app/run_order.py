"""Who goes first: the one ordering rule of every side-by-side timing (the bench, the TUI's race).

Here, in the layer the front-ends share, because the bench (:mod:`localspec.bench.runner`) and
the TUI's race (:mod:`localspec.tui.app`) both use it and the TUI may not import the bench.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")


def run_order(items: Sequence[T], repeat: int) -> list[T]:
    """Who goes first in repetition ``repeat`` (0-based): ``items`` in order on even
    repetitions, reversed on odd ones, so that over a pair of repetitions no mode (no race
    side) always runs first, with warm caches and CPU clocks favouring none. The bench
    (:func:`localspec.bench.run_bench`) and the TUI's race use this one rule.

    Returns:
        A new list of the same items.
    """
    return list(items) if repeat % 2 == 0 else list(reversed(items))
