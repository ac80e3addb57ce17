"""Several cached prompt prefixes: KV-cache snapshots kept in memory, the least recently used evicted.

A model's KV cache holds one token sequence; an agent alternates between a few long prompts (its
main conversation, a summarizer, a sub-agent), and each switch would read the other prompt again.
:class:`PrefixCache` keeps snapshots of caches a prompt was about to drop (the engine takes them,
:meth:`localspec.core.engine.SpeculativeEngine.prefill`) and gives back the one sharing the longest
prefix with a new prompt. The snapshots are opaque here: anything with ``tokens`` (the cached token
ids) and ``nbytes`` (their size), such as :class:`localspec.backend.llama.KvState`; a model's own
``save_state`` / ``load_state`` take and restore them, so a restored prefix is the very cells that
were computed, and the output is the same as without it.

Pure bookkeeping (no llama.cpp): one byte budget over every model's snapshots (``role`` tells the
target's from the draft model's); a snapshot whose tokens extend another's of the same role
replaces it (it serves every prompt the shorter one did, at least as far).

Scopes: every snapshot belongs to a scope (an opaque string; the server's is a hash of the API key and
a request's ``cache_salt``, :func:`localspec.server.scopes.scope_id`; ``""`` when there is one user), and
:meth:`PrefixCache.best` looks only at the asking scope's, so a prompt's reuse (``cached_tokens``) never
depends on another scope's prompts. The budget is shared: the least recently used snapshot goes first,
whatever its scope.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

#: shortest prefix worth a snapshot, tokens: shorter ones are read again in well under a second
MIN_SNAPSHOT_TOKENS = 64


class SnapshotStore(Protocol):
    """A second, persistent tier (:class:`localspec.backend.prompt_store.PromptStore`): it is given every
    snapshot the cache keeps, and asked when memory holds no match as long."""

    def save(self, role: str, snapshot: "Snapshot", scope: str = "") -> None: ...

    def best(self, role: str, tokens: Sequence[int], limit: int | None = None,
             scope: str = "") -> tuple["Snapshot", int] | None: ...

    def discard(self, snapshot: "Snapshot") -> None: ...

    def flush(self) -> None: ...


class Snapshot(Protocol):
    """What :class:`PrefixCache` keeps: a model's cache contents and their size."""

    @property
    def tokens(self) -> tuple[int, ...]: ...

    @property
    def nbytes(self) -> int: ...


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """Length of the longest common prefix of ``a`` and ``b``, at most ``limit`` (None: no limit)."""
    n = min(len(a), len(b), len(a) if limit is None else max(0, limit))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


@dataclass
class PrefixCacheStats:
    """Counters since the cache was made: snapshots kept, restored and evicted (for the byte limit)."""

    saved: int = 0
    restored: int = 0
    evicted: int = 0
    restored_tokens: int = 0
    #: snapshots :meth:`PrefixCache.best` found in the store (disk), not in memory
    from_store: int = 0


class PrefixCache:
    """Snapshots of KV caches by role, least recently used evicted beyond ``max_bytes``.

    Args:
        max_bytes: the most bytes the snapshots may take together; 0 keeps none.
        min_tokens: snapshots of fewer tokens are not kept.
        store: a persistent tier (disk) that gets every snapshot kept and serves longer matches, or None.
    """

    def __init__(self, max_bytes: int, min_tokens: int = MIN_SNAPSHOT_TOKENS,
                 store: SnapshotStore | None = None) -> None:
        if max_bytes < 0 or min_tokens < 1:
            raise ValueError("max_bytes must be >= 0 and min_tokens >= 1")
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        #: (role, scope) and snapshot, least recently used first
        self._entries: OrderedDict[int, tuple[tuple[str, str], Snapshot]] = OrderedDict()
        self._next = 0
        self._nbytes = 0
        self.stats = PrefixCacheStats()
        self.store = store

    @property
    def nbytes(self) -> int:
        """Bytes the kept snapshots take (a running total: /metrics reads it from another thread)."""
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def snapshots(self, role: str, scope: str | None = None) -> list[Snapshot]:
        """The kept snapshots of ``role`` (of ``scope``; None: of every scope), least recently used first."""
        return [s for (r, sc), s in self._entries.values() if r == role and scope in (None, sc)]

    def put(self, role: str, snapshot: Snapshot | None, scope: str = "") -> bool:
        """Keep ``snapshot`` of ``scope`` as the most recently used; evict the least recently used (of any
        scope) beyond the limit.

        Not kept (False): None, shorter than ``min_tokens``, larger than the whole limit, or the prefix
        of a snapshot of ``role`` and ``scope`` already kept (that one is marked used instead). Snapshots of
        ``role`` and ``scope`` whose tokens ``snapshot`` extends are dropped.
        """
        if snapshot is None or len(snapshot.tokens) < self.min_tokens or snapshot.nbytes > self.max_bytes:
            return False
        tokens = snapshot.tokens
        for key, (r, s) in list(self._entries.items()):
            if r != (role, scope):
                continue
            if len(s.tokens) >= len(tokens) and s.tokens[: len(tokens)] == tokens:
                self._entries.move_to_end(key)
                return False
            if s.tokens == tokens[: len(s.tokens)]:
                self._drop(key)
        self._entries[self._next] = ((role, scope), snapshot)
        self._next += 1
        self.stats.saved += 1
        if self.store is not None:
            self.store.save(role, snapshot, scope=scope)
        self._nbytes += snapshot.nbytes
        while self._nbytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
            self.stats.evicted += 1
        return True

    def best(self, role: str, tokens: Sequence[int], limit: int | None = None,
             scope: str = "") -> tuple[Snapshot, int] | None:
        """The snapshot of ``role`` and ``scope`` sharing the longest prefix with ``tokens`` (at most ``limit``
        tokens), marked most recently used, and that length; None when none shares a token. Ties: the most
        recently used. The store's longest match (of ``scope`` too) when it is longer than memory's."""
        found, found_key, longest = None, None, 0
        for key, (r, s) in reversed(self._entries.items()):
            if r == (role, scope):
                n = common_prefix(s.tokens, tokens, limit)
                if n > longest:
                    found, found_key, longest = s, key, n
        stored = self.store.best(role, tokens, limit, scope=scope) if self.store is not None else None
        if stored is not None and stored[1] > longest:
            self.stats.from_store += 1
            return stored
        if found is None:
            return None
        self._entries.move_to_end(found_key)
        return found, longest

    def discard(self, snapshot: Snapshot) -> None:
        """Forget ``snapshot`` (one a model refused to load), in the store too."""
        for key, (_, s) in list(self._entries.items()):
            if s is snapshot:
                self._drop(key)
        if self.store is not None:
            self.store.discard(snapshot)

    def _drop(self, key: int) -> None:
        _, s = self._entries.pop(key)
        self._nbytes -= s.nbytes

    def clear(self) -> None:
        self._entries.clear()
        self._nbytes = 0
