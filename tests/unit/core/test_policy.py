"""localspec.core.policy: the adaptive choice of drafter and draft length (AdaptivePolicy) on fixed cost curves."""

from __future__ import annotations

import pytest

from localspec.backend.calibration import ModelCosts
from localspec.core.costmodel import EngineCosts
from localspec.core.costmodel import LOOKUP_CHANCE_TOKENS, best_draft_length, expected_tokens_constant, succession_prior
from localspec.core.policy import FIRST_TOKEN_REASON, HELD_OUTPUT_REASON, AdaptivePolicy

from cost_curves import AVX512_RATIOS, CPU_CURVE, FLAT_CURVE, NO_AVX512_RATIOS, T1, ask, costs_for, curve_for, tell


def test_policy_never_drafts_when_draft_cannot_pay():
    curve = CPU_CURVE + [T1 * 3.8, T1 * 4.4, T1 * 5.2, T1 * 5.95]
    pol = AdaptivePolicy(costs_for(curve, draft_token=0.024), 8, has_draft=True, prior_draft=1.0)
    assert not pol.draft_can_pay(8)
    ch = ask(pol, 8, {})
    assert ch.drafter == "none" and ch.draft_len == 0
    assert ch.reason.startswith("no speculation: best g=0")
    assert "draft cannot pay" in ch.reason


def test_policy_drafts_with_cheap_draft_on_flat_curve():
    pol = AdaptivePolicy(costs_for(FLAT_CURVE, draft_token=T1 * 0.05), 8, has_draft=True, prior_draft=0.8)
    ch = ask(pol, 8, {})
    assert ch.drafter == "draft" and ch.draft_len > 2
    assert ch.reason.startswith(f"g={ch.draft_len} draft: est ")
    # a run of rejections at position 0 drives the draft length to 0
    for _ in range(20):
        tell(pol, "draft", ch.draft_len, 0, 0.01, T1)
    assert ask(pol, 8, {}).drafter == "none"


def test_policy_counts_draft_catchup_as_drafting_cost():
    """issue 8: a draft model needing a 1,000-token catch-up is not chosen for a short answer."""
    # a GPU-like machine where the draft pays: cheap draft tokens, flat verify curve,
    # catch-up measured at 3 ms per token (1,000 tokens: 3 s, ~90 target passes)
    costs = costs_for(FLAT_CURVE, draft_token=T1 * 0.05)
    costs.draft_prefill_token_seconds = 0.003
    pol = AdaptivePolicy(costs, 8, has_draft=True, prior_draft=0.8)
    assert ask(pol, 400, {}, generated=10, catchup_tokens=0).drafter == "draft"  # steady state: no catch-up
    assert pol.catchup_seconds() == (0, 0.0)
    ch = ask(pol, 400, {}, generated=10, catchup_tokens=1000)  # cold draft cache, 10 tokens into the answer
    assert pol.catchup_seconds() == (1000, pytest.approx(3.0))
    assert ch.drafter == "none" and ch.draft_len == 0
    assert "incl. catch-up of 1000 tok" in ch.reason
    # over the 64-token horizon: 64 tokens at the draft rate plus 3 s, against 64 target passes
    g, r, r0 = best_draft_length(pol.draft_est.values, FLAT_CURVE, T1 * 0.05, 8)
    assert 64 / (64 / r + 3.0) < r0
    # the same catch-up amortises over a long answer (2,000 tokens so far, 2,000 left)
    assert ask(pol, 2000, {}, generated=2000, catchup_tokens=1000).drafter == "draft"
    # ... but not when only 30 tokens are left to generate
    assert ask(pol, 30, {}, generated=2000, catchup_tokens=1000).drafter == "none"


def test_policy_lookup_choice_follows_shadow_scoring():
    pol = AdaptivePolicy(costs_for(CPU_CURVE), 4, has_draft=False)
    # prior 0.5: lookup does not pay on the CPU curve
    assert ask(pol, 4, {"lookup": 4}).drafter == "none"
    # no proposal -> no lookup, whatever the estimates
    committed = list(range(100))
    for step in range(12):
        # the lookup proposal made last round always equals what the target then committed
        proposal = [1000 + step * 10 + i for i in range(4)]
        ask(pol, 4, {"lookup": proposal}, committed)
        committed.extend(proposal[:2])  # two tokens committed per round: positions 0,1 scored
    ch = ask(pol, 4, {"lookup": 4})
    assert ch.drafter == "lookup" and ch.draft_len >= 1
    assert "lookup" in ch.reason and "tok/pass" in ch.reason
    assert ask(pol, 4, {"lookup": 0}).drafter == "none"
    assert ask(pol, 4, {}).drafter == "none"
    # then the proposals stop matching: lookup is switched off again
    for step in range(12):
        ask(pol, 4, {"lookup": [7, 7, 7, 7]}, committed)
        committed.extend([8, 8])
    assert ask(pol, 4, {"lookup": 4}).drafter == "none"


def test_policy_lookup_limited_by_match_and_limit():
    pol = AdaptivePolicy(costs_for(CPU_CURVE), 4, has_draft=False, prior_lookup=0.99)
    assert ask(pol, 4, {"lookup": 4}).draft_len == 3
    assert ask(pol, 4, {"lookup": 1}).draft_len == 1
    assert ask(pol, 2, {"lookup": 4}).draft_len == 2
    assert ask(pol, 0, {"lookup": 4}).drafter == "none"


def test_policy_refines_verify_costs_from_observations():
    costs = costs_for(CPU_CURVE)
    pol = AdaptivePolicy(costs, 4, has_draft=False)
    before = costs.verify[2]
    for _ in range(50):
        tell(pol, "lookup", 2, 2, 0.0001, 0.030)  # b = 3 turns out as cheap as one token
    assert costs.verify[2] < before
    assert costs.verify[2] == pytest.approx(0.030, rel=0.05)


def test_see_lookup_scores_deep_positions_without_speculating():
    # one token committed per round (no speculation): the proposal is scored once its fate is known;
    # no match length reported: bucket 0, which starts from prior_lookup
    pol = AdaptivePolicy(costs_for(CPU_CURVE), 4, has_draft=False, weight=0.5)
    committed = [1, 2, 3]
    ask(pol, 0, {"lookup": [10, 11, 12, 13]}, committed)
    for tok, prop in ((10, [99]), (11, [98]), (12, [97])):
        committed.append(tok)
        ask(pol, 0, {"lookup": prop}, committed)  # still pending: new proposals inside it are skipped
        assert pol.lookup_est.bucket(0).counts == [0, 0, 0, 0]
    committed.append(13)
    ask(pol, 0, {"lookup": [20, 21]}, committed)  # all four matched -> scored; [20, 21] now pending
    assert pol.lookup_est.values(0) == pytest.approx([0.75] * 4)
    committed.extend([20, 5])
    ask(pol, 0, {"lookup": []}, committed)  # mismatch at position 1
    assert pol.lookup_est.values(0) == pytest.approx([0.875, 0.375, 0.75, 0.75])
    assert pol.lookup_est.bucket(0).counts == [2, 2, 1, 1]


def _closed_form_best(a, curve, g_max=8):
    """argmax over g of (1 - a^(g+1)) / (1 - a) / T(g + 1), and the best and runner-up rates."""
    rates = sorted(((expected_tokens_constant(a, g) / curve[g], g) for g in range(g_max + 1)), reverse=True)
    return rates[0][1], rates[0][0], rates[1][0]


def _feed_history(pol, a, rounds, match_length, g=8):
    """Lookup proposals of g tokens whose per-position conditional acceptance is a, scored by the
    policy as rounds ask it (without drafting: limit 0); returns the committed tokens and this round's proposal.

    Error diffusion per position (no randomness): position i of a proposal that reaches it
    is accepted exactly a of the time in the long run.
    """
    acc = [0.0] * g
    committed = [1, 2, 3]
    nxt = 1000
    for _ in range(rounds):
        proposal = list(range(nxt, nxt + g))
        nxt += g + 1
        ask(pol, 0, {"lookup": (proposal, match_length)}, committed)
        k = 0
        while k < g:
            acc[k] += a
            if acc[k] < 1.0 - 1e-9:
                break
            acc[k] -= 1.0
            k += 1
        committed.extend(proposal[:k] + ([nxt - 1] if k < g else []))  # a mismatch after k accepted
    return committed, list(range(nxt, nxt + g))


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
    curve = curve_for(ratios)
    best_g, best, second = _closed_form_best(a, curve)
    assert best_g == expected_g
    # the case is well separated: a history within 0.02 of a has the same best length
    for da in (-0.02, 0.02):
        assert _closed_form_best(min(a + da, 1.0), curve)[0] == best_g
    pol = AdaptivePolicy(costs_for(curve), 8, has_draft=False, weight=0.02)
    committed, proposal = _feed_history(pol, a, 2000, match_length=5)
    ch = ask(pol, 8, {"lookup": (proposal, 5)}, committed)  # scores the last proposal, then chooses
    est = pol.lookup_est.values(5)
    tried = [v for v, n in zip(est, pol.lookup_est.bucket(5).counts) if n > 150]
    assert tried and all(abs(v - a) < 0.03 for v in tried)
    assert ch.draft_len == best_g
    assert ch.drafter == ("lookup" if best_g else "none")


def test_policy_follows_the_curve_at_the_current_position():
    """Short context: the AVX-512-like curve (g = 8 best); long context: the one with the jump (g = 6)."""
    short, long_ = curve_for(AVX512_RATIOS), curve_for(NO_AVX512_RATIOS, T1 * 1.5)
    mc = ModelCosts(seconds=short, contexts=[64, 2048], curves=[short, long_])
    costs = EngineCosts(verify=list(short), draft_token=None, target=mc, draft=None)
    pol = AdaptivePolicy(costs, 8, has_draft=False, weight=0.02)
    committed, proposal = _feed_history(pol, 1.0, 100, match_length=40)
    ask(pol, 0, {"lookup": (proposal, 40)}, committed)  # the last proposal scored; this one pending
    # the policy's position is the number of committed tokens: a prefix of them (the pending proposal
    # undecided), then the tokens through the pending proposal, all matched, and more to 2048
    assert ask(pol, 8, {"lookup": (proposal, 40)}, committed[:64]).draft_len == 8
    longer = committed + proposal
    assert ask(pol, 8, {"lookup": (proposal, 40)}, longer + [0] * (2048 - len(longer))).draft_len == 6
    assert costs.verify == pytest.approx(long_)
    mid = pol.costs
    mid.set_position(64 + (2048 - 64) // 2)
    assert mid.verify[0] == pytest.approx((short[0] + long_[0]) / 2)


def test_start_of_copy_trusts_a_long_match():
    curve = curve_for(NO_AVX512_RATIOS)
    pol = AdaptivePolicy(costs_for(curve), 8, has_draft=False)
    # no history at all: a proposal whose source agrees over 40 tokens is drafted at once
    ch = ask(pol, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], 40)}, [1, 2, 3])
    prior = succession_prior(32, 8, LOOKUP_CHANCE_TOKENS)
    g_cf = best_draft_length(prior, curve, 0.0, 8)[0]
    assert ch.drafter == "lookup" and ch.draft_len == g_cf == 6
    # a single matching token is no evidence: no speculation on the AVX-512-like curve
    pol2 = AdaptivePolicy(costs_for(curve_for(AVX512_RATIOS)), 8, has_draft=False)
    assert ask(pol2, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], 1)}, [1, 2, 3]).drafter == "none"


@pytest.mark.parametrize("ratios", [AVX512_RATIOS, NO_AVX512_RATIOS], ids=["avx512", "no-avx512"])
def test_chat_like_short_matches_are_not_speculated_without_history(ratios):
    # chat: most lookup matches are one or two common tokens; the first of them must not cost verify passes
    for m in (1, 2, 3):
        pol = AdaptivePolicy(costs_for(curve_for(ratios)), 8, has_draft=False)
        assert ask(pol, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], m)}, [1, 2, 3]).drafter == "none", m
    # while a long one is drafted at once on both curves
    pol = AdaptivePolicy(costs_for(curve_for(ratios)), 8, has_draft=False)
    assert ask(pol, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], 16)}, [1, 2, 3]).drafter == "lookup"


def test_a_match_that_grows_into_another_bucket_is_scored_there_too():
    # chat: a 2-token match goes on agreeing, the match grows to 4 and the round drafts from bucket 4-7;
    # that bucket must learn what its proposals do (before the fix only the bucket where the copy began,
    # 2-3, was ever scored, and bucket 4-7 stayed at its prior however often its drafts failed)
    pol = AdaptivePolicy(costs_for(CPU_CURVE), 4, has_draft=False, weight=0.5)
    committed = [1, 2, 3]
    ask(pol, 0, {"lookup": ([10, 11, 12, 13], 2)}, committed)
    committed += [10, 11]
    ask(pol, 0, {"lookup": ([12, 50, 51, 52], 4)}, committed)  # grown into bucket 4-7: bucket 2-3 closed, 2 of 2
    b2, b4 = pol.lookup_est.bucket(2), pol.lookup_est.bucket(4)
    assert b2.counts == [1, 1, 0, 0] and b2.values[:2] == pytest.approx([0.5 + 0.5 * 0.5, 2 / 3 + (1 - 2 / 3) * 0.5])
    committed += [12, 99]  # the bucket-4 proposal: first token right, second wrong
    ask(pol, 0, {"lookup": []}, committed)
    assert b4.counts == [1, 1, 0, 0]
    prior4 = pol.new_lookup_acceptance(4).bucket(4).values
    assert b4.values[0] == pytest.approx(prior4[0] + 0.5 * (1 - prior4[0]))
    assert b4.values[1] == pytest.approx(prior4[1] * 0.5)



def test_a_round_whose_output_the_client_would_not_see_yet_drafts_nothing_and_the_next_drafts_the_copy():
    """Issue 45 (time to first token): while the consumer holds all of the answer so far (a lone ``<`` that may
    begin a tool-call marker), the round drafts nothing however sure its copy; once the output is released the
    copy is drafted. Without ``first_token_undrafted`` (a policy not run by the engine) the flag changes nothing."""
    curve = curve_for(NO_AVX512_RATIOS)
    pol = AdaptivePolicy(costs_for(curve), 8, has_draft=False, first_token_undrafted=True)
    ask(pol, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], 40)}, [1, 2, 3], generated=0)
    held = ask(pol, 8, {"lookup": ([5, 6, 7, 8, 9, 10, 11, 12], 41)}, [1, 2, 3, 4], generated=1, output_held=True)
    assert (held.drafter, held.draft_len, held.reason) == ("none", 0, HELD_OUTPUT_REASON)
    free = ask(pol, 8, {"lookup": ([6, 7, 8, 9, 10, 11, 12, 13], 42)}, [1, 2, 3, 4, 5], generated=2)
    assert free.drafter == "lookup" and free.draft_len >= 6
    plain = AdaptivePolicy(costs_for(curve), 8, has_draft=False)
    assert ask(plain, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], 40)}, [1, 2, 3], generated=1,
               output_held=True).drafter == "lookup"


def test_the_first_token_is_not_held_for_a_draft_but_the_rounds_proposal_is_still_scored():
    """Issue 45 (time to first token): with ``first_token_undrafted`` (the engine's generations), the first round
    (nothing generated yet) drafts nothing however long its lookup match, and the second round drafts that copy,
    the first round's proposal having been scored against the token it committed."""
    curve = curve_for(NO_AVX512_RATIOS)
    pol = AdaptivePolicy(costs_for(curve), 8, has_draft=False, first_token_undrafted=True)
    first = ask(pol, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], 40)}, [1, 2, 3], generated=0)
    assert (first.drafter, first.draft_len, first.reason) == ("none", 0, FIRST_TOKEN_REASON)
    second = ask(pol, 8, {"lookup": ([5, 6, 7, 8, 9, 10, 11, 12], 41)}, [1, 2, 3, 4], generated=1)
    assert second.drafter == "lookup" and second.draft_len >= 6
    assert pol._pending["lookup"][0] == 3  # the first round's proposal is the one being scored
    # without the flag (the choice itself, as the other tests here ask it) the first round drafts the copy
    plain = AdaptivePolicy(costs_for(curve), 8, has_draft=False)
    assert ask(plain, 8, {"lookup": ([4, 5, 6, 7, 8, 9, 10, 11], 40)}, [1, 2, 3]).drafter == "lookup"
