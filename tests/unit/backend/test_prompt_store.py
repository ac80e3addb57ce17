"""Prompt-prefix snapshots on disk (localspec.backend.prompt_store): written atomically, found again by a new
store (a restarted server) with the same key only, bounded by size, least recently used deleted first."""

import ctypes
import os
import time

from localspec.backend.prompt_store import PromptStore
from localspec.core.prefix_cache import PrefixCache

KEY = {"format": 1, "path": "/models/m.gguf", "size": 10, "mtime": 1, "flash_attn": False}


class Snap:
    def __init__(self, tokens, fill=7):
        self.tokens = tuple(tokens)
        self.nbytes = 4 * len(self.tokens)
        self.data = (ctypes.c_uint8 * self.nbytes)(*([fill] * self.nbytes))
        self.flash_attn = False


def stored(folder, max_bytes=1 << 20, key=KEY):
    return PromptStore(folder, {"target": key}, max_bytes)


def test_a_snapshot_is_found_again_by_a_new_store_with_its_bytes(tmp_path):
    store = stored(tmp_path)
    store.save("target", Snap(range(100), fill=3))
    store.flush()
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".kv"]  # no temporary file left
    again = stored(tmp_path)  # the server restarted
    found, n = again.best("target", list(range(50)) + [999])
    assert n == 50 and found.tokens == tuple(range(100)) and found.flash_attn is False
    assert bytes(found.data) == bytes([3] * 400)
    assert again.best("draft", list(range(50))) is None


def test_another_models_or_settings_snapshots_are_not_read(tmp_path):
    store = stored(tmp_path)
    store.save("target", Snap(range(100)))
    store.flush()
    assert len(stored(tmp_path, key=KEY | {"mtime": 2})) == 0  # the model file changed
    assert len(stored(tmp_path, key=KEY | {"flash_attn": True})) == 0
    (tmp_path / "junk.json").write_text("{not json")
    assert len(stored(tmp_path)) == 1


def test_the_least_recently_used_is_deleted_beyond_the_size(tmp_path):
    store = stored(tmp_path, max_bytes=900)  # two 400-byte snapshots fit, not three
    a, b, c = Snap(range(100)), Snap(range(200, 300)), Snap(range(400, 500))
    for s in (a, b):
        store.save("target", s)
    store.flush()
    old = time.time() - 100
    os.utime(tmp_path / f"{store._digest('target', b.tokens)}.kv", (old, old))  # b: the least recently used
    store.save("target", a)  # already stored: only marked used
    store.save("target", c)
    store.flush()
    assert len(store) == 2 and len(list(tmp_path.glob("*.kv"))) == 2
    assert store.best("target", list(b.tokens)) is None
    assert store.best("target", list(a.tokens))[1] == 100 and store.best("target", list(c.tokens))[1] == 100


def test_the_memory_cache_writes_through_and_reads_a_longer_stored_match(tmp_path):
    store = stored(tmp_path)
    cache = PrefixCache(max_bytes=1 << 20, min_tokens=8, store=store)
    cache.put("target", Snap(range(100)))
    store.flush()
    restarted = PrefixCache(max_bytes=1 << 20, min_tokens=8, store=stored(tmp_path))
    found, n = restarted.best("target", list(range(80)))
    assert n == 80 and restarted.stats.from_store == 1
    restarted.discard(found)  # a model refused it: deleted on disk too
    assert len(stored(tmp_path)) == 0
