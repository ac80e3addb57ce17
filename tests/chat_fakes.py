"""A fake chat model for multi-turn tests: the fake backend plus a chat template.

Template: each message is ``SEP <content tokens> EOG``; the generation prompt is ``SEP``.
The "language model" continues the fake's deterministic sequence and emits EOG
``reply_len`` tokens after the newest SEP, so every turn ends on an end-of-generation
token and the history holds EOG tokens from earlier turns (cases.md C8).
"""

from __future__ import annotations

import numpy as np

from fakes import EOG, N_VOCAB, FakeModel, next_token

SEP = 38
ROLE = {"system": 1, "user": 2, "assistant": 3}


class FakeChatModel(FakeModel):
    def __init__(self, reply_len: int = 12, **kw) -> None:
        super().__init__(**kw)
        self.reply_len = reply_len

    def lazy_grammar(self, forms, root, ends, outside_code=False):
        """No grammar engine on a fake: tool_choice auto's lazy grammar is none, the scripted answers stand."""
        return None

    def logits_after(self, seq):
        logits = np.zeros(N_VOCAB, dtype=np.float32)
        seq = list(seq)
        last_sep = max((i for i, t in enumerate(seq) if t == SEP), default=-1)
        if last_sep >= 0 and len(seq) - 1 - last_sep >= self.reply_len:
            tok = EOG
        else:
            tok = next_token(seq)
            if tok == SEP:
                tok = 37
        logits[tok] = 10.0
        logits[(tok + 1) % N_VOCAB] = 5.0
        return logits

    def render_chat(self, messages, add_generation_prompt=True) -> str:
        out = []
        for m in messages:
            out.append(f"t{SEP} t{ROLE[m['role']]} {m['content']} t{EOG}")
        if add_generation_prompt:
            out.append(f"t{SEP}")
        return " ".join(out)

    def tokenize_chat(self, messages, add_generation_prompt=True) -> list[int]:
        return self.tokenize(self.render_chat(messages, add_generation_prompt))

    def tokenize(self, text: str, **kw) -> list[int]:
        """Words ``tN``; a word cut by a stop string (``t`` or ``t1`` of ``t12``) is kept as far as it parses."""
        return [int(w[1:]) for w in text.split() if w[1:].isdigit()]

    def detok(self, ids):
        return "".join(self.texts[t].decode() for t in ids)


def user_text(i: int) -> str:
    """A user message of 3 fake tokens."""
    return " ".join(f"t{(i * 5 + j) % 30 + 4}" for j in range(3))
