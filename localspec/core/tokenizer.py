"""Tokenizer compatibility of a target and a draft model, checked before generating.

Draft tokens are verified by id, so the two models must give every shared id the same
text. Pure function on :class:`localspec.backend.llama.VocabInfo` data.
"""

from __future__ import annotations

import re

from localspec.errors import TokenizerMismatchError

#: llama.cpp's LLAMA_TOKEN_ATTR_UNUSED bit
TOKEN_ATTR_UNUSED = 1 << 1
_PAD_TEXT = re.compile(rb"^(\[PAD\d*\]|<\|?(pad|PAD)[^>]*\|?>|<unused\d*>|<extra_\d+>)$")


def _is_padding(text: bytes, attr: int) -> bool:
    return bool(attr & TOKEN_ATTR_UNUSED) or bool(_PAD_TEXT.match(text))


def _show(text: bytes) -> str:
    return repr(text.decode("utf-8", errors="backslashreplace"))


def check_compatible(target, draft) -> int:
    """Check that ``draft`` may propose tokens for ``target``.

    Compares the vocab type, BOS and EOS ids, and the text of every id the two share.
    A size difference made only of padding entries (unused attribute or a ``[PAD…]``
    style text) is accepted.

    Args:
        target, draft: ``VocabInfo`` of each model.

    Returns:
        The number of ids the draft may propose (``min`` of both sizes): the draft
        drafter masks every id at or above it.

    Raises:
        TokenizerMismatchError: naming the first differing id and both token texts.
    """
    hint = "use a draft model from the target's family (same tokenizer), or --mode lookup"
    shared = min(target.n_tokens, draft.n_tokens)
    for i in range(shared):
        if target.texts[i] != draft.texts[i]:
            raise TokenizerMismatchError(
                f"the target and draft tokenizers differ at token id {i}: "
                f"target {_show(target.texts[i])} vs draft {_show(draft.texts[i])}",
                hint,
            )
    if target.vocab_type != draft.vocab_type:
        raise TokenizerMismatchError(
            f"the target and draft tokenizers differ: vocab type {target.vocab_type} vs {draft.vocab_type}", hint
        )
    for name in ("bos", "eos"):
        a, b = getattr(target, name), getattr(draft, name)
        if a != b:
            raise TokenizerMismatchError(f"the target and draft tokenizers differ: {name.upper()} id {a} vs {b}", hint)
    larger = target if target.n_tokens > draft.n_tokens else draft
    for i in range(shared, larger.n_tokens):
        if not _is_padding(larger.texts[i], larger.attrs[i]):
            which = "target" if larger is target else "draft"
            raise TokenizerMismatchError(
                f"the target and draft tokenizers differ at token id {i}: only the {which} has it "
                f"({_show(larger.texts[i])}), and it is not padding "
                f"(target has {target.n_tokens} tokens, draft {draft.n_tokens})",
                hint,
            )
    return shared
