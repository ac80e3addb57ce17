"""Where a model's Markdown answer is inside code: a fenced block or an inline code span.

A tool call marker (Qwen's ``<tool_call>``) that a model writes inside code is an example it shows,
not a call it makes: the lazy grammar of ``tool_choice`` auto (:class:`localspec.backend.grammar.LazyGrammar`)
does not start there and the parser (:class:`localspec.server.tool_parser.ToolCallParser`) leaves it in the
content. Both read the answer as it grows, so :class:`CodeState` is fed text in pieces and answers for the
end of what it was fed.

The rules are CommonMark's (https://spec.commonmark.org/0.31.2/, sections 4.5 and 6.1), for text seen
only up to the position asked about:

- a fenced block opens at a line of up to 3 spaces and 3 or more backticks (no backtick after them) or
  tildes, and closes at a line of up to 3 spaces and a run of the same character at least as long, then
  only spaces or tabs; everything from the opening fence's run on is inside it, to the end of the closing
  line (a fence never closed runs to the end of the answer);
- outside fenced blocks, a run of n backticks (the first one not escaped by a backslash) opens a code
  span that the next run of exactly n backticks closes. Whether a run that is still open will ever close
  cannot be known at its position, so an open run counts as code (a model that writes
  ```` `<tool_call>` ```` means the text), but only to the end of its line: CommonMark lets a span go on
  over line breaks inside a paragraph, models hardly ever break one, and a stray backtick must not turn
  a call written on a later line into text (a call lost costs an agent its turn).

Indented code blocks, block quotes and HTML blocks are not followed.
"""

from __future__ import annotations

import re

_RUN = re.compile(rb"(\\*)(`+)")
_CLOSE = re.compile(rb" {0,3}(`{3,}|~{3,})[ \t]*\r?")


class CodeState:
    """Whether the end of the text fed so far lies inside code (a fenced block or an inline code span).

    Feed it the answer's text in any pieces (:meth:`feed`, bytes or str); :meth:`inside` answers for the
    position after the last byte fed, as if the text ended there. Only the current line is kept besides one
    small field, so feeding costs O(text) and :meth:`inside` O(current line).
    """

    __slots__ = ("_fence", "_line")

    def __init__(self) -> None:
        self._fence: tuple[int, int] | None = None  # the open fenced block: (its character, its run's length)
        self._line = b""  # the current line's bytes so far (code spans end with their line)

    def copy(self) -> "CodeState":
        """An independent copy (the same answers from here on)."""
        c = CodeState()
        c._fence, c._line = self._fence, self._line
        return c

    def feed(self, text: bytes | str) -> "CodeState":
        """Move past ``text`` (str is read as UTF-8); returns self."""
        data = text.encode("utf-8", "replace") if isinstance(text, str) else text
        *done, self._line = (self._line + data).split(b"\n")
        for line in done:
            self._fence = _read_line(line, self._fence, complete=True)[0]
        return self

    def inside(self) -> bool:
        """Whether the position after the text fed so far is inside code."""
        return _read_line(self._line, self._fence, complete=False)[1]

    def inside_after(self, text: bytes | str) -> bool:
        """Whether the position after ``text``, fed after what was fed so far, is inside code (self unchanged)."""
        return self.copy().feed(text).inside()


def _fence_opening(line: bytes) -> tuple[int, int] | None:
    """(character, run length) when ``line`` (possibly partial) opens a fenced block."""
    body = line.lstrip(b" ")
    if len(line) - len(body) > 3 or body[:3] not in (b"```", b"~~~"):
        return None
    char = body[0]
    n = len(body) - len(body.lstrip(bytes([char])))
    if char == ord("`") and b"`" in body[n:]:  # a backtick fence's info string holds no backtick
        return None
    return char, n


def _read_line(line: bytes, fence: tuple[int, int] | None, complete: bool) -> tuple[tuple[int, int] | None, bool]:
    """The state after ``line`` (``complete``: its newline too) from ``fence`` at its start: (the fence open
    after it, whether its end is inside code)."""
    if fence is not None:
        m = _CLOSE.fullmatch(line) if complete else None
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1]:
            return None, False
        return fence, True
    opening = _fence_opening(line)
    if opening is not None:
        return opening, True
    span = 0  # the length of the backtick run that opened a code span on this line (0: none)
    for m in _RUN.finditer(line):
        slashes, n = len(m.group(1)), len(m.group(2))
        if not span and slashes % 2:  # an escaped backtick is text; the rest of the run counts
            n -= 1
        if not n:
            continue
        if not span:
            span = n
        elif span == n:
            span = 0
    return None, span > 0 and not complete  # a span still open at the line's end: a stray backtick, text
