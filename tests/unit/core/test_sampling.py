import numpy as np
import pytest

from localspec.config import SamplingParams
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


def test_target_and_draft_shaped_alike():
    """One function shapes both distributions (cases.md C6)."""
    params = SamplingParams(temperature=0.7, top_k=3, top_p=0.9)
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.0])
    np.testing.assert_array_equal(logits_to_probs(logits, params), logits_to_probs(logits.copy(), params))


def test_sample_is_seeded_and_follows_distribution():
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    a = [sample(probs, np.random.default_rng(7)) for _ in range(3)]
    b = [sample(probs, np.random.default_rng(7)) for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(0)
    counts = np.bincount([sample(probs, rng) for _ in range(20000)], minlength=4) / 20000
    assert counts[1] == 0
    np.testing.assert_allclose(counts, probs, atol=0.015)
