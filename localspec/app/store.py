"""The conversation store: every chat kept by itself in one local SQLite file.

Location: ``conversations.sqlite3`` in the user's data folder (:func:`localspec.app.catalog.data_dir`:
``$LOCALSPEC_DATA``, else ``~/.local/share/localspec``). The folder is made private (0700) and the file
is created 0600 (SQLite gives its ``-wal`` and ``-shm`` files the same mode). Nothing leaves the machine.

Each message is written in its own transaction as it completes (the question when it is sent, the
answer when it ends: finished, stopped or cut), in WAL mode with ``synchronous=NORMAL``: a crash or a
kill loses at most the answer being streamed. A message keeps what the JSON conversation format keeps
(:class:`localspec.app.conversation.Message`: coloured segments, the engine's statistics as
:meth:`~localspec.core.events.GenerationStats.as_dict`, rounds) and the models that made it.
A conversation keeps its title, its own system prompt and sampling preset, and the settings it was
made with.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from localspec.app.conversation import Conversation, Message
from localspec.app.fileio import FileError, expand_path

STORE_NAME = "conversations.sqlite3"
SCHEMA_VERSION = 1
#: longest title made from a first question, characters
TITLE_CHARS = 60

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    settings TEXT,            -- JSON: the Settings the conversation was made with
    system TEXT NOT NULL DEFAULT '',
    preset TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,     -- 0, 1, ... within the conversation
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    segments TEXT,            -- JSON lists, as in the JSON conversation format
    stats TEXT,
    rounds TEXT,
    models TEXT,              -- JSON: {"target": ..., "draft": ...} of an answer
    created TEXT NOT NULL,
    UNIQUE (conversation, seq)
);
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations(updated);
"""


def store_path() -> Path:
    """Where the conversation store lives (the file may not exist yet)."""
    from localspec.app.catalog import data_dir

    return data_dir() / STORE_NAME


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def title_from(text: str) -> str:
    """A conversation's title from its first question: the first non-blank line, at most
    :data:`TITLE_CHARS` characters (cut with an ellipsis)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "") or "untitled"
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"


@dataclass(frozen=True)
class ConversationInfo:
    """A row of the browser: id, title, ``updated`` (ISO 8601, UTC), number of messages, and the
    first matching text when listed by a search (else "")."""

    id: int
    title: str
    created: str
    updated: str
    messages: int
    system: str = ""
    preset: str = ""
    match: str = ""


class ConversationStore:
    """One SQLite file of conversations. Use as a context manager or call :meth:`close`.

    Args:
        path: the database file (default :func:`store_path`).

    Raises:
        FileError: the folder or the file cannot be created or opened, or is not a store.
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = expand_path(path) if path is not None else store_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.path.parent, 0o700)
            if not self.path.exists():  # created private before SQLite opens it
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            os.chmod(self.path, 0o600)
            self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute("PRAGMA busy_timeout = 5000")
            with self._tx():
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except (OSError, sqlite3.Error) as e:
            raise FileError(f"cannot open the conversation store {self.path}: {e}",
                            "check the folder is writable, or set LOCALSPEC_DATA to another folder") from e

    # -- plumbing ---------------------------------------------------------------------------
    def _tx(self):
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "ConversationStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------------
    def create(self, title: str, settings: dict | None = None, *, system: str = "", preset: str = "") -> int:
        """A new, empty conversation; returns its id."""
        now = _now()
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO conversations (title, created, updated, settings, system, preset) VALUES (?,?,?,?,?,?)",
                (title, now, now, json.dumps(settings) if settings is not None else None, system, preset))
        return int(cur.lastrowid)

    def add_message(self, conv_id: int, message: Message, models: dict | None = None) -> int:
        """Append ``message`` to the conversation (one transaction); returns its position (seq).

        Raises:
            KeyError: no conversation ``conv_id`` (deleted meanwhile).
        """
        now = _now()
        with self._tx():
            self._check(conv_id)
            (seq,) = self.db.execute("SELECT COUNT(*) FROM messages WHERE conversation = ?", (conv_id,)).fetchone()
            self.db.execute(
                "INSERT INTO messages (conversation, seq, role, content, segments, stats, rounds, models, created) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (conv_id, seq, message.role, message.content, _json(message.segments), _json(message.stats),
                 _json(message.rounds), _json(models or message.models), now))
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conv_id))
        return int(seq)

    def truncate(self, conv_id: int, keep: int) -> None:
        """Keep the first ``keep`` messages of the conversation (a retried or edited turn replaces the rest)."""
        with self._tx():
            self.db.execute("DELETE FROM messages WHERE conversation = ? AND seq >= ?", (conv_id, keep))
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (_now(), conv_id))

    def rename(self, conv_id: int, title: str) -> None:
        """Raises KeyError: no such conversation."""
        with self._tx():
            self._check(conv_id)
            self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title.strip() or "untitled", conv_id))

    def set_options(self, conv_id: int, *, system: str | None = None, preset: str | None = None) -> None:
        """The conversation's own system prompt and sampling preset ("" = none: the settings' sampling)."""
        with self._tx():
            self._check(conv_id)
            if system is not None:
                self.db.execute("UPDATE conversations SET system = ? WHERE id = ?", (system, conv_id))
            if preset is not None:
                self.db.execute("UPDATE conversations SET preset = ? WHERE id = ?", (preset, conv_id))

    def delete(self, conv_id: int) -> None:
        """Delete the conversation and its messages (no error when it is gone already)."""
        with self._tx():
            self.db.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))

    def import_conversation(self, conv: Conversation, title: str) -> int:
        """Keep a conversation read from a file (:func:`~localspec.app.conversation.load_conversation`):
        a leading system message becomes the conversation's system prompt. Returns the new id."""
        msgs = list(conv.messages)
        system = msgs.pop(0).content if msgs and msgs[0].role == "system" else ""
        conv_id = self.create(title, conv.settings, system=system)
        for m in msgs:
            self.add_message(conv_id, m)
        return conv_id

    # -- reading ----------------------------------------------------------------------------
    def _check(self, conv_id: int) -> None:
        if self.db.execute("SELECT 1 FROM conversations WHERE id = ?", (conv_id,)).fetchone() is None:
            raise KeyError(conv_id)

    def list(self, query: str = "", limit: int = 500) -> list[ConversationInfo]:
        """Conversations, the most recently updated first; with ``query``, only those whose title or
        any message contains it (case-insensitive for ASCII letters), with the first match's line."""
        base = ("SELECT c.id, c.title, c.created, c.updated, c.system, c.preset, "
                "(SELECT COUNT(*) FROM messages m WHERE m.conversation = c.id) FROM conversations c")
        q = query.strip().lower()
        if not q:
            rows = self.db.execute(base + " ORDER BY c.updated DESC, c.id DESC LIMIT ?", (limit,)).fetchall()
            return [ConversationInfo(r[0], r[1], r[2], r[3], r[6], r[4], r[5]) for r in rows]
        rows = self.db.execute(
            base + " WHERE instr(lower(c.title), ?) > 0 OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation"
            " = c.id AND instr(lower(m.content), ?) > 0) ORDER BY c.updated DESC, c.id DESC LIMIT ?",
            (q, q, limit)).fetchall()
        out = []
        for r in rows:
            hit = self.db.execute("SELECT content FROM messages WHERE conversation = ? AND instr(lower(content), ?) > 0 "
                                  "ORDER BY seq LIMIT 1", (r[0], q)).fetchone()
            out.append(ConversationInfo(r[0], r[1], r[2], r[3], r[6], r[4], r[5], _match_line(hit[0], q) if hit else ""))
        return out

    def info(self, conv_id: int) -> ConversationInfo:
        """Raises KeyError: no such conversation."""
        r = self.db.execute("SELECT c.id, c.title, c.created, c.updated, c.system, c.preset, "
                            "(SELECT COUNT(*) FROM messages m WHERE m.conversation = c.id) "
                            "FROM conversations c WHERE c.id = ?", (conv_id,)).fetchone()
        if r is None:
            raise KeyError(conv_id)
        return ConversationInfo(r[0], r[1], r[2], r[3], r[6], r[4], r[5])

    def load(self, conv_id: int, *, with_system: bool = False) -> Conversation:
        """The conversation in the JSON conversation format (what :func:`save_conversation` writes);
        with ``with_system``, its system prompt as a leading system message (exports).

        Raises:
            KeyError: no such conversation.
        """
        row = self.db.execute("SELECT created, settings, system FROM conversations WHERE id = ?",
                              (conv_id,)).fetchone()
        if row is None:
            raise KeyError(conv_id)
        created, settings, system = row
        msgs = [Message(role="system", content=system)] if with_system and system else []
        for role, content, segments, stats, rounds, models in self.db.execute(
                "SELECT role, content, segments, stats, rounds, models FROM messages WHERE conversation = ? "
                "ORDER BY seq", (conv_id,)):
            msgs.append(Message(role=role, content=content, segments=_unjson(segments), stats=_unjson(stats),
                                rounds=_unjson(rounds), models=_unjson(models)))
        return Conversation(created=created, settings=_unjson(settings), messages=msgs)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an exception) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def _json(value) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _unjson(text: str | None):
    return None if text is None else json.loads(text)


def _match_line(content: str, q: str, width: int = 70) -> str:
    """The line of ``content`` holding ``q`` (lower-cased), cut around it to ``width`` characters."""
    for line in content.splitlines():
        i = line.lower().find(q)
        if i >= 0:
            start = max(0, i - width // 3)
            cut = line[start:start + width]
            return ("…" if start else "") + cut + ("…" if start + width < len(line) else "")
    return ""
