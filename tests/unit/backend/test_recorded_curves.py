"""The measured cost curves kept in ``tests/data/cpu-curves`` (for replaying policies against CPUs the
suite does not run on) load with calibration's own reader and are curves a policy can use."""

from pathlib import Path

import numpy as np
import pytest

from localspec.app.catalog import load_catalog
from traces import CURVES, curve_files, load_curve, recorded_curves

#: calibration measures the draft model at b = 1, 2 only (it drafts one token a pass, plus its catch-up)
_DRAFT_STEMS = {Path(load_catalog().models[load_catalog().default.draft].hf_file).stem}


def test_every_cpu_kind_has_its_row_in_the_readme():
    readme = (CURVES / "README.md").read_text()
    cpus = {cpu for cpu, _, _ in recorded_curves()}
    assert cpus and all(f"`{cpu}_`" in readme for cpu in cpus), cpus


@pytest.mark.parametrize("path", curve_files(), ids=lambda p: p.stem)
def test_a_recorded_curve_loads_and_is_usable(path):
    costs = load_curve(path)
    cpu, _, rest = path.stem.partition("_")
    model = rest.rsplit("_ctx", 1)[0]
    n = 2 if model in _DRAFT_STEMS else 65
    assert len(costs.seconds) >= n, f"covers b = 1..{len(costs.seconds)}, not 1..{n}"
    assert costs.measured and not costs.disturbed
    assert len(costs.curves) == len(costs.contexts) >= 1 and costs.curves[0] == costs.seconds
    for curve in costs.curves:
        c = np.asarray(curve)
        assert (c > 0).all()
        assert (np.diff(c) >= 0).all(), "the fitted curve decreases in b"
    assert [costs.t(b) for b in range(1, n + 1)] == costs.seconds[:n]
    key = costs.key
    assert key["cpu"] and key["cpu"] != "?", "no CPU description"
    assert key["hostname"] == "-" and key["path"] == Path(key["path"]).name == model + ".gguf"
    assert path.stem.endswith(f"_ctx{key['n_ctx']}_t{key['n_threads']}")
