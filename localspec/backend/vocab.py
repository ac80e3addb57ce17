"""The vocabulary half of :class:`~localspec.backend.llama.LlamaModel`: token ids <-> bytes, the
special, fill-in-the-middle and end-of-generation tokens, the GGUF's metadata, and grammars.

:class:`Vocabulary` is a base class of ``LlamaModel``: it reads the llama.cpp handles the model
holds (``_lc``, the llama_cpp module; ``_model``; ``_vocab``) and never imports llama.cpp itself.
Rendering a chat with its template stays in :mod:`localspec.backend.llama` (the module that imports
llama-cpp-python's Jinja formatter).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from localspec.backend.chat_template import TOKEN_ATTR_SPECIAL
from localspec.backend.grammar import Grammar, LazyGrammar, Trigger
from localspec.backend.native import last_error, recent_errors
from localspec.errors import ConfigError


@dataclass(frozen=True)
class VocabInfo:
    """What the tokenizer compatibility check compares (pure data, see localspec.core.tokenizer)."""

    vocab_type: int
    n_tokens: int
    bos: int
    eos: int
    add_bos: bool
    texts: tuple[bytes, ...]
    attrs: tuple[int, ...]


class Vocabulary:
    """Tokenizing, token texts and special tokens of a loaded GGUF (a base class of
    :class:`~localspec.backend.llama.LlamaModel`, which sets the attributes below when it loads).

    Attributes:
        n_vocab: tokens in the vocabulary.
        bos, eos: the BOS and EOS token ids (-1: none).
        add_bos: whether the GGUF asks for BOS at the start of a text.
        eog_tokens: the end-of-generation token ids.
    """

    _lc: Any
    _model: Any
    _vocab: Any
    path: Path
    n_vocab: int
    _piece_cache: dict[int, bytes]
    _specials: dict[str, tuple[int, int]] | None
    _piece_buf: Any

    def _read_vocab(self, lc) -> None:
        """The special ids: BOS, EOS, whether BOS is added, the end-of-generation set."""
        self.bos = int(lc.llama_vocab_bos(self._vocab))
        self.eos = int(lc.llama_vocab_eos(self._vocab))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self._vocab))
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for t in range(self.n_vocab):
            if lc.llama_vocab_is_eog(self._vocab, t):
                self._eog[t] = True
        self.eog_tokens = frozenset(int(t) for t in np.flatnonzero(self._eog))

    # -- metadata -------------------------------------------------------------------
    def metadata(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            self._lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        """The GGUF's default chat template (Jinja), or None."""
        raw = self._lc.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8") if raw else None

    def fim_tokens(self) -> dict[str, int]:
        """The fill-in-the-middle tokens llama.cpp found in the GGUF (``tokenizer.ggml.fim_*_token_id``
        metadata, or known token texts such as ``<|fim_prefix|>``): role -> token id, -1 where absent.

        Roles (llama.cpp's ``llama_vocab_fim_<role>``): ``pre``, ``suf``, ``mid`` (prefix, suffix,
        middle), ``pad``, ``rep`` (repository name, Qwen2.5-Coder's ``<|repo_name|>``), ``sep``
        (file separator, ``<|file_sep|>``).
        """
        lc = self._lc
        return {role: int(getattr(lc, f"llama_vocab_fim_{role}")(self._vocab))
                for role in ("pre", "suf", "mid", "pad", "rep", "sep")}

    def special_tokens(self) -> dict[str, tuple[int, int]]:
        """The texts llama.cpp's tokenizer reads as special tokens: text -> (id, attributes).

        Control, user-defined and unknown tokens (llama.cpp's ``cache_special_tokens``);
        computed once per model.
        """
        if self._specials is None:
            lc = self._lc
            table: dict[str, tuple[int, int]] = {}
            for t in range(self.n_vocab):
                attrs = int(lc.llama_vocab_get_attr(self._vocab, t))
                if attrs & TOKEN_ATTR_SPECIAL:
                    text = (lc.llama_vocab_get_text(self._vocab, t) or b"").decode("utf-8", "replace")
                    if text:
                        table.setdefault(text, (t, attrs))
            self._specials = table
        return self._specials

    def vocab_info(self) -> VocabInfo:
        lc = self._lc
        texts = tuple(lc.llama_vocab_get_text(self._vocab, t) or b"" for t in range(self.n_vocab))
        attrs = tuple(int(lc.llama_vocab_get_attr(self._vocab, t)) for t in range(self.n_vocab))
        return VocabInfo(
            vocab_type=int(lc.llama_vocab_type(self._vocab)),
            n_tokens=self.n_vocab,
            bos=self.bos,
            eos=self.eos,
            add_bos=self.add_bos,
            texts=texts,
            attrs=attrs,
        )

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token]) if 0 <= token < self.n_vocab else False

    # -- tokenizer ------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool | None = None, parse_special: bool = True) -> list[int]:
        """Text -> token ids.

        Special tokens written as text (``<|im_start|>``) become single ids. BOS is added
        when the GGUF asks for it (``add_special=None``), and never twice: a text that
        already starts with the BOS token keeps one.

        Raises:
            ConfigError: the text holds a lone UTF-16 surrogate (e.g. from JSON ``"\\ud800"``),
                which is not Unicode text and has no UTF-8 encoding.
        """
        lc = self._lc
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ConfigError(f"the text holds a lone UTF-16 surrogate ({text[e.start]!r} at character {e.start}), "
                              "which is not valid Unicode", "send UTF-8 text; pair or remove the surrogate") from None
        add = self.add_bos if add_special is None else add_special
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add, parse_special)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add, parse_special)
        tokens = list(buf[:n])
        if self.bos >= 0 and len(tokens) >= 2 and tokens[0] == self.bos and tokens[1] == self.bos:
            tokens = tokens[1:]
        return tokens

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The bytes a token decodes to (control tokens render empty unless ``special``)."""
        key = token if not special else -1 - token
        hit = self._piece_cache.get(key)
        if hit is not None:
            return hit
        lc = self._lc
        n = lc.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
            out = buf.raw[:n]
        else:
            out = self._piece_buf.raw[:n]
        self._piece_cache[key] = out
        return out

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def grammar(self, gbnf: str, root: str = "root", triggers: Sequence[int] = ()) -> Grammar:
        """A fresh :class:`Grammar` state for ``gbnf`` (GBNF text, llama.cpp's grammar format) from rule ``root``.

        ``triggers`` (token ids): a lazy grammar (llama.cpp's ``llama_sampler_init_grammar_lazy_patterns``
        with trigger tokens only): it allows every token until one of them is accepted, which it then
        accepts as its own first token (the grammar must start with that token's text), and
        constrains from there on.

        Raises:
            ConfigError: llama.cpp cannot parse the grammar (or ``root`` is not one of its rules).
        """
        recent_errors.clear()
        lc = self._lc
        if triggers:
            ids = (lc.llama_token * len(triggers))(*triggers)
            sampler = lc.llama_sampler_init_grammar_lazy_patterns(self._vocab, gbnf.encode(), root.encode(),
                                                                  None, 0, ids, len(triggers))
        else:
            sampler = lc.llama_sampler_init_grammar(self._vocab, gbnf.encode(), root.encode())
        if not sampler:
            raise ConfigError(f"llama.cpp could not parse the grammar{last_error()}",
                              "check the GBNF text and that its root rule exists")
        return Grammar(self._lc, sampler, self.n_vocab)

    def lazy_grammar(self, forms: Sequence[tuple[bytes, str, bool]], root: str, ends: bytes,
                     outside_code: bool = False) -> LazyGrammar:
        """A :class:`LazyGrammar` over this vocabulary: free output until one of ``forms`` matches it.

        ``forms``: (pattern, gbnf, at_start) each, a regular expression over the output's bytes
        (:class:`Trigger`) and the grammar (start rule ``root``) from its match's start on. ``ends``:
        every byte a match can end with (the tokens holding one are found once per vocabulary and byte set).
        ``outside_code``: a match that starts inside Markdown code does not fire (:class:`LazyGrammar`).

        Raises:
            ConfigError: llama.cpp cannot parse a grammar.
        """
        triggers: list[Trigger] = []
        try:
            for pattern, gbnf, at_start in forms:
                triggers.append(Trigger(re.compile(pattern), self.grammar(gbnf, root), at_start))
        except Exception:
            for t in triggers:
                t.grammar.close()
            raise
        window = 256 + max(len(p) for p, _, _ in forms)  # a pattern's text bounds its matches' length
        return LazyGrammar(triggers, lambda t: self.token_bytes(t, special=True), self._spell,
                           lambda: self._tokens_holding(ends), window, outside_code)

    def _spell(self, text: bytes) -> list[int] | None:
        """Tokens whose (special-rendered) pieces are ``text``, or None (``text`` ends inside a character)."""
        try:
            tokens = self.tokenize(text.decode("utf-8"), add_special=False, parse_special=False)
        except (UnicodeDecodeError, ConfigError):
            return None
        return tokens if b"".join(self.token_bytes(t, special=True) for t in tokens) == text else None

    def _tokens_holding(self, ends: bytes) -> np.ndarray:
        """The ids whose piece holds one of the bytes ``ends``, shape (k,) int64 (a vocabulary scan, cached)."""
        cache = self.__dict__.setdefault("_holding", {})
        if ends not in cache:
            cache[ends] = np.array([t for t in range(self.n_vocab)
                                    if any(b in self.token_bytes(t, special=True) for b in ends)], dtype=np.int64)
        return cache[ends]
