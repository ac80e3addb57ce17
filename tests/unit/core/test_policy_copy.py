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
    assert pol.overhead == 0.0 and _exact_prediction_round(pol).draft_len == 0
    for _ in range(5):
        tell(pol, "none", 0, 0, 0.0, T1, round_seconds=3 * T1)
    assert 0.5 * T1 < pol.overhead <= 2 * T1  # learned from the rounds' time beside their passes
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


def test_a_repetition_of_the_output_is_judged_as_a_short_match_until_it_is_long():
    """A proposal copied from the generation's own output (the model restating a phrase) is capped and kept
    off the copy floor until it agrees over more than COPY_EVIDENCE_TOKENS + SELF_REPEAT_TOKENS tokens;
    one copied from the prompt is judged by its match length as before."""
    from localspec.core.policy import COPY_EVIDENCE_TOKENS, SELF_COPY_DRAFT_MAX, SELF_REPEAT_TOKENS, copy_evidence

    prompt_len = 500
    assert copy_evidence(20, 100, prompt_len) == (20, None)  # from the prompt
    assert copy_evidence(20, -1, prompt_len) == (20, None)  # a prediction, the draft memory
    assert copy_evidence(8, 600, prompt_len) == (8, SELF_COPY_DRAFT_MAX)
    assert copy_evidence(20, 600, prompt_len) == (COPY_EVIDENCE_TOKENS - 1, SELF_COPY_DRAFT_MAX)
    longest_untrusted = COPY_EVIDENCE_TOKENS + SELF_REPEAT_TOKENS - 1
    assert copy_evidence(longest_untrusted, 600, prompt_len) == (COPY_EVIDENCE_TOKENS - 1, SELF_COPY_DRAFT_MAX)
    assert copy_evidence(longest_untrusted + 1, 600, prompt_len) == (COPY_EVIDENCE_TOKENS, None)
    assert copy_evidence(200, 600, prompt_len) == (200 - SELF_REPEAT_TOKENS, None)


def _draft_lengths_after(res, start):
    """The draft lengths of the rounds that begin at or after output position ``start``."""
    done, out = 0, []
    for g in res.lengths:
        if done >= start:
            out.append(g)
        done += g + 1
    return out


def test_a_restated_phrase_is_not_drafted_long_and_costs_nothing():
    """Chat answers restate their own phrases ("In summary, a process is ..."): after 22 tokens that repeat
    an earlier sentence the answer goes its own way. Auto drafts at most SELF_COPY_DRAFT_MAX tokens from
    such a repetition (before: a 16-token match was a copy, drafted 19-47 tokens that kept 1-6) and
    is no slower than target-only decoding on the steep curve."""
    from localspec.bench.replay import target_only_seconds
    from localspec.core.policy import SELF_COPY_DRAFT_MAX

    first = text(120, seed=3)
    answer = first + first[30:52] + text(80, seed=4)  # 22 tokens restated, then new text
    trace = Trace("restated", (1, 2, 3), answer, eog=0)
    c = curve(STEEP_THEN_FLAT)
    for overhead in (0.0, 0.1 * T1):
        res = replay(trace, auto_policy(c), c, overhead, use_prediction=False)
        assert max(_draft_lengths_after(res, 120), default=0) <= SELF_COPY_DRAFT_MAX, res.lengths
        assert res.seconds <= target_only_seconds(trace, c, overhead) * 1.001, (res.seconds, res.lengths)


def test_a_long_repetition_of_the_output_is_trusted_as_a_copy():
    """A function written out again in the same answer: once the repetition agrees over more than
    COPY_EVIDENCE_TOKENS + SELF_REPEAT_TOKENS tokens it is drafted long, as a copy from the prompt is."""
    from localspec.core.policy import COPY_EVIDENCE_TOKENS, SELF_COPY_DRAFT_MAX, SELF_REPEAT_TOKENS

    first = text(300, seed=5)
    trace = Trace("written again", (1, 2, 3), first + first, eog=0)
    c = curve(STEEP_THEN_FLAT)
    res = replay(trace, auto_policy(c), c, use_prediction=False)
    later = _draft_lengths_after(res, 300 + COPY_EVIDENCE_TOKENS + SELF_REPEAT_TOKENS)
    assert max(later) >= 32 and max(later) > SELF_COPY_DRAFT_MAX, res.lengths
    assert res.accepted >= 0.9 * res.drafted
