"""Draft memory: earlier texts (each request's prompt and answer) that prompt lookup may copy from.

A client that asks again about the same file, or an agent that repeats a tool call or an earlier
answer, writes what an earlier request already said; prompt lookup (Saxena 2023) finds it only in
the current context. The memory keeps the token ids of earlier generations (prompt + output) in
one bounded pool shared across requests, as llama-server's ``ngram-mod`` keeps one pool and vLLM's
suffix decoding (Oliaro et al. 2024, "SuffixDecoding") keeps earlier outputs for agents. It is
searched with prompt lookup's own ranking (:func:`~localspec.core.drafters.lookup.best_match`).

Its drafts are point-mass proposals verified by the target like any lookup draft, so the output
never depends on what the memory holds (exactness); only the speed does.

Size: each token is an int32 (4 bytes) in one array, plus one separator per text, and an index
of it (the positions sorted by token: int64 positions and the sorted int32 tokens, 12 bytes a
token), so 16 bytes a token in all; an :meth:`add` briefly holds the old and the new arrays.
A search looks up the last token's positions in the index (binary search), so a round's cost
grows with how often that token occurs, not with the memory's size; an :meth:`add` re-sorts
(O(N log N), once per request).

Scopes (:class:`DraftMemories`): a server with several API keys keeps one memory per scope (an API key,
narrowed by a request's ``cache_salt``), so that what one scope's drafts copy, and so its statistics,
never depend on another scope's texts; the scopes share one token budget, the least recently used
scope giving up its oldest texts first.
"""

from __future__ import annotations

import threading
from collections import deque
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np

from localspec.config import DRAFT_MEMORY_BYTES_PER_TOKEN
from localspec.core.drafters.lookup import MAX_CONTEXT, agreement, best_match

#: bytes a remembered token takes: int32 in the searched array, int64 position + int32 token in the index
#: (the settings' help states it: one number, :data:`localspec.config.DRAFT_MEMORY_BYTES_PER_TOKEN`;
#: tests/unit/core/test_draft_memory.py checks it against :attr:`DraftMemory.nbytes`)
TOKEN_BYTES = DRAFT_MEMORY_BYTES_PER_TOKEN
#: what ends each text in the searched array: no token id, so no n-gram matches across two texts
SEPARATOR = -1


class DraftMemory:
    """Earlier token sequences, at most ``max_tokens`` tokens in all, the oldest evicted first.

    Thread-safe for one writer and any readers: :meth:`add` builds a new array under a lock and
    swaps it in; :meth:`find` reads whichever array is current (never a half-built one).

    Args:
        max_tokens: the budget, tokens (>= 0; 0 keeps nothing). About ``TOKEN_BYTES * max_tokens`` bytes.

    Raises:
        ValueError: ``max_tokens`` is negative.
    """

    def __init__(self, max_tokens: int, on_add: Callable[["DraftMemory"], None] | None = None,
                 lock: "threading.RLock | None" = None) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0 (got {max_tokens})")
        self.max_tokens = int(max_tokens)
        #: called after each :meth:`add` that kept a text, still under the lock (a :class:`DraftMemories` balancing
        #: its scopes: with the lock they share, nobody sees the scopes over their budget between the two)
        self._on_add = on_add
        self._texts: deque[np.ndarray] = deque()  # oldest first, each int32 shape (n,)
        self._tokens = 0
        #: (the texts joined, each followed by SEPARATOR; its positions sorted by token, stable; those tokens)
        self._index = _index(np.empty(0, dtype=np.int32))
        self._lock = lock if lock is not None else threading.RLock()

    @property
    def tokens(self) -> int:
        """Tokens held now (separators not counted)."""
        return self._tokens

    @property
    def texts(self) -> int:
        """Sequences held now."""
        return len(self._texts)

    @property
    def nbytes(self) -> int:
        """Bytes held now: the searched array (tokens and separators, int32) and its index."""
        return int(sum(a.nbytes for a in self._index))

    def add(self, tokens: Sequence[int]) -> None:
        """Remember ``tokens`` (a prompt and its answer, ids >= 0) as the newest text.

        The oldest whole texts are evicted until the budget holds; a text longer than the whole
        budget keeps only its last ``max_tokens`` tokens. A text equal to one held already is
        moved to the newest place instead of being held twice. Empty texts are ignored.
        """
        t = np.asarray(list(tokens), dtype=np.int32)[-self.max_tokens :] if self.max_tokens else None
        if t is None or t.size == 0:
            return
        with self._lock:
            for i, old in enumerate(self._texts):
                if old.size == t.size and np.array_equal(old, t):
                    del self._texts[i]
                    self._tokens -= old.size
                    break
            self._texts.append(t)
            self._tokens += t.size
            while self._tokens > self.max_tokens:
                self._tokens -= self._texts.popleft().size
            self._index = _index(self._joined())
            if self._on_add is not None:
                self._on_add(self)

    def shrink(self, max_tokens: int) -> int:
        """Evict the oldest whole texts until at most ``max_tokens`` tokens are held; returns the tokens evicted."""
        with self._lock:
            before = self._tokens
            while self._texts and self._tokens > max_tokens:
                self._tokens -= self._texts.popleft().size
            if self._tokens != before:
                self._index = _index(self._joined())
            return before - self._tokens

    def _joined(self) -> np.ndarray:
        out = np.empty(self._tokens + len(self._texts), dtype=np.int32)
        at = 0
        for t in self._texts:
            out[at : at + t.size] = t
            out[at + t.size] = SEPARATOR
            at += t.size + 1
        return out

    def clear(self) -> None:
        """Forget every text."""
        with self._lock:
            self._texts.clear()
            self._tokens = 0
            self._index = _index(np.empty(0, dtype=np.int32))

    def find(self, context: Sequence[int] | np.ndarray, max_ngram: int, min_ngram: int,
             draft_max: int) -> tuple[list[int], int, int]:
        """:meth:`locate` without the far agreement: (proposed ids, matched n-gram length, match length)."""
        copied, n, m, _ = self.locate(context, max_ngram, min_ngram, draft_max)
        return copied, n, m

    def locate(self, context: Sequence[int] | np.ndarray, max_ngram: int, min_ngram: int,
               draft_max: int, far: int = 0) -> tuple[list[int], int, int, int]:
        """A continuation of ``context`` copied from the remembered texts, ranked as
        :func:`~localspec.core.drafters.lookup.find_match` ranks places in the context itself.

        The last n tokens of ``context``, n from ``max_ngram`` down to ``min_ngram``, are searched
        for in the memory; the first n that occurs is used, at the place whose preceding tokens
        agree longest with the context's (up to :data:`~localspec.core.drafters.lookup.MAX_CONTEXT`),
        the newest of those. The copy stops where that earlier text ended (so it may be shorter
        than ``draft_max``, or empty).

        Args:
            context: shape (L,) integer token ids (prompt and output so far).
            max_ngram, min_ngram: n-gram lengths tried, longest first (1 <= min <= max).
            draft_max: most tokens proposed.
            far: where the place agrees over the whole compared span (:data:`~localspec.core.drafters.lookup.MAX_CONTEXT`
                tokens before the n-gram), also count how far back it agrees, up to ``far`` tokens
                (:func:`~localspec.core.drafters.lookup.agreement`; 0: not counted).

        Returns:
            (proposed ids, matched n-gram length, match length, far agreement): the first three as
            :func:`find_match` returns them; the far agreement is the tokens before the n-gram that agree
            (more than ``MAX_CONTEXT`` only when counted with ``far``); ``([], 0, 0, 0)`` when nothing matches.
        """
        hay, order, tokens = self._index  # one consistent snapshot: add() swaps in a new one
        t = np.asarray(context, dtype=np.int64)
        if draft_max <= 0 or hay.size == 0 or t.shape[0] == 0:
            return [], 0, 0, 0
        lo, hi = np.searchsorted(tokens, t[-1], "left"), np.searchsorted(tokens, t[-1], "right")
        last = order[lo:hi]  # every position of the context's last token, increasing
        for n in range(max_ngram, min_ngram - 1, -1):
            if t.shape[0] < n:
                continue
            starts = last - (n - 1)
            starts = starts[starts >= 0]
            for j in range(n - 1):
                starts = starts[hay[starts + j] == t[t.shape[0] - n + j]]
            hit = best_match(hay, hay.size - n, t, n, starts)
            if hit is None:
                continue
            s, k = hit
            copied = hay[s + n : s + n + draft_max]
            ends = np.flatnonzero(copied == SEPARATOR)
            copied = copied[: ends[0]] if ends.size else copied
            reach = agreement(hay, s, t, n, far) if far > MAX_CONTEXT and k == MAX_CONTEXT else k
            return copied.tolist(), n, n + k, reach
        return [], 0, 0, 0


class DraftMemories:
    """One :class:`DraftMemory` per scope, sharing one budget of ``max_tokens`` tokens.

    A scope is an opaque string (the server's: a hash of an API key and a request's ``cache_salt``,
    :func:`localspec.server.scopes.scope_id`); a scope's memory holds only the texts added to it, so its
    drafts never depend on another scope's. When the scopes together hold more than ``max_tokens``,
    the least recently used scope (the one whose memory was asked for longest ago) gives up its oldest
    texts first, then the next; the scope just added to goes last. A scope's memory is made on first use
    and forgotten once it is empty.

    Args:
        max_tokens: the budget over every scope, tokens (>= 0; 0 keeps nothing).

    Raises:
        ValueError: ``max_tokens`` is negative.
    """

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0 (got {max_tokens})")
        self.max_tokens = int(max_tokens)
        self._scopes: OrderedDict[str, DraftMemory] = OrderedDict()  # least recently used first
        self._lock = threading.RLock()  # one lock for the store and its scopes: an add and its balancing are one step

    def scope(self, scope: str) -> DraftMemory:
        """The memory of ``scope`` (made empty on first use), marked most recently used."""
        with self._lock:
            mem = self._scopes.get(scope)
            if mem is None:
                mem = self._scopes[scope] = DraftMemory(self.max_tokens, on_add=self._balance, lock=self._lock)
            self._scopes.move_to_end(scope)
            return mem

    def _balance(self, added: DraftMemory) -> None:
        """After ``added`` grew: evict across scopes, least recently used first, down to the budget."""
        with self._lock:
            over = sum(m.tokens for m in self._scopes.values()) - self.max_tokens
            for key, mem in [*((k, m) for k, m in self._scopes.items() if m is not added),
                             *((k, m) for k, m in self._scopes.items() if m is added)]:
                if over <= 0:
                    break
                over -= mem.shrink(max(mem.tokens - over, 0))
            for key in [k for k, m in self._scopes.items() if m.texts == 0 and m is not added]:
                del self._scopes[key]

    @property
    def tokens(self) -> int:
        """Tokens held now over every scope (never over ``max_tokens``: read under the lock adds hold)."""
        with self._lock:
            return sum(m.tokens for m in self._scopes.values())

    @property
    def texts(self) -> int:
        """Sequences held now over every scope."""
        with self._lock:
            return sum(m.texts for m in self._scopes.values())

    @property
    def nbytes(self) -> int:
        """Bytes held now over every scope (:attr:`DraftMemory.nbytes` summed): ``/metrics``' gauge."""
        with self._lock:
            return sum(m.nbytes for m in self._scopes.values())

    def __len__(self) -> int:
        """Scopes holding a memory now."""
        return len(self._scopes)

    def clear(self) -> None:
        """Forget every scope's texts."""
        with self._lock:
            self._scopes.clear()


def _index(hay: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``hay``, its positions sorted by token (stable: increasing within a token), the sorted tokens)."""
    order = np.argsort(hay, kind="stable")
    return hay, order, hay[order]
