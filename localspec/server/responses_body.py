"""The Responses API's request body (``POST /v1/responses``), typed: its input items as a union
chosen by their ``type``, its function tools (chat's function fields in the flat shape), ``text.format``
(chat's ``json_schema`` fields beside the type). :mod:`localspec.server.responses` turns a valid body
into the chat request the worker runs; an error names the Responses field at fault
(:meth:`ResponsesBody._named`), with the codes the API uses: ``invalid_value``, ``unsupported_item``,
``unsupported_content``, ``unsupported_tool``, ``unsupported_parameter``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from localspec.config import SamplingParams, invalid_values, request_field, user_error
from localspec.server.bodies import CACHE_PROMPT_FIELD, CachePrompt, RequestBody
from localspec.server.messages import FunctionDefinition, NamedFunction, an_object, said, tools_array
from localspec.server.errors import ApiError
from localspec.server.refused import INCLUDE_IGNORED, RESPONSES
from localspec.server.structured import JsonSchemaSpec

FORMAT_SHAPE = ('text.format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
                '"name": ..., "schema": {...}, "strict": true}')
#: content part types read as text
TEXT_PARTS = ("input_text", "output_text")
MESSAGE_ROLES = ("user", "system", "developer", "assistant")
#: chat parameter -> the Responses parameter it came from (for the errors of the chat checks)
RENAMED = (("response_format.json_schema.schema", "text.format.schema"),
           ("response_format.json_schema", "text.format"), ("response_format", "text.format"),
           ("tool_choice.function", "tool_choice"), ("max_tokens", "max_output_tokens"), ("messages", "input"))
#: the error code of a Responses field's own check (the chat checks' errors keep theirs)
INVALID = "invalid_value"


def _bad(param: str, message: str, code: str = INVALID) -> ApiError:
    return ApiError(400, message if message.startswith(param) else f"{param}: {message}", param, code)


def _tagged(tag_of, *members: tuple[str, Any]) -> Any:
    """A union whose member is chosen by ``tag_of(value)``; the tags are written ``<...>`` and left out
    of the error paths (:meth:`ResponsesBody._named`)."""
    return Annotated[Union[tuple(Annotated[t, Tag(tag)] for tag, t in members)], Discriminator(tag_of)]


class InputTextPart(BaseModel):
    """A content part read as text: ``{"type": "input_text" | "output_text", "text"}``."""

    model_config = ConfigDict(extra="allow")
    type: Literal["input_text", "output_text"]
    text: Annotated[str, Field(strict=True), said("a text part needs a string text", INVALID)]

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, part: Any) -> Any:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise user_error(f"content parts of type {kind!r} are not supported (text only: {', '.join(TEXT_PARTS)})",
                             "unsupported_content", at="type")
        return {"text": None, **part}


def _string_or_parts(value: Any) -> Any:
    if not isinstance(value, (str, list)):
        raise user_error("content must be a string or a list of input_text parts", INVALID)
    return value


#: a message's content (and a function_call_output's output): a string or a list of text parts
TextContent = Annotated[_tagged(lambda v: "<text>" if isinstance(v, str) else "<parts>",
                                ("<text>", str), ("<parts>", list[InputTextPart])), BeforeValidator(_string_or_parts)]


def text_of(content: str | list[InputTextPart]) -> str:
    """A :data:`TextContent` as one string (the parts' texts joined with newlines)."""
    return content if isinstance(content, str) else "\n".join(p.text for p in content)


def _needs(kind: str, key: str, empty: bool = False) -> Any:
    """A string field of an item of ``kind`` (non-empty unless ``empty``)."""
    return Annotated[str, Field(strict=True, min_length=0 if empty else 1),
                     said(f"{kind} items need a string {key}", INVALID)]


class MessageItem(BaseModel):
    """``{"type": "message" (optional), "role", "content"}``."""

    model_config = ConfigDict(extra="allow")
    _an_object = an_object("", ("role", "content"))
    type: Literal["message"] = "message"
    role: Annotated[Literal["user", "system", "developer", "assistant"],
                    said(lambda r: f"messages with role {r!r} are not supported ({', '.join(MESSAGE_ROLES)})", INVALID)]
    content: TextContent


CallId = _needs("function_call", "call_id")
OutputCallId = _needs("function_call_output", "call_id")
CallName = _needs("function_call", "name")
CallArguments = _needs("function_call", "arguments", empty=True)


class FunctionCallItem(BaseModel):
    """``{"type": "function_call", "call_id", "name", "arguments"}``: a call of the history."""

    model_config = ConfigDict(extra="allow")
    _an_object = an_object("", ("call_id", "name", "arguments"))
    type: Literal["function_call"]
    call_id: CallId
    name: CallName
    arguments: CallArguments


class FunctionCallOutputItem(BaseModel):
    """``{"type": "function_call_output", "call_id", "output"}``: a call's result."""

    model_config = ConfigDict(extra="allow")
    _an_object = an_object("", ("call_id", "output"))
    type: Literal["function_call_output"]
    call_id: OutputCallId
    output: TextContent


class ReasoningItem(BaseModel):
    """``{"type": "reasoning", ...}``: dropped (this server writes none: its models do not reason)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["reasoning"]


ITEM_KINDS = {"message": MessageItem, "function_call": FunctionCallItem,
              "function_call_output": FunctionCallOutputItem, "reasoning": ReasoningItem}


def _item_kind(item: Any) -> str | None:
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", None)
    return f"<{kind}>" if kind in ITEM_KINDS else None


def _known_item(item: Any) -> Any:
    if _item_kind(item) is None:
        kind = item.get("type", "message") if isinstance(item, dict) else None
        raise user_error(f"input items of type {kind!r} are not supported (message, function_call, "
                         "function_call_output)", "unsupported_item", at="type")
    return item


InputItem = Annotated[_tagged(_item_kind, *((f"<{k}>", m) for k, m in ITEM_KINDS.items())), BeforeValidator(_known_item)]


def _nonempty_input(value: Any) -> Any:
    if not isinstance(value, (str, list)) or not value:
        raise user_error("input must be a non-empty string or a non-empty list of items", INVALID)
    return value


#: ``input``: a string (one user message) or a list of items
Input = Annotated[_tagged(lambda v: "<text>" if isinstance(v, str) else "<items>", ("<text>", Annotated[str, Field(min_length=1)]),
                          ("<items>", list[InputItem])), BeforeValidator(_nonempty_input)]


def _lenient_bool(value: Any) -> Any:
    return value if isinstance(value, bool) else None


class ResponsesTool(FunctionDefinition):
    """A function tool in the Responses API's flat shape ``{"type": "function", "name", "description",
    "parameters", "strict"}`` (the function's fields as chat declares them)."""

    type: Literal["function"]
    #: read as a boolean, anything else as absent (dropped either way: :meth:`chat_tool`)
    strict: Annotated[bool | None, BeforeValidator(_lenient_bool)] = None

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, tool: Any) -> Any:  # replaces chat's check of the nested shape
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise user_error(f"tools of type {kind!r} are not supported: only function tools "
                             '{"type": "function", "name", "parameters"}', "unsupported_tool", at="type")
        return {"name": None, **tool}

    def chat_tool(self) -> dict:
        """The tool in chat's shape (``strict`` dropped: a call's arguments follow the schema whenever
        the call grammar applies, :mod:`.tools`)."""
        return {"type": "function", "function": self.model_dump(include={"name", "description", "parameters"},
                                                                 exclude_none=True)}


class NamedTool(NamedFunction):
    """``tool_choice`` naming one function: ``{"type": "function", "name"}`` (chat nests the name in ``function``)."""

    type: Literal["function"]


class TextFormat(JsonSchemaSpec):
    """``text.format``: ``{"type": "text" | "json_object" | "json_schema"}``, json_schema's fields
    (:class:`~localspec.server.structured.JsonSchemaSpec`) beside the type (chat nests them in ``json_schema``)."""

    type: Literal["text", "json_object", "json_schema"]

    @model_validator(mode="before")
    @classmethod
    def _a_format(cls, fmt: Any) -> Any:
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise user_error(FORMAT_SHAPE, INVALID)
        if fmt["type"] == "json_schema" and "schema" not in fmt:
            raise user_error("text.format must be an object with a schema: " + FORMAT_SHAPE, INVALID)
        return fmt if fmt["type"] == "json_schema" else {"type": fmt["type"]}

    def chat_format(self) -> dict:
        """As chat's ``response_format`` (json_schema's fields nested in ``json_schema``)."""
        if self.type != "json_schema":
            return {"type": self.type}
        return {"type": "json_schema", "json_schema": self.model_dump(by_alias=True, exclude={"type"},
                                                                      exclude_unset=True)}


class Text(BaseModel):
    """``text``: the output's ``format`` (``verbosity`` and other keys are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")
    _an_object = an_object('text must be an object such as {"format": {"type": "text"}}', code=INVALID)
    format: TextFormat | None = None


#: the order the checks of a Responses body run in (the first error found is reported): its own fields,
#: then what chat checks (sampling, speculation, the functions' fields), then ``text.format``'s json_schema
#: fields (when the grammar is made)
CHECK_ORDER = ("include", "metadata", "reasoning", "max_output_tokens", "instructions", "input", "tools", "tool_choice",
               "text", "temperature", "top_p", "stream", "speculation", "cache_prompt", "cache_salt", "tools.function",
               "parallel_tool_calls", "text.format.schema")


def _untagged(err: dict) -> dict:
    """A pydantic error without the union tags (``<items>``) in its location."""
    return {**err, "loc": tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("<")))}


def _check_rank(err: dict) -> tuple[int, int, int]:
    """Where an error comes in :data:`CHECK_ORDER` (and, in ``input``, its item's index, then 0 for the
    item's type and call_id, 2 for its other fields: a call_id answering no call, 1, comes between)."""
    loc, code = err["loc"], (err.get("ctx") or {}).get("code")
    if not loc:
        return -1, 0, 0
    name = loc[0]
    if name == "tools" and len(loc) > 2 and code != "unsupported_tool":
        name = "tools.function"
    elif name == "text" and len(loc) > 2 or str(err.get("msg", "")).startswith("text.format must be an object with"):
        name = "text.format.schema"
    index = loc[1] if name == "input" and len(loc) > 1 and isinstance(loc[1], int) else 0
    within = 0 if len(loc) <= 2 or loc[2] in ("type", "call_id") else 2
    return (CHECK_ORDER.index(name) if name in CHECK_ORDER else len(CHECK_ORDER)), index, within


def _unanswered_call(body: Any, before: tuple[int, int, int] | None = None) -> ApiError | None:
    """The 400 ``unknown_call_id`` of the first function_call_output item whose call_id answers no earlier
    function_call item, if it comes before the check at ``before`` (:func:`_check_rank`; None: anywhere);
    or None. Reads the decoded body: the items before ``before`` are valid."""
    items = body.get("input") if isinstance(body, dict) else getattr(body, "input", None)
    if not isinstance(items, list):
        return None
    calls: set[str] = set()
    for i, item in enumerate(items):
        if before is not None and (CHECK_ORDER.index("input"), i, 1) >= before:
            return None
        item = item if isinstance(item, dict) else item.model_dump() if isinstance(item, BaseModel) else {}
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.add(item.get("call_id"))
        elif kind == "function_call_output" and item.get("call_id") not in calls:
            return _bad(f"input[{i}].call_id", f"no function_call item before it has call_id {item.get('call_id')!r}",
                        "unknown_call_id")
    return None


class ResponsesBody(RequestBody):
    """``POST /v1/responses``: the request body (the subset in this module's docstring), validated and
    documented in ``/openapi.json``; an error names the Responses field at fault (:meth:`_named`)."""

    model_config = ConfigDict(json_schema_extra={"required": ["input"]})  # checked when it is read (:meth:`input_items`)
    endpoint: ClassVar[str] = RESPONSES

    include: Annotated[list[Literal[INCLUDE_IGNORED]] | None, said("include must be an array", INVALID)] = Field(
        None, description='only "reasoning.encrypted_content" (ignored)')
    metadata: Annotated[dict[str, Any] | None, said("metadata must be an object of string keys and values",
                                                    INVALID)] = Field(None, description="echoed in the response")
    reasoning: Annotated[dict[str, Any] | None, said('reasoning must be an object such as {"effort": "low"}',
                                                     INVALID)] = Field(
        None, description="accepted and ignored (the served models do not reason)")
    max_output_tokens: Annotated[int | None, Field(ge=1), said("max_output_tokens must be an integer >= 1",
                                                               INVALID)] = Field(
        None, description="most tokens to generate (>= 1)")
    instructions: Annotated[str | None, said("instructions must be a string", INVALID)] = Field(
        None, description="a system message put first")
    input: Input | None = Field(None, 
        description="a string, or a list of message, function_call and function_call_output items")
    tools: Annotated[list[ResponsesTool] | None, BeforeValidator(lambda v: tools_array(v, INVALID))] = Field(
        None, description='function tools: [{"type": "function", "name", "description", "parameters", "strict"}]')
    tool_choice: Annotated[Literal["none", "auto", "required"] | NamedTool | None,
                           said('tool_choice must be "none", "auto", "required" or {"type": "function", "name"}',
                                INVALID)] = Field(None, description='"none", "auto", "required" or {"type": "function", "name"}')
    text: Text | None = None
    temperature: float | None = request_field(SamplingParams, "temperature")
    top_p: float | None = request_field(SamplingParams, "top_p")
    top_k: int | None = request_field(SamplingParams, "top_k")  # llama-server's extension, as in chat
    stream: bool | None = None
    cache_prompt: CachePrompt = CACHE_PROMPT_FIELD
    parallel_tool_calls: Annotated[bool | None, said("parallel_tool_calls must be true or false")] = None
    model: Any = Field(None, description="accepted and ignored: the loaded model answers")
    store: Any = Field(None, description="accepted and ignored: nothing is stored")

    @model_validator(mode="wrap")
    @classmethod
    def _named(cls, body: Any, handler) -> "ResponsesBody":
        """The first error in :data:`CHECK_ORDER`, named as the Responses API names its fields: ``path:
        message``, the union tags (``<items>``) left out, chat's names of the shared checks
        (``response_format.json_schema``, ``function.name``) written as the Responses fields."""
        try:
            checked = handler(body)
        except ValidationError as e:
            first = min((_untagged(err) for err in e.errors()), key=_check_rank)
            unanswered = _unanswered_call(body, before=_check_rank(first))
            if unanswered is not None:
                raise user_error(unanswered.message, unanswered.code, at=unanswered.param) from None
            bad = invalid_values([first])[0]
            message = bad.line(whole="the body")
            for chat, ours in RENAMED[:3]:
                message = message.replace(chat, ours)
            if bad.path.startswith("tools["):
                message = message.replace("function.", "")
            own = bad.path and (bad.code is not None or not bad.written)  # chat's own messages are written whole
            err = _bad(bad.path, message, bad.code) if own else ApiError(400, message, bad.path or None, bad.code)
            raise user_error(err.message, err.code, at=err.param) from None
        unanswered = _unanswered_call(checked)
        if unanswered is not None:
            raise user_error(unanswered.message, unanswered.code, at=unanswered.param)
        return checked

    def input_items(self) -> str | list:
        """``input``: a string or the list of items.

        Raises:
            ApiError: 400 ``invalid_value`` naming ``input`` when it is absent.
        """
        if self.input is None:
            raise _bad("input", "input must be a non-empty string or a non-empty list of items")
        return self.input

    def format_echo(self) -> dict:
        """``text.format`` as sent (``{"type": "text"}`` when absent), for the answer."""
        fmt = self.text.format if self.text is not None else None
        return fmt.model_dump(by_alias=True, exclude_unset=True) if fmt is not None else {"type": "text"}
