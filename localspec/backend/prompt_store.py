"""Prompt-prefix snapshots on disk, so a restarted server does not read an agent's long prompt again.

:class:`PromptStore` is the disk tier of :class:`localspec.core.prefix_cache.PrefixCache`: every snapshot
the memory tier keeps is also written here (in a background thread), and on a prompt that no kept
snapshot in memory serves as far, the longest stored match is read back. Each snapshot is two files
under the folder (default ``$LOCALSPEC_CACHE/prompts``): ``<digest>.kv``, llama.cpp's bytes
(``llama_state_seq_get_data``), and ``<digest>.json``, what it is: the format, the key, the role
(``target``/``draft``), the tokens, the size. Both are written to a temporary name and renamed
(atomic), the data first, so a crash leaves no half snapshot. The key (:func:`store_key`) holds what the
cached cells depend on: the model file (path, size, mtime), the machine and llama.cpp build
(:func:`~localspec.backend.cache_keys.machine_key`), and the context settings that change the computed
values (flash attention, n_batch, n_ubatch, n_threads, GPU layers, weight repacking); a snapshot of
another key is never read. The folder is bounded (``max_bytes``): the least recently used snapshots
(file modification time, touched on use) are deleted first. Each snapshot belongs to a scope (an opaque
string, :func:`localspec.server.scopes.scope_id`; ``""`` with one user), written in its metadata and its
digest; :meth:`PromptStore.best` reads only the asking scope's.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

from localspec.backend.cache_keys import file_key, machine_key

log = logging.getLogger("localspec.server")

#: the stored files' format
STORE_FORMAT = 1


def store_key(model) -> dict:
    """What a model's cached cells depend on (see the module docstring), for a stored snapshot's key."""
    return {"format": STORE_FORMAT, **file_key(model.path), **machine_key(),
            "flash_attn": getattr(model, "flash_attn", None), "n_batch": int(getattr(model, "n_batch", 0)),
            "n_ubatch": int(getattr(model, "n_ubatch", 0) or getattr(model, "n_batch", 0)),
            "n_threads": int(getattr(model, "n_threads", 0)), "n_gpu_layers": int(getattr(model, "n_gpu_layers", 0)),
            "repack": bool(getattr(model, "repack", False))}


def engine_store(engine, folder: Path, max_bytes: int) -> PromptStore:
    """The store of an engine's models: the target's snapshots and, with a draft model of its own, the draft's."""
    keys = {"target": store_key(engine.target)}
    if getattr(engine, "has_draft_model", False) and engine.draft_model is not engine.target:
        keys["draft"] = store_key(engine.draft_model)
    return PromptStore(folder, keys, max_bytes)


class StoredKvState:
    """A snapshot on disk, read when restored: what :meth:`localspec.backend.llama.LlamaModel.load_state`
    takes (``tokens``, ``nbytes``, ``flash_attn``, ``data``)."""

    def __init__(self, path: Path, tokens: tuple[int, ...], nbytes: int, flash_attn: bool | None,
                 scope: str = "") -> None:
        self.path, self.tokens, self.nbytes, self.flash_attn = path, tokens, nbytes, flash_attn
        self.scope = scope  #: whose snapshot it is (:mod:`localspec.core.prefix_cache`'s scopes)

    @property
    def data(self):
        """llama.cpp's bytes, read from the file now (a ctypes ``uint8`` array); marks the file used."""
        buf = (ctypes.c_uint8 * self.nbytes)()
        with open(self.path, "rb") as f:
            if f.readinto(buf) != self.nbytes:
                raise OSError(f"{self.path} is shorter than {self.nbytes} bytes")
        os.utime(self.path)
        return buf


def _common(a: Sequence[int], b: Sequence[int], limit: int | None) -> int:
    n = min(len(a), len(b), len(a) if limit is None else max(0, limit))
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


class PromptStore:
    """Snapshots on disk for the models of one engine (see the module docstring).

    Args:
        folder: where the files go (made if missing).
        keys: role -> :func:`store_key` of that role's model (``{"target": ..., "draft": ...}``).
        max_bytes: the most bytes the snapshots' data files may take; the least recently used go first.
    """

    def __init__(self, folder: Path, keys: dict[str, dict], max_bytes: int) -> None:
        self.folder, self.keys, self.max_bytes = Path(folder), keys, max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._entries: dict[str, StoredKvState] = {}  # digest -> snapshot of this engine's keys
        self._roles: dict[str, str] = {}  # digest -> role
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="localspec-prompt-store")
        self._pending: list[Future] = []
        self._scan()

    def _digest(self, role: str, tokens: Sequence[int], scope: str = "") -> str:
        h = hashlib.sha256(json.dumps(self.keys[role], sort_keys=True).encode() + role.encode())
        if scope:
            h.update(b"\0scope\0" + scope.encode())
        h.update(np.asarray(tokens, dtype=np.int32).tobytes())
        return h.hexdigest()[:32]

    def _scan(self) -> None:
        """Index the stored snapshots whose key is one of this engine's (others are left alone)."""
        for meta in self.folder.glob("*.json"):
            try:
                d = json.loads(meta.read_text(encoding="utf-8"))
                role, data = d["role"], meta.with_suffix(".kv")
                if self.keys.get(role) != d["key"] or data.stat().st_size != int(d["nbytes"]):
                    continue
                self._entries[meta.stem] = StoredKvState(data, tuple(int(t) for t in d["tokens"]), int(d["nbytes"]),
                                                         d["key"].get("flash_attn"), str(d.get("scope", "")))
                self._roles[meta.stem] = role
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a foreign or damaged file: not ours to read

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def save(self, role: str, snapshot, scope: str = "") -> None:
        """Write ``snapshot`` (a :class:`~localspec.backend.llama.KvState` of ``role``'s model, of ``scope``) in the
        background; one already stored is only marked used."""
        if role not in self.keys:
            return
        digest = self._digest(role, snapshot.tokens, scope)
        with self._lock:
            known = self._entries.get(digest)
        if known is not None:
            os.utime(known.path)
            return
        self._pending = [f for f in self._pending if not f.done()] + [self._writer.submit(self._write, role, snapshot,
                                                                                            digest, scope)]

    def _write(self, role: str, snapshot, digest: str, scope: str = "") -> None:
        data, meta = self.folder / f"{digest}.kv", self.folder / f"{digest}.json"
        try:
            for path, write in ((data, lambda f: f.write(memoryview(snapshot.data).cast("B")[: snapshot.nbytes])),
                                (meta, lambda f: f.write(json.dumps({
                                    "format": STORE_FORMAT, "key": self.keys[role], "role": role,
                                    "tokens": list(snapshot.tokens), "nbytes": snapshot.nbytes,
                                    "scope": scope}).encode()))):
                tmp = path.with_suffix(path.suffix + ".tmp")
                with open(tmp, "wb") as f:
                    write(f)
                os.replace(tmp, path)
        except OSError as e:
            log.warning("could not store a prompt snapshot in %s: %s", self.folder, e)
            return
        with self._lock:
            self._entries[digest] = StoredKvState(data, tuple(snapshot.tokens), snapshot.nbytes,
                                                  self.keys[role].get("flash_attn"), scope)
            self._roles[digest] = role
        self._evict()

    def _evict(self) -> None:
        """Delete the least recently used snapshots beyond ``max_bytes``."""
        with self._lock:
            by_age = sorted(self._entries.items(), key=lambda kv: _mtime(kv[1].path))
            total = sum(s.nbytes for _, s in by_age)
            while by_age and total > self.max_bytes:
                digest, old = by_age.pop(0)
                total -= old.nbytes
                self._forget(digest)

    def _forget(self, digest: str) -> None:
        self._entries.pop(digest, None)
        self._roles.pop(digest, None)
        for suffix in (".json", ".kv"):
            try:
                (self.folder / f"{digest}{suffix}").unlink()
            except OSError:
                pass

    def best(self, role: str, tokens: Sequence[int], limit: int | None = None,
             scope: str = "") -> tuple[StoredKvState, int] | None:
        """The stored snapshot of ``role`` and ``scope`` sharing the longest prefix with ``tokens`` (at most
        ``limit``), and that length; None when none shares a token. Its data is read only when it is restored."""
        with self._lock:
            mine = [s for d, s in self._entries.items() if self._roles.get(d) == role and s.scope == scope]
        found, longest = None, 0
        for s in mine:
            n = _common(s.tokens, tokens, limit)
            if n > longest:
                found, longest = s, n
        return (found, longest) if found is not None else None

    def discard(self, snapshot) -> None:
        """Delete a stored snapshot a model refused."""
        with self._lock:
            for digest, s in list(self._entries.items()):
                if s is snapshot:
                    self._forget(digest)

    def flush(self, timeout: float | None = 60.0) -> None:
        """Wait for the snapshots being written (at shutdown)."""
        for f in list(self._pending):
            try:
                f.result(timeout)
            except Exception:  # noqa: BLE001 - logged in _write; a shutdown must go on
                pass
        self._pending = []


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
