"""How busy the machine is: the share of the CPUs other processes use, and the load average.

Timings taken while other programs use the CPUs are off (a 2-core machine running one more
busy process decodes at half speed), so calibration, the bench and the server's re-measure
check meter the load with :class:`CpuMeter` and compare it with :data:`BUSY_THRESHOLD`.
Linux ``/proc``; elsewhere the meter answers None (unknown).
"""

from __future__ import annotations

import os
import time
from typing import Sequence

#: share of all CPUs that other processes may use while timings are taken; above it they are
#: disturbed (a 2-core machine running one more busy process decodes at half speed)
BUSY_THRESHOLD = 0.15


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (runnable processes), or None where the platform has none."""
    try:
        return list(os.getloadavg())
    except (OSError, AttributeError):  # pragma: no cover - not on every platform
        return None


class CpuMeter:
    """CPU time used by *other* processes (Linux ``/proc``): the machine's busy time minus ours.

    ``other_fraction()`` is the share of all CPUs other processes used since the last
    ``start()`` (or since the meter was made); None where ``/proc`` is not available.
    """

    def __init__(self, also: Sequence[int] = (), blind: bool = False) -> None:
        self.also = tuple(also)  # processes whose CPU counts as ours (a model's child process)
        self.blind = blind  # others' work cannot be told from ours (RPC workers on this machine): report None
        self._t0 = self._state()

    def _state(self):
        try:
            with open("/proc/stat") as f:
                parts = f.readline().split()[1:]
            vals = [int(x) for x in parts[:8]]
            busy = sum(vals) - vals[3] - vals[4]  # minus idle and iowait
            mine = 0
            for pid in ("self", *self.also):
                with open(f"/proc/{pid}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
                mine += int(st[11]) + int(st[12])  # utime + stime of every thread, clock ticks
            return busy, mine, time.monotonic()
        except (OSError, ValueError, IndexError):
            return None

    def start(self) -> None:
        """Start a new interval now."""
        self._t0 = self._state()

    def other_fraction(self) -> float | None:
        """The share of all CPUs, in [0, 1], that other processes used since :meth:`start`; None where unknown."""
        t1 = self._state()
        if t1 is None or self._t0 is None or self.blind:
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
