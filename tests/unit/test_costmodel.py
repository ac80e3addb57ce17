"""Cost model: pure functions on fixed numbers, acceptance estimates, the adaptive choice."""

from __future__ import annotations

import json

import pytest

from localspec.calibration import (
    EngineCosts,
    ModelCosts,
    cost_cache_path,
    default_curve,
    load_costs,
    measure_decode_costs,
    save_costs,
)
from localspec.costmodel import (
    EWAcceptance,
    LOOKUP_CHANCE_TOKENS,
    MatchAcceptance,
    acceptance_by_position,
    best_draft_length,
    ceiling,
    expected_tokens,
    expected_tokens_constant,
    predicted_speedup,
    round_rate,
    succession_prior,
    textbook_speedup,
    verify_cost,
)
from localspec.policy import AdaptivePolicy

# models.md: Qwen2.5-Coder-1.5B on 2 cores, 33 ms per token, ratios b=1..5
T1 = 0.033
CPU_CURVE = [T1 * r for r in (1.0, 1.68, 2.26, 2.57, 3.21)]
FLAT_CURVE = [T1] * 9  # a GPU-like curve: verifying 9 tokens costs one pass


def test_expected_tokens_matches_closed_form():
    for a in (0.0, 0.3, 0.5, 0.8, 0.99):
        for g in range(0, 8):
            assert expected_tokens([a] * g) == pytest.approx((1 - a ** (g + 1)) / (1 - a))
            assert expected_tokens_constant(a, g) == pytest.approx(expected_tokens([a] * g))
    assert expected_tokens_constant(1.0, 4) == 5.0
    assert expected_tokens([]) == 1.0


def test_expected_tokens_per_position():
    # 1 + 0.9 + 0.9*0.5 + 0.9*0.5*0.0
    assert expected_tokens([0.9, 0.5, 0.0, 1.0]) == pytest.approx(2.35)
    # out-of-range estimates are clipped to [0, 1]
    assert expected_tokens([1.5, -1.0]) == pytest.approx(2.0)


def test_verify_cost_extrapolates_linearly():
    assert verify_cost(CPU_CURVE, 1) == pytest.approx(0.033)
    assert verify_cost(CPU_CURVE, 5) == pytest.approx(T1 * 3.21)
    assert verify_cost(CPU_CURVE, 7) == pytest.approx(T1 * (3.21 + 2 * 0.64))


def test_round_rate_fixed_numbers():
    # g=2, a=0.8: E = 1 + 0.8 + 0.64 = 2.44 tokens; time = 2.26*33 ms + 2*10 ms
    r = round_rate(2, [0.8, 0.8], CPU_CURVE, 0.010)
    assert r == pytest.approx(2.44 / (T1 * 2.26 + 0.020))
    assert round_rate(0, [], CPU_CURVE, 0.010) == pytest.approx(1 / T1)


def test_best_g_is_zero_when_verify_is_expensive():
    # the 0.5B draft (24 ms/token) with the CPU curve: even acceptance 0.9 loses
    g, best, rate0 = best_draft_length([0.9] * 4, CPU_CURVE, 0.024, 4)
    assert g == 0 and best == rate0
    # even a perfect draft cannot pay at 0.73 of a target pass per token
    g, _, _ = best_draft_length([1.0] * 4, CPU_CURVE, 0.024, 4)
    assert g == 0


def test_best_g_with_free_drafts_on_cpu_curve():
    # prompt lookup (draft cost 0): low acceptance -> no speculation
    assert best_draft_length([0.5] * 4, CPU_CURVE, 0.0, 4)[0] == 0
    # a = 0.95: rates per pass-time: g1 1.95/1.68=1.16, g2 2.85/2.26=1.26, g3 3.71/2.57=1.44, g4 4.52/3.21=1.41
    g, best, rate0 = best_draft_length([0.95] * 4, CPU_CURVE, 0.0, 4)
    assert g == 3
    assert best / rate0 == pytest.approx(expected_tokens([0.95] * 3) / 2.57)
    # the cap on g is respected
    assert best_draft_length([0.95] * 4, CPU_CURVE, 0.0, 2)[0] == 2


def test_best_g_on_flat_curve_is_textbook():
    # verify costs one pass: the textbook case, long drafts pay with a cheap draft
    g, best, rate0 = best_draft_length([0.8] * 8, FLAT_CURVE, T1 * 0.05, 8)
    assert g > 3
    assert best / rate0 == pytest.approx(textbook_speedup(0.8, g, 0.05))


def test_best_g_is_the_argmax_of_round_rate_on_random_curves():
    # best_draft_length accumulates the expected tokens in one pass; it must pick what
    # scoring every g with round_rate picks, with the same rates (curves with jumps included)
    import random

    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 17)
        steps = [rng.choice([0.0, 0.2, 0.6, 1.0, 3.0]) * T1 for _ in range(n - 1)]
        curve = [T1]
        for s in steps:
            curve.append(curve[-1] + s)
        accept = [rng.random() for _ in range(rng.randint(0, 16))]
        g_max, draft_s, ovh = rng.randint(0, 18), rng.choice([0.0, 0.3 * T1]), rng.choice([0.0, 0.001])
        g, best, rate0 = best_draft_length(accept, curve, draft_s, g_max, ovh)
        rates = [round_rate(k, accept, curve, draft_s, ovh) for k in range(min(g_max, len(accept)) + 1)]
        want = 0
        for k, r in enumerate(rates):
            if r > rates[want] * (1.0 + 1e-9):
                want = k
        assert (g, rate0) == (want, rates[0])
        assert best == pytest.approx(rates[want], rel=1e-12)


def test_predicted_speedup_and_textbook():
    assert predicted_speedup(0, [], CPU_CURVE, 0.0) == pytest.approx(1.0)
    assert predicted_speedup(1, [1.0], CPU_CURVE, 0.0) == pytest.approx(2 / 1.68)
    assert textbook_speedup(0.0, 3, 0.0) == pytest.approx(1.0)
    assert textbook_speedup(1.0, 3, 0.0) == pytest.approx(4.0)


def test_acceptance_by_position():
    rounds = [(4, 4), (4, 1), (2, 0), (0, 0)]
    acc = acceptance_by_position(rounds, 4)
    # position 0 tried 3 times, accepted 2; position 1 tried 2 (rounds 1,2), accepted 1
    assert acc[0] == pytest.approx(2 / 3)
    assert acc[1] == pytest.approx(1 / 2)
    assert acc[2] == pytest.approx(1.0)
    assert acc[3] == pytest.approx(1.0)
    assert acceptance_by_position([], 2) == [None, None]


def test_ew_updates():
    est = EWAcceptance(4, prior=0.5, weight=0.5)
    est.update(drafted=4, accepted=2)  # positions 0, 1 accepted; 2 rejected; 3 unobserved
    assert est.values == pytest.approx([0.75, 0.75, 0.25, 0.5])
    assert est.counts == [1, 1, 1, 0]
    est.update(drafted=1, accepted=1)
    assert est.values == pytest.approx([0.875, 0.75, 0.25, 0.5])
    est.update(drafted=3, accepted=0)
    assert est.values == pytest.approx([0.4375, 0.75, 0.25, 0.5])
    est.relax(1.0)
    assert est.values == pytest.approx([0.5] * 4)


def _costs(curve, draft_token=None):
    mc = ModelCosts(seconds=list(curve))
    return EngineCosts(verify=list(curve), draft_token=draft_token, target=mc, draft=None)


def test_policy_never_drafts_when_draft_cannot_pay():
    curve = CPU_CURVE + [T1 * 3.8, T1 * 4.4, T1 * 5.2, T1 * 5.95]
    pol = AdaptivePolicy(_costs(curve, draft_token=0.024), 8, has_draft=True, prior_draft=1.0)
    assert not pol.draft_can_pay(8)
    ch = pol.choose(8, {})
    assert ch.drafter == "none" and ch.draft_len == 0
    assert ch.reason.startswith("no speculation: best g=0")
    assert "draft cannot pay" in ch.reason


def test_policy_drafts_with_cheap_draft_on_flat_curve():
    pol = AdaptivePolicy(_costs(FLAT_CURVE, draft_token=T1 * 0.05), 8, has_draft=True, prior_draft=0.8)
    ch = pol.choose(8, {})
    assert ch.drafter == "draft" and ch.draft_len > 2
    assert ch.reason.startswith(f"g={ch.draft_len} draft: est ")
    # a run of rejections at position 0 drives the draft length to 0
    for _ in range(20):
        pol.observe("draft", ch.draft_len, 0, 0.01, T1)
    assert pol.choose(8, {}).drafter == "none"


def test_policy_counts_draft_catchup_as_drafting_cost():
    """issue 8: a draft model needing a 1,000-token catch-up is not chosen for a short answer."""
    # a GPU-like machine where the draft pays: cheap draft tokens, flat verify curve,
    # catch-up measured at 3 ms per token (1,000 tokens: 3 s, ~90 target passes)
    costs = _costs(FLAT_CURVE, draft_token=T1 * 0.05)
    costs.draft_prefill_token_seconds = 0.003
    pol = AdaptivePolicy(costs, 8, has_draft=True, prior_draft=0.8)
    pol.see_draft_cache(catchup_tokens=0, generated=10)  # steady state: nothing to catch up
    assert pol.catchup_seconds() == (0, 0.0)
    assert pol.choose(400, {}).drafter == "draft"
    pol.see_draft_cache(catchup_tokens=1000, generated=10)  # cold draft cache, 10 tokens into the answer
    assert pol.catchup_seconds() == (1000, pytest.approx(3.0))
    ch = pol.choose(400, {})
    assert ch.drafter == "none" and ch.draft_len == 0
    assert "incl. catch-up of 1000 tok" in ch.reason
    # over the 64-token horizon: 64 tokens at the draft rate plus 3 s, against 64 target passes
    g, r, r0 = best_draft_length(pol.draft_est.values, FLAT_CURVE, T1 * 0.05, 8)
    assert 64 / (64 / r + 3.0) < r0
    # the same catch-up amortises over a long answer (2,000 tokens so far, 2,000 left)
    pol.see_draft_cache(catchup_tokens=1000, generated=2000)
    assert pol.choose(2000, {}).drafter == "draft"
    # ... but not when only 30 tokens are left to generate
    assert pol.choose(30, {}).drafter == "none"


def test_catchup_cost_estimate_follows_observed_catchups():
    costs = _costs(FLAT_CURVE, draft_token=T1 * 0.5)
    # before any catch-up: one draft token scaled by the target curve's cost per token at b=9
    assert costs.draft_prefill_token_seconds == pytest.approx(T1 * 0.5 * FLAT_CURVE[-1] / (9 * T1))
    costs.observe_catchup(500, 1.0)
    assert costs.draft_prefill_token_seconds == pytest.approx(0.002)  # the first observation replaces it
    costs.observe_catchup(100, 0.4)
    assert 0.002 < costs.draft_prefill_token_seconds < 0.004


def test_policy_lookup_choice_follows_shadow_scoring():
    pol = AdaptivePolicy(_costs(CPU_CURVE), 4, has_draft=False)
    # prior 0.5: lookup does not pay on the CPU curve
    assert pol.choose(4, {"lookup": 4}).drafter == "none"
    # no proposal -> no lookup, whatever the estimates
    committed = list(range(100))
    for step in range(12):
        # the lookup proposal made last round always equals what the target then committed
        proposal = [1000 + step * 10 + i for i in range(4)]
        pol.see_free("lookup", committed, proposal)
        committed.extend(proposal[:2])  # two tokens committed per round: positions 0,1 scored
    ch = pol.choose(4, {"lookup": 4})
    assert ch.drafter == "lookup" and ch.draft_len >= 1
    assert "lookup" in ch.reason and "tok/pass" in ch.reason
    assert pol.choose(4, {"lookup": 0}).drafter == "none"
    assert pol.choose(4, {}).drafter == "none"
    # then the proposals stop matching: lookup is switched off again
    for step in range(12):
        pol.see_free("lookup", committed, [7, 7, 7, 7])
        committed.extend([8, 8])
    assert pol.choose(4, {"lookup": 4}).drafter == "none"


def test_policy_lookup_limited_by_match_and_limit():
    pol = AdaptivePolicy(_costs(CPU_CURVE), 4, has_draft=False, prior_lookup=0.99)
    assert pol.choose(4, {"lookup": 4}).draft_len == 3
    assert pol.choose(4, {"lookup": 1}).draft_len == 1
    assert pol.choose(2, {"lookup": 4}).draft_len == 2
    assert pol.choose(0, {"lookup": 4}).drafter == "none"


def test_policy_refines_verify_costs_from_observations():
    costs = _costs(CPU_CURVE)
    pol = AdaptivePolicy(costs, 4, has_draft=False)
    before = costs.verify[2]
    for _ in range(50):
        pol.observe("lookup", 2, 2, 0.0001, 0.030)  # b = 3 turns out as cheap as one token
    assert costs.verify[2] < before
    assert costs.verify[2] == pytest.approx(0.030, rel=0.05)


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
    """A front-end sees 0 at once, then one step per repetition per context, ending at the total."""
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    seen = []
    measure_decode_costs(_FakeModel(f), 4, repeats=3, contexts=[8, 40], progress=lambda *a: seen.append(a))
    assert [d for _, d, _ in seen] == list(range(7)) and {t for _, _, t in seen} == {6}
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


def test_calibration_under_load_is_marked_and_measured_again_when_quiet(tmp_path, monkeypatch):
    # a calibration taken while other processes used the CPUs is not trusted for good: a poisoned
    # cache (T(1) = 1.13 s measured under load, 12x the quiet value) once stayed valid forever
    import localspec.calibration as cal

    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    m = _FakeModel(f)
    measured = []

    def fake_calibrate(model, max_batch, repeats=3, contexts=None, progress=None):
        other = 0.6 if not measured else 0.01  # the first run under load, the second quiet
        measured.append(other)
        return ModelCosts(seconds=[0.1 * (b + 1) for b in range(max_batch)], key=cal.model_cost_key(model),
                          measured=True, other_cpu=other)

    monkeypatch.setattr(cal, "calibrate_model", fake_calibrate)
    first = cal.get_costs(m, 4)
    assert first.disturbed and "DISTURBED" in cal.describe_costs(first)
    assert load_costs(m, 4).other_cpu == pytest.approx(0.6)  # cached, with its load
    monkeypatch.setattr(cal, "machine_is_quiet", lambda *a, **k: False)
    assert cal.get_costs(m, 4).disturbed and len(measured) == 1  # still busy: the cached one is used
    assert cal.cached_engine_costs(m, None, 3) is not None  # what the loader hands the engine
    monkeypatch.setattr(cal, "machine_is_quiet", lambda *a, **k: True)
    assert cal.cached_engine_costs(m, None, 3) is None  # quiet: the first auto generation measures again
    monkeypatch.setattr(cal, "machine_is_quiet", lambda *a, **k: True)
    again = cal.get_costs(m, 4)
    assert len(measured) == 2 and not again.disturbed  # quiet now: measured again and replaced
    assert not load_costs(m, 4).disturbed and "DISTURBED" not in cal.describe_costs(again)
    assert cal.get_costs(m, 4).other_cpu == pytest.approx(0.01) and len(measured) == 2  # a clean one stays


def test_measure_records_other_processes_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    costs = measure_decode_costs(_FakeModel(f), 3, repeats=1)
    assert costs.other_cpu is None or 0.0 <= costs.other_cpu <= 1.0
    assert ModelCosts.from_json(costs.to_json()).other_cpu == costs.other_cpu


def test_see_lookup_scores_deep_positions_without_speculating():
    # one token committed per round (no speculation): the proposal is scored once its fate is known;
    # no match length reported: bucket 0, which starts from prior_lookup
    pol = AdaptivePolicy(_costs(CPU_CURVE), 4, has_draft=False, weight=0.5)
    committed = [1, 2, 3]
    pol.see_free("lookup", committed, [10, 11, 12, 13])
    for tok, prop in ((10, [99]), (11, [98]), (12, [97])):
        committed.append(tok)
        pol.see_free("lookup", committed, prop)  # still pending: new proposals inside it are skipped
        assert pol.lookup_est.bucket(0).counts == [0, 0, 0, 0]
    committed.append(13)
    pol.see_free("lookup", committed, [20, 21])  # all four matched -> scored; [20, 21] now pending
    assert pol.lookup_est.values(0) == pytest.approx([0.75] * 4)
    committed.extend([20, 5])
    pol.see_free("lookup", committed, [])  # mismatch at position 1
    assert pol.lookup_est.values(0) == pytest.approx([0.875, 0.375, 0.75, 0.75])
    assert pol.lookup_est.bucket(0).counts == [2, 2, 1, 1]


# -- issue 12: curves by position, match-length prior, the policy against the closed form --------
#: T(b)/T(1), b = 1..9, measured on this project's machines: an AVX-512 CPU (docs/benchmark.md) and a
#: 2-core CPU without AVX-512 whose verification pass jumps between 7 and 8 tokens (issue 12)
AVX512_RATIOS = (1.00, 1.81, 2.30, 2.82, 3.50, 4.13, 4.69, 4.83, 5.18)
NO_AVX512_RATIOS = (1.00, 1.59, 2.28, 3.36, 4.16, 4.75, 4.79, 8.11, 8.11)


def _curve(ratios, t1=T1):
    return [t1 * r for r in ratios]


def _closed_form_best(a, curve, g_max=8):
    """argmax over g of (1 - a^(g+1)) / (1 - a) / T(g + 1), and the best and runner-up rates."""
    rates = sorted(((expected_tokens_constant(a, g) / curve[g], g) for g in range(g_max + 1)), reverse=True)
    return rates[0][1], rates[0][0], rates[1][0]


def _feed_history(pol, a, rounds, match_length, g=8):
    """Lookup proposals of g tokens whose per-position conditional acceptance is a, through see_lookup.

    Error diffusion per position (no randomness): position i of a proposal that reaches it
    is accepted exactly a of the time in the long run.
    """
    acc = [0.0] * g
    committed = [1, 2, 3]
    nxt = 1000
    for _ in range(rounds):
        proposal = list(range(nxt, nxt + g))
        nxt += g + 1
        pol.see_free("lookup", committed, proposal, match_length)
        k = 0
        while k < g:
            acc[k] += a
            if acc[k] < 1.0 - 1e-9:
                break
            acc[k] -= 1.0
            k += 1
        committed.extend(proposal[:k] + ([nxt - 1] if k < g else []))  # a mismatch after k accepted
    # scores the last proposal and makes this round's, as the engine does before asking the policy
    pol.see_free("lookup", committed, list(range(nxt, nxt + g)), match_length)
    return committed


@pytest.mark.parametrize("ratios, a, expected_g", [
    (AVX512_RATIOS, 1.0, 8),      # long drafts pay where a 9-token pass costs 5 single ones
    (AVX512_RATIOS, 0.87, 3),
    (AVX512_RATIOS, 0.6, 0),
    (NO_AVX512_RATIOS, 1.0, 6),   # never into the jump between 7 and 8 tokens
    (NO_AVX512_RATIOS, 0.98, 6),
    (NO_AVX512_RATIOS, 0.75, 1),
    (NO_AVX512_RATIOS, 0.5, 0),
])
def test_policy_picks_the_closed_form_best_length(ratios, a, expected_g):
    curve = _curve(ratios)
    best_g, best, second = _closed_form_best(a, curve)
    assert best_g == expected_g
    # the case is well separated: a history within 0.02 of a has the same best length
    for da in (-0.02, 0.02):
        assert _closed_form_best(min(a + da, 1.0), curve)[0] == best_g
    pol = AdaptivePolicy(_costs(curve), 8, has_draft=False, weight=0.02)
    _feed_history(pol, a, 2000, match_length=5)
    est = pol.lookup_est.values(5)
    tried = [v for v, n in zip(est, pol.lookup_est.bucket(5).counts) if n > 150]
    assert tried and all(abs(v - a) < 0.03 for v in tried)
    ch = pol.choose(8, {"lookup": 8}, position=500)
    assert ch.draft_len == best_g
    assert ch.drafter == ("lookup" if best_g else "none")


def test_policy_follows_the_curve_at_the_current_position():
    """Short context: the AVX-512-like curve (g = 8 best); long context: the one with the jump (g = 6)."""
    short, long_ = _curve(AVX512_RATIOS), _curve(NO_AVX512_RATIOS, T1 * 1.5)
    mc = ModelCosts(seconds=short, contexts=[64, 2048], curves=[short, long_])
    costs = EngineCosts(verify=list(short), draft_token=None, target=mc, draft=None)
    pol = AdaptivePolicy(costs, 8, has_draft=False, weight=0.02)
    _feed_history(pol, 1.0, 100, match_length=40)
    assert pol.choose(8, {"lookup": 8}, position=64).draft_len == 8
    assert pol.choose(8, {"lookup": 8}, position=2048).draft_len == 6
    assert costs.verify == pytest.approx(long_)
    mid = pol.costs
    mid.set_position(64 + (2048 - 64) // 2)
    assert mid.verify[0] == pytest.approx((short[0] + long_[0]) / 2)


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


def test_start_of_copy_trusts_a_long_match():
    curve = _curve(NO_AVX512_RATIOS)
    pol = AdaptivePolicy(_costs(curve), 8, has_draft=False)
    # no history at all: a proposal whose source agrees over 40 tokens is drafted at once
    pol.see_free("lookup", [1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], 40)
    ch = pol.choose(8, {"lookup": 8})
    prior = succession_prior(32, 8, LOOKUP_CHANCE_TOKENS)
    g_cf = best_draft_length(prior, curve, 0.0, 8)[0]
    assert ch.drafter == "lookup" and ch.draft_len == g_cf == 6
    # a single matching token is no evidence: no speculation on the AVX-512-like curve
    pol2 = AdaptivePolicy(_costs(_curve(AVX512_RATIOS)), 8, has_draft=False)
    pol2.see_free("lookup", [1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], 1)
    assert pol2.choose(8, {"lookup": 8}).drafter == "none"


#: first-token acceptance of prompt-lookup proposals by match-length bucket, measured by replaying
#: find_match over the target's greedy answers to the five bench tasks (see LOOKUP_CHANCE_TOKENS)
MEASURED_LOOKUP_ACCEPTANCE = {1: 0.13, 2: 0.43, 4: 0.81, 8: 0.95, 16: 0.97, 32: 0.99}


def test_lookup_prior_follows_measured_acceptance():
    est = MatchAcceptance(8, prior=0.5, weight=0.3, chance=LOOKUP_CHANCE_TOKENS)
    for m, measured in MEASURED_LOOKUP_ACCEPTANCE.items():
        assert est.values(m)[0] == pytest.approx(measured, abs=0.15), m
    # Laplace's rule on the raw match length trusted the short matches far more than they earn
    assert succession_prior(1, 1)[0] - MEASURED_LOOKUP_ACCEPTANCE[1] > 0.5
    assert succession_prior(1, 3, chance=2) == pytest.approx([0.0, 1 / 2, 2 / 3])


@pytest.mark.parametrize("ratios", [AVX512_RATIOS, NO_AVX512_RATIOS], ids=["avx512", "no-avx512"])
def test_chat_like_short_matches_are_not_speculated_without_history(ratios):
    # chat: most lookup matches are one or two common tokens; the first of them must not cost verify passes
    for m in (1, 2, 3):
        pol = AdaptivePolicy(_costs(_curve(ratios)), 8, has_draft=False)
        pol.see_free("lookup", [1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], m)
        assert pol.choose(8, {"lookup": 8}).drafter == "none", m
    # while a long one is drafted at once on both curves
    pol = AdaptivePolicy(_costs(_curve(ratios)), 8, has_draft=False)
    pol.see_free("lookup", [1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], 16)
    assert pol.choose(8, {"lookup": 8}).drafter == "lookup"


def test_match_length_buckets_learn_separately():
    est = MatchAcceptance(4, prior=0.5, weight=0.5)
    assert est.values(0) == [0.5] * 4
    assert est.values(3) == pytest.approx(succession_prior(2, 4))
    assert est.values(100) == pytest.approx(succession_prior(64, 4))
    assert [MatchAcceptance.bucket_index(m) for m in (0, 1, 2, 3, 4, 7, 8, 63, 64, 500)] == \
        [0, 1, 2, 2, 3, 3, 4, 6, 7, 9]
    est.update(5, drafted=4, accepted=0)
    assert est.values(5)[0] == pytest.approx(0.5 * succession_prior(4, 1)[0])
    assert est.values(40) == pytest.approx(succession_prior(32, 4))  # other buckets untouched
    assert succession_prior(0, 3) == pytest.approx([1 / 2, 2 / 3, 3 / 4])


def test_ceiling():
    assert ceiling(_curve(NO_AVX512_RATIOS), 8) == (pytest.approx(7 / 4.79), 6)
    assert ceiling(_curve(AVX512_RATIOS), 8) == (pytest.approx(9 / 5.18), 8)
    assert ceiling(_curve(AVX512_RATIOS), 3) == (pytest.approx(4 / 2.82), 3)
    assert ceiling([1.0, 2.5, 4.0], 2) == (1.0, 0)


class _FlashFakeModel(_FakeModel):
    """A fake whose decode advances a fake clock: 1 ms per token, plus per cached token 1 us (off) or 0.5 us (on)."""

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
        per_cached = 0.5e-6 if self.flash_attn else 1e-6
        self.clock[0] += len(tokens) * (1e-3 + per_cached * len(self.cached_tokens))
        self.cached_tokens.extend(tokens)


def test_calibration_measures_two_contexts_and_keeps_the_faster_flash_attn(tmp_path, monkeypatch):
    from localspec import calibration

    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: _FlashFakeModel.clock[0])
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    m = _FlashFakeModel(f)
    costs = calibration.get_costs(m, 5, repeats=1)
    assert costs.contexts == [64, 1024]
    assert m.flash_attn is True and costs.flash_attn is True
    assert costs.flash_attn_scores["on"] == 1.0 < costs.flash_attn_scores["off"]
    assert costs.curves[0][0] == pytest.approx(1e-3 + 0.5e-6 * 64)
    assert costs.curves[1][4] == pytest.approx(5 * (1e-3 + 0.5e-6 * 1024))
    assert costs.prefill_token_seconds == pytest.approx(1e-3 + 0.5e-6 * 64, rel=1e-6)
    assert costs.key["flash_attn"] == "auto"
    # a new model object of the same file and settings: the cached choice is applied without measuring
    m2 = _FlashFakeModel(f)
    assert calibration.apply_cached_flash_attn(m2) is True and m2.flash_attn is True
    m2.flash_attn_mode = "off"  # asked explicitly: another cache entry, measured as asked
    assert calibration.load_costs(m2, 5) is None


def test_find_match_reports_how_long_the_context_agrees():
    from localspec.drafters.lookup import find_match

    file = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    tokens = [5] + file + [50] + [10, 11, 12, 13]
    # the 3-gram (11, 12, 13) matches in the file, and the token before it (10) agrees too
    assert find_match(tokens, 3, 1, 3) == ([14, 15, 16], 3, 4)
    assert find_match([1, 2, 3, 4], 3, 1, 5) == ([], 0, 0)


def test_flash_attn_scores_weigh_decode_and_verification_alike():
    from localspec.calibration import flash_attn_scores

    def mc(*curves):
        return ModelCosts(seconds=list(curves[0]), contexts=[64, 1024][: len(curves)], curves=[list(c) for c in curves])

    # on: 10 % slower for one token, half the time for a 9-token pass, at both contexts -> on
    sc = flash_attn_scores({"off": mc([1.0, 10.0], [2.0, 20.0]), "on": mc([1.1, 5.0], [2.2, 10.0])})
    assert sc == pytest.approx({"off": 1.5, "on": 1.05})
    # on: 10 % slower for one token, 5 % faster for the pass -> off (a big pass does not outweigh decoding)
    sc = flash_attn_scores({"off": mc([1.0, 10.0]), "on": mc([1.1, 9.5])})
    assert sc["off"] < sc["on"]


def test_cpu_meter_share_stays_within_0_and_1(monkeypatch):
    # /proc/stat counts clock ticks (10 ms): over 5 ms, 3 ticks of other processes on 2 CPUs would be
    # a share of 3.0; a share is a fraction of the CPUs, so it is capped at 1 (and floored at 0)
    from localspec.machine import CpuMeter

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    states = iter([(0, 0, 0.0), (100, 10, 50.000), (103, 10, 50.005), (100, 10, 60.0), (100, 12, 61.0)])
    monkeypatch.setattr(CpuMeter, "_state", staticmethod(lambda: next(states)))
    meter = CpuMeter()
    meter.start()
    assert meter.other_fraction() == 1.0
    meter.start()
    assert meter.other_fraction() == 0.0
