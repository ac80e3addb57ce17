"""Conversations: save and reopen as JSON (everything, token kinds included) or Markdown.

JSON keeps each assistant message's coloured segments (text, token kind), its
statistics and its rounds, so a reopened conversation looks as it did. Markdown is
for reading and sharing; reopening it restores the plain text of each message.
Both are written atomically (:func:`localspec.app.fileio.atomic_write_text`).
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from localspec.config import format_validation_error
from localspec.app.fileio import FileError, atomic_write_text, expand_path

FORMAT_VERSION = 1


class Message(BaseModel):
    """One turn. ``segments`` are (text, token kind[, round]) whose texts join to ``content``."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str
    segments: list[tuple[str, str, int] | tuple[str, str]] | None = None
    stats: dict | None = None
    rounds: list[dict] | None = None
    #: the models that wrote an answer: {"target": ..., "draft": ...} (None: not recorded)
    models: dict | None = None


class Conversation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = FORMAT_VERSION
    created: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    settings: dict | None = None
    messages: list[Message] = Field(default_factory=list)

    def chat_messages(self) -> list[dict]:
        """The messages as the engine's ``chat_tokens`` takes them."""
        return [{"role": m.role, "content": m.content} for m in self.messages]


_MARK = re.compile(r"^<!-- localspec:(system|user|assistant) -->\s*$")
_HEAD = re.compile(r"^## (System|User|Assistant)\s*$")


def to_markdown(conv: Conversation) -> str:
    """Markdown: a heading per turn, preceded by a marker comment used to reopen it."""
    out = ["# localspec conversation", "", f"_saved {conv.created}_", ""]
    for m in conv.messages:
        out += [f"<!-- localspec:{m.role} -->", f"## {m.role.capitalize()}", "", m.content, ""]
    return "\n".join(out)


def from_markdown(text: str) -> Conversation:
    """Parse :func:`to_markdown` output (or any file with ``## User``/``## Assistant`` headings)."""
    lines = text.splitlines()
    use_marks = any(_MARK.match(line) for line in lines)
    messages: list[Message] = []
    role: str | None = None
    body: list[str] = []

    def flush() -> None:
        if role is not None:
            content = "\n".join(body).strip("\n")
            messages.append(Message(role=role, content=content))

    i = 0
    while i < len(lines):
        line = lines[i]
        m = _MARK.match(line) if use_marks else _HEAD.match(line)
        if m:
            flush()
            role, body = m.group(1).lower(), []
            if use_marks and i + 1 < len(lines) and _HEAD.match(lines[i + 1]):
                i += 1  # the heading that follows the marker
        elif role is not None:
            body.append(line)
        i += 1
    flush()
    return Conversation(messages=messages)


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of a Markdown text (an answer), in order, each without its fences
    (CommonMark's reading, by markdown-it: ``` and ~~~ fences, indented fences, an unclosed fence
    running to the end)."""
    from markdown_it import MarkdownIt

    return [tok.content for tok in MarkdownIt("commonmark").parse(text) if tok.type == "fence"]


def save_conversation(conv: Conversation, path: str | os.PathLike) -> Path:
    """Write JSON, or Markdown when the name ends in ``.md``/``.markdown``. Raises FileError."""
    p = expand_path(path)
    if p.suffix.lower() in (".md", ".markdown"):
        return atomic_write_text(p, to_markdown(conv))
    return atomic_write_text(p, conv.model_dump_json(indent=2) + "\n")


def load_conversation(path: str | os.PathLike) -> Conversation:
    """Read a conversation saved by :func:`save_conversation`.

    Raises:
        FileError: the file is missing, unreadable, or not a conversation.
    """
    p = expand_path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is fine
    except FileNotFoundError as e:
        raise FileError(f"no such file: {p}", "check the path") from e
    except (OSError, UnicodeDecodeError) as e:
        raise FileError(f"cannot read {p}: {e}", "choose a .json or .md conversation file") from e
    if p.suffix.lower() in (".md", ".markdown"):
        conv = from_markdown(text)
        if not conv.messages:
            raise FileError(f"{p} has no '## User' or '## Assistant' sections", "choose a conversation saved by localspec")
        return conv
    try:
        return Conversation.model_validate(json.loads(text))
    except json.JSONDecodeError as e:
        raise FileError(f"{p} is not JSON: {e}", "choose a .json or .md conversation file") from e
    except ValidationError as e:
        raise FileError(f"{p} is not a localspec conversation:\n{format_validation_error(e)}",
                        "choose a file saved by localspec") from e
