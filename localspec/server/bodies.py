"""The request bodies of the OpenAI endpoints, declared once as pydantic models: the routes take
them, so FastAPI validates a request with them before it is queued and publishes them in
``/openapi.json``; each body builds the one :class:`GenerationRequest` the worker reads.

A bad value is a 400 with OpenAI's error object naming the parameter
(:func:`~localspec.server.errors.validation_error`, from :func:`localspec.config.invalid_values`, the
translator the CLI and the TUI use); a field's own message is declared beside it
(:func:`localspec.config.user_error`). Fields that do not change the output (``user``,
``metadata``, ``store``, ...) are accepted and ignored; fields we cannot honour (``n`` > 1,
``logit_bias``, ...) are refused with a 400 that names them, unless they are sent with their no-op
value (:data:`localspec.server.refused.REFUSED_FIELDS`). The tool fields are turned into a
:class:`localspec.server.tools.ToolRequest`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, SkipValidation, ValidationError, ValidationInfo,
                      WithJsonSchema, field_validator, model_validator)

from localspec.app.fim import FimInput
from localspec.core.messages import continues_final_message
from localspec.config import (AUTO_DRAFT_MAX, DraftMode, DraftParams, SamplingParams, check_stop, request_field,
                              user_error)
from localspec.server.messages import (TOOL_CHOICE_SHAPE, ChatMessage, FunctionTool, NamedToolChoice, Prediction,
                                       StreamOptions, an_object, joined, said, tools_array)
from localspec.server.errors import ApiError, validation_error
from localspec.server.refused import CHAT, COMPLETIONS, refused_field
from localspec.server.structured import ResponseFormat, response_grammar
from localspec.server.tools import tool_request

#: the most alternatives per token: chat's ``top_logprobs`` and completions' ``logprobs`` (OpenAI's limits)
TOP_LOGPROBS_MAX = 20
COMPLETION_LOGPROBS_MAX = 5


def _nonempty_array(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise user_error("messages must be a non-empty array")
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
        sampling: overrides of the server's :class:`~localspec.config.SamplingParams` (the body's
            fields of the same names: :meth:`SamplingBody.overrides`).
        generation: overrides of the server's :class:`~localspec.config.GenerationParams` but
            ``max_tokens`` (``stop``, the stop strings, when some are sent; ``/infill``'s ``min_indent``
            and ``newline_time_limit``, from ``n_indent`` and ``t_max_predict_ms``).
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
    """

    kind: Literal["chat", "completion"]
    messages: list[dict] | None = None
    prompt: str | None = None
    prediction: str | None = None
    max_tokens: int | None = None
    sampling: dict = field(default_factory=dict)
    generation: dict = field(default_factory=dict)
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

    @property
    def prompt_param(self) -> str:
        return "messages" if self.kind == "chat" else "prompt"


def integral_number(v: Any) -> Any:
    """JSON has one number type: ``4.0`` is the integer 4 (as JSON Schema says, so /openapi.json's
    ``integer`` admits it); ``4.5`` stays refused by the field's own type."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _is_integer(annotation: Any) -> bool:
    """Whether a field's type is an integer (``int`` or ``int | None``; not a bool, not a float)."""
    args = set(get_args(annotation)) or {annotation}
    return int in args and float not in args


class IntegralNumbers(BaseModel):
    """Every integer field of a model that inherits this takes JSON's ``4.0`` as 4 (:func:`integral_number`)."""

    @field_validator("*", mode="before")
    @classmethod
    def _integral_number(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return integral_number(v) if field is not None and _is_integer(field.annotation) else v


class SpeculationFields(IntegralNumbers):
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
    _an_object = an_object('speculation must be an object such as {"mode": "auto", "draft_max": %d}' % AUTO_DRAFT_MAX)

    mode: DraftMode | None = None
    draft_max: int | None = request_field(DraftParams, "draft_max")
    memory: Annotated[bool | None, said("speculation.memory must be true or false")] = Field(
        None, description="false: neither draft from the server's memory of earlier requests nor add this one "
                          "to it (the output is the same either way; only the speed changes)")


#: llama-server's ``cache_prompt`` on the OpenAI endpoints (a JSON boolean; absent: true)
CachePrompt = Annotated[bool | None, Field(strict=True), said("cache_prompt must be true or false")]
CACHE_PROMPT_FIELD = Field(None, description="llama-server's field: false = this request neither reuses a cached "
                                             "prompt prefix nor leaves its own in the cache (absent: true)")
#: vLLM's ``cache_salt``: a non-empty string (every endpoint takes it: :mod:`localspec.server.scopes`)
CacheSalt = Annotated[str | None, Field(strict=True, min_length=1),
                      said("cache_salt must be a non-empty string (requests reuse cached prompts and draft "
                           "from memory only with the same salt)")]
CACHE_SALT_FIELD = Field(None, description="vLLM's field: a request reuses cached prompt prefixes, and drafts from "
                                           "the memory of earlier requests, only where they came with the same "
                                           "API key and the same salt (absent: the key's own)")


class RequestBody(IntegralNumbers):
    """What every endpoint's body shares: the body is a JSON object; the fields its endpoint cannot
    honour are refused (:data:`localspec.server.refused.REFUSED_FIELDS`); the scalar fields' JSON
    types are checked strictly, integers as :class:`IntegralNumbers` says; stop strings are not
    empty; ``speculation`` and ``cache_salt``."""

    model_config = ConfigDict(extra="allow", strict=True)

    #: the route, for the table of refused fields (localspec.server.refused)
    endpoint: ClassVar[str] = CHAT
    #: the fields read as null when absent (so that their own message says what is missing)
    absent_as_null: ClassVar[tuple[str, ...]] = ()

    speculation: SpeculationFields | None = None
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

    @field_validator("stop", check_fields=False)
    @classmethod
    def _no_empty_stop(cls, stop: Any) -> Any:
        try:
            check_stop([stop] if isinstance(stop, str) else stop if isinstance(stop, list) else [])
        except ValueError as e:
            raise user_error(str(e)) from None
        return stop


class SamplingBody(RequestBody):
    """A body the worker runs as it is: the sampling fields, which take their range and help from the
    options' one declaration (:class:`~localspec.config.SamplingParams`; absent, they keep the
    server's settings), and :meth:`request`, the one place a body becomes the worker's
    :class:`GenerationRequest`."""

    temperature: float | None = request_field(SamplingParams, "temperature")
    top_p: float | None = request_field(SamplingParams, "top_p")
    seed: int | None = request_field(SamplingParams, "seed")
    # extensions with llama.cpp's names
    top_k: int | None = request_field(SamplingParams, "top_k")
    min_p: float | None = request_field(SamplingParams, "min_p")

    def overrides(self, params: type[BaseModel]) -> dict[str, Any]:
        """The values this body sets (not None) of the fields it shares by name with ``params``
        (:class:`~localspec.config.SamplingParams`): the request's overrides of the server's settings."""
        return {k: v for k in params.model_fields if k in type(self).model_fields and (v := getattr(self, k)) is not None}

    def request(self) -> GenerationRequest:
        """The checked request the worker runs: the fields every body shares read here, the
        endpoint's own from :meth:`own_fields`.

        Raises:
            ApiError: 400 for what only the whole request shows (``response_format`` with tools).
        """
        stop = getattr(self, "stop", None)
        stop = (stop,) if isinstance(stop, str) else tuple(stop or ())
        spec = self.speculation
        own = self.own_fields()
        return GenerationRequest(
            sampling=self.overrides(SamplingParams), generation={**({"stop": stop} if stop else {}),
                                                                  **own.pop("generation", {})},
            speculation=spec.model_dump(exclude_none=True, exclude={"memory"}) if spec else {},
            memory=spec is None or spec.memory is not False, cache_prompt=getattr(self, "cache_prompt") is not False,
            cache_salt=self.cache_salt, **own)

    def own_fields(self) -> dict[str, Any]:
        """The endpoint's own :class:`GenerationRequest` fields (``kind``, the prompt, ...)."""
        raise NotImplementedError


class SamplingFields(SamplingBody):
    """What the OpenAI endpoints' bodies share: the output's length and stop strings, streaming,
    ``cache_prompt`` and ``response_format`` (and :class:`SamplingBody`'s fields)."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = Field(None, description="stop strings, not empty")
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    cache_prompt: CachePrompt = CACHE_PROMPT_FIELD
    #: declared by its type; validated when the request is built, after the other fields (so that an error
    #: elsewhere is named first, as before it was typed): :func:`~localspec.server.structured.response_grammar`
    response_format: Annotated[ResponseFormat | None, SkipValidation] = Field(
        None, description='{"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", '
                          '"strict"}}: the answer follows the schema (localspec.server.structured)')

    def own_fields(self) -> dict[str, Any]:
        return {"stream": bool(self.stream),
                "include_usage": bool(self.stream_options and self.stream_options.include_usage),
                "max_tokens": self.max_completion_tokens or self.max_tokens,
                "grammar": response_grammar(self.response_format)}


class ChatCompletionBody(SamplingFields):
    """``POST /v1/chat/completions``: the request body, validated and documented in ``/openapi.json``
    (an error names the parameter at fault: :func:`~localspec.server.errors.validation_error`)."""

    absent_as_null: ClassVar[tuple[str, ...]] = ("messages",)
    messages: Annotated[list[ChatMessage], BeforeValidator(_nonempty_array)] = Field(min_length=1)
    prediction: Prediction | None = None
    tools: Annotated[list[FunctionTool] | None, BeforeValidator(lambda v: tools_array(v))] = None
    parallel_tool_calls: Annotated[bool | None, Field(strict=True),
                                   said("parallel_tool_calls must be true or false")] = None
    tool_choice: Annotated[Literal["none", "auto", "required"] | NamedToolChoice | None,
                           said(TOOL_CHOICE_SHAPE)] = None
    logprobs: Annotated[bool | None, Field(strict=True), said("logprobs must be true or false")] = Field(
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

    def own_fields(self) -> dict[str, Any]:
        """Chat's fields; the tool fields as a :class:`~localspec.server.tools.ToolRequest` (None without
        tools in the request or its history)."""
        messages = [m.template_message() for m in self.messages]
        own = {**super().own_fields(), "kind": "chat", "messages": messages,
               "prediction": joined(self.prediction.content) or None if self.prediction else None,
               "tools": tool_request(self, messages), "logprobs": (self.top_logprobs or 0) if self.logprobs else None}
        if own["grammar"] is not None and own["tools"] is not None and own["tools"].tools:
            raise ApiError(400, 'response_format: a JSON response format cannot be combined with tools (unless '
                                'tool_choice is "none"); send one or the other', "response_format",
                           "unsupported_parameter")
        if continues_final_message(messages) and (own["grammar"] is not None or own["tools"] and own["tools"].tools):
            # the grammar and the tool-call parser start at the answer's start, where the prefill is already
            # written: continued, a JSON answer would be written twice and a call begun in the prefill lost
            field, at = "response_format" if own["grammar"] is not None else "tools", f"messages[{len(messages) - 1}]"
            raise ApiError(400, f"{at}: the final assistant message is an assistant prefill, which {field} cannot "
                                "continue (its grammar starts at the answer's start); end the messages with a user "
                                f"message, or leave {field} out", at, "unsupported_parameter")
        prefill = messages[-1]["content"] if continues_final_message(messages) else ""
        if prefill and own["prediction"] and own["prediction"].startswith(prefill):
            own["prediction"] = own["prediction"][len(prefill):] or None  # the answer starts after the prefill
        return own


class CompletionBody(SamplingFields):
    """``POST /v1/completions``: the request body, validated and documented in ``/openapi.json``."""

    endpoint: ClassVar[str] = COMPLETIONS

    absent_as_null: ClassVar[tuple[str, ...]] = ("prompt",)
    prompt: Annotated[str, BeforeValidator(lambda p: p[0] if isinstance(p, list) and len(p) == 1 else p),
                      said("prompt must be a string (or a list of one string)"),
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

    @model_validator(mode="after")
    def _prompt_or_suffix(self) -> "CompletionBody":
        """An empty prompt is refused unless a suffix makes it fill-in-the-middle at the start of a file
        (llama.cpp's ``/infill`` takes an empty prefix too, its PR #4833)."""
        if not self.prompt and not self.suffix:
            raise user_error("the prompt is empty (an empty prompt is served only with a suffix: fill in the "
                             "middle at the start of a file)", at="prompt")
        return self

    def own_fields(self) -> dict[str, Any]:
        """Completions' fields: max_tokens 16 when absent (OpenAI's default); a non-empty ``suffix``
        makes it a fill-in-the-middle request (``fim``)."""
        own = super().own_fields()
        return {**own, "kind": "completion", "prompt": self.prompt,
                "fim": FimInput(self.prompt, self.suffix) if self.suffix else None,
                "prediction": joined(self.prediction.content) or None if self.prediction else None,
                "logprobs": self.logprobs,
                "max_tokens": 16 if own["max_tokens"] is None else own["max_tokens"]}  # OpenAI's default


BODIES: dict[str, type[SamplingFields]] = {"chat": ChatCompletionBody, "completion": CompletionBody}


def parse_request(body: Any, kind: Literal["chat", "completion"]) -> GenerationRequest:
    """Validate a decoded JSON body with its declared model (:data:`BODIES`) and turn it into a
    :class:`GenerationRequest`.

    Raises:
        ApiError: 400 naming the first parameter at fault.
    """
    try:
        return BODIES[kind].model_validate(body).request()
    except ValidationError as e:
        raise validation_error(e) from None
