"""The parts of a chat request body: messages and their content parts, tools, ``tool_choice``,
``prediction``, as pydantic models whose validators name the part at fault; and the two helpers
every body's fields use for their messages (:func:`said`, :func:`an_object`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Callable, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo,
                      WithJsonSchema, WrapValidator, field_validator, model_validator)

from pydantic_core import PydanticCustomError

from localspec.config import FUNCTION_NAME, user_error
from localspec.core.messages import joined_text


def _nonempty(v: Any) -> bool:
    return v not in (None, [], {}, "")




TOOL_SHAPE = 'a tool must be {"type": "function", "function": {"name": ..., "parameters": ...}}'
PREDICTION_SHAPE = 'prediction must be {"type": "content", "content": ...}'
TOOL_CHOICE_SHAPE = 'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}'


def said(message: str | Callable[[Any], str], code: str | None = None) -> WrapValidator:
    """A field's one error message: whatever fails in the field's own validation is reported as
    ``message`` (or ``message(value)``) at the field, with the error ``code`` (None: none)."""

    def wrap(value: Any, handler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise user_error(message(value) if callable(message) else message, code) from None

    return WrapValidator(wrap)


def an_object(message: str, absent_as_null: tuple[str, ...] = (), at: str | None = None, code: str | None = None):
    """A model's before-validator: a value that is not a JSON object is refused with ``message``
    (and ``code``); the keys ``absent_as_null`` are read as null when absent (so their fields' own
    messages apply)."""

    def check(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise user_error(message, code, at=at)
        return {**dict.fromkeys(absent_as_null), **value}

    return model_validator(mode="before")(classmethod(check))


#: a function's name, in every tool declaration (chat's and the Responses API's)
FunctionName = Annotated[str, Field(pattern=FUNCTION_NAME),
                         said(lambda n: f"function.name must be 1-64 letters, digits, '_', '-' or '.' (got {n!r})")]


def tools_array(value: Any, code: str | None = None) -> Any:
    """``tools``: absent, null and ``[]`` read as no tools; another value than an array refused (with ``code``)."""
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise user_error("tools must be an array of function tools", code)
    return value


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
    _an_object = an_object("a content part must be an object", ("type", "text"))
    type: Annotated[Literal["text"],
                    said(lambda t: f"content parts of type {t!r} are not supported (text only)")]
    text: Annotated[str, Field(strict=True), said("a text part needs a string 'text'")]


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
    """The text of a :data:`Content` (:func:`localspec.core.messages.joined_text`; None: ``""``)."""
    return joined_text([p.text for p in parts or ()])


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
    _an_object = an_object("a message must be an object", ("role",))
    role: Annotated[Literal["system", "developer", "user", "assistant", "tool"],
                    said(lambda r: f"messages with role {r!r} are not supported ({', '.join(ROLES)})")]
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
    _an_object = an_object(TOOL_SHAPE, ("name",))
    name: FunctionName
    description: Annotated[str | None, said("function.description must be a string")] = None
    parameters: Annotated[dict[str, Any] | None, said("function.parameters must be a JSON Schema object")] = Field(
        None, description="a JSON Schema object")

    @field_validator("parameters")
    @classmethod
    def _object_arguments(cls, params: dict[str, Any] | None) -> dict[str, Any] | None:
        """A call's arguments are a JSON object (OpenAI's rule): a schema of another ``type`` could never be met
        by a call, so ``tool_choice: required`` would have no answer."""
        kind = (params or {}).get("type", "object")
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            raise user_error(f'function.parameters must be a JSON Schema of "type": "object" (a call\'s arguments '
                             f"are a JSON object), not {json.dumps(kind)}; put the values in an object's properties")
        return params


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
    _an_object = an_object(PREDICTION_SHAPE, ("type", "content"), at="type")
    type: Annotated[Literal["content"], said(PREDICTION_SHAPE)]
    content: Content

