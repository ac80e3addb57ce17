"""The acceptance rule: draft tokens and target logits -> verdict. Pure numpy.

Three rules, chosen from what the draft carries (habit from huggingface/transformers):

* temperature 0: accept while the draft token is the target's argmax; the first
  mismatch is replaced by the argmax.
* temperature > 0 with draft probabilities (a draft model): accept draft token x with
  probability min(1, target_probs[x] / draft_probs[x]); at the first rejection sample
  from the residual distribution norm(max(0, target_probs - draft_probs)).
  Leviathan et al. 2022, "Fast Inference from Transformers via Speculative Decoding",
  section 2.3 and Algorithm 1; Chen et al. 2023, Algorithm 2.
* temperature > 0 without probabilities (prompt lookup, a point-mass draft): sample the
  target and compare; a match accepts the draft token, a mismatch keeps the sample.
  This is the ratio test for a one-hot draft distribution, so it is exact too.

Each rule returns the number of accepted draft tokens and exactly one more target
token: resampled at the first rejection, or a bonus token when every draft was accepted.

A :class:`Constraint` (a grammar, :class:`localspec.backend.grammar.Grammar`) makes the target
distribution at each position the target's restricted to the tokens the constraint allows
there, renormalized (llama.cpp applies its grammar sampler the same way, before the rest of
the chain). The rules run unchanged on the masked rows, row by row, the constraint moving
past each token as it is accepted: the output follows the constrained target distribution
exactly, whatever the drafter proposed (a forbidden draft token has target probability 0
and is rejected). Greedy checks the row's argmax first and masks the row only when the
grammar forbids it, as llama.cpp's common sampler does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from localspec.config import SamplingParams
from localspec.errors import ConfigError
from localspec.core.events import TokenKind
from localspec.core.sampling import logits_to_probs, sample


@dataclass(frozen=True, slots=True)
class Verdict:
    """Outcome of verifying one draft.

    Attributes:
        accepted: number of leading draft tokens accepted, 0..len(draft).
        token: the target token committed after them.
        kind: ``RESAMPLED`` if a draft token was rejected, ``BONUS`` if all were
            accepted (``TARGET`` when the draft was empty).
        target_tokens: the target's token at each verified position up to the
            verdict, length ``accepted + 1`` (for the round inspector).
    """

    accepted: int
    token: int
    kind: TokenKind
    target_tokens: tuple[int, ...]


class Constraint(Protocol):
    """The state of a constraint on the output, one position at a time (a grammar)."""

    def allows(self, token: int) -> bool: ...

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` (shape (n_vocab,)) with the forbidden tokens at -inf."""
        ...

    def accept(self, token: int) -> None:
        """Move past ``token`` (one the state allows)."""
        ...


def _no_token_allowed() -> Exception:
    return ConfigError("the output grammar allows no token here: it cannot continue",
                       "check the grammar (a tool's parameters schema, response_format's schema) for a rule no text "
                       "can satisfy")


def _final_kind(n_draft: int, accepted: int) -> TokenKind:
    if n_draft == 0:
        return TokenKind.TARGET
    return TokenKind.BONUS if accepted == n_draft else TokenKind.RESAMPLED


def verify_greedy(draft_tokens: Sequence[int], target_logits: np.ndarray,
                  constraint: Constraint | None = None) -> Verdict:
    """Greedy verification.

    Args:
        draft_tokens: g proposed ids.
        target_logits: shape (g + 1, n_vocab); row i holds the target's logits for the
            position of draft token i (row g: the position after the last draft).
        constraint: restricts each row to the tokens it allows; moved past every token of
            the verdict (the accepted ones and the final one).

    Raises:
        ConfigError: the constraint allows no token at some position.
    """
    g = len(draft_tokens)
    if constraint is not None:
        return _verify_greedy_constrained(draft_tokens, target_logits, constraint)
    return accept_greedy(draft_tokens, np.argmax(target_logits[: g + 1], axis=1))


def accept_greedy(draft_tokens: Sequence[int], target_ids: np.ndarray) -> Verdict:
    """Greedy verification from the target's argmax alone (:func:`verify_greedy` without a constraint).

    Args:
        draft_tokens: g proposed ids.
        target_ids: at least g + 1 ids (int); id i is the argmax of the target's logits at the position of
            draft token i (id g: the position after the last draft), as
            :meth:`~localspec.backend.llama.LlamaModel.decode_argmax` gives them.
    """
    g = len(draft_tokens)
    ids = np.asarray(target_ids[: g + 1])
    differ = np.flatnonzero(ids[:g] != np.asarray(draft_tokens, dtype=ids.dtype)) if g else ()
    accepted = int(differ[0]) if len(differ) else g
    return Verdict(accepted, int(ids[accepted]), _final_kind(g, accepted), tuple(ids[: accepted + 1].tolist()))


def _verify_greedy_constrained(draft_tokens: Sequence[int], target_logits: np.ndarray,
                                constraint: Constraint) -> Verdict:
    g = len(draft_tokens)
    chosen: list[int] = []
    for i in range(g + 1):
        row = target_logits[i]
        t = int(np.argmax(row))
        if not constraint.allows(t):  # the masked row's argmax is the row's unless the grammar forbids it
            masked = constraint.mask(row)
            t = int(np.argmax(masked))
            if not np.isfinite(masked[t]):
                raise _no_token_allowed()
        constraint.accept(t)
        chosen.append(t)
        if i == g or t != int(draft_tokens[i]):
            return Verdict(i, t, _final_kind(g, i), tuple(chosen))
    raise AssertionError("unreachable")


def residual_distribution(target_probs: np.ndarray, draft_probs: np.ndarray) -> np.ndarray:
    """norm(max(0, target_probs - draft_probs)); shape (n_vocab,) float64.

    When the two distributions are equal the residual is empty; a rejection then has
    probability 0, and the target distribution is returned as a safe fallback.
    """
    residual = np.maximum(target_probs - draft_probs, 0.0)
    total = residual.sum()
    if total <= 0.0:
        return target_probs
    return residual / total


def as_target_width(draft_row: np.ndarray, n_target: int) -> np.ndarray:
    """A draft distribution laid over the target's vocabulary; shape (n_target,) float64.

    Target and draft vocabularies may differ in size by padding only
    (:func:`localspec.core.tokenizer.check_compatible`): Qwen2.5 7B-32B have 152,064 ids,
    their 0.5B/1.5B drafts 151,936. The draft never proposes an id the other model lacks
    (the draft drafter masks them), so ids beyond the draft's width have draft probability
    0, and a wider draft row is cut to the target's width (its tail is 0 too).

    Args:
        draft_row: shape (n_draft,) float64, one row of the draft's probabilities.
        n_target: the target's vocabulary size (the width of its logits rows).
    """
    n_draft = draft_row.shape[0]
    if n_draft == n_target:
        return draft_row
    if n_draft > n_target:
        return draft_row[:n_target]
    out = np.zeros(n_target, dtype=draft_row.dtype)
    out[:n_draft] = draft_row
    return out


def verify_sampled(
    draft_tokens: Sequence[int],
    draft_probs: np.ndarray | None,
    target_logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
    constraint: Constraint | None = None,
) -> Verdict:
    """Sampled verification (temperature > 0).

    Args:
        draft_tokens: g proposed ids.
        draft_probs: shape (g, n_draft_vocab) float64 (padding may make it narrower or wider
            than the target's: :func:`as_target_width`), the distributions the draft tokens were
            sampled from (shaped by ``params``), or ``None`` for a point-mass drafter (lookup).
        target_logits: shape (g + 1, n_vocab); shaped here with ``params``.
        params: sampling settings shared with the drafter.
        rng: seeded generator; consumed in a fixed order, so a seed reproduces a run.
        constraint: as in :func:`verify_greedy`; every row is masked (a full-vocabulary walk).

    Raises:
        ConfigError: the constraint allows no token at some position.
    """
    g = len(draft_tokens)
    target_tokens: list[int] = []

    def row(i: int) -> np.ndarray:
        if constraint is None:
            return target_logits[i]
        masked = constraint.mask(target_logits[i])
        if not np.isfinite(masked).any():
            raise _no_token_allowed()
        return masked

    def commit(t: int) -> int:
        if constraint is not None:
            constraint.accept(t)
        return t

    for i in range(g):
        target_probs = logits_to_probs(row(i), params)
        x = int(draft_tokens[i])
        if draft_probs is None:
            t = sample(target_probs, rng)
            if t != x:
                target_tokens.append(commit(t))
                return Verdict(i, t, TokenKind.RESAMPLED, tuple(target_tokens))
        else:
            q = as_target_width(draft_probs[i], target_probs.shape[0])
            p_x, q_x = target_probs[x], q[x]
            u = rng.random()
            # accept with probability min(1, p_x / q_x), written without the division
            if not (q_x > 0.0 and u * q_x < p_x):
                t = sample(residual_distribution(target_probs, q), rng)
                target_tokens.append(commit(t))
                return Verdict(i, t, TokenKind.RESAMPLED, tuple(target_tokens))
        target_tokens.append(commit(x))
    t = sample(logits_to_probs(row(g), params), rng)
    target_tokens.append(commit(t))
    return Verdict(g, t, _final_kind(g, g), tuple(target_tokens))


def verify(
    draft_tokens: Sequence[int],
    draft_probs: np.ndarray | None,
    target_logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
    constraint: Constraint | None = None,
) -> Verdict:
    """Dispatch to :func:`verify_greedy` or :func:`verify_sampled` by temperature."""
    if params.greedy:
        return verify_greedy(draft_tokens, target_logits, constraint)
    return verify_sampled(draft_tokens, draft_probs, target_logits, params, rng, constraint)
