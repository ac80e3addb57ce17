"""Logprobs (issue 32, item 3): the log-softmax of the target's raw logits at each committed
position, from the verification pass that committed it, in every mode; on the fake backend."""

import math

import numpy as np
import pytest

from fakes import N_VOCAB, FakeModel, greedy_reference, next_token
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.engine import SpeculativeEngine
from localspec.core.events import TokenEvent, TokenKind
from localspec.core.sampling import log_softmax, token_logprobs
from test_engine import PROMPT, PlantingDrafter


class PositionalModel(FakeModel):
    """FakeModel whose logits also depend on the position, so a row taken from the wrong position
    shows in the values, not only in the token ids."""

    def logits_after(self, seq):
        logits = super().logits_after(seq)
        logits += np.linspace(0.0, 1.0, N_VOCAB, dtype=np.float32) * (len(seq) % 5)
        return logits


def test_log_softmax_matches_the_definition_and_is_stable():
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, 0.0]], dtype=np.float32)
    out = log_softmax(x)
    assert out.dtype == np.float64 and out.shape == (2, 3)
    expected = [math.log(math.exp(v) / sum(math.exp(u) for u in (1.0, 2.0, 3.0))) for v in (1.0, 2.0, 3.0)]
    assert np.allclose(out[0], expected, atol=1e-12)
    assert np.allclose(out[1][:2], math.log(0.5), atol=1e-12) and out[1][2] < -999  # no overflow
    assert np.allclose(np.exp(out).sum(axis=-1), 1.0)


def test_token_logprobs_top_is_sorted_with_ties_by_id():
    logits = np.array([[0.0, 3.0, 1.0, 3.0, 2.0]], dtype=np.float32)
    [(lp, top)] = token_logprobs(logits, [4], 3)
    row = log_softmax(logits[0])
    assert lp == pytest.approx(row[4])
    assert [t for t, _ in top] == [1, 3, 4]
    assert [v for _, v in top] == pytest.approx([row[1], row[3], row[4]])
    assert token_logprobs(logits, [0], 0) == [(pytest.approx(row[0]), ())]
    assert len(token_logprobs(logits, [0], 20)[0][1]) == 5  # no more alternatives than the vocabulary


def generate(eng, mode, logprobs, draft_max=4, max_tokens=24):
    gen = eng.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode=mode, draft_max=draft_max),
                       GenerationParams(max_tokens=max_tokens), logprobs=logprobs)
    return gen, [e for e in gen if isinstance(e, TokenEvent)]


def test_off_by_default():
    _, events = generate(SpeculativeEngine(PositionalModel()), "lookup", None)
    assert events and all(e.logprob is None and e.top_logprobs is None for e in events)


@pytest.mark.parametrize("mode", ["none", "lookup", "draft", "planted"])
def test_every_mode_reports_the_raw_distribution_at_each_position(mode):
    """Accepted, bonus and resampled tokens alike carry the log-softmax of the row that predicted them."""
    eng = SpeculativeEngine(PositionalModel(), PositionalModel())
    if mode == "planted":
        eng.drafter = PlantingDrafter(every=3)
    gen, events = generate(eng, "draft" if mode == "planted" else mode, 3)
    assert gen.token_ids == greedy_reference(PROMPT, 24)
    if mode == "planted":
        assert {TokenKind.RESAMPLED, TokenKind.ACCEPTED} <= {e.kind for e in events}
    seq, ref = list(PROMPT), PositionalModel()
    for e in events:
        row = log_softmax(ref.logits_after(seq))
        assert e.logprob == pytest.approx(row[e.token_id], abs=1e-12)
        assert e.top_logprobs[0][0] == next_token(seq)
        assert [t for t, _ in e.top_logprobs] == list(np.argsort(-row, kind="stable")[:3])
        assert [v for _, v in e.top_logprobs] == pytest.approx([row[t] for t, _ in e.top_logprobs], abs=1e-12)
        seq.append(e.token_id)


def test_sampled_tokens_get_the_raw_logprob_not_the_tempered_one():
    eng = SpeculativeEngine(PositionalModel())
    gen = eng.generate(PROMPT, SamplingParams(temperature=1.5, top_k=2, seed=3), DraftParams(mode="lookup"),
                       GenerationParams(max_tokens=12), logprobs=0)
    seq = list(PROMPT)
    for e in (e for e in gen if isinstance(e, TokenEvent)):
        assert e.logprob == pytest.approx(log_softmax(PositionalModel().logits_after(seq))[e.token_id], abs=1e-12)
        assert e.top_logprobs == ()
        seq.append(e.token_id)
