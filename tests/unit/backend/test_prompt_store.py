"""Prompt-prefix snapshots on disk (localspec.backend.prompt_store): written atomically, found again by a new
store (a restarted server) with the same key only, bounded by size, least recently used deleted first."""

import ctypes
import os
import shutil
import time
from types import SimpleNamespace

import pytest

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
    store = stored(tmp_path)
    a, b, c = Snap(range(100)), Snap(range(200, 300)), Snap(range(400, 500))
    for s in (a, b):
        store.save("target", s)
    store.flush()
    store.max_bytes = held(tmp_path) * 5 // 4  # two snapshots (their cells and metadata) fit, not three
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


# -- one budget, cleanup, privacy, damage and vanished files (issue 42) ------------------------------------------------

def held(folder) -> int:
    """Bytes of every file in ``folder`` (what the store holds on disk, whatever key or version wrote it)."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def test_one_budget_over_every_key_the_folder_ever_held(tmp_path):
    """The issue's repro: a 500-byte bound and five model-file versions (five keys) left 2,000 bytes in 5 files."""
    for version in range(5):
        store = stored(tmp_path, max_bytes=500, key=KEY | {"mtime": version})
        store.save("target", Snap(range(20 * version, 20 * version + 20)))  # 80 bytes of cells and their metadata
        store.flush()
        assert held(tmp_path) <= 500, f"version {version}: {held(tmp_path)} bytes on disk"
    assert store.best("target", list(range(80, 100)))[1] == 20  # the newest is kept, the others made room
    assert len(stored(tmp_path, max_bytes=500, key=KEY | {"mtime": 4})) == 1


def test_a_lower_budget_at_start_deletes_the_least_recently_used_of_every_key(tmp_path):
    for version in range(3):
        store = stored(tmp_path, key=KEY | {"mtime": version})
        store.save("target", Snap(range(100)))
        store.flush()
    newest = max(tmp_path.glob("*.kv"), key=lambda p: p.stat().st_mtime)
    for i, p in enumerate(sorted(tmp_path.glob("*.kv"), key=lambda p: p.stat().st_mtime)):
        os.utime(p, (1000 + i, 1000 + i))  # distinct ages, in the order written
    again = stored(tmp_path, max_bytes=held(tmp_path) // 2, key=KEY | {"mtime": 0})
    assert held(tmp_path) <= again.max_bytes
    assert [p.name for p in tmp_path.glob("*.kv")] == [newest.name]


def test_unfinished_writes_and_orphans_are_removed_at_start(tmp_path):
    store = stored(tmp_path)
    store.save("target", Snap(range(100)))
    store.flush()
    (tmp_path / f"{'a' * 32}.kv.tmp").write_bytes(b"x" * 300)  # a write that failed or was killed
    (tmp_path / f"{'b' * 32}.kv").write_bytes(b"x" * 300)  # cells without metadata
    (tmp_path / f"{'c' * 32}.json").write_text('{"format": 2}')  # metadata without cells
    (tmp_path / "notes.txt").write_text("not the store's")
    again = stored(tmp_path)
    assert len(again) == 1
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".kv", ".txt"]


def test_snapshots_are_private_to_the_user(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    store = stored(folder)
    store.save("target", Snap(range(100)))
    store.flush()
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o600}


def test_a_damaged_snapshot_is_a_miss_and_is_deleted(tmp_path):
    store = stored(tmp_path)
    store.save("target", Snap(range(100), fill=3))
    store.save("target", Snap(range(500, 600), fill=4))
    store.flush()
    first, second = (tmp_path / f"{store._digest('target', tuple(r))}.kv" for r in (range(100), range(500, 600)))
    raw = bytearray(first.read_bytes())
    raw[123] ^= 0xFF  # same length, one byte changed: only the checksum sees it
    first.write_bytes(bytes(raw))
    second.write_bytes(second.read_bytes()[:200])  # a short file: its length says so at start
    again = stored(tmp_path)
    assert again.best("target", list(range(500, 600))) is None and not second.exists()
    found, n = again.best("target", list(range(100)))
    with pytest.raises(OSError):  # the engine catches it: the prompt is read as without a snapshot
        found.data
    assert not first.exists() and not first.with_suffix(".json").exists()


def test_a_file_removed_by_someone_else_is_a_miss(tmp_path):
    folder = tmp_path / "prompts"
    store = stored(folder)
    cache = PrefixCache(max_bytes=1 << 20, min_tokens=8, store=store)
    a = Snap(range(100))
    store.save("target", a)
    store.flush()
    shutil.rmtree(folder)  # another server's cleanup, or a user freeing space
    store.save("target", a)  # known, but gone: written again, not an error
    store.flush()
    assert store.best("target", list(range(100)))[1] == 100
    assert bytes(store.best("target", list(range(100)))[0].data) == bytes([7] * 400)
    (folder / f"{store._digest('target', a.tokens)}.kv").unlink()
    with pytest.raises(OSError):
        store.best("target", list(range(100)))[0].data
    cache.put("target", Snap(range(200, 300)))
    store.flush()
    shutil.rmtree(folder)
    cache.put("target", Snap(range(300, 400)))
    store.flush()  # at shutdown: never raises
    assert len(stored(folder)) >= 1


def test_a_scopes_snapshots_are_found_only_in_that_scope(tmp_path):
    store = stored(tmp_path)
    store.save("target", Snap(range(100)), scope="key-a")
    store.flush()
    again = stored(tmp_path)  # across a restart too
    for s in (store, again):
        assert s.best("target", list(range(100)), scope="key-a")[1] == 100
        assert s.best("target", list(range(100)), scope="key-b") is None
        assert s.best("target", list(range(100))) is None  # the default scope
    assert "key-a" not in "".join(p.read_text() for p in tmp_path.glob("*.json"))  # a key's text is not written


def test_the_key_is_what_changes_the_cells(tmp_path, monkeypatch):
    """The model file by content (not its mtime or path), not the host name, kernel or CPU count."""
    import platform
    import socket

    from localspec.backend.prompt_store import store_key

    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(bytes(range(256)) * (48 << 12))  # 12 MiB
    model = SimpleNamespace(path=str(model_file), flash_attn=False, n_batch=512, n_ubatch=512, n_threads=2,
                            n_gpu_layers=0, repack=False)
    key = store_key(model)
    os.utime(model_file, (1, 1))
    monkeypatch.setattr(socket, "gethostname", lambda: "another-host")
    monkeypatch.setattr(platform, "platform", lambda *a, **k: "Linux-9.9-other")
    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    moved = tmp_path / "elsewhere.gguf"
    model_file.rename(moved)
    assert store_key(SimpleNamespace(**{**vars(model), "path": str(moved), "n_threads": 7})) == key
    for where in (100, -1):  # a byte of the header, of the last tensor
        raw = bytearray(moved.read_bytes())
        raw[where] ^= 1
        moved.write_bytes(bytes(raw))
        assert store_key(SimpleNamespace(**{**vars(model), "path": str(moved)})) != key
        raw[where] ^= 1
        moved.write_bytes(bytes(raw))
    assert store_key(SimpleNamespace(**{**vars(model), "path": str(moved)})) == key
    assert store_key(SimpleNamespace(**{**vars(model), "flash_attn": True})) != key


def test_the_default_budget_is_4_gib_or_a_tenth_of_the_free_space(tmp_path, monkeypatch):
    from localspec.backend import prompt_store

    usage = SimpleNamespace(total=1 << 40, used=0, free=100 << 30)
    monkeypatch.setattr(prompt_store.shutil, "disk_usage", lambda path: usage)
    assert prompt_store.default_disk_bytes(tmp_path / "not" / "made" / "yet") == 4 << 30
    usage.free = 10 << 30
    assert prompt_store.default_disk_bytes(tmp_path) == 1 << 30
    assert prompt_store.disk_budget(tmp_path / "prompts", None) == 1 << 30 and (tmp_path / "prompts").is_dir()
    assert prompt_store.disk_budget(tmp_path / "off", 0) == 0 and not (tmp_path / "off").exists()
    assert prompt_store.disk_budget(tmp_path / "p2", 1.5) == 3 << 19
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):  # serve warns and runs without the disk tier
        prompt_store.disk_budget(tmp_path / "file" / "prompts", None)


def test_the_store_counts_what_the_folder_holds(tmp_path):
    store = stored(tmp_path)
    store.save("target", Snap(range(100)))
    store.flush()
    (tmp_path / f"{'e' * 32}.kv.x.tmp").write_bytes(b"x" * 10)  # another server's write under way
    assert store.nbytes == held(tmp_path) > 400
    shutil.rmtree(tmp_path)
    assert store.nbytes == 0


def test_serve_help_names_the_disk_budget_and_its_default():
    from localspec.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = " ".join(sub.choices["serve"].format_help().split())
    assert "--prompt-cache-disk-mb X" in text and "default min(4096, a tenth of the free space there)" in text


def test_the_chunked_checksum_sees_a_byte_changed_in_any_chunk_and_old_whole_file_checksums_still_read(
        tmp_path, monkeypatch):
    """The checksum is hashed in chunks on every core (:func:`prompt_store.checksum`); a changed byte in the last
    chunk is seen as in the first. A snapshot written before it (metadata ``sha256``: one SHA-256 of the file)
    is still read and checked."""
    import hashlib
    import json

    from localspec.backend import prompt_store

    monkeypatch.setattr(prompt_store, "CHECKSUM_CHUNK", 64)  # 400 bytes: 7 chunks
    cells = bytes(range(200)) * 2
    assert prompt_store.checksum(cells) == hashlib.sha256(
        b"".join(hashlib.sha256(cells[i:i + 64]).digest() for i in range(0, 400, 64))).hexdigest()
    store = stored(tmp_path)
    store.save("target", Snap(range(100), fill=5))
    store.flush()
    kv = tmp_path / f"{store._digest('target', tuple(range(100)))}.kv"
    meta = kv.with_suffix(".json")
    d = json.loads(meta.read_text())
    assert "sha256_chunks" in d and "sha256" not in d
    # the old metadata: one SHA-256 of the whole file, under "sha256"
    d["sha256"] = hashlib.sha256(kv.read_bytes()).hexdigest()
    del d["sha256_chunks"]
    meta.write_text(json.dumps(d))
    found = stored(tmp_path).best("target", list(range(100)))[0]
    assert bytes(found.data) == bytes([5] * 400)
    # a byte changed in the last chunk, under the new checksum
    store.save("target", Snap(range(200, 300), fill=6))
    store.flush()
    kv2 = tmp_path / f"{store._digest('target', tuple(range(200, 300)))}.kv"
    raw = bytearray(kv2.read_bytes())
    raw[399] ^= 1
    kv2.write_bytes(bytes(raw))
    with pytest.raises(prompt_store.DamagedSnapshot):
        stored(tmp_path).best("target", list(range(200, 300)))[0].data
    assert not kv2.exists()


def test_snapshot_bytes_read_stay_whole_when_the_file_is_removed_after(tmp_path):
    """The bytes are a map of the file: removing the file (another server's eviction) leaves them readable."""
    store = stored(tmp_path)
    store.save("target", Snap(range(100), fill=9))
    store.flush()
    data = store.best("target", list(range(100)))[0].data
    for p in tmp_path.iterdir():
        p.unlink()
    assert bytes(data) == bytes([9] * 400)
