"""The kept prompt prefixes (localspec.core.prefix_cache): the LRU policy on fake sizes, and the engine's
swap-in on fake models (which decode only what neither the live cache nor a snapshot holds)."""

from dataclasses import dataclass

import pytest

from generation import run
from localspec.core.engine import SpeculativeEngine
from localspec.core.prefix_cache import PrefixCache, common_prefix
from tests.fakes import FakeModel


@dataclass(frozen=True)
class Snap:
    tokens: tuple
    nbytes: int


def snap(tokens, nbytes=None):
    t = tuple(tokens)
    return Snap(t, 10 * len(t) if nbytes is None else nbytes)


def test_common_prefix_stops_at_the_first_difference_and_the_limit():
    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([1, 2, 3], [1, 2, 3], limit=2) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([5], [6]) == 0


def test_the_least_recently_used_is_evicted_beyond_the_byte_limit():
    cache = PrefixCache(max_bytes=250, min_tokens=2)
    a, b, c = snap(range(0, 10)), snap(range(100, 110)), snap(range(200, 210))  # 100 bytes each
    assert cache.put("target", a) and cache.put("target", b)
    assert cache.best("target", list(range(0, 12)))[0] is a  # a is now the most recently used
    assert cache.put("target", c)  # 300 bytes > 250: b, the least recently used, goes
    assert cache.snapshots("target") == [a, c]
    assert cache.nbytes == 200 and cache.stats.evicted == 1


def test_too_short_or_too_large_snapshots_are_not_kept():
    cache = PrefixCache(max_bytes=100, min_tokens=4)
    assert not cache.put("target", snap([1, 2, 3]))
    assert not cache.put("target", snap(range(50), nbytes=101))
    assert not cache.put("target", None)
    assert len(cache) == 0


def test_a_longer_snapshot_replaces_its_prefix_and_a_prefix_is_not_added():
    cache = PrefixCache(max_bytes=10_000, min_tokens=2)
    short, long_ = snap(range(10)), snap(range(20))
    cache.put("target", short)
    cache.put("target", long_)
    assert cache.snapshots("target") == [long_]
    assert not cache.put("target", snap(range(15)))
    assert cache.snapshots("target") == [long_]
    cache.put("draft", snap(range(10)))  # another role's snapshot is its own
    assert len(cache) == 2


def test_best_finds_the_longest_shared_prefix_of_its_role_within_the_limit():
    cache = PrefixCache(max_bytes=10_000, min_tokens=2)
    a = snap([1, 2, 3, 4, 5, 6])
    b = snap([1, 2, 9, 9, 9, 9])
    cache.put("target", a)
    cache.put("target", b)
    prompt = [1, 2, 3, 4, 7]
    assert cache.best("target", prompt) == (a, 4)
    assert cache.best("target", prompt, limit=3) == (a, 3)
    assert cache.best("draft", prompt) is None
    assert cache.best("target", [8, 8]) is None
    cache.discard(a)
    assert cache.best("target", prompt) == (b, 2)


def test_limits_are_checked():
    with pytest.raises(ValueError):
        PrefixCache(-1)
    with pytest.raises(ValueError):
        PrefixCache(10, min_tokens=0)


class SnapshotModel(FakeModel):
    """A fake model whose KV cache can be saved and restored (its state is the token list)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.loads = 0

    def save_state(self):
        return snap(self.cached_tokens, 4 * self.n_cached) if self.cached_tokens else None

    def load_state(self, state) -> bool:
        self.loads += 1
        self.cached_tokens[:] = state.tokens
        return True


def _engine(draft: bool = False) -> SpeculativeEngine:
    eng = SpeculativeEngine(SnapshotModel(n_ctx=512), SnapshotModel(n_ctx=512) if draft else None)
    eng.prefix_cache = PrefixCache(max_bytes=1 << 20, min_tokens=8)
    return eng


def _run(eng, prompt, cache_prompt=True, mode="lookup"):
    """The generation of :func:`generation.run`, 6 tokens."""
    return run(eng, prompt, mode, 6, draft_max=4, cache_prompt=cache_prompt)[0]


A = [1] + [3, 5] * 30
B = [1] + [7, 2] * 30


def test_alternating_prompts_read_only_what_no_cache_holds():
    eng = _engine()
    first_a, first_b = _run(eng, A), _run(eng, B)
    assert first_a.stats.cached_prompt_tokens == 0 and first_b.stats.cached_prompt_tokens == 1  # the shared BOS
    again = _run(eng, A)
    assert again.stats.cached_prompt_tokens == len(A) - 1  # restored, nothing of A read again
    assert again.token_ids == first_a.token_ids
    assert eng.target.loads == 1 and eng.prefix_cache.stats.restored == 1
    assert _run(eng, B).stats.cached_prompt_tokens == len(B) - 1


def test_the_draft_model_is_restored_with_the_target():
    eng = _engine(draft=True)
    _run(eng, A, mode="draft")
    _run(eng, B, mode="draft")
    assert eng.draft_model.cached_tokens[:2] == B[:2]
    again = _run(eng, A, mode="draft")
    assert eng.draft_model.loads == 1
    assert again.rounds[0].catchup_tokens == 0  # its cache came back: nothing of A to catch up on
    eng.check_caches(again.committed)


def test_cache_prompt_false_neither_restores_nor_keeps_but_keeps_what_the_cache_held():
    eng = _engine()
    _run(eng, A)
    eng.clear_cache(keep=True)  # what the server does before a cache_prompt: false request
    kept = len(eng.prefix_cache)
    no_cache = _run(eng, A, cache_prompt=False)
    assert no_cache.stats.cached_prompt_tokens == 0 and eng.target.loads == 0
    eng.clear_cache()  # and after it
    assert len(eng.prefix_cache) == kept == 1
    assert _run(eng, A).stats.cached_prompt_tokens == len(A) - 1  # the earlier request's prefix is back


def test_a_snapshot_that_would_save_fewer_than_min_tokens_is_not_restored():
    eng = _engine()
    eng.prefix_cache.min_tokens = 40
    _run(eng, A)
    _run(eng, B)
    near = A[:30] + B[30:]  # 30 tokens of A (its snapshot) and 1 of B (the live cache): 29 < 40 gained
    gen = _run(eng, near)
    assert eng.target.loads == 0 and gen.stats.cached_prompt_tokens < 40


def test_a_snapshot_that_cannot_be_read_is_forgotten_and_the_prompt_read():
    eng = _engine()
    _run(eng, A)
    _run(eng, B)

    def unreadable(state):
        eng.target.cached_tokens.clear()  # as LlamaModel.load_state: emptied before the data is read
        raise OSError("gone")

    eng.target.load_state = unreadable
    gen = _run(eng, A)
    kept = eng.prefix_cache.snapshots("target")
    assert gen.stats.cached_prompt_tokens == 0
    assert len(kept) == 1 and kept[0].tokens[: len(B)] == tuple(B)  # A's is forgotten, B's (kept just now) stays
    assert gen.token_ids == _run(_engine(), A).token_ids
