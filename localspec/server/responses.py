"""``POST /v1/responses``: OpenAI's Responses API, the subset the Codex CLI and openai-agents use.

A Responses request is converted into the chat request the worker already runs (as llama.cpp's
server does): :func:`chat_body` writes the ``/v1/chat/completions`` body, which
:class:`~localspec.server.openai_api.ChatCompletionBody` checks, so sampling, tools, structured
outputs and speculation behave exactly as in chat. The chat answer (a ``chat.completion``, or its
stream of ``chat.completion.chunk`` objects) is then reshaped by :class:`ResponsesShape`.

Request (OpenAI's Responses API reference, "Create a model response"):

- ``input``: a string (one user message) or a list of items: messages ``{"role": "user" |
  "system" | "developer" | "assistant", "content": str | [{"type": "input_text" | "output_text",
  "text"}]}`` (``"type": "message"`` optional); ``{"type": "function_call", "call_id", "name",
  "arguments"}`` (becomes an assistant message's ``tool_calls``; consecutive calls, and calls right
  after an assistant message, join that message); ``{"type": "function_call_output", "call_id",
  "output"}`` (a ``role: tool`` message; ``call_id`` must answer an earlier call); ``{"type":
  "reasoning"}`` items are dropped (this server writes none: its models do not reason).
- ``instructions``: a system message put first. ``tools``: function tools in the flat shape
  ``{"type": "function", "name", "description", "parameters", "strict"}``; ``tool_choice``:
  ``"none" | "auto" | "required" | {"type": "function", "name"}``; ``parallel_tool_calls``.
- ``temperature``, ``top_p``, ``max_output_tokens`` (chat's ``max_tokens``), ``stream``,
  ``speculation`` (ours, as in chat), ``text.format`` (``text`` | ``json_object`` | ``json_schema``
  with ``name``, ``schema``, ``strict``: chat's ``response_format``, :mod:`.structured`).
- Accepted and ignored: ``model`` (the loaded model answers), ``metadata`` (echoed), ``store``
  (nothing is stored, whatever its value: the answer says ``"store": false``), ``reasoning``
  (``effort``/``summary``: the served models do not reason), ``text.verbosity``, ``user``,
  ``safety_identifier``, ``prompt_cache_key``, ``service_tier``, ``include:
  ["reasoning.encrypted_content"]`` (there is no reasoning to include).
- Refused with a 400 naming the field: the fields of /v1/responses in
  :data:`localspec.server.refused.REFUSED_FIELDS` (``previous_response_id``, ``conversation``,
  ``background``, ``prompt``, ``truncation: "auto"``, ``max_tool_calls``, ``top_logprobs`` > 0, any
  other ``include`` value); item and content types other than the above (images, files, audio,
  ``item_reference``, built-in tool calls), and tools other than functions (``web_search``,
  ``file_search``, ``local_shell``...).

Answer: ``{"id": "resp_...", "object": "response", "created_at", "status": "completed" |
"incomplete", "model", "output": [message and function_call items], "usage": {"input_tokens",
"output_tokens", "total_tokens", "input_tokens_details": {"cached_tokens"}, "output_tokens_details":
{"reasoning_tokens"}}, "incomplete_details": {"reason": "max_output_tokens"} | null, ...}`` plus
``speculation`` and ``queue`` as in chat. Streamed: server-sent events, each ``{"type",
"sequence_number" (0, 1, ...), ...}`` with the SSE ``event`` field set to its type, in OpenAI's
order: ``response.created``, ``response.in_progress``, per output item ``response.output_item.added``,
(text) ``response.content_part.added``, ``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done`` / (call) ``response.function_call_arguments.delta``...,
``response.function_call_arguments.done``; then ``response.output_item.done``; last
``response.completed`` (or ``response.incomplete``) holding the whole response. No ``[DONE]``. An
error after the stream began is an ``error`` event ``{"type": "error", "code", "message", "param"}``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Annotated, Any, AsyncIterator

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from localspec.server.bodies import ChatCompletionBody, GenerationRequest
from localspec.server.openai_api import ApiError, api_error
from localspec.server.refused import INCLUDE_IGNORED, RESPONSES, refused_field

FORMAT_SHAPE = ('text.format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
                '"name": ..., "schema": {...}, "strict": true}')
#: content part types read as text
TEXT_PARTS = ("input_text", "output_text")
MESSAGE_ROLES = ("user", "system", "developer", "assistant")
#: chat parameter -> the Responses parameter it came from (for the errors of the chat checks)
RENAMED = (("response_format.json_schema.schema", "text.format.schema"),
           ("response_format.json_schema", "text.format"), ("response_format", "text.format"),
           ("tool_choice.function", "tool_choice"), ("max_tokens", "max_output_tokens"), ("messages", "input"))


# The fields' shapes in /openapi.json (documentation and the fuzz's generator): the values are checked by
# chat_body, which names the field at fault, so the model itself takes Any.
_TEXT_CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "items": {
    "type": "object", "properties": {"type": {"enum": list(TEXT_PARTS)}, "text": {"type": "string"}},
    "required": ["type", "text"]}}]}
INPUT_SCHEMA = {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "minItems": 1, "items": {"anyOf": [
    {"type": "object", "properties": {"type": {"const": "message"}, "role": {"enum": list(MESSAGE_ROLES)},
                                      "content": _TEXT_CONTENT}, "required": ["role", "content"]},
    {"type": "object", "properties": {"type": {"const": "function_call"},
                                      "call_id": {"type": "string", "minLength": 1},
                                      "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
                                      "arguments": {"type": "string"}},
     "required": ["type", "call_id", "name", "arguments"]},
    {"type": "object", "properties": {"type": {"const": "function_call_output"}, "call_id": {"type": "string"},
                                      "output": {"type": "string"}}, "required": ["type", "call_id", "output"]}]}}]}
TOOL_SCHEMA = {"type": "object", "properties": {
    "type": {"const": "function"}, "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
    "description": {"type": "string"}, "parameters": {"type": "object"}, "strict": {"type": "boolean"}},
    "required": ["type", "name"]}
TOOL_CHOICE_SCHEMA = {"anyOf": [{"enum": ["none", "auto", "required"]}, {"type": "object", "properties": {
    "type": {"const": "function"}, "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"}},
    "required": ["type", "name"]}, {"type": "null"}]}
TEXT_SCHEMA = {"type": ["object", "null"], "properties": {"format": {"anyOf": [
    {"type": "object", "properties": {"type": {"enum": ["text", "json_object"]}}, "required": ["type"]},
    {"type": "object", "properties": {"type": {"const": "json_schema"}, "name": {"type": "string"},
                                      "schema": {"type": "object"}, "strict": {"type": "boolean"}},
     "required": ["type", "name", "schema"]}]}}}


def _bad(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message if message.startswith(param) else f"{param}: {message}", param, code)


class ResponsesBody(BaseModel):
    """``POST /v1/responses``: the request body (the subset in this module's docstring). Values are
    checked by :func:`chat_body`, which names the field at fault."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"required": ["input"]})

    model: Any = Field(None, description="accepted and ignored: the loaded model answers")
    input: Annotated[Any, WithJsonSchema(INPUT_SCHEMA)] = Field(
        None, description="a string, or a list of message, function_call and function_call_output items")
    instructions: Annotated[Any, WithJsonSchema({"type": ["string", "null"]})] = Field(
        None, description="a system message put first")
    tools: Annotated[Any, WithJsonSchema({"type": ["array", "null"], "items": TOOL_SCHEMA})] = Field(
        None, description='function tools: [{"type": "function", "name", "description", "parameters", "strict"}]')
    tool_choice: Annotated[Any, WithJsonSchema(TOOL_CHOICE_SCHEMA)] = Field(
        None, description='"none", "auto", "required" or {"type": "function", "name"}')
    parallel_tool_calls: Annotated[Any, WithJsonSchema({"type": ["boolean", "null"]})] = None
    temperature: Annotated[Any, WithJsonSchema({"type": ["number", "null"], "minimum": 0, "maximum": 2})] = None
    top_p: Annotated[Any, WithJsonSchema({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1})] = None
    max_output_tokens: Annotated[Any, WithJsonSchema({"type": ["integer", "null"], "minimum": 1})] = Field(
        None, description="most tokens to generate (>= 1)")
    stream: Annotated[Any, WithJsonSchema({"type": ["boolean", "null"]})] = None
    text: Annotated[Any, WithJsonSchema(TEXT_SCHEMA)] = Field(
        None, description='{"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}}')
    speculation: Any = Field(None, description="localspec's extension, as in /v1/chat/completions")
    cache_prompt: Annotated[Any, WithJsonSchema({"type": ["boolean", "null"]})] = Field(
        None, description="llama-server's field, as in /v1/chat/completions: false, the prompt neither "
                          "reuses a cached prefix nor leaves its own")
    cache_salt: Annotated[Any, WithJsonSchema({"type": ["string", "null"], "minLength": 1})] = Field(
        None, description="vLLM's field, as in /v1/chat/completions: reuse cached prompts and the draft memory "
                          "only of requests with the same API key and salt")
    include: Annotated[Any, WithJsonSchema({"type": ["array", "null"],
                                            "items": {"enum": list(INCLUDE_IGNORED)}})] = Field(
        None, description='only "reasoning.encrypted_content" (ignored)')
    store: Any = Field(None, description="accepted and ignored: nothing is stored")
    metadata: Annotated[Any, WithJsonSchema({"type": ["object", "null"],
                                             "additionalProperties": {"type": "string"}})] = Field(
        None, description="echoed in the response")
    reasoning: Any = Field(None, description="accepted and ignored (the served models do not reason)")


def _text_of(content: Any, param: str) -> str:
    """A message's content (a string, or input_text/output_text parts) as one string."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(param, "content must be a string or a list of input_text parts")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise _bad(f"{param}[{j}].type", f"content parts of type {kind!r} are not supported (text only: "
                                             f"{', '.join(TEXT_PARTS)})", "unsupported_content")
        if not isinstance(part.get("text"), str):
            raise _bad(f"{param}[{j}].text", "a text part needs a string text")
        texts.append(part["text"])
    return "\n".join(texts)


def _string_field(item: dict, key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (key != "arguments" and not value):
        raise _bad(f"{param}.{key}", f"{item.get('type')} items need a string {key}")
    return value


def _call_message(messages: list[dict], item: dict, param: str, origins: list[str],
                  calls: dict[str, str] | None = None) -> None:
    """A function_call item joins the assistant message before it (or starts one); ``calls`` gets the
    chat path of the call (``messages[k].tool_calls[j]``) -> ``param``."""
    call = {"id": _string_field(item, "call_id", param), "type": "function",
            "function": {"name": _string_field(item, "name", param),
                         "arguments": _string_field(item, "arguments", param)}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        origins.append(param)
    if calls is not None:
        calls[f"messages[{len(messages) - 1}].tool_calls[{len(messages[-1]['tool_calls']) - 1}]"] = param


def _output_message(messages: list[dict], item: dict, param: str) -> dict:
    """A function_call_output item: the ``role: tool`` message answering its call."""
    call_id = _string_field(item, "call_id", param)
    calls = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    if call_id not in calls:
        raise _bad(f"{param}.call_id", f"no function_call item before it has call_id {call_id!r}",
                   "unknown_call_id")
    output = item.get("output")
    text = output if isinstance(output, str) else _text_of(output, f"{param}.output")
    return {"role": "tool", "tool_call_id": call_id, "name": calls[call_id], "content": text}


def input_messages(value: Any, instructions: Any = None, origins: list[str] | None = None,
                   calls: dict[str, str] | None = None) -> list[dict]:
    """``instructions`` and ``input`` as chat messages (``{"role", "content"}``, assistant messages
    with ``tool_calls``, ``role: tool`` messages with ``tool_call_id`` and ``name``). ``origins``, when
    given, gets for each message the Responses field it came from (``instructions``, ``input``,
    ``input[3]``), so a chat check's error can name it; ``calls``, when given, the item of each call
    (``{"messages[2].tool_calls[1]": "input[4]"}``).

    Raises:
        ApiError: 400 naming the item or part at fault (``input[2].content[0].type``).
    """
    messages: list[dict] = []
    origins = origins if origins is not None else []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions", "instructions must be a string")
        messages.append({"role": "system", "content": instructions})
        origins.append("instructions")
    if isinstance(value, str) and value:
        origins.append("input")
        return [*messages, {"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _bad("input", "input must be a non-empty string or a non-empty list of items")
    for i, item in enumerate(value):
        param = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            role = item.get("role")
            if role not in MESSAGE_ROLES:
                raise _bad(f"{param}.role", f"messages with role {role!r} are not supported "
                                            f"({', '.join(MESSAGE_ROLES)})")
            messages.append({"role": role, "content": _text_of(item.get("content"), f"{param}.content")})
            origins.append(param)
        elif kind == "function_call":
            _call_message(messages, item, param, origins, calls)
        elif kind == "function_call_output":
            messages.append(_output_message(messages, item, param))
            origins.append(param)
        elif kind != "reasoning":
            raise _bad(f"{param}.type", f"input items of type {kind!r} are not supported (message, "
                                        "function_call, function_call_output)", "unsupported_item")
    return messages


def chat_tools(tools: Any) -> list[dict] | None:
    """Flat function tools as chat's ``{"type": "function", "function": {...}}`` (``strict`` dropped:
    a call's arguments follow the schema whenever the call grammar applies, :mod:`.tools`).

    Raises:
        ApiError: 400 naming a tool that is not a function tool (``web_search``...).
    """
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise _bad("tools", "tools must be an array of function tools")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise _bad(f"tools[{i}].type", f"tools of type {kind!r} are not supported: only function tools "
                                           '{"type": "function", "name", "parameters"}', "unsupported_tool")
        out.append({"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")
                                                       if tool.get(k) is not None}})
    return out


def chat_tool_choice(choice: Any) -> Any:
    """``tool_choice`` as chat takes it (``{"type": "function", "name"}`` -> chat's nested shape)."""
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise _bad("tool_choice", 'tool_choice must be "none", "auto", "required" or {"type": "function", "name"}')


def response_format(text: Any) -> dict | None:
    """``text.format`` as chat's ``response_format`` (json_schema's flat fields nested in ``json_schema``)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("text", 'text must be an object such as {"format": {"type": "text"}}')
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise _bad("text.format", FORMAT_SHAPE)
    if fmt["type"] != "json_schema":
        return fmt
    return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}


def _check_refused(body: ResponsesBody) -> None:
    refused = refused_field(RESPONSES, body.model_dump())
    if refused:
        raise _bad(refused[0], refused[1], "unsupported_parameter")
    if body.include is not None and not isinstance(body.include, list):
        raise _bad("include", "include must be an array")
    if body.metadata is not None and not isinstance(body.metadata, dict):
        raise _bad("metadata", "metadata must be an object of string keys and values")
    if body.reasoning is not None and not isinstance(body.reasoning, dict):
        raise _bad("reasoning", 'reasoning must be an object such as {"effort": "low"}')


def chat_body(body: ResponsesBody, origins: list[str] | None = None, calls: dict[str, str] | None = None) -> dict:
    """The ``/v1/chat/completions`` body of a Responses request (see the module docstring).

    Raises:
        ApiError: 400 naming the Responses field at fault.
    """
    _check_refused(body)
    max_tokens = body.max_output_tokens
    if isinstance(max_tokens, float) and max_tokens.is_integer():  # JSON's 4.0 is the integer 4
        max_tokens = int(max_tokens)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise _bad("max_output_tokens", "max_output_tokens must be an integer >= 1")
    chat = {"messages": input_messages(body.input, body.instructions, origins, calls), "tools": chat_tools(body.tools),
            "tool_choice": chat_tool_choice(body.tool_choice), "parallel_tool_calls": body.parallel_tool_calls,
            "temperature": body.temperature, "top_p": body.top_p, "max_tokens": max_tokens, "stream": body.stream,
            "response_format": response_format(body.text), "speculation": body.speculation,
            "cache_prompt": body.cache_prompt, "cache_salt": body.cache_salt}
    return {k: v for k, v in chat.items() if v is not None}


def _renamed(e: ApiError, origins: list[str], calls: dict[str, str] | None = None) -> ApiError:
    """A chat check's error, naming the Responses field (``max_tokens`` -> ``max_output_tokens``;
    ``messages[k].tool_calls[j]`` -> the function_call item of that call, ``calls[...]``;
    ``messages[k]`` -> the field message k came from, ``origins[k]``)."""
    param, message = e.param or "", e.message
    m = re.match(r"messages\[(\d+)\]\.tool_calls\[\d+\]", param)
    if m and m[0] in (calls or {}):
        ours = calls[m[0]]
        param, message = ours + param[m.end():], message.replace(m[0], ours)
    m = re.match(r"messages\[(\d+)\]", param)
    if m and int(m[1]) < len(origins):
        ours = origins[int(m[1])]
        param, message = ours + param[m.end():], message.replace(m[0], ours)
    for chat, ours in RENAMED:
        if param.startswith(chat):
            param, message = ours + param[len(chat):], message.replace(chat, ours)
            break
    tool = param.startswith("tools[") and ".function." in param
    if tool:
        param, message = param.replace(".function.", "."), message.replace("function.", "")
    return ApiError(e.status, message, param or None, e.code, e.headers)


def generation_request(body: ResponsesBody, origins: list[str] | None = None,
                       calls: dict[str, str] | None = None) -> GenerationRequest:
    """The checked chat request of a Responses body (``include_usage`` on: the last event has the usage).
    ``origins``, when given, gets the Responses field of each chat message (:func:`input_messages`), for
    :func:`_renamed` of the errors raised later (:meth:`ResponsesShape.renamed`); ``calls`` the item of each call.

    Raises:
        ApiError: 400 naming the Responses field at fault.
    """
    origins = origins if origins is not None else []
    calls = calls if calls is not None else {}
    chat = chat_body(body, origins, calls)
    try:
        req = ChatCompletionBody.model_validate(chat).request()
    except ValidationError as e:
        raise _renamed(api_error(e), origins, calls) from None
    except ApiError as e:
        raise _renamed(e, origins, calls) from None
    req.include_usage = True
    return req


# -- the answer -----------------------------------------------------------------------------
def response_usage(chat_usage: dict | None) -> dict | None:
    """Chat's ``usage`` as the Responses API's (``prompt_tokens`` -> ``input_tokens``, ...)."""
    if not chat_usage:
        return None
    return {"input_tokens": chat_usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": chat_usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens": chat_usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": chat_usage["total_tokens"]}


def _extra(chat: dict) -> dict:
    return {k: chat[k] for k in ("speculation", "queue") if k in chat}


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class ResponsesShape:
    """One request's Responses objects, from its chat answer: :meth:`whole` reshapes a
    ``chat.completion``; :meth:`events` the stream of chat chunks into Responses events.

    Args:
        model: the name the model is served as.
        body: the request (echoed: instructions, tools, metadata, sampling fields).
    """

    def __init__(self, model: str, body: ResponsesBody) -> None:
        self.model = model
        self.body = body
        self.id = _new_id("resp_")
        self.created_at = int(time.time())
        self.output: list[dict] = []
        self.sequence_number = 0
        self.open: dict | None = None  #: the streamed item not yet done (the last of ``output``)
        #: the Responses field each chat message came from (:func:`generation_request` fills it)
        self.origins: list[str] = []
        self.calls: dict[str, str] = {}  #: the function_call item of each chat call

    def request(self) -> GenerationRequest:
        """The checked chat request of the body (:func:`generation_request`), its messages' origins kept."""
        return generation_request(self.body, self.origins, self.calls)

    def renamed(self, e: ApiError) -> ApiError:
        """An error of the chat request run for this one (the worker's context overflow, a tool's
        special-token text, ...), naming the Responses fields (``input``, ``max_output_tokens``,
        ``text.format``, ``tools[i]``): every error of a Responses request goes through it."""
        return _renamed(e, self.origins, self.calls)

    def response(self, status: str, usage: dict | None = None, extra: dict | None = None) -> dict:
        """The ``response`` object with the output so far (``status``: in_progress, completed, incomplete)."""
        b = self.body
        fmt = b.text.get("format") if isinstance(b.text, dict) else None
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": b.instructions, "max_output_tokens": b.max_output_tokens,
                "metadata": b.metadata or {}, "model": self.model, "output": self.output,
                "parallel_tool_calls": b.parallel_tool_calls is not False, "previous_response_id": None,
                "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": b.temperature,
                "text": {"format": fmt or {"type": "text"}}, "tool_choice": b.tool_choice or "auto",
                "tools": b.tools or [], "top_p": b.top_p, "truncation": "disabled", "usage": usage, "user": None,
                **(extra or {})}

    def whole(self, chat: dict) -> dict:
        """The response of a non-streamed answer (``chat``: its ``chat.completion`` object): a message
        item for the text (an empty one when there is neither text nor a call), a function_call item per call."""
        choice = chat["choices"][0]
        message = choice["message"]
        status = "incomplete" if choice["finish_reason"] == "length" else "completed"
        if message.get("content") or not message.get("tool_calls"):
            self.output.append({"type": "message", "id": _new_id("msg_"), "role": "assistant", "status": status,
                                "content": [_text_part(message.get("content") or "")]})
        for call in message.get("tool_calls") or ():
            self.output.append({"type": "function_call", "id": _new_id("fc_"), "call_id": call["id"],
                                "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                                "status": "completed"})
        return self.response(status, response_usage(chat.get("usage")), _extra(chat))

    # -- the stream
    def _event(self, kind: str, **fields: Any) -> dict:
        """One server-sent event (sse-starlette's dict): ``event`` its type, ``data`` its JSON."""
        data = json.dumps({"type": kind, "sequence_number": self.sequence_number, **fields})
        self.sequence_number += 1
        return {"event": kind, "data": data}

    def _add(self, item: dict) -> list[dict]:
        self.output.append(item)
        self.open = item
        return [self._event("response.output_item.added", output_index=len(self.output) - 1, item=item)]

    def _close(self, status: str = "completed") -> list[dict]:
        """The events that end the open item (none when none is open)."""
        item, self.open = self.open, None
        if item is None:
            return []
        at = {"item_id": item["id"], "output_index": len(self.output) - 1}
        if item["type"] == "message":
            part = item["content"][0]
            out = [self._event("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[]),
                   self._event("response.content_part.done", **at, content_index=0, part=part)]
        else:
            out = [self._event("response.function_call_arguments.done", **at, arguments=item["arguments"])]
        item["status"] = status
        return [*out, self._event("response.output_item.done", output_index=at["output_index"], item=item)]

    def _text(self, text: str) -> list[dict]:
        out = []
        if self.open is None or self.open["type"] != "message":
            out += self._close()
            out += self._add({"type": "message", "id": _new_id("msg_"), "role": "assistant", "status": "in_progress",
                              "content": []})
            self.open["content"].append(_text_part(""))
            out.append(self._event("response.content_part.added", item_id=self.open["id"],
                                   output_index=len(self.output) - 1, content_index=0, part=_text_part("")))
        self.open["content"][0]["text"] += text
        if text:
            out.append(self._event("response.output_text.delta", item_id=self.open["id"],
                                   output_index=len(self.output) - 1, content_index=0, delta=text, logprobs=[]))
        return out

    def _call(self, call: dict) -> list[dict]:
        """A chat chunk's ``delta.tool_calls[]`` entry: a new call (it has an ``id``) or an argument fragment."""
        out = []
        if call.get("id"):
            out += self._close()
            out += self._add({"type": "function_call", "id": _new_id("fc_"), "call_id": call["id"],
                              "name": call["function"]["name"], "arguments": "", "status": "in_progress"})
        fragment = (call.get("function") or {}).get("arguments")
        if fragment and self.open is not None:
            self.open["arguments"] += fragment
            out.append(self._event("response.function_call_arguments.delta", item_id=self.open["id"],
                                   output_index=len(self.output) - 1, delta=fragment))
        return out

    def _feed(self, chunk: dict, final: dict) -> list[dict]:
        """The events of one chat chunk; ``final`` collects the finish reason, usage and extra fields."""
        if not chunk["choices"]:  # the usage chunk
            final.update(usage=chunk.get("usage"), extra=_extra(chunk))
            return []
        choice = chunk["choices"][0]
        delta = choice.get("delta") or {}
        out = self._text(delta["content"]) if delta.get("content") else []
        for call in delta.get("tool_calls") or ():
            out += self._call(call)
        if choice.get("finish_reason"):
            final.update(reason=choice["finish_reason"], extra=_extra(chunk))
        return out

    def _closing(self, final: dict) -> list[dict]:
        status = "incomplete" if final.get("reason") == "length" else "completed"
        out = self._text("") if not self.output else []  # no text and no call: an empty message
        out += self._close(status if self.open is not None and self.open["type"] == "message" else "completed")
        done = "response.incomplete" if status == "incomplete" else "response.completed"
        return [*out, self._event(done, response=self.response(status, response_usage(final.get("usage")),
                                                               final.get("extra")))]

    async def events(self, chunks: AsyncIterator[Any]) -> AsyncIterator[dict]:
        """The Responses events of a chat stream: ``chunks`` yields chat chunk dicts, then ``"[DONE]"``
        (or an :class:`~localspec.server.openai_api.ApiError`, which ends the stream with an ``error`` event)."""
        yield self._event("response.created", response=self.response("in_progress"))
        yield self._event("response.in_progress", response=self.response("in_progress"))
        final: dict = {}
        async for chunk in chunks:
            if isinstance(chunk, ApiError):
                chunk = self.renamed(chunk)
                yield self._event("error", code=chunk.code, message=chunk.message, param=chunk.param)
                return
            if chunk == "[DONE]":
                break
            if not isinstance(chunk, dict):  # a keepalive (localspec.server.app.KEEPALIVE): still in progress
                yield self._event("response.in_progress", response=self.response("in_progress"))
                continue
            for event in self._feed(chunk, final):
                yield event
        for event in self._closing(final):
            yield event
