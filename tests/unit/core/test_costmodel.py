"""localspec.core.costmodel: the pure cost math on fixed numbers (expected tokens, round rate, best draft
length, speedups) and the acceptance estimates (EWAcceptance, MatchAcceptance)."""

from __future__ import annotations

import pytest

from localspec.core.costmodel import (
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

from cost_curves import AVX512_RATIOS, CPU_CURVE, FLAT_CURVE, NO_AVX512_RATIOS, T1, curve_for


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
    assert ceiling(curve_for(NO_AVX512_RATIOS), 8) == (pytest.approx(7 / 4.79), 6)
    assert ceiling(curve_for(AVX512_RATIOS), 8) == (pytest.approx(9 / 5.18), 8)
    assert ceiling(curve_for(AVX512_RATIOS), 3) == (pytest.approx(4 / 2.82), 3)
    assert ceiling([1.0, 2.5, 4.0], 2) == (1.0, 0)
