"""A sure copy on every recorded CPU curve (issue 44, item 3): after a run of wholly agreeing proposals, a free
drafter's copy is drafted as long as the cost per token, the round's fixed cost included, keeps falling at the
current position; a copy that broke in this generation is discounted by its break rate."""

from __future__ import annotations

import pytest

from localspec.core.costmodel import EngineCosts
from localspec.core.events import DrafterId
from localspec.core.policy import COPY_EVIDENCE_TOKENS, SURE_COPY_PROPOSALS, SURE_COPY_TOKENS, AdaptivePolicy

from cost_curves import ask
from traces import load_curve, recorded_curves

XEON = "intel-xeon-amx-kvm_qwen2.5-coder-1.5b-instruct-q4_k_m_ctx4096_t2.json"
ZEN5_8K = "amd-zen5-avx512_qwen2.5-coder-1.5b-instruct-q4_k_m_ctx8192_t2.json"
ZEN5_4K = "amd-zen5-avx512_qwen2.5-coder-1.5b-instruct-q4_k_m_ctx4096_t2.json"
#: seconds a round cost on the AMX Xeon beyond the calibrated pass at its length and position, in the unchanged-file
#: task of issue 44 (the shared record intel-xeon-amx-kvm_vs-llama-server.json: decode seconds / rounds - T(mean
#: draft + 1) at the middle of the answer, 1,100-token prompt): 0.11-0.23 s over its 16 localspec runs; the least
XEON_ROUND_FIXED_SECONDS = 0.11


def steep_curve(t9_over_t1: float = 6.8, t1: float = 0.05, n: int = 65) -> list[float]:
    """AMD EPYC without AVX-512 (docs/benchmark-history.md): T(9) = 6.8 T(1), linear."""
    s = (t9_over_t1 - 1.0) / 8.0
    return [t1 * (1.0 + s * (b - 1)) for b in range(1, n + 1)]


class _Flat:
    """A curve the same at every position, as :class:`~localspec.core.costmodel.MeasuredCosts`."""

    prefill_token_seconds = None
    disturbed = False

    def __init__(self, seconds: list[float]) -> None:
        self.curves = [seconds]

    def curve_at(self, position):
        return self.curves[0]


def _curves():
    out = [pytest.param(costs, id=f"{cpu}_{model}_ctx{costs.key.get('n_ctx')}")
           for cpu, model, costs in recorded_curves() if len(costs.seconds) >= 65]
    return out + [pytest.param(_Flat(steep_curve()), id="amd-no-avx512-linear")]


def copy_rounds(curve, prompt: int, fixed: float, proposals: int = SURE_COPY_PROPOSALS + 1, break_at=None):
    """Mode auto's policy on ``curve`` (its fixed cost ``fixed`` seconds) following a prediction that the answer
    copies: each step proposes 64 tokens and the answer commits them all (but the second proposal, a copy of
    64 agreeing tokens, breaks after ``break_at`` tokens when given). Returns (the policy, the draft lengths
    chosen, the last position)."""
    costs = EngineCosts(verify=list(curve.curve_at(None)[:65]), draft_token=None, target=curve, draft=None,
                        overhead=fixed)
    pol = AdaptivePolicy(costs, 64, has_draft=False)
    committed, lengths, pos = list(range(prompt)), [], prompt
    for step in range(proposals):
        proposal = list(range(len(committed), len(committed) + 64))
        pos = len(committed)
        lengths.append(ask(pol, 4000, {"prediction": (proposal, pos - prompt)}, committed, pos - prompt).draft_len)
        if step == 1 and break_at is not None:
            committed += proposal[:break_at] + [-7]  # the answer leaves the copy here
        else:
            committed += proposal
    return pol, lengths, pos


def least_cost_per_token(curve, position: int, fixed: float, g_max: int = 64) -> int:
    """The draft length g <= ``g_max`` with the least (T(g + 1) + fixed) / (g + 1) on ``curve`` at ``position``."""
    t = curve.curve_at(position)
    return min(range(1, g_max + 1), key=lambda g: (t[g] + fixed) / (g + 1))


@pytest.mark.parametrize("curve", _curves())
@pytest.mark.parametrize("prompt", [16, 1100, 1800])
@pytest.mark.parametrize("share", [0.0, 0.5, 1.5])
def test_a_sure_copy_is_drafted_where_the_cost_per_token_stops_falling(curve, prompt, share):
    fixed = share * curve.curve_at(None)[0]
    pol, lengths, pos = copy_rounds(curve, prompt, fixed)
    assert pol.is_sure_copy(DrafterId.PREDICTION)
    assert lengths[-1] == least_cost_per_token(curve, pos, fixed)


def test_on_the_amx_xeon_a_sure_copy_reaches_48_tokens_and_where_long_drafts_do_not_pay_it_does_not():
    xeon = load_curve(XEON)
    # the unchanged file of issue 44 on that host: 1,100 prompt tokens, the round's measured fixed cost
    assert copy_rounds(xeon, 1100, XEON_ROUND_FIXED_SECONDS)[1][-1] >= 48
    # without a fixed cost, past 1,800 tokens of context, a pass there costs more per token beyond ~32 tokens
    assert copy_rounds(xeon, 1800, 0.0)[1][-1] < 48
    # Zen 5 (8,192-token window) past 1,000 tokens of context: flat from 8 to 16 tokens, steep after; a sure copy
    # stays at 15 even with a fixed cost of 1.5 T(1)
    zen5 = load_curve(ZEN5_8K)
    for prompt in (1100, 1800):
        assert copy_rounds(zen5, prompt, 1.5 * zen5.seconds[0])[1][-1] <= 16


def test_a_copy_is_sure_only_after_whole_proposals_agreed_and_a_mismatch_ends_it():
    xeon = load_curve(XEON)
    pol, lengths, _ = copy_rounds(xeon, 1100, XEON_ROUND_FIXED_SECONDS, proposals=SURE_COPY_PROPOSALS)
    assert not pol.is_sure_copy(DrafterId.PREDICTION) and max(lengths) < 48  # not yet: the rule of succession
    pol, lengths, _ = copy_rounds(xeon, 1100, XEON_ROUND_FIXED_SECONDS, break_at=20)
    assert pol.agreed_run[DrafterId.PREDICTION] == 0  # the break ended the run of the first proposal
    assert not pol.is_sure_copy(DrafterId.PREDICTION) and lengths[-1] < 48


def test_a_copy_that_broke_in_this_generation_is_discounted_by_its_break_rate():
    # Zen 5 at a 4,096-token window and 1,100 tokens of context: 15 and 64 tokens cost about the same per token;
    # an unbroken copy goes to 64, one that broke once in ~150 tokens (a rename) is drafted shorter
    zen5 = load_curve(ZEN5_4K)
    _, unbroken, pos = copy_rounds(zen5, 1100, 0.0)
    assert unbroken[-1] == least_cost_per_token(zen5, pos, 0.0) == 64
    pol, broken, _ = copy_rounds(zen5, 1100, 0.0, proposals=SURE_COPY_PROPOSALS + 3, break_at=20)
    assert pol.is_sure_copy(DrafterId.PREDICTION) and 0 < pol.copy_break_rate(DrafterId.PREDICTION) < 0.01
    assert broken[-1] < unbroken[-1]


@pytest.mark.parametrize("source", ["prediction", "memory"])
def test_sampled_output_is_unchanged_by_long_sure_copy_drafts(source):
    """Issue 44, item 6: at temperature > 0 the target samples each verified position with the same seeded
    generator whether a point-mass draft sits there or not, so a sure copy drafted long (a prediction, or an
    earlier answer in the draft memory) changes no token: the answer equals mode none's with the same seed."""
    from fakes import FakeModel
    from localspec.config import DraftParams, GenerationParams, SamplingParams
    from localspec.core.drafters import DraftMemory
    from localspec.core.engine import SpeculativeEngine
    from cost_curves import costs_for

    prompt, n = [11, 13, 5, 7], 400
    eng = SpeculativeEngine(FakeModel(n_ctx=1024), None, costs=costs_for([0.03 + 0.002 * b for b in range(65)]))
    sampling = SamplingParams(temperature=1.0, seed=3)  # 400 tokens without an end-of-generation token

    def sampled(mode, **kw):
        return eng.generate(prompt, sampling, DraftParams(mode=mode), GenerationParams(max_tokens=n), **kw).run()

    reference = sampled("none")
    if source == "prediction":
        again = sampled("auto", prediction=reference.token_ids)
    else:
        memory = DraftMemory(10_000)
        sampled("auto", memory=memory)  # the first answer goes into the memory
        again = sampled("auto", memory=memory)
    assert again.token_ids == reference.token_ids and len(again.token_ids) == n
    long = [r for r in again.rounds if r.drafted >= 48]
    assert long and all(r.accepted == r.drafted for r in long)
    if source == "memory":
        assert any(r.from_memory for r in long)


def ramp_lengths(curve, prompt: int, fixed: float, answer_tokens: int, break_at: int | None = None) -> list[int]:
    """Mode auto's draft lengths as the engine meets a prediction that the answer copies from its first token:
    each round the prediction proposes its next 64 tokens with the match so far (the committed tokens in a row
    that agreed with it, 0 after a mismatch), the answer commits the accepted ones and one more, and it leaves
    the copy once, at token ``break_at``. The match grows every round, so each proposal is closed in another
    bucket before it is wholly committed."""
    costs = EngineCosts(verify=list(curve.curve_at(None)[:65]), draft_token=None, target=curve, draft=None,
                        overhead=fixed)
    pol = AdaptivePolicy(costs, 64, has_draft=False)
    prediction = list(range(10_000, 10_000 + answer_tokens))
    answer = list(prediction)
    if break_at is not None:
        answer[break_at] = -7
    committed, j, agree, lengths = list(range(prompt)), 0, 0, []
    while j < answer_tokens:
        proposal = prediction[j:j + 64]
        g = ask(pol, 4000, {"prediction": (proposal, agree)}, committed, j).draft_len
        lengths.append(g)
        k = 0
        while k < g and j + k < answer_tokens and proposal[k] == answer[j + k]:
            k += 1
        new = answer[j:j + k + 1]
        committed += new
        j += len(new)
        agree = agree + len(new) if k == g else 0
    return lengths


@pytest.mark.parametrize("curve", _curves())
@pytest.mark.parametrize("prompt", [1100, 1800])
def test_a_growing_copy_becomes_sure_as_soon_as_two_proposals_agreed_over_48_tokens(curve, prompt):
    # the ramp of a copy: its proposals agreed over every token committed so far, but each was closed early when
    # the next round's match fell into another bucket; they count, so once two of them agreed over 48 tokens
    # the next round drafts the least-cost length (before, only whole committed proposals counted: the unchanged file
    # on the AMX Xeon drafted 3, 15, 15, 25, 37, 49, 62 before its first 64)
    fixed = XEON_ROUND_FIXED_SECONDS if curve.curve_at(None)[0] > 0.05 else 0.0
    lengths = ramp_lengths(curve, prompt, fixed, 600)
    # the first round after two or more drafts of 15+ in a row (each committed 16+ agreeing tokens) that together
    # committed SURE_COPY_TOKENS or more
    def sure_before(i):
        run = []
        for g in reversed(lengths[:i]):
            if g < COPY_EVIDENCE_TOKENS - 1:
                break
            run.append(g + 1)
        return len(run) >= SURE_COPY_PROPOSALS and sum(run) >= SURE_COPY_TOKENS

    first = next((i for i in range(len(lengths)) if sure_before(i)), None)
    if first is None:  # curves where short drafts never paid within these 600 tokens (steep, or a tiny model)
        assert max(lengths) < COPY_EVIDENCE_TOKENS - 1 or lengths.count(COPY_EVIDENCE_TOKENS - 1) == 1, lengths
        return
    pos = prompt + sum(lengths[:first]) + first
    # a 64-token proposal drafted 15 at a time is judged once the committed tokens cover it (4 rounds), so the
    # least-cost length may come one round later
    assert max(lengths[first:first + 2]) >= least_cost_per_token(curve, pos, fixed) - 1, lengths


def test_after_a_break_the_copy_is_sure_again_after_two_agreeing_proposals():
    xeon = load_curve(XEON)
    lengths = ramp_lengths(xeon, 1100, XEON_ROUND_FIXED_SECONDS, 1400, break_at=600)
    # the break: a short match again, then sure after 2 proposals of 16+ tokens (the round after the break
    # proposes from a match of 0)
    committed, i = 0, 0
    while committed <= 600:
        committed += lengths[i] + 1
        i += 1
    after = lengths[i:]
    assert after[0] < 16 and max(after[:4]) >= 48, lengths
