"""Grammars: llama.cpp's grammar sampler over a model's vocabulary, and JSON Schema -> GBNF.

:class:`Grammar` is the constraint of a constrained generation (the server's tool calls); a
model makes one (:meth:`localspec.backend.llama.LlamaModel.grammar`, which creates the native
sampler) and this class masks, checks and advances it through the llama_cpp module the model
passes in. :class:`LazyGrammar` leaves the output free until a text pattern matches it (a tool
call begun, in any of its forms), then follows a grammar (made by
:meth:`localspec.backend.llama.LlamaModel.lazy_grammar`). :func:`json_schema_grammar` imports llama-cpp-python's JSON-schema converter
(``llama_cpp.llama_grammar``, pure Python): with :mod:`localspec.backend.llama` and
:mod:`localspec.bench.peer`, one of the three modules that import llama_cpp.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from localspec.backend.markdown import CodeState
from localspec.backend.native import NativeResource


#: a JSON string's character (RFC 8259, section 7): any but the quote, the backslash and the control characters
#: U+0000-U+001F, which must be escaped; llama-cpp-python's converter lets the control characters through
#: unescaped (a raw newline in a string: an answer ``json.loads`` refuses), llama.cpp's own converter does not
JSON_CHAR_RULE = r'char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


def json_schema_grammar(schema: dict, prop_order: Sequence[str] = ()) -> str:
    """GBNF text for JSON following ``schema`` (a JSON Schema), start rule ``root``.

    llama-cpp-python's converter (``llama_cpp.llama_grammar.json_schema_to_gbnf``, a port of
    llama.cpp's ``json_schema_to_grammar``), its string character rule replaced by :data:`JSON_CHAR_RULE`;
    object properties in ``prop_order`` come first.

    Raises:
        Exception: what the converter raises on a schema it cannot read (AssertionError,
            KeyError, ValueError, ...).
    """
    import json

    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps(schema), prop_order=list(prop_order))
    return re.sub(r"(?m)^char ::= .*$", lambda _: JSON_CHAR_RULE, gbnf)


#: ``llama_token_data`` as numpy sees it: (id int32, logit float32, p float32), C layout
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)


class Grammar(NativeResource):
    """A GBNF grammar's state over one model's vocabulary: llama.cpp's grammar sampler.

    The constraint of a constrained generation (:class:`localspec.core.acceptance.Constraint`): the
    acceptance rule masks each target row with :meth:`mask` (or checks a single token with
    :meth:`allows`) before choosing, and :meth:`accept` moves the state past each committed
    token. Once the grammar is complete only end-of-generation tokens are allowed. Made by
    :meth:`localspec.backend.llama.LlamaModel.grammar`; free it with :meth:`close` (or a ``with`` block).

    Only ever :meth:`accept` a token the state allows: llama.cpp aborts on one it does not.
    """

    def __init__(self, lc, sampler, n_vocab: int) -> None:
        """Take ownership of ``sampler``, a grammar sampler (``llama_sampler_init_grammar``) over a
        vocabulary of ``n_vocab`` tokens; ``lc`` is the llama_cpp module that made it."""
        self._lc = lc
        self.n_vocab = n_vocab
        self._smpl = sampler
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self._all = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
        self._all["id"] = np.arange(self.n_vocab, dtype=np.int32)

    def _apply(self, arr: np.ndarray) -> None:
        lc = self._lc
        data = lc.llama_token_data_array(data=arr.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)),
                                         size=len(arr), selected=-1, sorted=False)
        lc.llama_sampler_apply(self._smpl, ctypes.byref(data))

    def allows(self, token: int) -> bool:
        """Whether the grammar's state allows ``token`` next (cheap: one candidate)."""
        one = self._one
        one["id"], one["logit"] = token, 0.0
        self._apply(one)
        return bool(np.isfinite(one["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` (shape (n_vocab,), float32) with every token the state forbids set to -inf (a copy).

        Costs a walk of the grammar over the whole vocabulary: tens of milliseconds for a
        150k-token vocabulary on a CPU.
        """
        arr = self._all
        arr["id"] = np.arange(self.n_vocab, dtype=np.int32)  # llama.cpp may reorder candidates
        arr["logit"] = logits[: self.n_vocab]
        self._apply(arr)
        out = np.full(logits.shape, -np.inf, dtype=np.float32)
        out[arr["id"]] = arr["logit"]
        return out

    def accept(self, token: int) -> None:
        """Move the state past ``token``, which it must allow."""
        self._lc.llama_sampler_accept(self._smpl, int(token))

    def clone(self) -> "Grammar":
        """An independent copy of this state (llama.cpp's ``llama_sampler_clone``), freed on its own."""
        return Grammar(self._lc, self._lc.llama_sampler_clone(self._smpl), self.n_vocab)

    def close(self) -> None:
        if getattr(self, "_smpl", None):
            self._lc.llama_sampler_free(self._smpl)
            self._smpl = None


@dataclass(frozen=True)
class Trigger:
    """Where a :class:`LazyGrammar` starts constraining, and the grammar it follows from there.

    Attributes:
        pattern: a regular expression over the output's bytes. The constraint starts at its
            first group when it has one (else at the match), and every text it matches, from
            there, must be a prefix of ``grammar``'s language: that text is fed to the grammar.
        grammar: the grammar's state at its start (a :class:`Grammar`); the lazy grammar
            works on clones of it and closes it.
        at_start: the pattern only matches at the start of the output (it begins with ``\\A``).
    """

    pattern: re.Pattern[bytes]
    grammar: "Grammar"
    at_start: bool = False


class LazyGrammar:
    """A grammar that constrains the output only from the first match of one of its triggers on.

    Until then every token is allowed, except one that would complete a trigger's match and
    with it a text its grammar rejects (so a call that has begun always parses); the token that
    completes a match starts the trigger's grammar, fed the text from the match's start
    (which may begin inside an earlier token, and may end past the match inside this token).
    From there on :meth:`allows`, :meth:`mask` and :meth:`accept` are the grammar's. Like
    llama.cpp's ``llama_sampler_init_grammar_lazy_patterns``, on text patterns as well as
    tokens, but the token that fires a trigger is checked against the grammar too.

    The state is a function of the accepted tokens alone, so inside the acceptance rule
    (:mod:`localspec.core.acceptance`) the output is the same with and without speculation.

    Args:
        triggers: tried on each token; of several matches the one that starts first wins
            (then the first trigger).
        piece: a token's bytes as the grammar reads them (a special token as its text).
        spell: tokens whose pieces are exactly the given bytes, or None when there are none
            (the grammar is fed text through them).
        finals: token ids whose piece holds a byte that can end a trigger's match, shape (k,)
            int; :meth:`mask` checks only these (called once, when first needed).
        window: the most bytes a trigger's match spans; matches are sought in the last
            ``window`` bytes of the output and the token's piece.
        outside_code: a match that starts inside Markdown code (a fenced block or an inline code
            span of the output so far: :class:`localspec.backend.markdown.CodeState`) does not fire;
            the output there stays free (a tool call marker shown as an example is text).
    """

    def __init__(self, triggers: Sequence[Trigger], piece: Callable[[int], bytes],
                 spell: Callable[[bytes], list[int] | None], finals: Callable[[], np.ndarray], window: int,
                 outside_code: bool = False) -> None:
        self.triggers = tuple(triggers)
        self._piece = piece
        self._spell = spell
        self._finals_of = finals
        self._finals: np.ndarray | None = None
        self.window = window
        self._tail = b""  # the last ``window`` bytes of the output, until a trigger fires
        self._n = 0  # bytes of output so far, until a trigger fires
        #: (trigger, start in the tail) -> its grammar past the output from there (None: rejected)
        self._states: dict[tuple[int, int], Grammar | None] = {}
        #: the grammar of the trigger that fired, None before (and after :meth:`close`)
        self.active: Grammar | None = None
        #: the index of the trigger that fired, None before (kept after :meth:`close`)
        self.fired: int | None = None
        self.outside_code = outside_code
        self._code = CodeState()  # where the output is inside code, at the start of the tail
        self._code_end: CodeState | None = None  # the same at the end of the tail (made when first needed)
        self._inside: dict[int, bool] = {}  # a position in the tail -> whether it is inside code

    # -- before the trigger ------------------------------------------------------------
    def _match(self, token: int) -> tuple[int, int, bytes] | None:
        """(trigger index, where its text starts, the window's text through ``token``'s piece) when
        ``token`` completes a match."""
        text = self._tail + self._piece(token)
        best: tuple[int, int] | None = None
        for i, trig in enumerate(self.triggers):
            if trig.at_start and self._n > len(self._tail):
                continue  # the output's start has left the window
            for m in trig.pattern.finditer(text):
                start = m.start(1) if m.re.groups else m.start()
                if self.outside_code and self._inside_code(start, text):
                    continue  # an example in code: the next match of this trigger may still fire
                if best is None or start < best[1]:
                    best = (i, start)
                break
        return None if best is None else (*best, text)

    def _inside_code(self, start: int, text: bytes) -> bool:
        """Whether ``text`` (the tail and a token's piece) is inside code at ``start``."""
        n = len(self._tail)
        if start <= n:
            if start not in self._inside:
                self._inside[start] = self._code.inside_after(self._tail[:start])
            return self._inside[start]
        if self._code_end is None:
            self._code_end = self._code.copy().feed(self._tail)
        return self._code_end.inside_after(text[n:start])

    def _feed(self, grammar, text: bytes) -> bool:
        """Move ``grammar`` past ``text``; False (the state then spent) when it rejects it."""
        tokens = self._spell(text)
        if tokens is None:
            return False
        for t in tokens:
            if not grammar.allows(t):
                return False
            grammar.accept(t)
        return True

    def _fits(self, token: int, i: int, start: int, text: bytes) -> bool:
        """Whether trigger ``i``'s grammar takes ``text[start:]``, which ends with ``token``'s piece."""
        if start < len(self._tail):  # the match began in the output: its grammar past that, then the token
            key = (i, start)
            if key not in self._states:
                g = self.triggers[i].grammar.clone()
                if not self._feed(g, self._tail[start:]):
                    _close(g)
                    g = None
                self._states[key] = g
            state = self._states[key]
            return state is not None and state.allows(token)
        g = self.triggers[i].grammar.clone()
        try:
            return self._feed(g, text[start:])
        finally:
            _close(g)

    def _allowed_before(self, token: int) -> bool:
        hit = self._match(token)
        return hit is None or self._fits(token, *hit)

    def _forget_states(self) -> None:
        for g in self._states.values():
            if g is not None:
                _close(g)
        self._states.clear()

    # -- the Constraint protocol --------------------------------------------------------
    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next."""
        if self.active is not None:
            return self.active.allows(token)
        return self._allowed_before(token)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` (shape (n_vocab,), float32) with the forbidden tokens at -inf (a copy).

        Before a trigger: only tokens among ``finals`` can be forbidden; each is tried.
        """
        if self.active is not None:
            return self.active.mask(logits)
        if self._finals is None:
            self._finals = np.asarray(self._finals_of(), dtype=np.int64)
        out = np.array(logits, dtype=np.float32, copy=True)
        for t in self._finals:
            if t < len(out) and not self._allowed_before(int(t)):
                out[t] = -np.inf
        return out

    def accept(self, token: int) -> None:
        """Move past ``token`` (one :meth:`allows` allows).

        Raises:
            ValueError: the token completes a trigger whose grammar rejects the text (it
                was not allowed).
        """
        if self.active is not None:
            self.active.accept(token)
            return
        hit = self._match(token)
        self._forget_states()
        if hit is None:
            piece = self._piece(token)
            text = self._tail + piece
            if self.outside_code:
                self._code.feed(text[:max(0, len(text) - self.window)])  # the bytes that leave the tail
                self._code_end = None
                self._inside.clear()
            self._tail = text[-self.window:]
            self._n += len(piece)
            return
        i, start, text = hit
        g = self.triggers[i].grammar.clone()
        if not self._feed(g, text[start:]):
            _close(g)
            raise ValueError(f"token {token} completes a trigger with text its grammar rejects: {text[start:]!r}")
        self.active, self.fired = g, i

    def close(self) -> None:
        """Free the active grammar and the triggers' (idempotent)."""
        self._forget_states()
        if self.active is not None:
            _close(self.active)
            self.active = None
        for trig in self.triggers:
            _close(trig.grammar)


def _close(grammar) -> None:
    if hasattr(grammar, "close"):
        grammar.close()
