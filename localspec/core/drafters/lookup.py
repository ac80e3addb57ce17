"""Prompt lookup decoding: draft by copying what followed an earlier match of the last n tokens.

Saxena 2023, "Prompt Lookup Decoding" (github.com/apoorvumang/prompt-lookup-decoding).
Written in numpy; no model runs while drafting.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.config import DraftParams
from localspec.core.events import DrafterId
from localspec.core.drafters.base import Draft

#: how many tokens before an n-gram match are compared to rank matches and reported as the match
#: length (the evidence for a long draft: :class:`~localspec.core.costmodel.MatchAcceptance`)
MAX_CONTEXT = 256


def ngram_starts(haystack: np.ndarray, pattern: np.ndarray, m: int) -> np.ndarray:
    """Every start s in [0, m) where ``haystack[s : s + len(pattern)] == pattern``.

    Args:
        haystack: shape (L,) int64; needs ``m + len(pattern) - 1 <= L``.
        pattern: shape (n,) int64, n >= 1.

    Returns:
        shape (k,) int64, increasing.
    """
    mask = haystack[0:m] == pattern[0]
    for j in range(1, len(pattern)):
        mask &= haystack[j : m + j] == pattern[j]
    return np.flatnonzero(mask)


def find_candidate(
    tokens: np.ndarray | Sequence[int], max_ngram: int, min_ngram: int, draft_max: int
) -> tuple[list[int], int]:
    """:func:`find_match` without the match length: (proposed ids, matched n-gram length)."""
    copied, n, _ = find_match(tokens, max_ngram, min_ngram, draft_max)
    return copied, n


def find_match(
    tokens: np.ndarray | Sequence[int], max_ngram: int, min_ngram: int, draft_max: int
) -> tuple[list[int], int, int]:
    """:func:`locate_match` without the source position: (proposed ids, n-gram length n, match length)."""
    copied, n, m, _ = locate_match(tokens, max_ngram, min_ngram, draft_max)
    return copied, n, m


def locate_match(
    tokens: np.ndarray | Sequence[int], max_ngram: int, min_ngram: int, draft_max: int
) -> tuple[list[int], int, int, int]:
    """Find a continuation of ``tokens`` by n-gram lookup in ``tokens`` itself.

    The last n tokens, n from ``max_ngram`` down to ``min_ngram``, are searched for in
    the earlier tokens (prompt and output alike); the first n that matches anywhere is
    used. Among its matches, the one whose preceding tokens agree longest with what
    precedes the last n tokens wins (up to ``MAX_CONTEXT`` tokens: in a code edit that
    is the place in the file being copied, not an earlier copy of a common n-gram), and
    of those the most recent. The proposal copies what followed that match; where the
    copy reaches the end of ``tokens`` it continues with the period of the match (a
    repetition such as "ha ha ha" keeps repeating), so it is always ``draft_max`` long.

    Args:
        tokens: shape (L,) integer token ids.
        max_ngram, min_ngram: n-gram lengths tried, longest first (1 <= min <= max).
        draft_max: tokens proposed.

    Returns:
        (proposed ids, matched n-gram length n, match length, source position): the match length
        counts the n-gram plus the tokens before it that agree with the tokens before the last n
        (at most ``MAX_CONTEXT``), i.e. over how many tokens the copied place agrees with the end
        of the text; the source position is the index in ``tokens`` of the first copied token;
        ``([], 0, 0, -1)`` when nothing matches.
    """
    t = np.asarray(tokens, dtype=np.int64)
    L = t.shape[0]
    if draft_max <= 0:
        return [], 0, 0, -1
    for n in range(max_ngram, min_ngram - 1, -1):
        if L < n + 1:
            continue
        # candidate starts s in [0, L - n): the n-gram t[s:s+n] is followed by t[s+n]
        hit = best_match(t, L - n, t, n)
        if hit is None:
            continue
        s, k = hit
        period = L - n - s  # >= 1: the match repeats the text every ``period`` tokens
        copied = t[s + n : s + n + draft_max].tolist()
        while len(copied) < draft_max:
            copied.append(copied[len(copied) - period])
        return copied, n, n + k, s + n
    return [], 0, 0, -1


def best_match(haystack: np.ndarray, end: int, context: np.ndarray, n: int,
               starts: np.ndarray | None = None) -> tuple[int, int] | None:
    """The best place in ``haystack`` to copy a continuation of ``context`` from (:func:`find_match`'s ranking).

    Among the starts s in [0, ``end``) where ``haystack[s : s + n]`` equals the last ``n`` tokens of
    ``context``, the one whose preceding tokens agree longest with the tokens before the last ``n``
    of ``context`` (compared up to :data:`MAX_CONTEXT` tokens back), and of those the most recent.
    The haystack is ``context`` itself (prompt lookup) or earlier texts
    (:class:`~localspec.core.drafters.memory.DraftMemory`, whose separators, -1, agree with no token).

    Args:
        haystack: shape (H,) integer token ids; needs ``end + n - 1 <= H``.
        end: starts are searched in [0, end).
        context: shape (L,) integer token ids, L >= n.
        n: the n-gram length, >= 1.
        starts: the starts where the n-gram occurs, shape (k,) int, increasing, when the caller
            found them faster (an index); None: searched here (:func:`ngram_starts`).

    Returns:
        (s, k): the chosen start and how many tokens before it agree with the tokens before the
        context's last n (at most :data:`MAX_CONTEXT`); None when the n-gram does not occur.
    """
    L = context.shape[0]
    if starts is None:
        starts = ngram_starts(haystack, context[L - n :], end)
    if starts.size == 0:
        return None
    # keep the matches whose earlier context agrees longest with the current one
    k = 1
    while starts.size > 1 and k <= MAX_CONTEXT and L - n - k >= 0:
        before = starts - k
        ok = before >= 0
        ok[ok] = haystack[before[ok]] == context[L - n - k]
        if not ok.any():
            break
        starts = starts[ok]
        k += 1
    s = int(starts[-1])
    # how far the earlier context of the chosen match agrees (the loop above may stop early)
    k = 0
    while k < MAX_CONTEXT and s - k - 1 >= 0 and L - n - k - 1 >= 0 and haystack[s - k - 1] == context[L - n - k - 1]:
        k += 1
    return s, k


def agreement(haystack: np.ndarray, s: int, context: np.ndarray, n: int, limit: int) -> int:
    """How many tokens before ``haystack[s]`` agree with the tokens before the last ``n`` of ``context``,
    counted backwards up to ``limit`` (one vectorised comparison; :func:`best_match` counts up to
    :data:`MAX_CONTEXT` only).

    Args:
        haystack: shape (H,) integer token ids (separators, -1, agree with no token).
        s: the start of the match in ``haystack`` (0 <= s <= H).
        context: shape (L,) integer token ids, L >= n.
        n: the n-gram length, >= 0.
        limit: most tokens compared, >= 0.

    Returns:
        tokens agreeing, in [0, min(limit, s, L - n)].
    """
    L = context.shape[0]
    m = min(int(limit), int(s), L - n)
    if m <= 0:
        return 0
    diff = np.flatnonzero(haystack[s - m : s][::-1] != context[L - n - m : L - n][::-1])
    return int(diff[0]) if diff.size else m


class PromptLookupDrafter:
    """Drafter that proposes tokens by prompt lookup (point-mass draft: no probabilities).

    Args:
        memory: earlier texts to copy from as well (:class:`~localspec.core.drafters.memory.DraftMemory`),
            or None. Its proposal is used when its place agrees with the end of the context over more
            tokens than the context's own best match does. When both agree over the whole compared
            span (:data:`MAX_CONTEXT` tokens before the n-gram), the one that agrees further back wins
            (:func:`agreement`, over the whole context; ties: the context's own): asked the same edit
            again, the memory's earlier answer agrees since the answer began, while the prompt's file
            agrees only since the last place the edit changed, and breaks at the next (a rename: every
            renamed site), so the capped comparison alone chose the prompt in every long unchanged stretch.
    """

    name = DrafterId.LOOKUP
    last_catchup = (0, 0.0)  #: no cache, nothing to catch up

    def __init__(self, memory=None) -> None:
        self.memory = memory

    def draft(self, context: Sequence[int], draft_len: int, drafting: DraftParams) -> Draft:
        """Up to ``draft_len`` ids copied after the best n-gram match (:func:`locate_match`) in the context
        (``source_position``: where in ``context`` the copy starts) or, when it agrees longer, in the
        memory (then ``from_memory``, ``source_position`` -1); probs None."""
        tokens, n, m, at = locate_match(context, drafting.max_ngram, drafting.min_ngram, draft_len)
        if self.memory is not None:
            remembered, n_mem, m_mem, far = self.memory.locate(context, drafting.max_ngram, drafting.min_ngram,
                                                               draft_len, far=len(context))
            if remembered and (m_mem > m or (m_mem == m and m == n + MAX_CONTEXT and n_mem == n
                                              and far > self._agreement(context, at - n, n))):
                return Draft(tuple(remembered), None, self.name, m_mem, from_memory=True)
        return Draft(tuple(tokens), None, self.name, m, source_position=at)

    @staticmethod
    def _agreement(context: Sequence[int], s: int, n: int) -> int:
        """How far back the context's own match at ``s`` agrees with the end of the context (:func:`agreement`)."""
        t = np.asarray(context, dtype=np.int64)
        return agreement(t, s, t, n, t.shape[0])

    def catchup_tokens(self, context: Sequence[int]) -> int:
        return 0

    def rollback(self, committed: Sequence[int]) -> None:
        pass

    def reset(self) -> None:
        pass
