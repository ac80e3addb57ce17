"""The input of one ``localspec generate`` run, read in one call: the prompt text (or stdin), the
chat messages file, the system message, the file put in the prompt and the predicted output.

Files are read whole as text (UTF-8, a BOM dropped, CRLF read as LF: the form the model sees a
file in, :func:`localspec.app.codeedit.file_form`); the file given with ``--file`` goes into the
prompt inside a Markdown fence longer than any fence it contains.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TextIO

from localspec.app.codeedit import file_form, longest_fence
from localspec.app.fileio import FileError, read_text_file
from localspec.core.messages import joined_text
from localspec.errors import ConfigError

_PROMPT_HINT = 'localspec generate "your question" (or - to read stdin)'


@dataclass(frozen=True)
class PromptInput:
    """What the model is asked: exactly one of ``raw`` (a prompt sent without the chat template)
    and ``messages`` (chat messages, ``[{"role", "content"}]``) is set; ``prediction`` is the
    predicted output's text in file form, or None."""

    raw: str | None
    messages: list[dict] | None
    prediction: str | None = None


def read_file_text(name: str) -> str:
    """A text file named by the user (``--file``, ``--prediction``), any size, in file form.
    Raises ConfigError (exit code 2) when it cannot be read as text."""
    try:
        return file_form(read_text_file(name, max_bytes=None)).text
    except FileError as e:
        raise ConfigError(e.message, e.hint) from e


def _content_text(content: object) -> str | None:
    """A message's content as text: a string, or a list of text parts read as the server reads them
    (:func:`localspec.core.messages.joined_text`); None if it is neither."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return joined_text([p["text"] for p in content])
    return None


def read_messages(name: str) -> list[dict]:
    """The ``--messages`` JSON file (UTF-8, with or without a BOM): a list of ``{role, content}``
    with role system, user or assistant, the content a string or a list of text parts
    (``[{"type": "text", "text": ...}]``, read as their texts joined with newlines, as the server reads
    them). Returns the messages with string contents. Raises ConfigError, naming the first message at fault."""
    hint = 'write a JSON list like [{"role": "user", "content": "..."}]'
    try:
        text = read_text_file(name, max_bytes=None)
    except FileError as e:  # missing, a folder, binary, not UTF-8: said as for --file
        raise ConfigError(e.message, e.hint) from e
    try:
        messages = json.loads(text.removeprefix("\ufeff"))
    except ValueError as e:
        raise ConfigError(f"cannot read chat messages from {name}: {e}", hint) from e
    if not isinstance(messages, list):
        raise ConfigError(f"{name} is not a list of {{role, content}} messages", hint)
    read = []
    for i, m in enumerate(messages):
        text = _content_text(m.get("content")) if isinstance(m, dict) else None
        if text is None or m.get("role") not in ("system", "user", "assistant"):
            raise ConfigError(f"{name} is not a list of {{role, content}} messages: message {i} is not a system, user "
                              "or assistant message whose content is a string or a list of text parts", hint)
        read.append({**m, "content": text})
    return read


def with_system(messages: list[dict], system: str | None) -> list[dict]:
    """``--system`` over chat messages: it replaces a leading system message, else it is put first."""
    if system is None:
        return messages
    rest = messages[1:] if messages and messages[0].get("role") == "system" else messages
    return [{"role": "system", "content": system}, *rest]


def read_prompt_input(prompt: str | None, *, raw: bool = False, system: str | None = None,
                      messages_file: str | None = None, file: str | None = None,
                      prediction_file: str | None = None, stdin: TextIO | None = None) -> PromptInput:
    """Read everything one generation is asked from the user's text and files.

    Args:
        prompt: the prompt text, ``"-"`` to read ``stdin``, or None (then ``messages_file`` is needed).
        raw: send the prompt without the chat template (conflicts with ``system`` and ``messages_file``).
        system: a system message (replaces the messages file's leading one, or comes first).
        messages_file: a JSON file of earlier chat messages; the prompt is appended as a user turn.
        file: a text file put into the prompt in a fence (needs a prompt).
        prediction_file: a text file the answer will mostly repeat (drafted first).
        stdin: where ``"-"`` reads from (default ``sys.stdin``).

    Raises:
        ConfigError: no or an empty prompt, an unreadable file, or options that conflict.
    """
    for flag, value in (("--system", system), ("--messages", messages_file)):
        if raw and value is not None:
            raise ConfigError(f"--raw and {flag} conflict: a raw prompt is sent without the chat template, "
                              f"so {flag} would have no effect",
                              f"drop --raw to use the chat template, or drop {flag} and write everything into the prompt")
    text = (stdin or sys.stdin).read() if prompt == "-" else prompt
    messages = read_messages(messages_file) if messages_file else None
    if text is None and messages is None:
        raise ConfigError("no prompt given", _PROMPT_HINT)
    if text is not None and not text.strip():
        raise ConfigError("the prompt is empty", _PROMPT_HINT)
    if file:
        if text is None:
            raise ConfigError("--file needs a prompt to go with it", 'localspec generate --file F "what to do with it"')
        body = read_file_text(file)
        fence = "`" * max(3, longest_fence(body) + 1)
        text = f"{text}\n\n{fence}\n{body.rstrip(chr(10))}\n{fence}"
    prediction = read_file_text(prediction_file) if prediction_file else None
    if raw:
        return PromptInput(text, None, prediction)
    messages = (messages or []) + ([{"role": "user", "content": text}] if text is not None else [])
    return PromptInput(None, with_system(messages, system), prediction)
