"""The prediction drafter (Predicted Outputs): keeping its place, re-synchronising after an
edit, and the engine's output unchanged by it (fake backend; the real model is in
tests/integration/test_server.py)."""

import pytest

from cost_curves import ask
from fakes import FakeModel, greedy_reference
from localspec.backend.calibration import ModelCosts
from localspec.core.costmodel import EngineCosts
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.drafters import PredictionDrafter
from localspec.core.engine import SpeculativeEngine
from localspec.core.events import DrafterId, RoundStats
from localspec.core.policy import AdaptivePolicy, FixedPolicy

P = [100, 101]  # a prompt
DP = DraftParams(max_ngram=3, min_ngram=1)


def proposal(drafter, answer, g=4):
    return list(drafter.draft(P + list(answer), g, DP).tokens)


def test_follows_a_copy_from_the_start():
    pred = [10, 11, 12, 13, 14, 15]
    d = PredictionDrafter(pred, len(P))
    assert proposal(d, []) == [10, 11, 12, 13]
    assert proposal(d, [10, 11, 12]) == [13, 14, 15]
    assert proposal(d, pred) == []  # used up
    assert d.position == len(pred)


@pytest.mark.parametrize("answer, expected", [
    ([1, 2, 9, 4], [5, 6, 7]),          # replaced 3 by 9: rejoins after 4
    ([1, 2, 9, 8, 3], [4, 5, 6, 7]),    # inserted 9 8 before 3
    ([1, 2, 5], [6, 7]),                # deleted 3 4
])
def test_resynchronises_where_the_answer_rejoins(answer, expected):
    d = PredictionDrafter([1, 2, 3, 4, 5, 6, 7], len(P))
    assert proposal(d, answer) == expected


def test_nearest_forward_position_first():
    #       0  1  2  3  4  5  6  7  8  9
    pred = [5, 1, 2, 9, 1, 2, 8, 1, 2, 7]
    d = PredictionDrafter(pred, len(P))
    proposal(d, [5, 1, 2, 9])  # copied through index 3: the answer left at 4
    # an inserted 3, then (1, 2): matches end at 3, 6 and 9; nearest at or after 4 is 6
    assert proposal(d, [5, 1, 2, 9, 3, 1, 2]) == [8, 1, 2, 7]


def test_falls_back_to_the_nearest_earlier_match():
    pred = [1, 2, 3, 4, 5, 6]
    d = PredictionDrafter(pred, len(P))
    answer = [1, 2, 3, 4, 5, 6]
    proposal(d, answer)
    # the answer repeats its beginning: only an earlier match exists
    assert proposal(d, answer + [2, 3]) == [4, 5, 6]


def test_longest_ngram_first():
    pred = [7, 3, 9, 1, 2, 3, 4]
    d = PredictionDrafter(pred, len(P))
    # after an edit the answer ends in (1, 2, 3): the 3-gram match (continuing with 4) beats
    # the nearer 1-gram match of 3 (continuing with 9)
    assert proposal(d, [7, 0, 1, 2, 3]) == [4]


def test_lost_while_nothing_matches_and_match_length_reported():
    d = PredictionDrafter([1, 2, 3, 4], len(P))
    assert proposal(d, [50, 51]) == []
    assert d.position is None
    out = d.draft(P + [50, 51, 2], 4, DP)
    assert list(out.tokens) == [3, 4] and out.match_length == 1 and out.source == "prediction"
    out = d.draft(P + [50, 51, 2, 3], 4, DP)
    assert list(out.tokens) == [4] and out.match_length == 2


# -- in the engine (fake backend) --------------------------------------------------------
PROMPT = [3, 5, 7, 3, 5]
N = 40


def generate(prediction, mode="lookup", policy=None, temperature=0.0, seed=0, draft_max=6):
    eng = SpeculativeEngine(FakeModel(), None)
    gen = eng.generate(PROMPT, SamplingParams(temperature=temperature, seed=seed),
                       DraftParams(mode=mode, draft_max=draft_max), GenerationParams(max_tokens=N),
                       policy=policy, prediction=prediction)
    rounds = [e for e in gen if isinstance(e, RoundStats)]
    assert eng.target.cached_tokens == gen.committed[:-1]
    return gen, rounds


def edited(ref):
    out = list(ref)
    out[5] = 38 if out[5] != 38 else 37  # a replaced token
    out[15:17] = []  # a deletion
    out[25:25] = [1, 2, 3]  # an insertion
    return out


@pytest.mark.parametrize("mode", ["lookup", "none", "draft-free-auto"])
@pytest.mark.parametrize("kind", ["exact", "edited", "unrelated"])
def test_output_unchanged_by_a_prediction(kind, mode):
    ref = greedy_reference(PROMPT, N)
    prediction = {"exact": ref, "edited": edited(ref), "unrelated": [11, 12, 13] * 20}[kind]
    policy = None
    if mode == "draft-free-auto":
        curve = [0.03 * r for r in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6)]  # a GPU-like curve: speculation pays
        policy = AdaptivePolicy(EngineCosts(verify=curve, draft_token=None, target=ModelCosts(seconds=curve),
                                            draft=None), 6, has_draft=False)
        mode = "auto"
    gen, rounds = generate(prediction, mode, policy)
    assert gen.token_ids == ref
    used = [r for r in rounds if r.drafter == "prediction"]
    if mode == "none":
        assert not used
    elif kind == "exact":
        assert used and all(r.accepted == r.drafted for r in used)
        assert len(rounds) < N // 3  # long accepted runs: few target passes
    elif kind == "edited":
        # the unchanged regions are drafted: by the prediction, or in auto by prompt lookup where
        # its match length (the answer copying its own earlier text) makes it the better bet
        free = used if mode == "lookup" else [r for r in rounds if r.drafter in ("prediction", "lookup")]
        assert sum(r.accepted for r in free) >= N // 2 and any(r.accepted > 0 for r in used)
        assert any(r.accepted < r.drafted for r in used)  # and the edits rejected


def test_sampled_output_is_exact_with_a_point_mass_prediction():
    """At temperature > 0 a prediction equal to the answer is accepted in full: the target
    samples each drafted position with the same seeded generator either way."""
    gen, rounds = generate(None, "none", temperature=0.7, seed=3)
    again, rounds2 = generate(gen.token_ids, "lookup", temperature=0.7, seed=3)
    assert all(r.accepted == r.drafted for r in rounds2 if r.drafter == "prediction")
    assert sum(r.accepted for r in rounds2) > 0


def test_fixed_policy_tries_the_prediction_first():
    pol = FixedPolicy(DrafterId.LOOKUP, 8)
    assert ask(pol, 8, {"lookup": 5, "prediction": 3}).drafter == "prediction"
    assert ask(pol, 8, {"lookup": 5, "prediction": 3}).draft_len == 3
    assert ask(pol, 8, {"lookup": 5, "prediction": 0}).drafter == "lookup"
    assert ask(FixedPolicy(DrafterId.NONE, 8), 8, {DrafterId.PREDICTION: 3}).draft_len == 0


def test_adaptive_policy_prefers_the_prediction_on_a_tie_and_scores_it():
    curve = [0.03 * r for r in (1.0, 1.1, 1.2, 1.3, 1.4)]
    costs = EngineCosts(verify=curve, draft_token=None, target=ModelCosts(seconds=curve), draft=None)
    pol = AdaptivePolicy(costs, 4, has_draft=False, prior_lookup=0.8, prior_prediction=0.8)
    assert ask(pol, 4, {"lookup": 4, "prediction": 4}).drafter == "prediction"
    # proposals that never match drive the prediction's estimates down; lookup takes over
    committed = list(range(50))
    for _ in range(12):
        ask(pol, 0, {"prediction": [7, 7, 7, 7]}, committed)
        committed.extend([8, 8])
    assert pol.free_est["prediction"].values(0)[0] < 0.1
    assert ask(pol, 4, {"lookup": 4, "prediction": 4}).drafter == "lookup"
