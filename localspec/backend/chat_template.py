"""Chat prompts split into the template's markup and the messages' contents: pure text, no llama.cpp.

:class:`localspec.backend.llama.LlamaModel.tokenize_chat` renders a chat with the GGUF's
template, then tokenizes only the markup with special-token parsing and every message's
content as plain text (:func:`split_rendered_chat`, then :func:`chat_fragments`), so a message
holding ``<|im_end|>`` cannot open a turn.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Callable, Sequence

#: llama.cpp's token attributes (``enum llama_token_attr``)
TOKEN_ATTR_UNKNOWN = 1 << 0
TOKEN_ATTR_CONTROL = 1 << 3
TOKEN_ATTR_USER_DEFINED = 1 << 4
TOKEN_ATTR_LSTRIP = 1 << 7
TOKEN_ATTR_RSTRIP = 1 << 8
#: the tokens llama.cpp's tokenizer matches as text when parsing special tokens (its
#: ``cache_special_tokens``)
TOKEN_ATTR_SPECIAL = TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED | TOKEN_ATTR_UNKNOWN
#: what a template may do to a message's content before writing it (tried in this order)
_CONTENT_FORMS: tuple[Callable[[str], str], ...] = (lambda c: c, str.strip)


@dataclass(frozen=True)
class ChatPiece:
    """A piece of a rendered chat prompt: the template's own text, or a message's content."""

    text: str
    is_content: bool


def split_rendered_chat(messages: Sequence[dict], render: Callable[[list[dict]], str]) -> list[ChatPiece] | None:
    """Split a chat prompt into the template's markup and the messages' contents.

    The template is rendered twice: as is, and with every non-empty string ``content``
    replaced by a unique placeholder (other keys, e.g. ``tool_calls``, pass through unchanged). The
    placeholders mark where each content sits; the split is kept only if writing each
    content back (as is, or stripped, as a ``| trim`` filter does) into the placeholders
    gives exactly the real rendering.

    Args:
        messages: chat messages (dicts with ``role``, ``content`` and any other keys).
        render: renders a list of messages to the prompt text (the chat template).

    Returns:
        The pieces in order, their texts concatenated equal to ``render(messages)``; or
        None when the template writes content in another form (escaped, split, only in
        part) or its markup depends on the content, so the split cannot be trusted.
    """
    nonce = secrets.token_hex(8)
    # an empty content holds no markers and stays as it is (templates test it: ``if message.content``)
    slots = {i: f"LSPC{nonce}M{i}E" for i, m in enumerate(messages) if isinstance(m.get("content"), str)
             and m["content"]}
    masked = [{**m, "content": slots[i]} if i in slots else dict(m) for i, m in enumerate(messages)]
    real = render([dict(m) for m in messages])
    if any(nonce in m["content"] for i, m in enumerate(messages) if i in slots):
        return None  # pragma: no cover - a 64-bit random nonce
    parts = re.split(f"LSPC{nonce}M(\\d+)E", render(masked))
    for form in _CONTENT_FORMS:
        pieces = [ChatPiece(parts[0], False)]
        for k in range(1, len(parts), 2):
            pieces.append(ChatPiece(form(messages[int(parts[k])]["content"]), True))
            pieces.append(ChatPiece(parts[k + 1], False))
        if "".join(p.text for p in pieces) == real:
            return [p for p in pieces if p.text]
    return None


def open_final_message(pieces: Sequence[ChatPiece], content: str) -> list[ChatPiece] | None:
    """The pieces of a chat rendered without the generation prompt, cut right after the final message's
    content, so the prompt ends inside that message and the model continues it (Hugging Face's
    ``continue_final_message``; llama-server's assistant prefill). The template's end of turn and anything after
    it are dropped.

    Args:
        pieces: from :func:`split_rendered_chat`, of a chat whose final message holds ``content``.
        content: the final message's content (non-empty).

    Returns:
        The pieces up to and including that content; None when the last content piece is not it (as is, or
        stripped, as a ``| trim`` filter writes it), so the cut cannot be trusted.
    """
    last = max((i for i, p in enumerate(pieces) if p.is_content), default=None)
    if last is None or pieces[last].text not in (content, content.strip()):
        return None
    return list(pieces[:last + 1])


def chat_fragments(pieces: Sequence[ChatPiece], specials: dict[str, tuple[int, int]]) -> list[int | str]:
    """The special tokens of the markup, and the text between them, in order.

    Mirrors llama.cpp's special-token partition (``tokenizer_st_partition``): a special
    token's text becomes its id, the text between two special tokens is one fragment for
    the text tokenizer, and a token with the LSTRIP (RSTRIP) attribute strips the
    whitespace before (after) it. Only markup is searched for special tokens; a content's
    text, whatever special-token text it holds, stays inside its fragment.

    Args:
        pieces: from :func:`split_rendered_chat`.
        specials: special-token text -> (id, llama.cpp token attributes).

    Returns:
        Token ids (int) and non-empty texts (str) to tokenize without special parsing.
    """
    pattern = re.compile("|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True) if t))
    out: list[int | str] = []
    run: list[str] = []
    rstrip_next = False

    def flush(lstrip: bool) -> None:
        text = "".join(run)
        run.clear()
        if rstrip_next:
            text = text.lstrip(_ASCII_SPACE)
        if lstrip:
            text = text.rstrip(_ASCII_SPACE)
        if text:
            out.append(text)

    for piece in pieces:
        if piece.is_content or not specials:
            run.append(piece.text)
            continue
        at = 0
        for m in pattern.finditer(piece.text):
            run.append(piece.text[at:m.start()])
            token, attrs = specials[m.group()]
            flush(bool(attrs & TOKEN_ATTR_LSTRIP))
            out.append(token)
            rstrip_next = bool(attrs & TOKEN_ATTR_RSTRIP)
            at = m.end()
        run.append(piece.text[at:])
    flush(False)
    return out


_ASCII_SPACE = " \t\n\v\f\r"  # C isspace(), as llama.cpp strips
