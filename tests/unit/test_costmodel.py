"""Cost model: pure functions on fixed numbers, acceptance estimates, the adaptive choice."""

from __future__ import annotations

import json

import pytest

from localspec.costmodel import (
    AdaptivePolicy,
    EngineCosts,
    EWAcceptance,
    ModelCosts,
    acceptance_by_position,
    best_draft_length,
    cost_cache_path,
    default_curve,
    expected_tokens,
    expected_tokens_constant,
    load_costs,
    measure_decode_costs,
    predicted_speedup,
    round_rate,
    save_costs,
    textbook_speedup,
    verify_cost,
)

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
    ch = pol.choose(8, None)
    assert ch.drafter == "none" and ch.draft_len == 0
    assert ch.reason.startswith("no speculation: best g=0")
    assert "draft cannot pay" in ch.reason


def test_policy_drafts_with_cheap_draft_on_flat_curve():
    pol = AdaptivePolicy(_costs(FLAT_CURVE, draft_token=T1 * 0.05), 8, has_draft=True, prior_draft=0.8)
    ch = pol.choose(8, None)
    assert ch.drafter == "draft" and ch.draft_len > 2
    assert ch.reason.startswith(f"g={ch.draft_len} draft: est ")
    # a run of rejections at position 0 drives the draft length to 0
    for _ in range(20):
        pol.observe("draft", ch.draft_len, 0, 0.01, T1)
    assert pol.choose(8, None).drafter == "none"


def test_policy_counts_draft_catchup_as_drafting_cost():
    """issue 8: a draft model needing a 1,000-token catch-up is not chosen for a short answer."""
    # a GPU-like machine where the draft pays: cheap draft tokens, flat verify curve,
    # catch-up measured at 3 ms per token (1,000 tokens: 3 s, ~90 target passes)
    costs = _costs(FLAT_CURVE, draft_token=T1 * 0.05)
    costs.draft_prefill_token = 0.003
    pol = AdaptivePolicy(costs, 8, has_draft=True, prior_draft=0.8)
    pol.see_draft_cache(pending=1, generated=10)  # steady state: nothing to catch up
    assert pol.catchup_seconds() == (0, 0.0)
    assert pol.choose(400, None).drafter == "draft"
    pol.see_draft_cache(pending=1001, generated=10)  # cold draft cache, 10 tokens into the answer
    assert pol.catchup_seconds() == (1000, pytest.approx(3.0))
    ch = pol.choose(400, None)
    assert ch.drafter == "none" and ch.draft_len == 0
    assert "incl. catch-up of 1000 tok" in ch.reason
    # over the 64-token horizon: 64 tokens at the draft rate plus 3 s, against 64 target passes
    g, r, r0 = best_draft_length(pol.draft_est.values, FLAT_CURVE, T1 * 0.05, 8)
    assert 64 / (64 / r + 3.0) < r0
    # the same catch-up amortises over a long answer (2,000 tokens so far, 2,000 left)
    pol.see_draft_cache(pending=1001, generated=2000)
    assert pol.choose(2000, None).drafter == "draft"
    # ... but not when only 30 tokens are left to generate
    assert pol.choose(30, None).drafter == "none"


def test_catchup_cost_estimate_follows_observed_catchups():
    costs = _costs(FLAT_CURVE, draft_token=T1 * 0.5)
    # before any catch-up: one draft token scaled by the target curve's cost per token at b=9
    assert costs.draft_prefill_token == pytest.approx(T1 * 0.5 * FLAT_CURVE[-1] / (9 * T1))
    costs.observe_catchup(500, 1.0)
    assert costs.draft_prefill_token == pytest.approx(0.002)  # the first observation replaces it
    costs.observe_catchup(100, 0.4)
    assert 0.002 < costs.draft_prefill_token < 0.004


def test_policy_lookup_choice_follows_shadow_scoring():
    pol = AdaptivePolicy(_costs(CPU_CURVE), 4, has_draft=False)
    # prior 0.5: lookup does not pay on the CPU curve
    assert pol.choose(4, 4).drafter == "none"
    # no proposal -> no lookup, whatever the estimates
    committed = list(range(100))
    for step in range(12):
        # the lookup proposal made last round always equals what the target then committed
        proposal = [1000 + step * 10 + i for i in range(4)]
        pol.see_lookup(committed, proposal)
        committed.extend(proposal[:2])  # two tokens committed per round: positions 0,1 scored
    ch = pol.choose(4, 4)
    assert ch.drafter == "lookup" and ch.draft_len >= 1
    assert "lookup" in ch.reason and "tok/pass" in ch.reason
    assert pol.choose(4, 0).drafter == "none"
    assert pol.choose(4, None).drafter == "none"
    # then the proposals stop matching: lookup is switched off again
    for step in range(12):
        pol.see_lookup(committed, [7, 7, 7, 7])
        committed.extend([8, 8])
    assert pol.choose(4, 4).drafter == "none"


def test_policy_lookup_limited_by_match_and_limit():
    pol = AdaptivePolicy(_costs(CPU_CURVE), 4, has_draft=False, prior_lookup=0.99)
    assert pol.choose(4, 4).draft_len == 3
    assert pol.choose(4, 1).draft_len == 1
    assert pol.choose(2, 4).draft_len == 2
    assert pol.choose(0, 4).drafter == "none"


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

    def decode(self, tokens, logits_for="last"):
        self.cached_tokens.extend(tokens)

    def truncate(self, n):
        del self.cached_tokens[n:]


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


def test_see_lookup_scores_deep_positions_without_speculating():
    # one token committed per round (no speculation): the proposal is scored once its fate is known
    pol = AdaptivePolicy(_costs(CPU_CURVE), 4, has_draft=False, weight=0.5)
    committed = [1, 2, 3]
    pol.see_lookup(committed, [10, 11, 12, 13])
    for tok, prop in ((10, [99]), (11, [98]), (12, [97])):
        committed.append(tok)
        pol.see_lookup(committed, prop)  # still pending: new proposals inside it are skipped
        assert pol.lookup_est.counts == [0, 0, 0, 0]
    committed.append(13)
    pol.see_lookup(committed, [20, 21])  # all four matched -> scored; [20, 21] now pending
    assert pol.lookup_est.values == pytest.approx([0.75] * 4)
    committed.extend([20, 5])
    pol.see_lookup(committed, [])  # mismatch at position 1
    assert pol.lookup_est.values == pytest.approx([0.875, 0.375, 0.75, 0.75])
    assert pol.lookup_est.counts == [2, 2, 1, 1]
