"""Streaming text: release token text only on complete UTF-8 characters, and hold back
text that could still become a stop string.

The texts released, joined, equal the final text exactly (see :class:`TextAssembler`).
"""

from __future__ import annotations

import codecs
from typing import Sequence


class TextAssembler:
    """Turns token bytes into releasable text, finding stop strings as they complete.

    A token's bytes may end inside a multi-byte UTF-8 character; the incremental decoder
    keeps the partial bytes until the character completes, so no replacement character
    is produced for text that is valid UTF-8 as a whole, and a character left incomplete
    at the end is dropped (:meth:`finish`). Bytes that can never be UTF-8 still become U+FFFD.

    Args:
        stop: stop strings; the output ends right before the first one found.
    """

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = tuple(s for s in stop if s)
        self._max_stop = max((len(s) for s in self.stop), default=0)
        self.text = ""
        self.token_ends: list[int] = []  # len(text) after each pushed token
        self.stop_at: int | None = None  # index in text where the first stop string starts
        self.stop_word: str | None = None  #: the stop string found at ``stop_at`` (the first given, of several there)
        self.finished = False
        self.dangling = b""  #: the incomplete character's bytes dropped by :meth:`finish`

    def push(self, piece: bytes) -> None:
        """Append one token's bytes."""
        before = len(self.text)
        self.text += self._decoder.decode(piece)
        self.token_ends.append(len(self.text))
        if self.stop and self.stop_at is None and len(self.text) > before:
            lo = max(0, before - self._max_stop + 1)
            hits = [(i, s) for s in self.stop if (i := self.text.find(s, lo)) >= 0]
            if hits:
                self.stop_at = min(i for i, _ in hits)
                self.stop_word = next(s for i, s in hits if i == self.stop_at)

    def finish(self) -> None:
        """End the text. Bytes of a character the generation never completed (max_tokens
        or the context cut it) are dropped, not shown as U+FFFD: the text stays what the
        bytes say, and the tokens that carried them still count (their text is "")."""
        if not self.finished:
            self.dangling = self._decoder.getstate()[0]
            self._decoder.reset()
            self.finished = True

    def tokens_before_stop(self) -> int:
        """How many pushed tokens start before the stop string (all, without a stop)."""
        if self.stop_at is None:
            return len(self.token_ends)
        starts = [0] + self.token_ends[:-1]
        return sum(1 for start in starts if start < self.stop_at)

    def truncate_tokens(self, n: int) -> None:
        """Forget tokens after the first ``n`` (text is cut at the stop, or at token n's end)."""
        del self.token_ends[n:]
        end = self.token_ends[-1] if self.token_ends else 0
        if self.stop_at is not None:
            end = min(end, self.stop_at)
        self.text = self.text[:end]

    def safe_end(self) -> int:
        """Length of the text that can be released now.

        Everything before a found stop string; else everything except a tail that is a
        proper prefix of some stop string (it might still complete). After
        :meth:`finish`, everything.
        """
        if self.stop_at is not None:
            return self.stop_at
        if self.finished or not self.stop:
            return len(self.text)
        text = self.text
        hold = 0
        for k in range(min(self._max_stop - 1, len(text)), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self.stop):
                hold = k
                break
        return len(text) - hold


class IndentLimit:
    """llama.cpp's ``n_indent`` (its server's ``/infill``, for code completion): the output ends
    before the first line, after the output's first newline, whose indentation (spaces and tabs)
    is shorter than ``min_indent`` characters; the whitespace of that line is kept, the rest cut.
    A blank line counts as indentation 0 (its newline is where the cut falls), as in llama.cpp.

    llama.cpp's server (``server-context.cpp``, ``process_token``) checks one line per sampled
    token, a token late; this checks every line as soon as its first character other than a space
    or tab arrives, so the cut is found in the round that produced it, before any of the cut text
    is released. Both cut the same place; llama.cpp can miss the last lines when its output ends
    before its check catches up.

    Args:
        min_indent: characters; 0 turns the rule off.
    """

    def __init__(self, min_indent: int) -> None:
        self.min_indent = min_indent
        self._line = -1  #: where the line being checked starts in the text; -1: no newline yet

    def cut(self, text: str) -> int | None:
        """The index in ``text`` (the whole output so far, grown since the last call) where the
        output is cut, or None to go on."""
        if self.min_indent <= 0:
            return None
        while True:
            if self._line < 0:
                nl = text.find("\n")
                if nl < 0:
                    return None
                self._line = nl + 1
            pos = self._line
            while pos < len(text) and text[pos] in " \t":
                pos += 1
            if pos >= len(text):
                return None  # only whitespace so far: wait for more
            if pos - self._line < self.min_indent:
                return pos
            nl = text.find("\n", pos)
            if nl < 0:
                return None
            self._line = nl + 1
