"""Chat messages' shapes, read the same way by the engine, the server, the chat app and ``generate --messages``:
a content given as text parts, an assistant message that only opens the answer, one whose text the answer
continues (a prefill). Pure functions of OpenAI-style message dicts (``{"role": ..., "content": ...}``).
"""

from __future__ import annotations

from typing import Sequence


def joined_text(texts: Sequence[str]) -> str:
    """A message's content given as text parts (OpenAI's ``[{"type": "text", "text": ...}]``), read as one
    string: the parts' texts joined with newlines. The one rule for the server's messages and for
    ``generate --messages``."""
    return "\n".join(texts)


def opens_the_answer(message: dict) -> bool:
    """Whether ``message`` is an assistant message with no text (none, or only whitespace) and no ``tool_calls``:
    at a chat's end it only opens the turn being answered, so the prompt leaves it out."""
    return (message.get("role") == "assistant" and not str(message.get("content") or "").strip()
            and not message.get("tool_calls"))


def continues_final_message(messages: Sequence[dict]) -> bool:
    """Whether a chat's answer continues its final message rather than starting a new turn: it is an
    assistant message holding text (a string, not only whitespace) and no ``tool_calls`` (an assistant
    prefill, as llama-server takes one by default; OpenAI's API has none)."""
    last = messages[-1] if messages else {}
    return (last.get("role") == "assistant" and isinstance(last.get("content"), str) and not last.get("tool_calls")
            and not opens_the_answer(last))
