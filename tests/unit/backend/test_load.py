"""localspec.backend.load: the share of the CPUs other processes use."""

import os
import time

import pytest

from localspec.backend.load import CpuMeter


def test_cpu_meter_share_stays_within_0_and_1(monkeypatch):
    # /proc/stat counts clock ticks (10 ms): over 5 ms, 3 ticks of other processes on 2 CPUs would be
    # a share of 3.0; a share is a fraction of the CPUs, so it is capped at 1 (and floored at 0)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    states = iter([(0, 0, 0.0), (100, 10, 50.000), (103, 10, 50.005), (100, 10, 60.0), (100, 12, 61.0)])
    monkeypatch.setattr(CpuMeter, "_state", staticmethod(lambda: next(states)))
    meter = CpuMeter()
    meter.start()
    assert meter.other_fraction() == 1.0
    meter.start()
    assert meter.other_fraction() == 0.0


def test_a_child_counted_as_ours_is_not_other_load():
    """A model's child process (IsolatedModel) burning the CPU is this model's work: with its pid in
    ``also`` the meter does not count it as other processes' share; without, it does (the difference
    is the child's own CPU time over the interval, read from /proc, whatever else runs)."""
    import subprocess
    import sys

    from localspec.backend.load import CpuMeter

    def ticks(pid):
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        return int(st[11]) + int(st[12])

    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
    try:
        time.sleep(0.3)
        c0, t0 = ticks(child.pid), time.monotonic()
        ours, theirs = CpuMeter(also=[child.pid]), CpuMeter()
        time.sleep(1.0)
        with_child, without = ours.other_fraction(), theirs.other_fraction()
        c1, t1 = ticks(child.pid), time.monotonic()
    finally:
        child.kill()
        child.wait()
    share = (c1 - c0) / (os.sysconf("SC_CLK_TCK") * (t1 - t0) * (os.cpu_count() or 1))
    assert share > 0.05  # the child ran
    assert without - with_child == pytest.approx(share, abs=0.05)
    assert CpuMeter(blind=True).other_fraction() is None
