"""Issue 31, items 1 and 2: a copy that keeps being accepted is trusted quickly, and a round's fixed cost
(beside its model passes) is part of the time model. Replayed with :mod:`localspec.bench.replay` on
synthetic token ids (no model: which draft tokens are accepted is given by the answer)."""

import numpy as np

from cost_curves import T1, costs_for, tell
from localspec.backend.calibration import ModelCosts
from localspec.bench.replay import NgramModRule, Trace, auto_policy, best_fixed, replay
from localspec.core.drafters import Draft
from localspec.core.events import DrafterId
from localspec.core.policy import AdaptivePolicy, RoundState

#: a CPU whose verification pass costs nearly linearly to 8 tokens and flattens after (the Zen 5 class
#: of issue 31, short context): T(b)/T(1)
STEEP_THEN_FLAT = [1.0, 2.1, 2.9, 3.6, 4.3, 5.0, 5.9, 6.7] + [6.7 + 0.26 * (b - 8) for b in range(9, 66)]


def text(n, seed=0, vocab=5000):
    """``n`` token ids with no repeated 3-gram in practice (a file a copy can follow unambiguously)."""
    return tuple(int(t) for t in np.random.default_rng(seed).integers(100, 100 + vocab, size=n))


def curve(ratios, t1=T1):
    return ModelCosts(seconds=[t1 * r for r in ratios])


def test_a_copy_that_keeps_being_accepted_reaches_the_longest_draft_quickly():
    body = text(900)
    trace = Trace("unchanged", (1, 2, 3) + body + (4, 5), body, eog=0)
    res = replay(trace, auto_policy(curve(STEEP_THEN_FLAT)), curve(STEEP_THEN_FLAT), use_prediction=False)
    # the first round that drafts 64 comes within the first 150 tokens, and from there every round but
    # the last ones (near the end of the answer) drafts 64
    done, first_long = 0, None
    for g in res.lengths:
        if g == 64:
            first_long = done
            break
        done += g + 1
    assert first_long is not None and first_long < 150, res.lengths[:20]
    assert res.accepted == res.drafted
    assert sorted(res.lengths[-6:])[0] < 64 or len(body) % 65 == 0
    long_rounds = [g for g in res.lengths if g == 64]
    assert len(long_rounds) >= (len(body) - 100) // 65 - 1


def test_one_rejected_token_shortens_the_next_draft():
    body = text(900, seed=1)
    answer = list(body)
    answer[600] = 7  # an edit: the copy breaks there
    trace = Trace("one edit", (1, 2, 3) + body + (4, 5), tuple(answer), eog=0)
    res = replay(trace, auto_policy(curve(STEEP_THEN_FLAT)), curve(STEEP_THEN_FLAT), use_prediction=False)
    done, before, after = 0, None, None
    for g in res.lengths:
        if done <= 600 < done + g + 1:
            before = g  # the round whose draft runs into the edit
        elif before is not None and after is None:
            after = g
        done += g + 1
    assert before == 64 and after < 64, (before, after)


def test_auto_is_not_slower_than_ngram_mod_or_the_best_fixed_length_on_a_synthetic_copy():
    body = text(1000, seed=2)
    trace = Trace("unchanged", (1, 2, 3) + body + (4, 5), body, prediction=body, eog=0)
    c = curve(STEEP_THEN_FLAT)
    auto = replay(trace, auto_policy(c), c).seconds
    _, fixed = best_fixed(trace, c, lengths=(8, 16, 32, 64))
    assert auto <= replay(trace, NgramModRule(), c).seconds
    assert auto <= fixed.seconds / 0.95


def test_a_rounds_fixed_cost_makes_free_drafts_pay_on_a_linear_curve():
    """A one-thread 135M model: a pass of b tokens costs b passes of one (no batching gain). With only the
    passes counted no draft can pay; a round that also costs as much again in Python, sampling and
    bookkeeping (measured: round time minus the passes) makes an exact prediction pay, from its first
    round, and the copy's drafts grow long."""
    linear = [T1 * b for b in range(1, 66)]
    pol = AdaptivePolicy(costs_for(list(linear)), 64, has_draft=False)
    for _ in range(5):
        tell(pol, "none", 0, 0, 0.0, T1, round_seconds=T1)
    assert pol.costs.overhead == 0.0 and _exact_prediction_round(pol).draft_len == 0
    for _ in range(5):
        tell(pol, "none", 0, 0, 0.0, T1, round_seconds=3 * T1)
    assert 0.5 * T1 < pol.costs.overhead <= 2 * T1  # learned from the rounds' time beside their passes
    assert _exact_prediction_round(pol).draft_len > 0

    body = text(300, seed=3)
    trace = Trace("exact prediction", (1, 2, 3), body, prediction=body, eog=0)
    c = ModelCosts(seconds=linear)
    assert replay(trace, auto_policy(c), c, overhead_seconds=0.0).drafted == 0
    res = replay(trace, auto_policy(c), c, overhead_seconds=T1)
    assert max(res.lengths) >= 16 and res.accepted == res.drafted  # growing with the copy: 2, 3, 5, 7, ... 32
    none = replay(trace, auto_policy(c), c, overhead_seconds=T1, use_prediction=False)
    assert res.seconds < 0.7 * none.seconds


def _exact_prediction_round(pol, n=64):
    answer = list(range(1000, 1000 + n))
    props = {DrafterId.PREDICTION: Draft(tuple(answer), None, DrafterId.PREDICTION, 0)}
    return pol.choose(RoundState([1, 2, 3], n, props, 0, 0))
