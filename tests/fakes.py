"""A deterministic fake backend for unit-testing the engine's control flow.

It implements the small surface of :class:`localspec.backend.llama.LlamaModel` the engine
uses. Its "language model" is a fixed function of the last two tokens, so greedy
output is known in advance; token i decodes to ``TEXTS[i]``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.backend.llama import VocabInfo

N_VOCAB = 40
EOG = 39
TEXTS = [f"t{i} ".encode() for i in range(N_VOCAB)]
TEXTS[EOG] = b""


def next_token(prev: Sequence[int]) -> int:
    a = prev[-1] if prev else 0
    b = prev[-2] if len(prev) > 1 else 0
    return (a * 7 + b * 3 + 1) % (N_VOCAB - 1)  # never EOG unless forced


class FakeModel:
    def __init__(self, n_ctx: int = 256, n_batch: int = 64, eog_after: int | None = None, texts=None) -> None:
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.n_vocab = N_VOCAB
        self.cached_tokens: list[int] = []
        self.eog_after = eog_after  # emit EOG once the sequence is this long
        self.eog_tokens = frozenset({EOG})
        self.texts = texts or TEXTS
        self.decode_calls: list[int] = []
        self.path = "fake.gguf"
        self.template: str | None = None  # chat template (Jinja source); None: none

    @property
    def n_cached(self) -> int:
        return len(self.cached_tokens)

    def logits_after(self, seq: Sequence[int]) -> np.ndarray:
        logits = np.zeros(N_VOCAB, dtype=np.float32)
        tok = EOG if self.eog_after is not None and len(seq) >= self.eog_after else next_token(seq)
        logits[tok] = 10.0
        logits[(tok + 1) % N_VOCAB] = 5.0
        return logits

    def decode(self, tokens, logits_for="last", progress=None):
        n = len(tokens)
        if self.n_cached + n > self.n_ctx:
            from localspec.errors import ContextOverflowError

            raise ContextOverflowError("overflow")
        self.decode_calls.append(n)
        want = [n - 1] if logits_for == "last" else list(range(n)) if logits_for == "all" else list(logits_for)
        rows = []
        for i, t in enumerate(tokens):
            self.cached_tokens.append(int(t))
            if i in want:
                rows.append(self.logits_after(self.cached_tokens))
        return np.stack(rows) if rows else np.empty((0, N_VOCAB), np.float32)

    def decode_argmax(self, tokens, logits_for="all", width=None):
        """LlamaModel.decode_argmax, over :meth:`decode` (so a subclass's or a test's decode sees the pass)."""
        return np.argmax(self.decode(tokens, logits_for)[:, :width], axis=1)

    def truncate(self, n: int) -> None:
        del self.cached_tokens[n:]

    def reset(self) -> None:
        self.cached_tokens.clear()

    def sync(self, tokens) -> int:
        limit = len(tokens) - 1
        common = 0
        while common < min(limit, self.n_cached) and self.cached_tokens[common] == tokens[common]:
            common += 1
        self.truncate(common)
        return common

    def is_eog(self, t: int) -> bool:
        return t in self.eog_tokens

    def token_bytes(self, t: int, special: bool = False) -> bytes:
        return self.texts[t]

    def tokenize(self, text: str, **kw) -> list[int]:
        return [int(w[1:]) for w in text.split()]

    def chat_template(self) -> str | None:
        return self.template

    def vocab_info(self) -> VocabInfo:
        return VocabInfo(0, N_VOCAB, -1, EOG, False, tuple(self.texts), tuple([4] * N_VOCAB))

    def close(self) -> None:
        pass


#: the fill-in-the-middle tokens of :class:`WithFimTokens` (prefix, suffix, middle)
PRE, SUF, MID = 30, 31, 32


class WithFimTokens:
    """A fake model with fill-in-the-middle tokens, mixed in first: ``class M(WithFimTokens, FakeModel)``
    (the plain fake has none, as SmolLM2)."""

    def fim_tokens(self) -> dict[str, int]:
        return {"pre": PRE, "suf": SUF, "mid": MID, "pad": -1, "rep": -1, "sep": -1}


def greedy_reference(prompt: Sequence[int], n: int, model: FakeModel | None = None) -> list[int]:
    model = model or FakeModel()
    seq = list(prompt)
    out = []
    for _ in range(n):
        tok = int(np.argmax(model.logits_after(seq)))
        if tok == EOG:
            break
        seq.append(tok)
        out.append(tok)
    return out
