"""OpenAI's request and response shapes: the request bodies as pydantic models, the error object,
the responses.

The request bodies (:class:`ChatCompletionBody`, :class:`CompletionBody`) are declared once: the
routes take them, so FastAPI validates a request with them before it is queued and publishes
them in ``/openapi.json``. A bad value is a 400 with OpenAI's error object naming the parameter
(:func:`api_error`, from :func:`localspec.config.invalid_values`, the translator the CLI and
the TUI use); a field's own message is declared beside it (:func:`localspec.config.user_error`).
Fields that do not change the output (``user``, ``metadata``, ``store``, ...) are accepted and
ignored; fields we cannot honour (``n`` > 1, ``logit_bias``, ...)
are refused with a 400 that names them, unless they are sent with their no-op value
(:data:`localspec.server.refused.REFUSED_FIELDS`). The tool fields are turned into a
:class:`localspec.server.tools.ToolRequest`.

Reference: the OpenAI API reference for ``/v1/chat/completions`` and ``/v1/completions``
(objects ``chat.completion``, ``chat.completion.chunk``, ``text_completion``, ``usage``
with ``completion_tokens_details.accepted_prediction_tokens`` /
``rejected_prediction_tokens``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, ClassVar, Literal, Sequence

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo,
                      WithJsonSchema, WrapValidator, field_validator, model_validator)

from pydantic_core import PydanticCustomError

from localspec.app.fim import FimInput
from localspec.config import (AUTO_DRAFT_MAX, DraftMode, DraftParams, SamplingParams, check_stop, invalid_values,
                              request_field, user_error)
from localspec.core.events import DrafterId, EndReason, GenerationStats, RoundStats, TokenEvent, drafter_tallies
from localspec.server.refused import CHAT, COMPLETIONS, refused_field

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


class ErrorObject(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """OpenAI's error object, the body of every 4xx and 5xx answer (:meth:`ApiError.body`)."""

    error: ErrorObject


#: the error answers as ``/openapi.json`` documents them (instead of FastAPI's 422)
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {"4XX": {"model": ErrorBody, "description": "OpenAI's error object"}}


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




#: ``response_format``'s shape in /openapi.json (documentation and the fuzz's generator; the values are
#: checked by localspec.server.structured, which names the part at fault)
JSON_SCHEMA_FORMAT = {"type": "object", "properties": {"name": {"type": "string"}, "schema": {"type": "object"},
                                                       "strict": {"type": "boolean"}}, "required": ["name"]}
RESPONSE_FORMAT_SCHEMA = {"anyOf": [
    {"type": "object", "properties": {"type": {"enum": ["text", "json_object"]}}, "required": ["type"]},
    {"type": "object", "properties": {"type": {"const": "json_schema"}, "json_schema": JSON_SCHEMA_FORMAT},
     "required": ["type", "json_schema"]},
    {"type": "null"}]}


#: the most alternatives per token: chat's ``top_logprobs`` and completions' ``logprobs`` (OpenAI's limits)
TOP_LOGPROBS_MAX = 20
COMPLETION_LOGPROBS_MAX = 5


#: OpenAI's rule for function names (plus ``.``): also keeps names free of template markup
FUNCTION_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"
TOOL_SHAPE = 'a tool must be {"type": "function", "function": {"name": ..., "parameters": ...}}'
PREDICTION_SHAPE = 'prediction must be {"type": "content", "content": ...}'
TOOL_CHOICE_SHAPE = 'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}'


def _nonempty_array(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise user_error("messages must be a non-empty array")
    return value


def _tools_array(value: Any) -> Any:
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise user_error("tools must be an array of function tools")
    return value


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
        logprobs: None (no logprobs), or how many alternatives each token's logprob comes with
            (chat: ``top_logprobs`` when ``logprobs`` is true; completions: ``logprobs``).
        memory: whether the request drafts from the server's draft memory and is added to it
            (``speculation.memory``, default true).
        cache_prompt: whether the request reuses a cached prompt prefix and leaves its own in the KV
            cache (llama-server's ``cache_prompt``, default true).
        cache_salt: vLLM's ``cache_salt`` (a non-empty string), or None: the request reuses only what
            requests of its API key with the same salt left (:mod:`localspec.server.scopes`).
        scope: whose caches and draft memory the request reads and feeds (set by the server from the API
            key and ``cache_salt``: :func:`localspec.server.scopes.scope_id`; ``""``: one user).
        grammar: the GBNF (start rule ``root``) of ``response_format`` json_object / json_schema
            (:func:`localspec.server.structured.response_grammar`), or None.
        min_indent: ``/infill``'s ``n_indent`` (:attr:`localspec.config.GenerationParams.min_indent`).
        newline_time_limit: ``/infill``'s ``t_max_predict_ms`` in seconds, or None
            (:attr:`localspec.config.GenerationParams.newline_time_limit`).
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
    logprobs: int | None = None
    memory: bool = True
    cache_prompt: bool = True
    cache_salt: str | None = None
    scope: str = ""
    fim: Any = None  #: a fill-in-the-middle request's :class:`localspec.app.fim.FimInput` (prompt unused), or None
    grammar: str | None = None
    min_indent: int = 0
    newline_time_limit: float | None = None

    @property
    def prompt_param(self) -> str:
        return "messages" if self.kind == "chat" else "prompt"


def _said(message: str | Callable[[Any], str]) -> WrapValidator:
    """A field's one error message: whatever fails in the field's own validation is reported as
    ``message`` (or ``message(value)``) at the field."""

    def wrap(value: Any, handler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise user_error(message(value) if callable(message) else message) from None

    return WrapValidator(wrap)


def _object(message: str, absent_as_null: tuple[str, ...] = (), at: str | None = None):
    """A model's before-validator: a value that is not a JSON object is refused with ``message``;
    the keys ``absent_as_null`` are read as null when absent (so their fields' own messages apply)."""

    def check(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise user_error(message, at=at)
        return {**dict.fromkeys(absent_as_null), **value}

    return model_validator(mode="before")(classmethod(check))


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    include_usage: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, value: Any) -> Any:
        """Refused as pydantic refuses it (FastAPI validates from attributes too, which words it otherwise)."""
        if not isinstance(value, dict):
            raise PydanticCustomError("model_type", "Input should be a valid dictionary or instance of StreamOptions")
        return value


class TextPart(BaseModel):
    """A text content part (the only kind served)."""

    model_config = ConfigDict(extra="allow")
    _an_object = _object("a content part must be an object", ("type", "text"))
    type: Annotated[Literal["text"],
                    _said(lambda t: f"content parts of type {t!r} are not supported (text only)")]
    text: Annotated[str, Field(strict=True), _said("a text part needs a string 'text'")]


def _as_parts(value: Any) -> Any:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list):
        raise user_error("content must be a string or a list of text parts")
    return value


#: a message's content: a string, or a list of text parts (read as their texts joined with newlines)
Content = Annotated[list[TextPart], BeforeValidator(_as_parts),
                    WithJsonSchema({"anyOf": [{"type": "string"},
                                              {"type": "array", "items": TextPart.model_json_schema()}]})]


def joined(parts: list[TextPart] | None) -> str:
    """The text of a :data:`Content` (texts joined with newlines; None: ``""``)."""
    return "\n".join(p.text for p in parts or ())


class FunctionCall(BaseModel):
    """A call's function: its name and its arguments, a JSON string of an object (read as the
    object: chat templates write it with ``tojson``; another string is kept as it is)."""

    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str | dict[str, Any] | None = None

    @field_validator("arguments", mode="before")
    @classmethod
    def _decoded(cls, args: Any) -> Any:
        if isinstance(args, str):
            try:
                decoded = json.loads(args) if args.strip() else {}
            except ValueError:
                decoded = None
            return decoded if isinstance(decoded, dict) else args
        if args is None or isinstance(args, dict):
            return args or {}
        raise user_error("function.arguments must be a JSON string")


class ToolCallItem(BaseModel):
    """One call in an assistant message of the history."""

    model_config = ConfigDict(extra="allow")
    id: Annotated[str, BeforeValidator(lambda v: str(v or ""))] = ""
    type: Annotated[Literal["function"], BeforeValidator(lambda v: "function")] = "function"
    function: FunctionCall

    @model_validator(mode="before")
    @classmethod
    def _a_call(cls, call: Any) -> Any:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise user_error('a tool call must be {"id", "type": "function", "function": {"name", "arguments"}}')
        return call


ROLES = ("system", "developer", "user", "assistant", "tool")


def _content_required(schema: dict) -> None:
    """/openapi.json's message: content required, a string or text parts (the validator also takes
    null in an assistant message holding tool_calls; the schema says the common case, so that
    the fuzz's valid messages are valid)."""
    schema["required"] = sorted({*schema.get("required", ()), "content"})
    schema["properties"]["content"] = {
        "anyOf": [{"type": "string"}, {"type": "array", "items": TextPart.model_json_schema()}],
        "description": "null only in an assistant message with tool_calls"}


class ChatMessage(BaseModel):
    """A message: system, developer (read as system), user, assistant (content may be null, then
    it holds ``tool_calls``) or tool (a tool's result, answering ``tool_call_id``)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=lambda schema: _content_required(schema))
    _an_object = _object("a message must be an object", ("role",))
    role: Annotated[Literal["system", "developer", "user", "assistant", "tool"],
                    _said(lambda r: f"messages with role {r!r} are not supported ({', '.join(ROLES)})")]
    function_call: Annotated[Any, WithJsonSchema({"type": "null"})] = Field(
        None, description="deprecated: refused (send tool_calls)")
    content: Content | None = Field(None, validate_default=True)
    tool_calls: list[ToolCallItem] | None = Field(None, description="an assistant message's calls")
    tool_call_id: Annotated[str, BeforeValidator(lambda v: str(v or ""))] | None = None
    name: Annotated[str | None, BeforeValidator(lambda v: v if isinstance(v, str) else None)] = None

    @field_validator("function_call")
    @classmethod
    def _no_function_call(cls, value: Any) -> Any:
        if _nonempty(value):
            raise user_error("the deprecated function_call is not supported (send tool_calls)")
        return value

    @field_validator("content")
    @classmethod
    def _content_unless_assistant(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.data.get("role", "assistant") != "assistant":
            raise user_error("content must be a string or a list of text parts")
        return value

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _calls_of_assistant(cls, value: Any, info: ValidationInfo) -> Any:
        """Only an assistant's calls are read (another role's are ignored, as an empty list is)."""
        if info.data.get("role") != "assistant" or not _nonempty(value):
            return None
        if not isinstance(value, list):
            raise user_error("tool_calls must be an array")
        return value

    def template_message(self) -> dict:
        """The message as the chat template takes it: ``{"role", "content"}`` (content a string), with
        ``tool_calls`` (arguments as objects) or ``tool_call_id`` and ``name``."""
        msg: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role,
                               "content": joined(self.content)}
        if self.tool_calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                 for c in self.tool_calls]
        if self.role == "tool":
            msg["tool_call_id"] = self.tool_call_id or ""
            if self.name is not None:
                msg["name"] = self.name
        return msg


class FunctionDefinition(BaseModel):
    """A function the model may call (:mod:`localspec.server.tools`)."""

    model_config = ConfigDict(extra="allow")
    _an_object = _object(TOOL_SHAPE, ("name",))
    name: Annotated[str, Field(pattern=FUNCTION_NAME),
                    _said(lambda n: f"function.name must be 1-64 letters, digits, '_', '-' or '.' (got {n!r})")]
    description: Annotated[str | None, _said("function.description must be a string")] = None
    parameters: Annotated[dict[str, Any] | None, _said("function.parameters must be a JSON Schema object")] = Field(
        None, description="a JSON Schema object")


class FunctionTool(BaseModel):
    """A tool: a function the model may call."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    function: FunctionDefinition

    @model_validator(mode="before")
    @classmethod
    def _a_function_tool(cls, tool: Any) -> Any:
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise user_error(TOOL_SHAPE)
        return tool

    def template_tool(self) -> dict:
        """The tool as the chat template takes it (description and parameters when given)."""
        fn = {"name": self.function.name}
        fn |= {k: v for k in ("description", "parameters") if (v := getattr(self.function, k)) is not None}
        return {"type": "function", "function": fn}


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    #: a function's name (any value is read: one not among the tools is refused, naming it)
    name: Annotated[Any, WithJsonSchema({"type": "string"})] = None


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming one of the tools: the answer is a call to it."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    function: NamedFunction


class Prediction(BaseModel):
    """OpenAI's Predicted Outputs: text the answer will mostly repeat (drafted first)."""

    model_config = ConfigDict(extra="allow")
    _an_object = _object(PREDICTION_SHAPE, ("type", "content"), at="type")
    type: Annotated[Literal["content"], _said(PREDICTION_SHAPE)]
    content: Content


def integral_number(v: Any) -> Any:
    """JSON has one number type: ``4.0`` is the integer 4 (as JSON Schema says, so /openapi.json's
    ``integer`` admits it); ``4.5`` stays refused by the field's own type."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


class SpeculationFields(BaseModel):
    """The request's ``speculation`` extension: how this request is drafted (llama.cpp's server
    has no per-request control). Unknown keys are refused; absent ones keep the server's settings
    (``localspec serve --mode/--draft-max``).

    Attributes:
        mode: ``auto`` | ``draft`` | ``lookup`` | ``none`` (``draft`` needs a draft model loaded).
        draft_max: most tokens drafted per round, 1..:data:`~localspec.config.DRAFT_MAX_LIMIT`
            (a cap; mode auto chooses each round's length up to it); declared by
            :class:`~localspec.config.DraftParams`.
        memory: ``false``: this request neither drafts from the server's draft memory (earlier
            requests' prompts and answers, ``--draft-memory-tokens``) nor adds to it (benchmarks);
            absent or ``true``: it does both. A JSON boolean.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    _an_object = _object('speculation must be an object such as {"mode": "auto", "draft_max": %d}' % AUTO_DRAFT_MAX)

    mode: DraftMode | None = None
    draft_max: int | None = request_field(DraftParams, "draft_max")
    memory: Annotated[bool | None, _said("speculation.memory must be true or false")] = Field(
        None, description="false: neither draft from the server's memory of earlier requests nor add this one "
                          "to it (the output is the same either way; only the speed changes)")

    @field_validator("draft_max", mode="before")
    @classmethod
    def _integral_number(cls, v: Any) -> Any:
        return integral_number(v)


#: vLLM's ``cache_salt``: a non-empty string (every endpoint takes it: :mod:`localspec.server.scopes`)
CacheSalt = Annotated[str | None, Field(strict=True, min_length=1),
                      _said("cache_salt must be a non-empty string (requests reuse cached prompts and draft "
                            "from memory only with the same salt)")]
CACHE_SALT_FIELD = Field(None, description="vLLM's field: a request reuses cached prompt prefixes, and drafts from "
                                           "the memory of earlier requests, only where they came with the same "
                                           "API key and the same salt (absent: the key's own)")


class SamplingFields(BaseModel):
    """What both endpoints share: the body is a JSON object; parameters we cannot honour are refused
    (:data:`localspec.server.refused.REFUSED_FIELDS`); the scalar fields' JSON types are checked
    strictly. The sampling fields
    take their range and help from the options' one declaration
    (:class:`~localspec.config.SamplingParams`); absent, they keep the server's settings."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = request_field(SamplingParams, "temperature")
    top_p: float | None = request_field(SamplingParams, "top_p")
    seed: int | None = request_field(SamplingParams, "seed")
    stop: str | list[str] | None = Field(None, description="stop strings, not empty")
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # extensions with llama.cpp's names
    top_k: int | None = request_field(SamplingParams, "top_k")
    min_p: float | None = request_field(SamplingParams, "min_p")
    speculation: SpeculationFields | None = None
    cache_prompt: Annotated[bool | None, Field(strict=True), _said("cache_prompt must be true or false")] = Field(
        None, description="llama-server's field: false = this request neither reuses a cached prompt prefix "
                          "nor leaves its own in the cache (absent: true)")
    response_format: Annotated[Any, WithJsonSchema(RESPONSE_FORMAT_SCHEMA)] = Field(
        None, description='{"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", '
                          '"strict"}}: the answer follows the schema (localspec.server.structured)')
    cache_salt: CacheSalt = CACHE_SALT_FIELD

    @model_validator(mode="before")
    @classmethod
    def _supported(cls, body: Any) -> Any:
        if not isinstance(body, dict):
            raise user_error("the request body must be a JSON object")
        refused = refused_field(cls.endpoint, body)
        if refused:
            raise user_error(refused[1], "unsupported_parameter", at=refused[0])
        return {**dict.fromkeys(cls.absent_as_null), **body}

    #: the fields read as null when absent (so that their own message says what is missing)
    absent_as_null: ClassVar[tuple[str, ...]] = ()
    #: the route, for the table of refused fields (localspec.server.refused)
    endpoint: ClassVar[str] = CHAT

    @field_validator("max_tokens", "max_completion_tokens", "seed", "top_k", "top_logprobs", mode="before",
                     check_fields=False)
    @classmethod
    def _integral_number(cls, v: Any) -> Any:
        return integral_number(v)

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stop: Any) -> Any:
        try:
            check_stop([stop] if isinstance(stop, str) else stop if isinstance(stop, list) else [])
        except ValueError as e:
            raise user_error(str(e)) from None
        return stop

    def request(self, kind: Literal["chat", "completion"]) -> "GenerationRequest":
        """The fields both endpoints share, as a :class:`GenerationRequest` of ``kind``.

        Raises:
            ApiError: 400 for a ``response_format`` the grammar cannot express (naming the part).
        """
        from localspec.server.structured import response_grammar  # structured imports this module

        return GenerationRequest(
            kind=kind, stop=(self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ()),
            stream=bool(self.stream), include_usage=bool(self.stream_options and self.stream_options.include_usage),
            max_tokens=self.max_completion_tokens or self.max_tokens,
            sampling={k: v for k in ("temperature", "top_p", "seed", "top_k", "min_p")
                      if (v := getattr(self, k)) is not None},
            speculation=self.speculation.model_dump(exclude_none=True, exclude={"memory"}) if self.speculation else {},
            memory=self.speculation is None or self.speculation.memory is not False,
            cache_prompt=self.cache_prompt is not False, cache_salt=self.cache_salt,
            grammar=response_grammar(self.response_format))


class ChatCompletionBody(SamplingFields):
    """``POST /v1/chat/completions``: the request body, validated and documented in ``/openapi.json``
    (an error names the parameter at fault: :func:`api_error`)."""

    absent_as_null: ClassVar[tuple[str, ...]] = ("messages",)
    messages: Annotated[list[ChatMessage], BeforeValidator(_nonempty_array)] = Field(min_length=1)
    prediction: Prediction | None = None
    tools: Annotated[list[FunctionTool] | None, BeforeValidator(_tools_array)] = None
    parallel_tool_calls: Annotated[bool | None, Field(strict=True),
                                   _said("parallel_tool_calls must be true or false")] = None
    tool_choice: Annotated[Literal["none", "auto", "required"] | NamedToolChoice | None,
                           _said(TOOL_CHOICE_SHAPE)] = None
    logprobs: Annotated[bool | None, Field(strict=True), _said("logprobs must be true or false")] = Field(
        None, description="return each output token's log-probability: the target's raw distribution "
                          "(before temperature, top-k, top-p, min-p)")
    top_logprobs: int | None = Field(None, ge=0, le=TOP_LOGPROBS_MAX,
                                     description="alternatives per token, most probable first (needs logprobs)")

    @field_validator("top_logprobs")
    @classmethod
    def _top_needs_logprobs(cls, top: int | None, info: ValidationInfo) -> int | None:
        if top and not info.data.get("logprobs"):
            raise user_error("top_logprobs needs logprobs: true")
        return top

    @field_validator("tools")
    @classmethod
    def _distinct_names(cls, tools: list[FunctionTool] | None) -> list[FunctionTool] | None:
        names = [t.function.name for t in tools or ()]
        if len(set(names)) != len(names):
            raise user_error("two tools have the same function name")
        return tools

    @field_validator("tool_choice")
    @classmethod
    def _choice_among_tools(cls, choice: Any, info: ValidationInfo) -> Any:
        if "tools" not in info.data:  # the tools were refused: that error is reported
            return choice
        names = [t.function.name for t in info.data["tools"] or ()]
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise user_error(f"tool_choice names the function {choice.function.name!r}, which is not among the "
                             f"tools ({', '.join(names) or 'none sent'})", at="function.name")
        if choice == "required" and not names:
            raise user_error('tool_choice "required" needs tools')
        return choice

    def request(self, kind: Literal["chat", "completion"] = "chat") -> "GenerationRequest":
        """The checked request (:class:`GenerationRequest`), its tool fields as a
        :class:`~localspec.server.tools.ToolRequest` (None without tools in the request or its history)."""
        from localspec.server.tools import tool_request  # tools imports this module

        req = super().request("chat")
        req.messages = [m.template_message() for m in self.messages]
        req.prediction = joined(self.prediction.content) or None if self.prediction else None
        req.tools = tool_request(self, req.messages)
        if req.grammar is not None and req.tools is not None and req.tools.tools:
            raise ApiError(400, 'response_format: a JSON response format cannot be combined with tools (unless '
                                'tool_choice is "none"); send one or the other', "response_format",
                           "unsupported_parameter")
        req.logprobs = (self.top_logprobs or 0) if self.logprobs else None
        return req


class CompletionBody(SamplingFields):
    """``POST /v1/completions``: the request body, validated and documented in ``/openapi.json``."""

    endpoint: ClassVar[str] = COMPLETIONS

    absent_as_null: ClassVar[tuple[str, ...]] = ("prompt",)
    prompt: Annotated[str, BeforeValidator(lambda p: p[0] if isinstance(p, list) and len(p) == 1 else p),
                      _said("prompt must be a string (or a list of one string)"),
                      WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1},
                                                {"type": "array", "items": {"type": "string", "minLength": 1},
                                                 "minItems": 1, "maxItems": 1}],
                                      "description": "the text to continue; with a suffix, the text before the "
                                                     "cursor, which may be empty (the start of a file)"})]
    prediction: Prediction | None = None
    logprobs: int | None = Field(None, ge=0, le=COMPLETION_LOGPROBS_MAX,
                                 description="return each output token's log-probability and this many "
                                             "alternatives: the target's raw distribution (before temperature, "
                                             "top-k, top-p, min-p)")
    suffix: str | None = Field(None, description="fill in the middle: the text after the completion (the prompt "
                                                 "is the text before it); needs a model with FIM tokens")

    @field_validator("logprobs", mode="before")
    @classmethod
    def _integral_logprobs(cls, v: Any) -> Any:
        return integral_number(v)

    @model_validator(mode="after")
    def _prompt_or_suffix(self) -> "CompletionBody":
        """An empty prompt is refused unless a suffix makes it fill-in-the-middle at the start of a file
        (llama.cpp's ``/infill`` takes an empty prefix too, its PR #4833)."""
        if not self.prompt and not self.suffix:
            raise user_error("the prompt is empty (an empty prompt is served only with a suffix: fill in the "
                             "middle at the start of a file)", at="prompt")
        return self

    def request(self, kind: Literal["chat", "completion"] = "completion") -> "GenerationRequest":
        """The checked request (:class:`GenerationRequest`); max_tokens 16 when absent (OpenAI's default);
        a non-empty ``suffix`` makes it a fill-in-the-middle request (``fim``)."""
        req = super().request("completion")
        req.prompt = self.prompt
        req.fim = FimInput(self.prompt, self.suffix) if self.suffix else None
        req.prediction = joined(self.prediction.content) or None if self.prediction else None
        req.logprobs = self.logprobs
        if req.max_tokens is None:
            req.max_tokens = 16  # OpenAI's default for /v1/completions
        return req


BODIES: dict[str, type[SamplingFields]] = {"chat": ChatCompletionBody, "completion": CompletionBody}


def api_error(err: ValidationError | Sequence[dict], skip: int = 0) -> ApiError:
    """A request's validation error (pydantic's, or FastAPI's ``RequestValidationError.errors()`` with
    ``skip=1`` for its ``"body"``) as OpenAI's error object: 400 naming the first parameter at fault
    (:func:`localspec.config.invalid_values`, the translator the CLI and the TUI use)."""
    first = invalid_values(err, skip)[0]
    return ApiError(400, first.line(whole="the body"), first.path or None, first.code)


def parse_request(body: Any, kind: Literal["chat", "completion"]) -> GenerationRequest:
    """Validate a decoded JSON body with its declared model (:data:`BODIES`) and turn it into a
    :class:`GenerationRequest`.

    Raises:
        ApiError: 400 naming the first parameter at fault.
    """
    try:
        return BODIES[kind].model_validate(body).request(kind)
    except ValidationError as e:
        raise api_error(e) from None


# -- responses ----------------------------------------------------------------------------
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
        self.id = self.id or ("chatcmpl-" if self.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
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
