"""Reading a user's text file (the one reader of the CLI and the TUI), and safe writes:
atomic replacement, backups, and a refusal for binary files.

Every write goes to a temporary file in the destination's folder, is flushed and
fsync'ed, then renamed over the destination with :func:`os.replace` (atomic on POSIX
and Windows), so a crash never leaves a half-written file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from localspec.config import expand_path
from localspec.errors import LocalspecError


class FileError(LocalspecError):
    """A file cannot be read as text, or cannot be written: the user's file, so exit code 2 as for any
    other input to fix (``--file``, ``--prediction``, ``--messages``, ``localspec edit F``)."""

    exit_code = 2


#: refuse to edit files larger than this, bytes (a model rewrites the whole file)
MAX_EDIT_BYTES = 256 * 1024


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same folder + ``os.replace``).

    Keeps the mode bits of an existing file; a new file gets the mode ``open()`` would
    give it (0o666 less the umask), not :func:`tempfile.mkstemp`'s 0o600. Creates missing
    parent folders.

    Raises:
        FileError: the folder cannot be created or written.
    """
    path = expand_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise FileError(f"cannot write {path}: {e.strerror or e}", "check the folder exists and is writable") from e
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            shutil.copymode(path, tmp)
        else:
            os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except OSError as e:
        raise FileError(f"cannot write {path}: {e.strerror or e}", "check the disk has room and the file is writable") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def read_text_file(path: str | os.PathLike, max_bytes: int | None = MAX_EDIT_BYTES) -> str:
    """Read a UTF-8 text file: one for code-edit mode (at most ``max_bytes``), or, with
    ``max_bytes=None``, any size (``localspec generate --file/--prediction``).

    Returns:
        the text as in the file (a BOM and CRLF line ends are kept:
        :func:`localspec.app.codeedit.file_form` turns it into what the model sees).

    Raises:
        FileError: the file is missing, a folder, unreadable, too large, binary (has NUL
            bytes), or not valid UTF-8.
    """
    path = expand_path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise FileError(f"no such file: {path}", "check the path") from e
    except IsADirectoryError as e:
        raise FileError(f"{path} is a folder, not a file", "choose a text file") from e
    except OSError as e:
        raise FileError(f"cannot read {path}: {e.strerror or e}", "check the file's permissions") from e
    if max_bytes is not None and len(data) > max_bytes:
        raise FileError(f"{path} is {len(data)} bytes; code-edit mode takes at most {max_bytes}",
                        "edit a smaller file, or a part of it")
    if b"\x00" in data:
        raise FileError(f"{path} looks like a binary file (it contains NUL bytes)", "choose a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError(f"{path} is not valid UTF-8 (byte {e.start}: {data[e.start:e.start + 1]!r})",
                        "convert the file to UTF-8 first") from e


def free_name(path: Path, first: str, numbered) -> Path:
    """``path``'s sibling ``first``, or ``numbered(n)`` for n = 1, 2, ... while the name is taken."""
    candidate = path.with_name(first)
    n = 1
    while candidate.exists():
        candidate = path.with_name(numbered(n))
        n += 1
    return candidate


def backup_path_for(path: Path) -> Path:
    """``name.bak``, or ``name.bak-<timestamp>`` when that exists already."""
    if not path.with_name(path.name + ".bak").exists():
        return path.with_name(path.name + ".bak")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return free_name(path, f"{path.name}.bak-{stamp}", lambda n: f"{path.name}.bak-{stamp}-{n}")


def replace_with_backup(path: str | os.PathLike, new_text: str) -> Path:
    """Copy ``path`` to a backup, then replace it atomically with ``new_text``.

    Returns:
        the backup's path (``name.bak`` or ``name.bak-<timestamp>``).

    Raises:
        FileError: the original is missing, or the backup or the write fails (the
            original is then untouched).
    """
    path = expand_path(path)
    if not path.is_file():
        raise FileError(f"no such file: {path}", "save it as a new file instead")
    backup = backup_path_for(path)
    try:
        shutil.copy2(path, backup)
    except OSError as e:
        raise FileError(f"cannot back up {path} to {backup}: {e.strerror or e}", "the original was not changed") from e
    atomic_write_text(path, new_text)
    return backup
