"""What the backend's cached measurements are keyed by: the model file, this machine, the llama.cpp build.

The cost curves (:mod:`localspec.backend.calibration`) and the repack verdicts
(:mod:`localspec.backend.repack`) are measured once and kept under ``$LOCALSPEC_CACHE``; their
keys hold :func:`file_key` and :func:`machine_key`, so a measurement is taken again when the
model file, the machine or the llama.cpp build changes (timings depend on all of it).

Stored KV-cache snapshots (:mod:`localspec.backend.prompt_store`) depend on less: only what changes
the computed cells, :func:`model_identity` (the file's content, not its path or mtime) and
:func:`kernel_key` (the llama.cpp build and the CPU's vector extensions, which pick the kernels), so
that a container, a kernel update, a re-download or a moved file does not orphan them.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
from pathlib import Path

from localspec.backend.llama import llama_cpp_version
from localspec.backend.machine import cpu_model, vector_extensions

#: :func:`model_identity` hashes the file's first bytes (the GGUF header, its metadata and tensor index, and the
#: first tensors) and this many evenly spaced samples of this many bytes each through the rest (the tensors)
IDENTITY_HEAD_BYTES = 4 << 20
IDENTITY_SAMPLES = 4
IDENTITY_SAMPLE_BYTES = 1 << 20


def file_key(path: str | os.PathLike) -> dict:
    """A file's identity for a cache key: ``{"path": resolved path, "size": bytes (-1 if missing),
    "mtime": seconds (0 if missing)}``."""
    p = Path(path)
    try:
        st = p.stat()
        size, mtime = st.st_size, int(st.st_mtime)
    except OSError:
        size, mtime = -1, 0
    return {"path": str(p.resolve()), "size": size, "mtime": mtime}


def machine_key() -> dict:
    """This machine and llama.cpp build, for cache keys: ``hostname``, ``cpu`` (model name),
    ``cpu_count``, ``platform`` and ``llama_cpp_python`` (the build, ``"?"`` where llama_cpp
    cannot be imported)."""
    try:
        build = llama_cpp_version()
    except Exception:  # pragma: no cover - llama_cpp missing (fake models in tests)
        build = "?"
    return {"hostname": socket.gethostname(), "cpu": cpu_model(), "cpu_count": os.cpu_count() or 0,
            "platform": platform.platform(), "llama_cpp_python": build}


def model_identity(path: str | os.PathLike) -> dict:
    """A model file's content for a cache key, cheaply: ``{"size": bytes, "sha256": hex}``, the hash of its
    first :data:`IDENTITY_HEAD_BYTES` (header, metadata, tensor index) and :data:`IDENTITY_SAMPLES` samples of
    :data:`IDENTITY_SAMPLE_BYTES` spread through the tensors, the last bytes included: about 8 MiB read,
    whatever the file's size. The same file moved, copied or downloaded again has the same identity; its path
    and mtime are not in it. ``{"size": -1, "sha256": ""}`` for a file that cannot be read."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return {"size": -1, "sha256": ""}
    return _identity(str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


@functools.lru_cache(maxsize=16)
def _identity(path: str, size: int, mtime_ns: int, inode: int) -> dict:  # mtime and inode: only the memo's key
    h = hashlib.sha256(str(size).encode())
    try:
        with open(path, "rb") as f:
            h.update(f.read(IDENTITY_HEAD_BYTES))
            rest = size - IDENTITY_HEAD_BYTES
            for i in range(1, IDENTITY_SAMPLES + 1) if rest > 0 else ():
                f.seek(IDENTITY_HEAD_BYTES + max(0, rest * i // IDENTITY_SAMPLES - IDENTITY_SAMPLE_BYTES))
                h.update(f.read(IDENTITY_SAMPLE_BYTES))
    except OSError:
        return {"size": -1, "sha256": ""}
    return {"size": size, "sha256": h.hexdigest()}


def kernel_key() -> dict:
    """What picks the kernels that compute a model's cells here: ``llama_cpp`` (llama-cpp-python's version and
    the llama.cpp build, ``"?"`` where llama_cpp cannot be imported) and ``cpu_flags`` (the CPU's vector
    extensions, :func:`~localspec.backend.machine.vector_extensions`). Not the host name, the kernel release,
    the CPU's model name or its count (threads split the work, they do not change the sums)."""
    try:
        build = llama_cpp_version()
    except Exception:  # pragma: no cover - llama_cpp missing (fake models in tests)
        build = "?"
    return {"llama_cpp": build, "cpu_flags": " ".join(vector_extensions())}
