"""OpenAI's request and response shapes: parse and check requests, build responses.

Requests are checked here, before they are queued: a bad value is a 400 with OpenAI's
error object naming the parameter. Fields that do not change the output (``user``,
``metadata``, ``store``, ...) are accepted and ignored; fields we cannot honour
(``logprobs``, a non-text ``response_format``, ``n`` > 1, ...) are refused with a 400
that names them, unless they are sent with their no-op value. ``tools``, ``tool_choice``,
``parallel_tool_calls`` and the tool messages are checked by :mod:`localspec.server.tools`.

Reference: the OpenAI API reference for ``/v1/chat/completions`` and ``/v1/completions``
(objects ``chat.completion``, ``chat.completion.chunk``, ``text_completion``, ``usage``
with ``completion_tokens_details.accepted_prediction_tokens`` /
``rejected_prediction_tokens``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from localspec.config import DraftMode, DraftParams, SamplingParams, request_field
from localspec.core.events import DrafterId, EndReason, GenerationStats, RoundStats, TokenEvent, drafter_tallies

#: ``error.type`` per HTTP status, as OpenAI names them
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
               405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
               500: "server_error", 503: "server_error"}


class ApiError(Exception):
    """An error answered with OpenAI's error object ``{"error": {message, type, param, code}}``.

    Attributes:
        status: HTTP status code.
        message: one sentence for the client.
        param: the request parameter at fault (``"messages[1].content"``), or None.
        code: a short machine-readable code, or None.
        headers: extra response headers (``Retry-After``).
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


#: the deepest nesting of arrays and objects a request body may have (OpenAI's request bodies
#: nest less than 10 levels; a tool's JSON schema may add some)
MAX_JSON_DEPTH = 64


def _surrogate_at(text: str) -> int | None:
    """Index of the first lone UTF-16 surrogate in ``text`` (valid in JSON, not in Unicode), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def check_json(body: Any) -> None:
    """Check a decoded request body before anything reads it (iterative: no recursion limit).

    Raises:
        ApiError: 400 ``invalid_json`` for arrays and objects nested more than
            :data:`MAX_JSON_DEPTH` levels; 400 ``invalid_unicode`` naming the field
            (``messages[0].content``) for a string or key holding a lone UTF-16 surrogate
            (``"\\ud800"``: valid JSON, but no Unicode text, so it cannot be tokenized).
    """
    stack: list[tuple[Any, str, int]] = [(body, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            at = _surrogate_at(value)
            if at is not None:
                raise ApiError(400, f"{path or 'the body'} holds a lone UTF-16 surrogate ({value[at]!r} at character "
                                    f"{at}), which is not valid Unicode text", path or None, "invalid_unicode")
        elif isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ApiError(400, f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
                               None, "invalid_json")
            if isinstance(value, dict):
                children = []
                for key, child in value.items():
                    where = f"{path}.{key}" if path else str(key)
                    if _surrogate_at(key) is not None:
                        raise ApiError(400, f"a key in {path or 'the body'} holds a lone UTF-16 surrogate, which is "
                                            "not valid Unicode text", path or None, "invalid_unicode")
                    children.append((child, where, depth + 1))
            else:
                children = [(child, f"{path}[{i}]", depth + 1) for i, child in enumerate(value)]
            stack.extend(reversed(children))  # document order: the first bad field is reported


def _nonempty(v: Any) -> bool:
    return v not in (None, [], {}, "")


#: parameter -> (is it set to something we cannot honour?, why)
UNSUPPORTED: dict[str, tuple[Any, str]] = {
    "n": (lambda v: v not in (None, 1), "only n = 1 is supported (one engine generates one answer at a time)"),
    "functions": (_nonempty, "the deprecated functions field is not supported (send tools)"),
    "function_call": (lambda v: v not in (None, "none", "auto"),
                      "the deprecated function_call field is not supported (send tool_choice)"),
    "logprobs": (lambda v: v not in (None, False), "logprobs are not supported"),
    "top_logprobs": (lambda v: v not in (None, 0), "logprobs are not supported"),
    "response_format": (lambda v: v not in (None, {"type": "text"}), "only the text response format is supported"),
    "logit_bias": (_nonempty, "logit_bias is not supported"),
    "presence_penalty": (lambda v: v not in (None, 0), "presence_penalty is not supported (only 0)"),
    "frequency_penalty": (lambda v: v not in (None, 0), "frequency_penalty is not supported (only 0)"),
    "audio": (_nonempty, "audio output is not supported"),
    "modalities": (lambda v: v not in (None, ["text"]), "only the text modality is supported"),
    "best_of": (lambda v: v not in (None, 1), "only best_of = 1 is supported"),
    "echo": (lambda v: v not in (None, False), "echo is not supported"),
    "suffix": (_nonempty, "suffix (insertion) is not supported"),
}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    include_usage: bool | None = None


class SamplingFields(BaseModel):
    """The scalar fields both endpoints share (JSON types checked strictly). The sampling
    fields take their range and help from the options' one declaration
    (:class:`~localspec.config.SamplingParams`); absent, they keep the server's settings."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = request_field(SamplingParams, "temperature")
    top_p: float | None = request_field(SamplingParams, "top_p")
    seed: int | None = request_field(SamplingParams, "seed")
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # extensions with llama.cpp's names
    top_k: int | None = request_field(SamplingParams, "top_k")
    min_p: float | None = request_field(SamplingParams, "min_p")

    @field_validator("max_tokens", "max_completion_tokens", "seed", "top_k", mode="before")
    @classmethod
    def _integral_number(cls, v: Any) -> Any:
        """JSON has one number type: ``4.0`` is the integer 4 (as JSON Schema says); ``4.5`` stays refused."""
        return int(v) if isinstance(v, float) and v.is_integer() else v


class TextPart(BaseModel):
    """A text content part (the only kind served)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """A system, developer (read as system) or user message."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user"]
    content: str | list[TextPart]


class FunctionCall(BaseModel):
    """A call's function: its name and its arguments as a JSON string of an object."""

    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str | None = None


class ToolCallItem(BaseModel):
    """One call in an assistant message of the history."""

    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCall


class AssistantMessage(BaseModel):
    """An assistant message of the history; its content may be null (then it holds tool calls)."""

    model_config = ConfigDict(extra="allow")
    role: Literal["assistant"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallItem] | None = None


class ToolMessage(BaseModel):
    """A tool's result, answering the call ``tool_call_id``."""

    model_config = ConfigDict(extra="allow")
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str | None = None


class FunctionDefinition(BaseModel):
    """A function the model may call (:mod:`localspec.server.tools`)."""

    model_config = ConfigDict(extra="allow")
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON Schema object")


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming one of the tools: the answer is a call to it."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    function: NamedFunction


class Prediction(BaseModel):
    """OpenAI's Predicted Outputs: text the answer will mostly repeat (drafted first)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["content"]
    content: str | list[TextPart]


StopString = Annotated[str, Field(min_length=1)]


class ChatCompletionBody(SamplingFields):
    """``POST /v1/chat/completions``: the request body as documented in ``/openapi.json``
    (:func:`parse_request` checks it and names the parameter at fault)."""

    messages: list[Annotated[ChatMessage | AssistantMessage | ToolMessage,
                             Field(discriminator="role")]] = Field(min_length=1)
    prediction: Prediction | None = None
    stop: StopString | list[StopString] | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None


class CompletionBody(SamplingFields):
    """``POST /v1/completions``: the request body as documented in ``/openapi.json``."""

    prompt: Annotated[str, Field(min_length=1)] | Annotated[list[Annotated[str, Field(min_length=1)]],
                                                            Field(min_length=1, max_length=1)]
    prediction: Prediction | None = None
    stop: StopString | list[StopString] | None = None


class SpeculationFields(BaseModel):
    """The request's ``speculation`` extension: how this request is drafted (llama.cpp's server
    has no per-request control). Unknown keys are refused; absent ones keep the server's settings
    (``localspec serve --mode/--draft-max``).

    Attributes:
        mode: ``auto`` | ``draft`` | ``lookup`` | ``none`` (``draft`` needs a draft model loaded).
        draft_max: most tokens drafted per round, 1..:data:`~localspec.config.DRAFT_MAX_LIMIT`
            (a cap; mode auto chooses each round's length up to it); declared by
            :class:`~localspec.config.DraftParams`.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    mode: DraftMode | None = None
    draft_max: int | None = request_field(DraftParams, "draft_max")


@dataclass
class GenerationRequest:
    """A checked request, ready for the engine worker.

    Attributes:
        kind: ``"chat"`` or ``"completion"``.
        messages: chat messages (``{"role", "content"}``, content a string) or None.
        prompt: the raw prompt text of a completion, or None.
        prediction: the predicted output's text, or None.
        max_tokens: most tokens to generate; None = the server's default (the room left
            in the context window unless ``--max-tokens`` was given).
        sampling: overrides of the server's :class:`~localspec.config.SamplingParams`.
        stop: stop strings.
        stream: answer as server-sent events.
        include_usage: ``stream_options.include_usage``.
        tools: the checked tool fields (:class:`localspec.server.tools.ToolRequest`), or None.
        speculation: overrides of the server's :class:`~localspec.config.DraftParams`
            (``mode``, ``draft_max``) from the request's ``speculation`` object.
    """

    kind: Literal["chat", "completion"]
    messages: list[dict] | None = None
    prompt: str | None = None
    prediction: str | None = None
    max_tokens: int | None = None
    sampling: dict = field(default_factory=dict)
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    tools: Any = None
    speculation: dict = field(default_factory=dict)

    @property
    def prompt_param(self) -> str:
        return "messages" if self.kind == "chat" else "prompt"


def _param(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _text(value: Any, param: str, allow_none: bool = False) -> str:
    """A message content: a string, or a list of text parts (joined with newlines)."""
    if value is None and allow_none:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict):
                raise ApiError(400, "a content part must be an object", f"{param}[{j}]")
            if part.get("type") != "text":
                raise ApiError(400, f"content parts of type {part.get('type')!r} are not supported (text only)",
                               f"{param}[{j}].type")
            if not isinstance(part.get("text"), str):
                raise ApiError(400, "a text part needs a string 'text'", f"{param}[{j}].text")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ApiError(400, "content must be a string or a list of text parts", param)


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages must be a non-empty array", "messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ApiError(400, "a message must be an object", f"messages[{i}]")
        role = m.get("role")
        role = "system" if role == "developer" else role
        if role not in ("system", "user", "assistant", "tool"):
            raise ApiError(400, f"messages with role {m.get('role')!r} are not supported "
                                "(system, developer, user, assistant, tool)", f"messages[{i}].role")
        if _nonempty(m.get("function_call")):
            raise ApiError(400, "the deprecated function_call is not supported (send tool_calls)",
                           f"messages[{i}].function_call")
        msg = {"role": role, "content": _text(m.get("content"), f"messages[{i}].content",
                                              allow_none=role == "assistant")}
        if role == "assistant" and _nonempty(m.get("tool_calls")):
            from localspec.server.tools import history_tool_calls  # tools imports this module

            msg["tool_calls"] = history_tool_calls(m["tool_calls"], f"messages[{i}].tool_calls")
        if role == "tool":
            msg["tool_call_id"] = str(m.get("tool_call_id") or "")
            if isinstance(m.get("name"), str):
                msg["name"] = m["name"]
        out.append(msg)
    return out


def _prediction(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("type") != "content":
        raise ApiError(400, 'prediction must be {"type": "content", "content": ...}', "prediction.type")
    return _text(raw.get("content"), "prediction.content") or None


def _speculation(raw: Any) -> dict:
    """The ``speculation`` extension's overrides (:class:`SpeculationFields`); ApiError 400 naming the key."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ApiError(400, 'speculation must be an object such as {"mode": "auto", "draft_max": 64}',
                       "speculation")
    try:
        f = SpeculationFields.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        param = _param(("speculation", *err.get("loc", ())))
        raise ApiError(400, f"{param}: {err.get('msg', 'invalid value')} (got {err.get('input')!r})", param) from None
    return f.model_dump(exclude_none=True)


def parse_request(body: Any, kind: Literal["chat", "completion"]) -> GenerationRequest:
    """Check a decoded JSON body and turn it into a :class:`GenerationRequest`.

    Raises:
        ApiError: 400 naming the first parameter at fault.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for name, (refused, why) in UNSUPPORTED.items():
        if name in body and refused(body[name]):
            raise ApiError(400, f"{name}: {why} by localspec serve", name, "unsupported_parameter")
    try:
        f = SamplingFields.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        param = _param(err.get("loc", ()))
        raise ApiError(400, f"{param}: {err.get('msg', 'invalid value')} (got {err.get('input')!r})", param) from None
    stop = (f.stop,) if isinstance(f.stop, str) else tuple(f.stop or ())
    if any(s == "" for s in stop):
        raise ApiError(400, "stop strings must not be empty", "stop")
    req = GenerationRequest(kind=kind, stop=stop, stream=bool(f.stream),
                            include_usage=bool(f.stream_options and f.stream_options.include_usage),
                            max_tokens=f.max_completion_tokens or f.max_tokens,
                            sampling={k: v for k in ("temperature", "top_p", "seed", "top_k", "min_p")
                                      if (v := getattr(f, k)) is not None},
                            speculation=_speculation(body.get("speculation")))
    if kind == "chat":
        req.messages = _messages(body.get("messages"))
        req.prediction = _prediction(body.get("prediction"))
        from localspec.server.tools import parse_tool_request  # tools imports this module

        req.tools = parse_tool_request(body, req.messages)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt must be a string (or a list of one string)", "prompt")
        if not prompt:
            raise ApiError(400, "the prompt is empty", "prompt")
        req.prompt = prompt
        req.prediction = _prediction(body.get("prediction"))
        if req.max_tokens is None:
            req.max_tokens = 16  # OpenAI's default for /v1/completions
    return req


# -- responses ----------------------------------------------------------------------------
FINISH_REASONS = {EndReason.EOG: "stop", EndReason.STOP: "stop", EndReason.MAX_TOKENS: "length",
                  EndReason.CONTEXT: "length", EndReason.CANCELLED: "stop"}


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


def speculation(mode: str, stats: GenerationStats, rounds: list[RoundStats], draft_max: int | None = None) -> dict:
    """The extra ``speculation`` object (definitions as in ``localspec bench``): ``mode`` and
    ``draft_max`` are what this request was drafted with (the server's settings with the
    request's ``speculation`` overrides; ``draft_max`` the effective cap)."""
    return {
        "mode": mode,
        "draft_max": draft_max,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "rounds": stats.rounds,
        "target_passes": stats.target_passes,
        "acceptance_rate": stats.acceptance_rate,
        "mean_accepted_length": stats.mean_accepted_length,
        "tokens_per_target_pass": stats.tokens_per_target_pass,
        "tokens_per_second": stats.tokens_per_second,
        "time_to_first_token": stats.time_to_first_token,
        "prefill_seconds": stats.prefill_seconds,
        "elapsed_seconds": stats.elapsed_seconds,
        "end_reason": stats.end_reason.value if stats.end_reason else None,
        "drafters": drafter_counts(rounds),
    }


@dataclass
class ResponseShape:
    """Builds one request's response objects (ids, names and timestamps shared by its chunks)."""

    kind: Literal["chat", "completion"]
    model: str
    id: str = ""
    created: int = 0

    def __post_init__(self) -> None:
        self.id = self.id or ("chatcmpl-" if self.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = self.created or int(time.time())

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    def complete(self, text: str, finish_reason: str, extra: dict) -> dict:
        """The non-streamed response: ``chat.completion`` or ``text_completion``."""
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                      "logprobs": None, "finish_reason": finish_reason}
            return {**self._head("chat.completion"), "choices": [choice], **extra}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head("text_completion"), "choices": [choice], **extra}

    def chunk(self, text: str | None, finish_reason: str | None = None, tokens: list[TokenEvent] | None = None,
              first: bool = False, include_usage: bool = False, extra: dict | None = None) -> dict:
        """One streamed chunk. ``tokens`` adds each token's id, text and kind (``choices[0].tokens``)."""
        if self.kind == "chat":
            delta: dict = {"role": "assistant", "content": text or ""} if first else (
                {"content": text} if text is not None else {})
            choice: dict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            head = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
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
