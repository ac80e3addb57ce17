import zlib

import numpy as np
import pytest

from fakes import N_VOCAB, FakeModel
from localspec.config import DraftParams, SamplingParams
from localspec.core.acceptance import verify_sampled
from localspec.core.drafters.model import DraftModelDrafter
from localspec.core.events import TokenKind
from localspec.core.sampling import logits_to_probs, sample, softmax


def full_sort_top_p(probs, top_p):
    order = np.argsort(-probs, kind="stable")
    csum = np.cumsum(probs[order])
    cut = int(np.searchsorted(csum, top_p)) + 1
    out = np.zeros_like(probs)
    out[order[:cut]] = probs[order[:cut]]
    return out / out.sum()


def test_greedy_is_one_hot_at_argmax():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    p = logits_to_probs(logits, SamplingParams(temperature=0))
    assert p.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_temperature_scales_logits():
    logits = np.array([1.0, 2.0, 3.0])
    p = logits_to_probs(logits, SamplingParams(temperature=2.0))
    np.testing.assert_allclose(p, softmax(logits / 2.0))


def test_top_k_keeps_k_most_probable():
    logits = np.array([5.0, 1.0, 4.0, 3.0, 0.0])
    p = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert set(np.flatnonzero(p)) == {0, 2}
    assert p.sum() == pytest.approx(1.0)


def test_min_p_drops_tokens_below_fraction_of_top():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = logits_to_probs(logits, SamplingParams(temperature=1.0, min_p=0.2))  # threshold 0.1
    assert set(np.flatnonzero(p)) == {0, 1, 2}


@pytest.mark.parametrize("n", [10, 200, 5000])
@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.9, 0.999])
def test_top_p_partial_sort_equals_full_sort(n, top_p):
    rng = np.random.default_rng(n)
    logits = rng.normal(size=n) * 3
    p = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=top_p))
    np.testing.assert_allclose(p, full_sort_top_p(softmax(logits), top_p), atol=1e-12)


class _SpreadModel(FakeModel):
    """A fake whose logits spread over every id: a fixed function of the sequence (its CRC32 seeds them);
    no end-of-generation token, so a draft runs to its length."""

    def __init__(self) -> None:
        super().__init__()
        self.eog_tokens = frozenset()

    def logits_after(self, seq):
        rng = np.random.default_rng(zlib.crc32(np.asarray(seq, dtype=np.int64).tobytes()))
        return (rng.normal(size=N_VOCAB) * 2.0).astype(np.float32)


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.7, top_k=8, top_p=0.9),
                                    SamplingParams(temperature=1.3, min_p=0.05),
                                    SamplingParams(temperature=0.5, top_p=0.6)], ids=["top-k-p", "min-p", "top-p"])
def test_target_and_draft_shaped_alike(params):
    """The draft-model drafter samples from the distribution the target verifies against (cases.md C6): with one
    model as both, every row the drafter returns equals the target's row shaped by the same ``SamplingParams``,
    and the ratio test (:func:`verify_sampled`, the target's own shaping) accepts every drafted token whatever
    the draws."""
    context, g = [3, 5, 7], 6
    for seed in range(20):
        drafter = DraftModelDrafter(_SpreadModel())
        drafter.begin(params, np.random.default_rng(seed))
        draft = drafter.draft(context, g, DraftParams(mode="draft"))
        assert len(draft.tokens) == g and draft.probs.shape == (g, N_VOCAB)
        target_logits = _SpreadModel().decode([*context, *draft.tokens], "all")[len(context) - 1:]
        for i in range(g):
            np.testing.assert_array_equal(draft.probs[i], logits_to_probs(target_logits[i], params), err_msg=f"row {i}")
        verdict = verify_sampled(draft.tokens, draft.probs, target_logits, params, np.random.default_rng(seed))
        assert verdict.accepted == g and verdict.kind is TokenKind.BONUS, (seed, verdict)


def test_sample_is_seeded_and_follows_distribution():
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    a = [sample(probs, np.random.default_rng(7)) for _ in range(3)]
    b = [sample(probs, np.random.default_rng(7)) for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(0)
    counts = np.bincount([sample(probs, rng) for _ in range(20000)], minlength=4) / 20000
    assert counts[1] == 0
    np.testing.assert_allclose(counts, probs, atol=0.015)
