"""localspec.backend.calibration: measuring and caching this machine's costs (EngineCosts, ModelCosts) on a fake model."""

from __future__ import annotations

import json
import sys

import pytest

from localspec.backend.calibration import (
    ModelCosts,
    cost_cache_path,
    default_curve,
    load_costs,
    measure_decode_costs,
    save_costs,
)
from localspec.core.costmodel import EngineCosts

from cost_curves import FLAT_CURVE, T1, costs_for


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """Every measurement here counts as quiet (these tests run beside others on a shared machine, and
    a disturbed measurement is not cached); the test of disturbed ones sets its own CPU shares."""
    import localspec.backend.calibration as cal

    monkeypatch.setattr(cal, "BUSY_THRESHOLD", 1.01)


def test_catchup_cost_estimate_follows_observed_catchups():
    costs = costs_for(FLAT_CURVE, draft_token=T1 * 0.5)
    # before any catch-up: one draft token scaled by the target curve's cost per token at b=9
    assert costs.draft_prefill_token_seconds == pytest.approx(T1 * 0.5 * FLAT_CURVE[-1] / (9 * T1))
    costs.observe_catchup(500, 1.0)
    assert costs.draft_prefill_token_seconds == pytest.approx(0.002)  # the first observation replaces it
    costs.observe_catchup(100, 0.4)
    assert 0.002 < costs.draft_prefill_token_seconds < 0.004


def test_default_curve():
    c = default_curve(0.01, 6)
    assert c[0] == pytest.approx(0.01)
    assert c[1] == pytest.approx(0.0168)
    assert c[5] == pytest.approx(0.01 * (3.21 + (5.95 - 3.21) / 3))


class _FakeModel:
    """Times nothing real: decode sleeps nothing, tracks the cache like LlamaModel."""

    n_vocab = 1000
    n_threads = 2
    n_batch = 512
    n_gpu_layers = 0

    def __init__(self, path):
        self.path = path
        self.cached_tokens = [5, 6, 7]

    @property
    def n_cached(self):
        return len(self.cached_tokens)

    def is_eog(self, t):
        return False

    def decode(self, tokens, logits_for="last", progress=None):
        self.cached_tokens.extend(tokens)

    def truncate(self, n):
        del self.cached_tokens[n:]


def test_measure_reports_its_progress_in_steps(tmp_path, monkeypatch):
    """A front-end sees 0 at once, then one step per repetition per context and one for the fill to the
    longer context (the longest wait of a calibration), ending at the total."""
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    seen = []
    measure_decode_costs(_FakeModel(f), 4, repeats=3, contexts=[8, 40], progress=lambda *a: seen.append(a))
    assert [d for _, d, _ in seen] == list(range(8)) and {t for _, _, t in seen} == {7}
    assert all("m.gguf" in what for what, _, _ in seen)


def test_measure_restores_cache_and_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    m = _FakeModel(f)
    costs = measure_decode_costs(m, 4, repeats=2)
    assert m.cached_tokens == [5, 6, 7]
    assert len(costs.seconds) == 4
    assert load_costs(m, 4) is None
    path = save_costs(costs)
    assert path == cost_cache_path(costs.key)
    assert json.loads(path.read_text())["key"]["n_threads"] == 2
    assert load_costs(m, 4).seconds == costs.seconds
    assert load_costs(m, 5) is None  # does not cover b = 5
    m.n_threads = 1  # other settings: another cache entry
    assert load_costs(m, 4) is None


def test_a_calibration_under_load_is_used_once_and_never_saved(tmp_path, monkeypatch):
    # a calibration taken while other processes used the CPUs is not trusted beyond its own run: a
    # poisoned cache (T(1) = 1.13 s measured under load, 12x the quiet value) once stayed valid
    # forever, and later a flat curve measured under contention (every pass ~3.2 s) was reused by
    # servers started while the machine was briefly busy, so chat ran at half speed
    import localspec.backend.calibration as cal

    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    m = _FakeModel(f)
    measured = []
    busy = [0.6, 0.01, 0.7]  # under load, then quiet, then under load again

    def fake_calibrate(model, max_batch, repeats=2, contexts=None, progress=None):
        other = busy[len(measured)]
        measured.append(other)
        return ModelCosts(seconds=[0.1 * (b + 1) for b in range(max_batch)], key=cal.model_cost_key(model),
                          measured=True, other_cpu=other)

    monkeypatch.setattr(cal, "calibrate_model", fake_calibrate)
    monkeypatch.setattr(cal, "BUSY_THRESHOLD", 0.15)
    first = cal.get_costs(m, 4)
    assert first.disturbed and "DISTURBED" in cal.describe_costs(first) and "not saved" in cal.describe_costs(first)
    assert load_costs(m, 4) is None and cal.cached_engine_costs(m, None, 3) is None  # not in the cache
    again = cal.get_costs(m, 4)
    assert len(measured) == 2 and not again.disturbed  # the next load measured again, quiet this time
    assert load_costs(m, 4).other_cpu == pytest.approx(0.01) and "DISTURBED" not in cal.describe_costs(again)
    assert cal.get_costs(m, 4).other_cpu == pytest.approx(0.01) and len(measured) == 2  # a clean one stays
    assert cal.get_costs(m, 4, remeasure=True).disturbed and len(measured) == 3  # asked again, under load:
    assert load_costs(m, 4).other_cpu == pytest.approx(0.01)  # ... the good measurement is not overwritten
    # a disturbed file in the cache (written by an older version) is not used either
    path = cost_cache_path(first.key)
    path.write_text(json.dumps(first.to_json()))
    assert load_costs(m, 4) is None


def test_the_draft_models_short_curve_never_replaces_a_longer_cached_one(tmp_path, monkeypatch):
    # a target and a draft model that are one file with the same settings share one cache entry:
    # re-measuring the draft's b = 1, 2 used to overwrite the target's curve, measured again next load
    import localspec.backend.calibration as cal

    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    m = _FakeModel(f)

    def fake_calibrate(model, max_batch, repeats=2, contexts=None, progress=None):
        return ModelCosts(seconds=[0.1 * (b + 1) for b in range(max_batch)], key=cal.model_cost_key(model),
                          measured=True, other_cpu=0.0)

    monkeypatch.setattr(cal, "calibrate_model", fake_calibrate)
    assert len(cal.get_costs(m, 9).seconds) == 9  # the target's
    draft = cal.get_costs(m, 2, remeasure=True, keep_longer=True)
    assert len(draft.seconds) == 2  # measured and used...
    assert len(load_costs(m, 9).seconds) == 9  # ... but the target's longer curve stays on disk
    cal.get_costs(m, 2, remeasure=True)  # without keep_longer (the target re-measured at a lower cap): replaced
    assert load_costs(m, 9) is None and len(load_costs(m, 2).seconds) == 2
    ec = cal.engine_costs(m, m, 8, remeasure=True)  # the engine: target 9, then the draft's 2 keep the 9
    assert len(ec.verify) == 9 and len(load_costs(m, 9).seconds) == 9


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="other processes' CPU is read from Linux's /proc")
def test_measure_records_other_processes_cpu(tmp_path, monkeypatch):
    """On Linux the share is always known (a number in [0, 1]), and it survives the cost cache's JSON."""
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    costs = measure_decode_costs(_FakeModel(f), 3, repeats=1)
    assert isinstance(costs.other_cpu, float) and 0.0 <= costs.other_cpu <= 1.0, costs.other_cpu
    assert ModelCosts.from_json(costs.to_json()).other_cpu == costs.other_cpu


def test_curve_interpolates_and_extrapolates_by_position():
    short, long_ = [1.0, 2.0, 3.0], [2.0, 3.0, 5.0]
    mc = ModelCosts(seconds=short, contexts=[100, 1100], curves=[short, long_])
    assert mc.curve_at(None) == short and mc.curve_at(10) == short
    assert mc.curve_at(600) == pytest.approx([1.5, 2.5, 4.0])
    assert mc.curve_at(2100) == pytest.approx([3.0, 4.0, 7.0])  # linear in the context beyond it
    assert mc.t(3, 1100) == 5.0 and mc.t(4, 1100) == pytest.approx(7.0)
    back = ModelCosts.from_json(json.loads(json.dumps(mc.to_json())))
    assert back.contexts == [100, 1100] and back.curves == [short, long_]


def test_engine_costs_learn_a_ratio_at_any_position():
    short, long_ = [1.0, 2.0, 3.0], [2.0, 4.0, 6.0]
    mc = ModelCosts(seconds=short, contexts=[100, 1100], curves=[short, long_])
    costs = EngineCosts(verify=list(short), draft_token=None, target=mc, draft=None)
    costs.set_position(1100)
    for _ in range(40):
        costs.observe_verify(2, 2.0)  # b = 2 at 1,100 tokens takes half the calibrated time
    assert costs.verify[1] == pytest.approx(2.0, rel=0.02)
    costs.set_position(100)
    assert costs.verify[1] == pytest.approx(1.0, rel=0.02)  # the same ratio applied at the other position
    assert costs.verify[0] == pytest.approx(0.5, rel=0.05)  # unobserved b: the overall scale


class _FlashFakeModel(_FakeModel):
    """A fake whose decode advances a fake clock: 1 ms per token, plus per cached token 50 us (off) or 25 us (on)."""

    clock = [0.0]
    n_ctx = 4096

    def __init__(self, path):
        super().__init__(path)
        self.flash_attn = False
        self.flash_attn_mode = "auto"
        self.switches = 0

    def set_flash_attn(self, on):
        if on != self.flash_attn:
            self.switches += 1
            self.cached_tokens = []
        self.flash_attn = on

    def decode(self, tokens, logits_for="last", progress=None):
        per_cached = 25e-6 if self.flash_attn else 50e-6
        self.clock[0] += len(tokens) * (1e-3 + per_cached * len(self.cached_tokens))
        self.cached_tokens.extend(tokens)


def test_calibration_measures_two_contexts_and_keeps_the_faster_flash_attn(tmp_path, monkeypatch):
    from localspec.backend import calibration

    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: _FlashFakeModel.clock[0])
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    m = _FlashFakeModel(f)
    timed = []  # (flash attention, tokens cached, tokens decoded) of each decode with logits for all
    decode = m.decode

    def logged(tokens, logits_for="last", progress=None):
        if logits_for == "all":
            timed.append((m.flash_attn, len(m.cached_tokens), len(tokens)))
        decode(tokens, logits_for, progress)

    m.decode = logged
    costs = calibration.get_costs(m, 5, repeats=1)
    short, long_ = calibration.SHORT_CONTEXT, calibration.LONG_CONTEXT
    assert costs.contexts == [short, long_] == [16, 2048]
    assert m.flash_attn is True and costs.flash_attn is True
    assert costs.flash_attn_scores["on"] == 1.0 < costs.flash_attn_scores["off"]
    assert costs.curves[0][0] == pytest.approx(1e-3 + 25e-6 * short)
    assert costs.curves[1][4] == pytest.approx(5 * (1e-3 + 25e-6 * long_))
    assert costs.prefill_token_seconds == pytest.approx(1e-3 + 25e-6 * short, rel=1e-6)
    # b = 1 and 5 at the short context were timed once per setting while comparing, and those of the
    # chosen setting (on) count for the curve: the curve's own pass times only 2, 3 and 4 there
    at_short_on = [b for fa, c, b in timed if fa and c == short]
    assert at_short_on == [1, 1, 5, 1, 2, 3, 4]  # (warm-up, 1, 5) comparing, then (warm-up, 2, 3, 4)
    assert costs.key["flash_attn"] == "auto"
    # a new model object of the same file and settings: the cached choice is applied without measuring
    m2 = _FlashFakeModel(f)
    assert calibration.apply_cached_flash_attn(m2) is True and m2.flash_attn is True
    m2.flash_attn_mode = "off"  # asked explicitly: another cache entry, measured as asked
    assert calibration.load_costs(m2, 5) is None


def test_flash_attn_scores_weigh_decode_and_verification_alike():
    from localspec.backend.calibration import flash_attn_scores

    # on: 10 % slower for one token, half the time for a full pass -> on
    sc = flash_attn_scores({"off": [1.0, 10.0], "on": [1.1, 5.0]})
    assert sc == pytest.approx({"off": 1.5, "on": 1.05})
    # on: 10 % slower for one token, 5 % faster for the pass -> off (a big pass does not outweigh decoding)
    sc = flash_attn_scores({"off": [1.0, 10.0], "on": [1.1, 9.5]})
    assert sc["off"] < sc["on"]
    assert flash_attn_scores({"off": [2.0, 3.0]}) == {"off": 1.0}  # one setting (the other failed): fastest


def test_flash_attn_comparison_takes_turns_and_a_burst_of_load_does_not_decide(tmp_path, monkeypatch):
    """On is 2 % slower; a neighbour triples every pass of off's first visit. The settings take
    turns and keep their fastest sample, so off is kept; and on, 2 % faster, is not worth a switch
    (FLASH_ATTN_MARGIN), while 10 % faster is."""
    from localspec.backend import calibration

    monkeypatch.setattr(calibration.time, "perf_counter", lambda: _FlashFakeModel.clock[0])
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)

    class Bursty(_FlashFakeModel):
        def __init__(self, path, on_factor, burst=3.0):
            super().__init__(path)
            self.on_factor, self.visits, self.burst = on_factor, [], burst

        def set_flash_attn(self, on):
            super().set_flash_attn(on)
            self.visits.append(on)

        def decode(self, tokens, logits_for="last", progress=None):
            burst = self.burst if self.visits == [False] else 1.0
            factor = self.on_factor if self.flash_attn else 1.0
            self.clock[0] += burst * factor * len(tokens) * 1e-3
            self.cached_tokens.extend(tokens)

    m = Bursty(f, 1.02)
    scores, samples = calibration.compare_flash_attn(m, 9, repeats=2)
    assert m.visits[:4] == [False, True, True, False]  # off, on, on, off: turns
    assert scores["off"] == pytest.approx(1.0) and scores["on"] == pytest.approx(1.02)
    assert m.flash_attn is False
    # the chosen setting's samples, every visit's (the burst too: the curve's median and third sample judge them)
    assert samples[1] == pytest.approx([3e-3, 1e-3]) and samples[9] == pytest.approx([27e-3, 9e-3])
    m = Bursty(f, 1 / 1.02)  # on 2 % faster: within the margin, off (the default) stays
    calibration.compare_flash_attn(m, 9, repeats=2)
    assert m.flash_attn is False
    m = Bursty(f, 0.9)
    calibration.compare_flash_attn(m, 9, repeats=2)
    assert m.flash_attn is True
    assert m.visits == [False, True, True, False, True]  # turns, then on kept
    assert m.cached_tokens == []  # switched after the last visit: a new, empty context
    m = Bursty(f, 1.0, burst=1.0)
    calibration.compare_flash_attn(m, 9, repeats=2)
    assert m.visits == [False, True, True, False, False] and m.flash_attn is False
    assert len(m.cached_tokens) == calibration.SHORT_CONTEXT  # off was timed last: its filled context stays for the curves that follow
