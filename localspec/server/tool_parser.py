"""Tool calls in a model's answer: the template families' call formats and the incremental parser.

Why these hold together: a :class:`ToolFormat` says how a family writes a call, and
:class:`ToolCallParser` reads exactly that back out of text that arrives in pieces, content and
:class:`ToolCall` items in order, the same however the text is cut. It knows nothing of requests or
grammars: :mod:`localspec.server.tools` builds those and re-exports these names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from localspec.backend.markdown import CodeState
from localspec.config import object_id


@dataclass(frozen=True)
class ToolFormat:
    """How one template family writes a tool call.

    Attributes:
        family: the family's name (``"hermes"``).
        blocks: (start, end) markers around one call's JSON object; the first pair is the
            template's own, the others what models of the family also write.
        marker: text whose presence in a chat template means this family.
    """

    family: str
    blocks: tuple[tuple[str, str], ...]
    marker: str

    #: how the template writes a call block around the JSON object: (before, after)
    template_block: tuple[str, str] = ("", "")
    #: what the template writes between two calls of one answer
    separator: str = "\n"

    @property
    def start(self) -> str:
        return self.blocks[0][0]


#: template family -> its call format; the first whose marker the template contains wins.
#: Hermes: Qwen2.5(-Coder) often fences a call as a ```json block instead of <tool_call>
#: (llama.cpp's Hermes parser accepts the same); a fenced block that is not a call to one of
#: the request's tools stays content.
FORMATS: dict[str, ToolFormat] = {
    "hermes": ToolFormat("hermes", (("<tool_call>", "</tool_call>"), ("```json", "```")), "<tool_call>",
                         template_block=("<tool_call>\n", "\n</tool_call>")),
}


def tool_format(template: str | None) -> ToolFormat | None:
    """The call format of a GGUF chat template, or None when it does not render ``tools``."""
    if not template or not re.search(r"\btools\b", template):
        return None
    return next((f for f in FORMATS.values() if f.marker in template), None)


@dataclass
class ToolCall:
    """One parsed call: ``arguments`` is a JSON string of an object, as OpenAI sends it."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: object_id("call_"))

    def message_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


#: the start of a bare call object, up to its name (whitespace as JSON allows it)
_BARE_HEAD = re.compile(r'\{[ \t\r\n]*"name"[ \t\r\n]*:[ \t\r\n]*"((?:[^"\\]|\\.)*)"')


def _could_begin_call(text: str, names: set[str]) -> bool:
    """Whether ``text`` (starting with ``{``) may still grow into ``{"name": "<one of names>"``."""
    i = 0
    for lit in ("{", '"name"', ":", '"'):
        while 0 < i < len(text) and text[i] in " \t\r\n":
            i += 1
        n = min(len(lit), len(text) - i)
        if text[i:i + n] != lit[:n]:
            return False
        i += n
        if i == len(text):
            return True
    partial = text[i:]
    return "\\" in partial or any(name.startswith(partial) for name in names)


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def holds_all(fmt: ToolFormat, text: str) -> bool:
    """Whether :class:`ToolCallParser` still holds all of an answer that begins with ``text``, waiting to see
    whether a call marker starts there: ``text`` is whitespace, or whitespace and a proper prefix of one of
    ``fmt``'s start markers (``<``, ``<tool``, a code fence's first backticks). A bare ``{`` is not counted: the
    object it may begin is held until whole, and drafting it pays as drafting a call does.

    The generation reads it (:attr:`localspec.core.generation.Generation.holds_output`) so that a round whose
    text the client would not see yet drafts nothing: its next token usually settles the question. Once false
    for ``text`` it is false for every text that begins with ``text`` (the generation stops asking).
    """
    if len(text) > 64:  # longer than any marker and the whitespace a model writes before one
        return False
    t = text.lstrip()
    return not t or any(len(t) < len(start) and start.startswith(t) for start, _ in fmt.blocks)


class ToolCallParser:
    """Splits model output into content and tool calls, incrementally.

    ``feed(text)`` and ``finish()`` return a list of items, each a ``str`` (content to
    show) or a :class:`ToolCall`; the concatenation over a whole answer is the same however
    the text is cut into pieces, so a streamed answer equals the non-streamed one.

    Args:
        fmt: the template family's call format.
        names: the functions the request offers; a call to another name is not a call.
        parallel: keep every call (True) or only the first.

    Calls come in the format's blocks (anywhere in the answer but inside Markdown code: a marker in a
    fenced block or an inline code span is an example, content as written) or, at the start of the
    answer (and right after such a call), as bare JSON objects whose first key is ``name``, a requested
    tool's; a bare object is held until it is whole or can no longer be such a call.
    """

    def __init__(self, fmt: ToolFormat, names: tuple[str, ...], parallel: bool = True) -> None:
        self.fmt = fmt
        self.names = set(names)
        self.parallel = parallel
        self.calls = 0
        self._pending = ""  # outside a block: text not yet released
        self._block: str | None = None  # inside a block: its text after the start marker
        self._open = fmt.blocks[0]  # the open block's (start, end)
        self._ws_before = ""  # whitespace dropped before the open block (given back if it fails)
        self._after_call = False
        self._bare = True  # a bare call object may come next (the start of the answer, or after one)
        self._code = CodeState()  # Markdown code in the answer before the pending text (calls' text left out)

    def _call(self, body: str) -> ToolCall | None:
        try:
            obj = json.loads(body, strict=False)  # a raw newline in a string: models write them
        except ValueError:
            return None
        return self._call_of(obj)

    def _call_of(self, obj: Any) -> ToolCall | None:
        if not isinstance(obj, dict) or obj.get("name") not in self.names:
            return None
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args, strict=False)
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))

    def _close(self, body: str, closed: bool) -> list:
        """A block ends (``closed``: its end marker was seen): a call, or its text as content."""
        self._block = None
        call = self._call(body)
        if call is None:
            written = self._open[0] + body + (self._open[1] if closed else "")
            self._code.feed(written)
            raw = self._ws_before + written
            self._ws_before = ""
            self._after_call = False
            return [raw]
        self._ws_before = ""
        self._bare = False
        return self._emit(call)

    def _emit(self, call: ToolCall) -> list:
        self._after_call = True
        self.calls += 1
        return [call] if self.parallel or self.calls == 1 else []

    def _bare_call(self) -> tuple[ToolCall, int] | bool:
        """At a possible bare call (pending text, less whitespace, starts with ``{``): (the call, where
        its object ends in the pending text), True to wait for more text, or False: not a call."""
        lead = len(self._pending) - len(self._pending.lstrip())
        text = self._pending[lead:]
        m = _BARE_HEAD.match(text)
        if m is None:
            return _could_begin_call(text, self.names)
        try:
            if json.loads(f'"{m.group(1)}"', strict=False) not in self.names:
                return False
            obj, end = json.JSONDecoder(strict=False).raw_decode(text)
        except ValueError:
            return True  # not whole yet (or malformed: released as text at the end)
        call = self._call_of(obj)
        return (call, lead + end) if call is not None else False

    def feed(self, text: str) -> list:
        """Take the next piece of output; return what can be released now."""
        out: list = []
        if self._block is not None:
            self._block += text
        else:
            self._pending += text
        while True:
            if self._block is not None:
                end = self._open[1]
                j = self._block.find(end)
                if j < 0:
                    break
                rest = self._block[j + len(end):]
                out += self._close(self._block[:j], closed=True)
                self._pending = rest
                continue
            if self._after_call:
                stripped = self._pending.lstrip()
                self._code.feed(self._pending[:len(self._pending) - len(stripped)])
                if not stripped:
                    self._pending = ""
                    break
                self._pending = stripped
            if self._bare:
                if not self._pending.strip():
                    break
                bare = self._pending.lstrip().startswith("{") and self._bare_call()
                if bare is True:
                    break
                if bare:
                    call, end = bare
                    out += self._emit(call)
                    self._pending = self._pending[end:]
                    continue
                self._bare = False
            found = self._next_start()
            if found:
                out += self._open_block(*found)
                continue
            # release all but a trailing partial start marker and the whitespace before it
            hold = max(_partial_suffix(self._pending, pair[0]) for pair in self.fmt.blocks)
            keep = self._pending[:len(self._pending) - hold]
            body = keep.rstrip()
            self._code.feed(body)
            if body:
                out.append(body)
                self._after_call = False
            self._pending = keep[len(body):] + self._pending[len(keep):]
            break
        return [x for x in out if not isinstance(x, str) or x]

    def _open_block(self, i: int, pair: tuple[str, str]) -> list:
        """A block starts at ``i`` of the pending text: release the text before it (less the whitespace next
        to the block, kept in case the block is no call)."""
        self._open = pair
        before = self._pending[:i]
        self._code.feed(before)
        body = before.rstrip()
        if body:
            self._after_call = False
        self._bare = False
        self._ws_before = before[len(body):]
        self._block = self._pending[i + len(pair[0]):]
        self._pending = ""
        return [body]

    def _next_start(self) -> tuple[int, tuple[str, str]] | None:
        """The first start marker in the pending text outside Markdown code: (where, its block's (start, end))."""
        best = None
        for pair in self.fmt.blocks:
            i = self._pending.find(pair[0])
            while i >= 0 and self._code.inside_after(self._pending[:i]):
                i = self._pending.find(pair[0], i + 1)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, pair)
        return best

    def finish(self) -> list:
        """The end of the output: release what is held (an unclosed block: a call if its JSON is whole)."""
        if self._block is not None:
            return self._close(self._block, closed=False)
        rest, self._pending = self._pending, ""
        if self._after_call and not rest.strip():
            return []
        return [rest] if rest else []


def parse_all(parser: ToolCallParser, text: str) -> tuple[str | None, list[ToolCall]]:
    """A whole answer -> (content or None, calls)."""
    items = parser.feed(text) + parser.finish()
    content = "".join(x for x in items if isinstance(x, str))
    return (content or None), [x for x in items if isinstance(x, ToolCall)]


def argument_fragments(arguments: str, size: int = 24) -> list[str]:
    """``arguments`` cut into pieces for ``delta.tool_calls[].function.arguments`` (OpenAI streams fragments)."""
    return [arguments[i:i + size] for i in range(0, len(arguments), size)] or [""]
