"""OpenAI's answers: ``chat.completion``, ``chat.completion.chunk``, ``text_completion`` and their
``usage``, the ``speculation`` object, and the output tokens' logprobs in each endpoint's shape.

Reference: the OpenAI API reference for ``/v1/chat/completions`` and ``/v1/completions``
(objects ``chat.completion``, ``chat.completion.chunk``, ``text_completion``, ``usage``
with ``completion_tokens_details.accepted_prediction_tokens`` /
``rejected_prediction_tokens``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

from localspec.config import object_id
from localspec.core.events import DrafterId, EndReason, GenerationStats, RoundStats, TokenEvent, drafter_tallies

FINISH_REASONS = {EndReason.EOG: "stop", EndReason.STOP: "stop", EndReason.MAX_TOKENS: "length",
                  EndReason.CONTEXT: "length", EndReason.CANCELLED: "stop", EndReason.INDENT: "stop",
                  EndReason.TIME_LIMIT: "length"}


def drafter_counts(rounds: list[RoundStats]) -> dict[str, dict[str, int]]:
    """Per drafter: rounds that drafted, tokens drafted, draft tokens accepted
    (:func:`~localspec.core.events.drafter_tallies` without the rounds that drafted nothing)."""
    return {k: v for k, v in drafter_tallies(rounds).items() if k != DrafterId.NONE}


def usage(stats: GenerationStats, rounds: list[RoundStats]) -> dict:
    """OpenAI's ``usage``.

    ``accepted_prediction_tokens``: prediction-drafted tokens the target accepted;
    ``rejected_prediction_tokens``: prediction-drafted tokens that went through a
    verification pass and were not accepted (the rest of a round's draft after its first
    rejection included). Prediction tokens never drafted (the edited parts) count in
    neither.
    """
    pred = drafter_counts(rounds).get(DrafterId.PREDICTION, {"drafted": 0, "accepted": 0})
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.tokens,
        "total_tokens": stats.prompt_tokens + stats.tokens,
        "prompt_tokens_details": {"cached_tokens": stats.cached_prompt_tokens},
        "completion_tokens_details": {"accepted_prediction_tokens": pred["accepted"],
                                      "rejected_prediction_tokens": pred["drafted"] - pred["accepted"],
                                      "reasoning_tokens": 0},
    }


def memory_counts(rounds: list[RoundStats], enabled: bool) -> dict:
    """The ``speculation.memory`` object: whether this request drafted from the draft memory
    (``enabled``: the server keeps one and the request did not opt out), and the prompt-lookup
    rounds whose draft was copied from it: rounds, tokens drafted, draft tokens accepted (these
    are also counted in ``drafters.lookup``)."""
    used = [r for r in rounds if r.from_memory]
    return {"enabled": enabled, "rounds": len(used), "drafted": sum(r.drafted for r in used),
            "accepted": sum(r.accepted for r in used)}


def speculation(mode: str, stats: GenerationStats, rounds: list[RoundStats], draft_max: int | None = None,
                memory: bool = False) -> dict:
    """The extra ``speculation`` object (definitions as in ``localspec bench``; its figures are the
    statistics record's ``speculation`` view, :class:`~localspec.core.events.GenerationStats`): ``mode`` and
    ``draft_max`` are what this request was drafted with (the server's settings with the
    request's ``speculation`` overrides; ``draft_max`` the effective cap); ``memory``: the draft
    memory's part (:func:`memory_counts`; ``memory``: whether the request used it)."""
    return {"mode": mode, "draft_max": draft_max, **stats.view("speculation"), "drafters": drafter_counts(rounds),
            "memory": memory_counts(rounds, memory)}


#: the logprob reported for a token the target gives no chance (-inf is not JSON; OpenAI's value)
LOGPROB_FLOOR = -9999.0


@dataclass(frozen=True)
class TokenLogprob:
    """One output token's logprob entry, before it takes an endpoint's shape (:meth:`ResponseShape.logprobs`).

    Attributes:
        token: the token's text (invalid UTF-8 replaced; a control token as its text).
        bytes: its UTF-8 bytes, 0..255 each.
        logprob: natural log of its probability under the target's raw distribution (float, >= LOGPROB_FLOOR).
        top: the most probable tokens there, ``(token, bytes, logprob)`` by descending logprob.
        released: characters of output text this token released (its stream text), for ``text_offset``.
        id: the token's id in the target's vocabulary (-1: not known).
        top_ids: the ids of ``top``, in its order.
    """

    token: str
    bytes: list[int]
    logprob: float
    top: list[tuple[str, list[int], float]]
    released: int
    id: int = -1
    top_ids: tuple[int, ...] = ()


def token_logprobs(tokens: Sequence[TokenEvent], token_bytes: Callable[[int], bytes]) -> list[TokenLogprob]:
    """The entries of tokens generated with logprobs (``TokenEvent.logprob`` set); ``token_bytes(id)``
    gives a token's bytes (the engine's :meth:`~localspec.core.engine.SpeculativeEngine.token_bytes`,
    called in the thread that owns the engine)."""
    def piece(tid: int, lp: float) -> tuple[str, list[int], float]:
        b = token_bytes(tid)
        return b.decode("utf-8", errors="replace"), list(b), max(float(lp), LOGPROB_FLOOR)

    out = []
    for t in tokens:
        text, raw, lp = piece(t.token_id, t.logprob if t.logprob is not None else LOGPROB_FLOOR)
        top = t.top_logprobs or ()
        out.append(TokenLogprob(text, raw, lp, [piece(i, v) for i, v in top], len(t.text), t.token_id,
                                tuple(i for i, _ in top)))
    return out


def completion_token_key(raw: Sequence[int]) -> str:
    """A token as completions' ``tokens`` and ``top_logprobs`` keys write it: its text when its bytes
    are valid UTF-8 on their own; else ``"bytes:"`` and each byte as ``\\xNN`` (two lower-case hex
    digits): ``"bytes:\\xf0\\x9f"`` for the first half of an emoji.

    OpenAI's own convention for the legacy completions (its tokens that are partial UTF-8 read
    ``bytes:\\xNN``): a client sees the true bytes (joining a token's bytes with the next ones' gives
    the character), and the keys of one position stay distinct where the text of partial tokens is
    the same replacement character "\ufffd" (which made them collide and the last one win).
    Chat's ``logprobs`` carry the bytes in their own ``bytes`` field instead (OpenAI's shape)."""
    b = bytes(raw)
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{x:02x}" for x in b)


def completion_top(e: TokenLogprob) -> dict[str, float]:
    """A completion token's ``top_logprobs`` object ``{key: logprob}``, most probable first: the k
    alternatives asked for (``logprobs: k``), plus the chosen token when it is not among them (OpenAI:
    "the API will always return the logprob of the sampled token, so there may be up to logprobs+1
    elements"; k = 0 gives ``{}``). Keys are :func:`completion_token_key`; two different tokens with the
    same bytes (a byte-fallback token and its character) cannot share a key: the chosen token keeps
    its key (the one in ``tokens``), another gets vLLM's ``"token_id:N"``. The chosen token's value is
    its ``token_logprobs`` entry."""
    entries = list(zip(e.top_ids, e.top))
    if not entries:
        return {}
    if e.id not in e.top_ids:
        entries.append((e.id, (e.token, e.bytes, e.logprob)))
    out: dict[str, float] = {}
    # the chosen token first, so that it keeps the key written in ``tokens``
    for tid, (_, raw, v) in sorted(entries, key=lambda x: x[0] != e.id):
        key = completion_token_key(raw)
        out[f"token_id:{tid}" if key in out else key] = v
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


@dataclass
class ResponseShape:
    """Builds one request's response objects (ids, names and timestamps shared by its chunks)."""

    kind: Literal["chat", "completion"]
    model: str
    id: str = ""
    created: int = 0
    #: characters of completion text before the next token (``text_offset`` of a completion's logprobs)
    text_offset: int = 0

    def __post_init__(self) -> None:
        self.id = self.id or object_id("chatcmpl-" if self.kind == "chat" else "cmpl-")
        self.created = self.created or int(time.time())

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    def logprobs(self, entries: Sequence[TokenLogprob] | None) -> dict | None:
        """A choice's ``logprobs`` object (None: not asked for). Chat: ``{"content": [{token, logprob,
        bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": None}``; completions: ``{tokens,
        token_logprobs, top_logprobs: [{token: logprob}], text_offset}`` (tokens and keys written by
        :func:`completion_token_key`, alternatives by :func:`completion_top`; offsets in characters of the
        completion's text, continuing across a stream's chunks)."""
        if entries is None:
            return None
        if self.kind == "chat":
            return {"content": [{"token": e.token, "logprob": e.logprob, "bytes": e.bytes,
                                 "top_logprobs": [{"token": t, "logprob": v, "bytes": b} for t, b, v in e.top]}
                                for e in entries], "refusal": None}
        offsets = []
        for e in entries:
            offsets.append(self.text_offset)
            self.text_offset += e.released
        return {"tokens": [completion_token_key(e.bytes) for e in entries],
                "token_logprobs": [e.logprob for e in entries], "top_logprobs": [completion_top(e) for e in entries],
                "text_offset": offsets}

    def complete(self, text: str, finish_reason: str, extra: dict,
                 logprobs: Sequence[TokenLogprob] | None = None) -> dict:
        """The non-streamed response: ``chat.completion`` or ``text_completion`` (``logprobs``: the
        entries of every output token, when asked for)."""
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                      "logprobs": self.logprobs(logprobs), "finish_reason": finish_reason}
            return {**self._head("chat.completion"), "choices": [choice], **extra}
        choice = {"index": 0, "text": text, "logprobs": self.logprobs(logprobs), "finish_reason": finish_reason}
        return {**self._head("text_completion"), "choices": [choice], **extra}

    def chunk(self, text: str | None, finish_reason: str | None = None, tokens: list[TokenEvent] | None = None,
              first: bool = False, include_usage: bool = False, extra: dict | None = None,
              logprobs: Sequence[TokenLogprob] | None = None) -> dict:
        """One streamed chunk. ``tokens`` adds each token's id, text and kind (``choices[0].tokens``);
        ``logprobs``: the entries of this chunk's tokens, when asked for."""
        lp = self.logprobs(logprobs)
        if self.kind == "chat":
            delta: dict = {"role": "assistant", "content": text or ""} if first else (
                {"content": text} if text is not None else {})
            choice: dict = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish_reason}
            head = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish_reason}
            head = self._head("text_completion")
        if tokens:
            choice["tokens"] = [{"id": t.token_id, "text": t.text, "kind": t.kind.value} for t in tokens]
        out = {**head, "choices": [choice]}
        if include_usage:
            out["usage"] = None
        return {**out, **(extra or {})}

    def usage_chunk(self, usage_obj: dict, extra: dict) -> dict:
        """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage_obj, **extra}

