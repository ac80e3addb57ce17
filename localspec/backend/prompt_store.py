"""Prompt-prefix snapshots on disk, so a restarted server does not read an agent's long prompt again.

Why these hold together: one folder's whole life (its file format, the atomic writes, the checks on
reading, the byte budget and its evictions, the background writer) is one invariant, that a snapshot
which looks whole is whole; split, each part would have to trust the others' files.

:class:`PromptStore` is the disk tier of :class:`localspec.core.prefix_cache.PrefixCache`: every snapshot
the memory tier keeps is also written here (in a background thread), and on a prompt that no kept
snapshot in memory serves as far, the longest stored match is read back.

Files. Each snapshot is two files in the folder (default ``$LOCALSPEC_CACHE/prompts``, made 0700):
``<digest>.json``, what it is (the format, the key, the role ``target``/``draft``, the scope's hash, the
tokens, the size and the SHA-256 of the cells), and ``<digest>.kv``, llama.cpp's bytes
(``llama_state_seq_get_data``). Each is written to a temporary ``*.tmp`` file (0600), fsync'ed and renamed
(atomic), the metadata first: the data file is the commit point, so a crash leaves a ``.tmp`` file or
metadata without data, both deleted at the next start, never a snapshot that looks whole. A snapshot's
length and checksum are checked when it is read; a damaged one is deleted and is a miss (``OSError``, which
the engine treats as no snapshot), as is a file someone else removed.

Key (:func:`store_key`): only what changes the cached cells: the model file's content
(:func:`~localspec.backend.cache_keys.model_identity`), the llama.cpp build and the CPU's vector extensions
(:func:`~localspec.backend.cache_keys.kernel_key`), and the context settings that change the computed values
(flash attention, n_batch, n_ubatch, GPU layers, weight repacking). Not the host name, the kernel release,
the thread count or the file's mtime or path. A snapshot of another key is never read, and a snapshot of
one scope (:meth:`PromptStore.save`'s ``scope``, e.g. an API key) is never found by another.

Budget: one bound (``max_bytes``) over every file the store owns in the folder (``<32 hex>.kv``,
``<32 hex>.json`` and their ``.tmp`` files), whatever key, version, model or server wrote them: the least
recently used snapshots (the data file's mtime, touched on use) are deleted first, before a write, so the
folder stays within the bound even while a write is under way. The default bound
(:func:`default_disk_bytes`) is ``min(4 GiB, 10% of the free space)`` where the folder is.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

from localspec.backend.cache_keys import kernel_key, model_identity

log = logging.getLogger("localspec.server")

#: the store's folder under ``$LOCALSPEC_CACHE``
FOLDER_NAME = "prompts"
#: the stored files' format (1: keyed by host and mtime, no checksum; never read, deleted as the budget needs)
STORE_FORMAT = 2
#: the scope of a server without API keys (one user): every snapshot is found by every request
DEFAULT_SCOPE = ""
#: the default budget: at most this many bytes ...
DEFAULT_DISK_MAX_BYTES = 4 << 30
#: ... and at most this share of the free space where the folder is, when the server starts
DEFAULT_DISK_FREE_SHARE = 0.10

#: bytes hashed apart, in parallel, by :func:`checksum` (hashlib lets go of the GIL while it hashes)
CHECKSUM_CHUNK = 32 << 20
_hashers = ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, 8)), thread_name_prefix="localspec-sha")


def checksum(cells) -> str:
    """The stored snapshot's checksum (metadata ``sha256_chunks``): SHA-256 of the SHA-256 digests of its
    consecutive :data:`CHECKSUM_CHUNK`-byte chunks, hashed on every core. A 217 MB snapshot (7,556 tokens of
    the default target) took 0.10 s against 0.19 s for one SHA-256 (2-core Intel Xeon with AMX).

    ``cells``: a bytes-like object (a memoryview is sliced without copies). Returns the hex digest."""
    view = memoryview(cells).cast("B")
    digests = _hashers.map(lambda i: hashlib.sha256(view[i: i + CHECKSUM_CHUNK]).digest(),
                           range(0, len(view), CHECKSUM_CHUNK))
    return hashlib.sha256(b"".join(digests)).hexdigest()


#: the names the store owns: a snapshot's files, and the temporary files they are written to
_OWNED = re.compile(r"^(?P<digest>[0-9a-f]{32})\.(?P<kind>kv|json)(?P<tmp>\..*\.tmp|\.tmp)?$")


def store_key(model) -> dict:
    """What a model's cached cells depend on (see the module docstring), for a stored snapshot's key."""
    return {"format": STORE_FORMAT, "model": model_identity(model.path), **kernel_key(),
            "flash_attn": getattr(model, "flash_attn", None), "n_batch": int(getattr(model, "n_batch", 0)),
            "n_ubatch": int(getattr(model, "n_ubatch", 0) or getattr(model, "n_batch", 0)),
            "n_gpu_layers": int(getattr(model, "n_gpu_layers", 0)), "repack": bool(getattr(model, "repack", False))}


def default_disk_bytes(folder: Path) -> int:
    """The disk store's default budget, bytes: ``min(DEFAULT_DISK_MAX_BYTES, DEFAULT_DISK_FREE_SHARE x the free
    space)`` of the file system holding ``folder`` (or its nearest existing parent); 0 when none can be read."""
    p = Path(folder).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        free = shutil.disk_usage(p).free
    except OSError:
        return 0
    return int(min(DEFAULT_DISK_MAX_BYTES, DEFAULT_DISK_FREE_SHARE * free))


def disk_budget(folder: Path, max_mb: float | None) -> int:
    """The store's budget in bytes for ``--prompt-cache-disk-mb`` ``max_mb`` (None: :func:`default_disk_bytes`),
    after checking that ``folder`` can be used (:func:`open_folder`) when the budget is above 0.

    Raises:
        OSError: the folder cannot be made or written.
    """
    budget = default_disk_bytes(folder) if max_mb is None else int(max_mb * (1 << 20))
    if budget > 0:
        open_folder(folder)
    return budget


def open_folder(folder: Path) -> None:
    """Make ``folder`` (and its parents) if missing, private to the user (0700), and check a file can be
    written there (a probe file, removed).

    Raises:
        OSError: it cannot be made, made private, or written.
    """
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o077:
        folder.chmod(0o700)
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe.", suffix=".tmp")
    os.close(fd)
    os.unlink(probe)


def engine_store(engine, folder: Path, max_bytes: int) -> PromptStore | None:
    """The store of an engine's models: the target's snapshots and, with a draft model of its own, the draft's.
    None (with a warning in the log) when the folder cannot be used, or the target takes no snapshots (a fake)."""
    if not hasattr(engine.target, "save_state"):
        return None
    keys = {"target": store_key(engine.target)}
    if getattr(engine, "has_draft_model", False) and engine.draft_model is not engine.target:
        keys["draft"] = store_key(engine.draft_model)
    try:
        return PromptStore(folder, keys, max_bytes)
    except OSError as e:
        log.warning("prompt snapshots are not kept on disk: %s cannot be used (%s)", folder, e.strerror or e)
        return None


def scope_tag(scope: str) -> str:
    """What the files say of a scope: a hash, never the scope's text (it may be an API key)."""
    return hashlib.sha256(b"localspec-scope\0" + scope.encode()).hexdigest()[:32]


class DamagedSnapshot(OSError):
    """A stored snapshot's data is not what its metadata says (length or checksum): it was deleted."""


class StoredKvState:
    """A snapshot on disk, read when restored: what :meth:`localspec.backend.llama.LlamaModel.load_state`
    takes (``tokens``, ``nbytes``, ``flash_attn``, ``data``)."""

    def __init__(self, path: Path, tokens: tuple[int, ...], nbytes: int, flash_attn: bool | None,
                 sha256: str = "", role: str = "target", scope: str = "", chunked: bool = True) -> None:
        self.path, self.tokens, self.nbytes, self.flash_attn = path, tokens, nbytes, flash_attn
        self.sha256, self.role, self.scope = sha256, role, scope
        #: whether ``sha256`` is :func:`checksum`'s (metadata ``sha256_chunks``), else one SHA-256 of the file
        #: (written before 2026-12-07)
        self.chunked = chunked

    @property
    def data(self):
        """llama.cpp's bytes (a ctypes ``uint8`` array over a private, copy-on-write map of the file: no copy
        is made, the pages come from the page cache) once its length and checksum are checked; marks the
        file used. A file removed after this keeps its pages until the array is dropped.

        Raises:
            OSError: the file is gone or unreadable; :class:`DamagedSnapshot` (deleted) when its length or
                checksum is not the metadata's.
        """
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size == self.nbytes and size else None
        if mapped is None or (checksum(mapped) if self.chunked else hashlib.sha256(mapped).hexdigest()) != self.sha256:
            if mapped is not None:
                mapped.close()
            for p in (self.path, self.path.with_suffix(".json")):
                _unlink(p)
            raise DamagedSnapshot(f"{self.path} is damaged (its length or checksum is not its metadata's): deleted")
        try:
            os.utime(self.path)
        except OSError:
            pass
        return (ctypes.c_uint8 * self.nbytes).from_buffer(mapped)  # keeps the map alive


def _common(a: Sequence[int], b: Sequence[int], limit: int | None) -> int:
    n = min(len(a), len(b), len(a) if limit is None else max(0, limit))
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


class PromptStore:
    """Snapshots on disk for the models of one engine (see the module docstring).

    At start: makes the folder (0700), deletes the ``.tmp`` files, the data files without metadata, the
    metadata without data and this key's snapshots whose data file has the wrong length, then deletes the
    least recently used snapshots beyond ``max_bytes``.

    Args:
        folder: where the files go (made if missing).
        keys: role -> :func:`store_key` of that role's model (``{"target": ..., "draft": ...}``).
        max_bytes: the most bytes every file the store owns in ``folder`` may take together.

    Raises:
        OSError: the folder cannot be made or written (:func:`open_folder`).
    """

    def __init__(self, folder: Path, keys: dict[str, dict], max_bytes: int) -> None:
        self.folder, self.keys, self.max_bytes = Path(folder), keys, max_bytes
        open_folder(self.folder)
        self._lock = threading.RLock()
        self._entries: dict[str, StoredKvState] = {}  # digest -> snapshot of this engine's keys
        self._warned = False
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="localspec-prompt-store")
        self._pending: list[Future] = []
        self._scan()
        self._evict()

    @property
    def nbytes(self) -> int:
        """Bytes of every file the store owns in the folder now (counted: another server, or a user, may have
        added or removed some)."""
        return sum(_size(p) for files in self._owned().values() for kind in files.values() for p in kind)

    def _digest(self, role: str, tokens: Sequence[int], scope: str = DEFAULT_SCOPE) -> str:
        h = hashlib.sha256(json.dumps(self.keys[role], sort_keys=True).encode() + b"\0" + role.encode() + b"\0"
                           + scope_tag(scope).encode() + b"\0")
        h.update(np.asarray(tokens, dtype=np.int32).tobytes())
        return h.hexdigest()[:32]

    def _owned(self) -> dict[str, dict[str, list[Path]]]:
        """The files the store owns, by digest: ``{"kv": [...], "json": [...], "tmp": [...]}``."""
        found: dict[str, dict[str, list[Path]]] = {}
        try:
            names = os.listdir(self.folder)
        except OSError:
            return found
        for name in names:
            m = _OWNED.match(name)
            if m:
                kind = "tmp" if m["tmp"] else m["kind"]
                found.setdefault(m["digest"], {"kv": [], "json": [], "tmp": []})[kind].append(self.folder / name)
        return found

    def _scan(self) -> None:
        """At start: delete what no write finished or what is damaged; index this engine's keys' snapshots
        (another key's are left to the budget)."""
        for digest, files in self._owned().items():
            for p in files["tmp"]:
                _unlink(p)
            if not files["kv"] or not files["json"]:  # an unfinished write, or half a deletion
                for p in files["kv"] + files["json"]:
                    _unlink(p)
                continue
            data, meta = files["kv"][0], files["json"][0]
            try:
                d = json.loads(meta.read_text(encoding="utf-8"))
                if not isinstance(d, dict) or d.get("format") != STORE_FORMAT or self.keys.get(d["role"]) != d["key"]:
                    continue  # another version's or key's: not ours to read
                entry = StoredKvState(data, tuple(int(t) for t in d["tokens"]), int(d["nbytes"]),
                                      d["key"].get("flash_attn"), str(d.get("sha256_chunks") or d["sha256"]),
                                      d["role"], str(d["scope"]), chunked="sha256_chunks" in d)
                if data.stat().st_size != entry.nbytes:
                    raise ValueError("short")
            except OSError:
                continue
            except (ValueError, KeyError, TypeError):  # damaged: deleted
                for p in (data, meta):
                    _unlink(p)
                continue
            self._entries[digest] = entry

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def save(self, role: str, snapshot, scope: str = DEFAULT_SCOPE) -> None:
        """Write ``snapshot`` (a :class:`~localspec.backend.llama.KvState` of ``role``'s model) for requests of
        ``scope`` in the background; one already stored is only marked used (written again if its file went
        away). Never raises for the files."""
        if role not in self.keys:
            return
        digest = self._digest(role, snapshot.tokens, scope)
        with self._lock:
            known = self._entries.get(digest)
        if known is not None:
            try:
                os.utime(known.path)
                return
            except OSError:  # removed by someone else: stored again
                with self._lock:
                    self._entries.pop(digest, None)
        self._pending = [f for f in self._pending if not f.done()] + [
            self._writer.submit(self._write, role, snapshot, digest, scope_tag(scope))]

    def _write(self, role: str, snapshot, digest: str, scope: str) -> None:
        data, meta = self.folder / f"{digest}.kv", self.folder / f"{digest}.json"
        cells = memoryview(snapshot.data).cast("B")[: snapshot.nbytes]
        digest_of_cells = checksum(cells)
        about = json.dumps({"format": STORE_FORMAT, "key": self.keys[role], "role": role, "scope": scope,
                            "tokens": [int(t) for t in snapshot.tokens], "nbytes": snapshot.nbytes,
                            "sha256_chunks": digest_of_cells}).encode()
        size = len(about) + snapshot.nbytes
        if size > self.max_bytes:
            return
        self._evict(reserve=size)
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # again: someone may have removed it
            _write_file(meta, about)
            _write_file(data, cells)  # the commit point
            _fsync_folder(self.folder)
        except OSError as e:
            if not data.exists():
                _unlink(meta)
            (log.debug if self._warned else log.warning)("could not store a prompt snapshot in %s: %s",
                                                         self.folder, e)
            self._warned = True
            return
        self._warned = False
        with self._lock:
            self._entries[digest] = StoredKvState(data, tuple(snapshot.tokens), snapshot.nbytes,
                                                  self.keys[role].get("flash_attn"), digest_of_cells, role, scope)

    def _evict(self, reserve: int = 0) -> None:
        """Count every file the store owns and delete the least recently used snapshots (of any key) until they
        and ``reserve`` more bytes fit in ``max_bytes``. Age: the data file's mtime (touched on use), else the
        metadata's; unfinished writes (``.tmp``) are counted, not deleted (another server may be writing them)."""
        with self._lock:
            sizes, ages, total = {}, {}, 0
            for digest, files in self._owned().items():
                total += sum(_size(p) for p in files["tmp"])
                if files["kv"] or files["json"]:
                    sizes[digest] = sum(_size(p) for p in files["kv"] + files["json"])
                    ages[digest] = _mtime((files["kv"] or files["json"])[0])
                    total += sizes[digest]
            for digest in sorted(sizes, key=ages.__getitem__):
                if total + reserve <= self.max_bytes:
                    break
                self._forget(digest)
                total -= sizes[digest]

    def _forget(self, digest: str) -> None:
        """Delete a snapshot: the data first (no longer committed), then its metadata."""
        with self._lock:
            self._entries.pop(digest, None)
            for suffix in (".kv", ".json"):
                _unlink(self.folder / f"{digest}{suffix}")

    def best(self, role: str, tokens: Sequence[int], limit: int | None = None,
             scope: str = DEFAULT_SCOPE) -> tuple[StoredKvState, int] | None:
        """The stored snapshot of ``role`` and ``scope`` sharing the longest prefix with ``tokens`` (at most
        ``limit``), and that length; None when none shares a token. Its data is read (and checked) only when it
        is restored."""
        tag = scope_tag(scope)
        with self._lock:
            mine = [s for s in self._entries.values() if s.role == role and s.scope == tag]
        found, longest = None, 0
        for s in mine:
            n = _common(s.tokens, tokens, limit)
            if n > longest:
                found, longest = s, n
        return (found, longest) if found is not None else None

    def discard(self, snapshot) -> None:
        """Delete a stored snapshot a model refused, or whose file could not be read."""
        with self._lock:
            for digest, s in list(self._entries.items()):
                if s is snapshot:
                    self._forget(digest)
            self._evict()

    def flush(self, timeout: float | None = 60.0) -> None:
        """Wait for the snapshots being written (at shutdown). Never raises."""
        for f in list(self._pending):
            try:
                f.result(timeout)
            except Exception:  # noqa: BLE001 - a shutdown must go on
                log.warning("a prompt snapshot was not stored", exc_info=True)
        self._pending = []


def _write_file(path: Path, payload) -> None:
    """Write ``payload`` to ``path`` atomically: a private temporary file (0600) in the same folder, fsync'ed,
    renamed over ``path``. Raises OSError (the temporary file removed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        raise


def _fsync_folder(folder: Path) -> None:
    """Make the renames in ``folder`` durable (where the platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
