"""localspec.backend.load: the share of the CPUs other processes use."""

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
