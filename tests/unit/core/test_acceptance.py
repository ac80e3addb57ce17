"""The acceptance rule on fixed logits (exact outcomes) and its output distribution (seeded statistics)."""

import numpy as np
import pytest

from localspec.config import SamplingParams
from localspec.core.events import TokenKind
from localspec.core.sampling import logits_to_probs
from localspec.core.acceptance import accept_greedy, residual_distribution, verify, verify_greedy, verify_sampled

V = 6


def onehot_logits(tokens, big=30.0):
    rows = np.zeros((len(tokens), V), dtype=np.float32)
    for i, t in enumerate(tokens):
        rows[i, t] = big
    return rows


def test_greedy_all_accepted_gives_bonus():
    v = verify_greedy([1, 2, 3], onehot_logits([1, 2, 3, 4]))
    assert (v.accepted, v.token, v.kind) == (3, 4, TokenKind.BONUS)
    assert v.target_tokens == (1, 2, 3, 4)


def test_greedy_first_mismatch_is_resampled_with_target_argmax():
    v = verify_greedy([1, 5, 3], onehot_logits([1, 2, 3, 4]))
    assert (v.accepted, v.token, v.kind) == (1, 2, TokenKind.RESAMPLED)
    assert v.target_tokens == (1, 2)


def test_greedy_empty_draft_is_target_token():
    v = verify_greedy([], onehot_logits([4]))
    assert (v.accepted, v.token, v.kind) == (0, 4, TokenKind.TARGET)


def test_greedy_from_the_argmax_alone_is_greedy_on_the_rows():
    """What the round reads when only the argmax is taken in llama.cpp's buffer (``decode_argmax``): the same
    verdict as the rows give, ties at the lowest id, the first mismatch anywhere in a draft of 0..64."""
    rng = np.random.default_rng(3)
    for _ in range(500):
        g = int(rng.integers(0, 65))
        logits = rng.integers(0, 4, size=(g + 1, V)).astype(np.float32)  # many ties
        target = np.argmax(logits, axis=1)
        draft = [int(t) for t in target[:g]]
        if g and rng.random() < 0.8:
            i = int(rng.integers(0, g))
            draft[i:] = [int(t) for t in rng.integers(0, V, size=g - i)]
        k = 0  # the reference: accept while the draft token is the row's argmax
        while k < g and draft[k] == int(np.argmax(logits[k])):
            k += 1
        kind = TokenKind.TARGET if g == 0 else TokenKind.BONUS if k == g else TokenKind.RESAMPLED
        expected = (k, int(np.argmax(logits[k])), kind, tuple(int(np.argmax(r)) for r in logits[: k + 1]))
        v = accept_greedy(draft, np.argmax(logits, axis=1))
        assert (v.accepted, v.token, v.kind, v.target_tokens) == expected and v == verify_greedy(draft, logits)


def test_sampled_saturated_logits_exact():
    params = SamplingParams(temperature=1.0, seed=0)
    rng = np.random.default_rng(0)
    target = onehot_logits([1, 2, 0])
    draft_probs = np.stack([logits_to_probs(r, params) for r in onehot_logits([1, 3])])
    v = verify_sampled([1, 3], draft_probs, target, params, rng)
    assert (v.accepted, v.token, v.kind) == (1, 2, TokenKind.RESAMPLED)
    v = verify_sampled([1, 2], None, target, params, rng)
    assert (v.accepted, v.token, v.kind) == (2, 0, TokenKind.BONUS)


def test_residual_distribution():
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.7, 0.1, 0.2])
    np.testing.assert_allclose(residual_distribution(p, q), [0.0, 1.0, 0.0])
    np.testing.assert_allclose(residual_distribution(p, p), p)


def _first_token_histogram(target_logits_row, draft_logits_row, params, n, with_probs, seed=1):
    """Draw one draft token from the draft distribution, verify it, record the committed first token."""
    rng = np.random.default_rng(seed)
    q = logits_to_probs(draft_logits_row, params)
    target = np.stack([target_logits_row, target_logits_row])
    counts = np.zeros(V)
    csum = np.cumsum(q)
    for _ in range(n):
        if with_probs:
            x = int(np.searchsorted(csum, rng.random() * csum[-1], side="right"))
            v = verify_sampled([x], q[None, :], target, params, rng)
        else:
            x = 2  # a point-mass draft (prompt lookup) always proposes the same id
            v = verify_sampled([x], None, target, params, rng)
        first = x if v.accepted >= 1 else v.token
        counts[first] += 1
    return counts / n


@pytest.mark.parametrize("with_probs", [True, False])
@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=4),
                                    SamplingParams(temperature=1.3, top_p=0.9)])
def test_output_follows_target_distribution(with_probs, params):
    """Leviathan et al. 2022, Theorem 1: the committed token is distributed as the target."""
    target_row = np.array([1.0, 0.2, 2.0, -0.5, 0.7, 1.5])
    draft_row = np.array([2.0, 1.0, 0.0, 0.5, -1.0, 0.1])
    expected = logits_to_probs(target_row, params)
    n = 40000
    got = _first_token_histogram(target_row, draft_row, params, n, with_probs)
    # 5 standard errors per bin
    tol = 5 * np.sqrt(expected * (1 - expected) / n) + 1e-9
    assert np.all(np.abs(got - expected) <= tol), (got, expected)
    draft = logits_to_probs(draft_row, params)
    if with_probs:
        # and it is not just the draft distribution
        assert np.abs(got - draft).max() > 0.05


def test_verify_dispatches_on_temperature():
    rng = np.random.default_rng(0)
    v = verify([1], None, onehot_logits([1, 2]), SamplingParams(temperature=0), rng)
    assert v.kind == TokenKind.BONUS


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.95)])
def test_a_stream_verified_in_64_token_point_mass_drafts_follows_the_target_chain(params):
    """Long drafts (mode auto drafts up to 64 tokens) keep the output distribution: a Markov-chain
    target, verified in rounds of 64-token point-mass drafts (the target's most likely chain, as a
    copy would propose), commits a stream whose transition frequencies are the target's."""
    rng = np.random.default_rng(7)
    trans = np.full((V, V), 0.0)
    for a in range(V):
        trans[a, (a + 1) % V] = 4.5  # p ~ 0.95 at temperature 1: runs of tens of accepted tokens
        trans[a, (a + 3) % V] = 1.0
    g = 64
    committed = [0]
    accepted_runs = []
    while len(committed) < 30000:
        draft = [(committed[-1] + i + 1) % V for i in range(g)]
        prev = [committed[-1]] + draft
        v = verify_sampled(draft, None, trans[prev], params, rng)
        accepted_runs.append(v.accepted)
        committed += draft[: v.accepted] + [v.token]
    assert max(accepted_runs) >= 48  # the long drafts were exercised, not only their first tokens
    seq = np.asarray(committed)
    for a in range(V):
        nxt = seq[1:][seq[:-1] == a]
        got = np.bincount(nxt, minlength=V) / len(nxt)
        expected = logits_to_probs(trans[a], params)
        tol = 5 * np.sqrt(expected * (1 - expected) / len(nxt)) + 1e-9
        assert np.all(np.abs(got - expected) <= tol), (a, got, expected)


# -- a constraint (a grammar) restricts each row --------------------------------------------
class StepConstraint:
    """Allows ``allowed[i]`` at the i-th token; refuses (as llama.cpp aborts) a forbidden accept."""

    def __init__(self, allowed):
        self.allowed = [set(a) for a in allowed]
        self.accepted = []

    def _now(self):
        return self.allowed[min(len(self.accepted), len(self.allowed) - 1)]

    def allows(self, token):
        return token in self._now()

    def mask(self, logits):
        out = np.full(logits.shape, -np.inf, dtype=np.float32)
        ok = sorted(self._now())
        out[ok] = logits[ok]
        return out

    def accept(self, token):
        assert token in self._now(), f"accepted forbidden token {token}"
        self.accepted.append(token)


def test_greedy_constrained_takes_the_best_allowed_token_and_rejects_forbidden_drafts():
    # raw argmaxes 1, 2, 3, 4; position 1 forbids 2 (the draft's token too), allows 0 and 5
    rows = onehot_logits([1, 2, 3, 4])
    rows[1, 5] = 5.0
    c = StepConstraint([{1}, {0, 5}, {3}, {4}])
    v = verify_greedy([1, 2, 3], rows, c)
    assert (v.accepted, v.token, v.kind) == (1, 5, TokenKind.RESAMPLED)
    assert v.target_tokens == (1, 5) and c.accepted == [1, 5]  # moved past exactly the verdict's tokens
    # everything allowed: the same verdict as without a constraint
    everything = StepConstraint([range(V)])
    assert verify_greedy([1, 2, 3], onehot_logits([1, 2, 3, 4]), everything) == \
        verify_greedy([1, 2, 3], onehot_logits([1, 2, 3, 4]))
    assert everything.accepted == [1, 2, 3, 4]


def test_a_constraint_that_allows_nothing_is_a_clear_error():
    from localspec.errors import ConfigError

    with pytest.raises(ConfigError, match="grammar allows no token"):
        verify_greedy([], onehot_logits([1]), StepConstraint([set()]))
    with pytest.raises(ConfigError, match="grammar allows no token"):
        verify_sampled([], None, onehot_logits([1]), SamplingParams(temperature=1.0), np.random.default_rng(0),
                       StepConstraint([set()]))


@pytest.mark.parametrize("with_probs", [True, False])
@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=3)])
def test_constrained_output_follows_the_restricted_target_distribution(with_probs, params):
    """The committed first token is distributed as the target restricted to the allowed tokens."""
    target_row = np.array([1.0, 0.2, 2.0, -0.5, 0.7, 1.5], dtype=np.float32)
    draft_row = np.array([2.0, 1.0, 0.0, 0.5, -1.0, 0.1])
    allowed = {1, 2, 4}  # forbids the draft's favourite (0) and the target's second (5)
    masked = np.full(V, -np.inf)
    masked[sorted(allowed)] = target_row[sorted(allowed)]
    expected = logits_to_probs(masked, params)
    q = logits_to_probs(draft_row, params)
    csum = np.cumsum(q)
    rng = np.random.default_rng(3)
    n = 30000
    counts = np.zeros(V)
    target = np.stack([target_row, target_row])
    for _ in range(n):
        x = int(np.searchsorted(csum, rng.random() * csum[-1], side="right")) if with_probs else 0
        c = StepConstraint([allowed])
        v = verify_sampled([x], q[None, :] if with_probs else None, target, params, rng, c)
        first = x if v.accepted >= 1 else v.token
        assert c.accepted[0] == first
        counts[first] += 1
    got = counts / n
    tol = 5 * np.sqrt(expected * (1 - expected) / n) + 1e-9
    assert np.all(np.abs(got - expected) <= tol), (got, expected)
    assert got[0] == 0 and got[5] == 0


@pytest.mark.parametrize("draft_width", [4, 6, 8])
def test_output_follows_target_distribution_when_the_vocabularies_differ_by_padding(draft_width):
    """A target padded past the draft (Qwen2.5 7B: 152,064 ids; its 0.5B draft: 151,936), and the
    other way round: the draft's row is laid over the target's width (0 beyond the draft's ids),
    and the committed token still follows the target distribution, padded ids included."""
    params = SamplingParams(temperature=1.0)
    target_row = np.array([1.0, 0.2, 2.0, -0.5, 0.7, 1.5])
    draft_logits = np.full(draft_width, -np.inf)
    draft_logits[:4] = [2.0, 1.0, 0.0, 0.5]  # the draft proposes only ids both models share
    q = logits_to_probs(draft_logits, params)
    target = np.stack([target_row, target_row])
    rng = np.random.default_rng(3)
    n = 40000
    counts = np.zeros(V)
    csum = np.cumsum(q)
    for _ in range(n):
        x = int(np.searchsorted(csum, rng.random() * csum[-1], side="right"))
        v = verify_sampled([x], q[None, :], target, params, rng)
        counts[x if v.accepted else v.token] += 1
    expected = logits_to_probs(target_row, params)
    got = counts / n
    tol = 5 * np.sqrt(expected * (1 - expected) / n) + 1e-9
    assert np.all(np.abs(got - expected) <= tol), (got, expected)
    assert got[4:].sum() > 0.2, "ids only the target has are resampled at their target probability"
