"""``POST /v1/responses``: OpenAI's Responses API, the subset the Codex CLI and openai-agents use.

A Responses request is converted into the chat request the worker already runs (as llama.cpp's
server does): :func:`chat_body` writes the ``/v1/chat/completions`` body, which
:class:`~localspec.server.bodies.ChatCompletionBody` checks, so sampling, tools, structured
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
from typing import Any, AsyncIterator

from pydantic import BaseModel, ValidationError

from localspec.config import object_id
from localspec.server.bodies import ChatCompletionBody, GenerationRequest
from localspec.server.errors import ApiError, translate, validation_error
from localspec.server.responses_body import (RENAMED, FunctionCallItem, FunctionCallOutputItem, MessageItem, NamedTool,
                                             ResponsesBody, _bad, text_of)


def input_messages(value: Any, instructions: str | None = None, origins: list[str] | None = None,
                   calls: dict[str, str] | None = None) -> list[dict]:
    """``instructions`` and ``input`` (a string or a list of items, typed or as decoded JSON) as chat
    messages (``{"role", "content"}``, assistant messages with ``tool_calls``, ``role: tool`` messages
    with ``tool_call_id`` and ``name``). ``origins``, when given, gets for each message the Responses
    field it came from (``instructions``, ``input``, ``input[3]``), so a chat check's error can name
    it; ``calls``, when given, the item of each call (``{"messages[2].tool_calls[1]": "input[4]"}``).

    Raises:
        ApiError: 400 naming the item or part at fault (``input[2].content[0].type``; a
            function_call_output whose call_id answers no earlier call: ``unknown_call_id``).
    """
    if isinstance(value, list) and any(isinstance(item, dict) for item in value):
        try:
            value = ResponsesBody.model_validate({"input": value}).input
        except ValidationError as e:
            raise validation_error(e) from None
    messages: list[dict] = []
    origins = origins if origins is not None else []
    if instructions is not None:
        messages.append({"role": "system", "content": instructions})
        origins.append("instructions")
    if isinstance(value, str):
        origins.append("input")
        return [*messages, {"role": "user", "content": value}]
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": text_of(item.content)})
            origins.append(param)
        elif isinstance(item, FunctionCallItem):
            _call_message(messages, item, param, origins, calls)
        elif isinstance(item, FunctionCallOutputItem):
            messages.append(_output_message(messages, item, param))
            origins.append(param)
    return messages


def _call_message(messages: list[dict], item: FunctionCallItem, param: str, origins: list[str],
                  calls: dict[str, str] | None = None) -> None:
    """A function_call item joins the assistant message before it (or starts one); ``calls`` gets the
    chat path of the call (``messages[k].tool_calls[j]``) -> ``param``."""
    call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        origins.append(param)
    if calls is not None:
        calls[f"messages[{len(messages) - 1}].tool_calls[{len(messages[-1]['tool_calls']) - 1}]"] = param


def _output_message(messages: list[dict], item: FunctionCallOutputItem, param: str) -> dict:
    """A function_call_output item: the ``role: tool`` message answering its call."""
    calls = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    if item.call_id not in calls:
        raise _bad(f"{param}.call_id", f"no function_call item before it has call_id {item.call_id!r}",
                   "unknown_call_id")
    return {"role": "tool", "tool_call_id": item.call_id, "name": calls[item.call_id], "content": text_of(item.output)}


#: the Responses fields that chat also has but takes in another shape (converted by :func:`chat_body`) or
#: ignores as we do (``model``); every other field chat has under the same name is passed on as it is
#: (llama.cpp's server passes the whole body on, ``input`` replaced by ``messages``)
CONVERTED = ("model", "tools", "tool_choice")


def chat_body(body: ResponsesBody, origins: list[str] | None = None, calls: dict[str, str] | None = None) -> dict:
    """The ``/v1/chat/completions`` body of a Responses request (see the module docstring).

    Raises:
        ApiError: 400 naming the Responses field at fault.
    """
    choice = body.tool_choice
    same = {k: v.model_dump(exclude_none=True) if isinstance(v, BaseModel) else v
            for k in type(body).model_fields if k in ChatCompletionBody.model_fields and k not in CONVERTED
            and (v := getattr(body, k)) is not None}
    chat = {"messages": input_messages(body.input_items(), body.instructions, origins, calls),
            "tools": [t.chat_tool() for t in body.tools] if body.tools else None,
            "tool_choice": {"type": "function", "function": {"name": choice.name}} if isinstance(choice, NamedTool)
            else choice, "max_tokens": body.max_output_tokens,
            "response_format": body.text.format.chat_format() if body.text and body.text.format else None, **same}
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
    return e.renamed(param or None, message)


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
    except (ValidationError, ApiError) as e:
        raise _renamed(translate(e), origins, calls) from None
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
    return object_id(prefix)


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
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": b.instructions, "max_output_tokens": b.max_output_tokens,
                "metadata": b.metadata or {}, "model": self.model, "output": self.output,
                "parallel_tool_calls": b.parallel_tool_calls is not False, "previous_response_id": None,
                "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": b.temperature,
                "text": {"format": b.format_echo()},
                "tool_choice": b.tool_choice.model_dump() if isinstance(b.tool_choice, NamedTool)
                else b.tool_choice or "auto", "tools": [t.model_dump(exclude_unset=True) for t in b.tools or ()], "top_p": b.top_p, "truncation": "disabled", "usage": usage, "user": None,
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

    def error_event(self, e: ApiError) -> dict:
        """The stream's ``error`` event of ``e`` (its last: the stream ends after it), naming the Responses
        fields (:meth:`renamed`)."""
        e = self.renamed(e)
        return self._event("error", code=e.code, message=e.message, param=e.param)

    async def events(self, chunks: AsyncIterator[Any]) -> AsyncIterator[dict]:
        """The Responses events of a chat stream: ``chunks`` yields chat chunk dicts, then ``"[DONE]"``
        (or an :class:`~localspec.server.errors.ApiError`, which ends the stream with an ``error`` event)."""
        yield self._event("response.created", response=self.response("in_progress"))
        yield self._event("response.in_progress", response=self.response("in_progress"))
        final: dict = {}
        async for chunk in chunks:
            if isinstance(chunk, ApiError):
                yield self.error_event(chunk)
                return
            if chunk == "[DONE]":
                break
            if not isinstance(chunk, dict):  # a keepalive (localspec.server.streams.KEEPALIVE): still in progress
                yield self._event("response.in_progress", response=self.response("in_progress"))
                continue
            for event in self._feed(chunk, final):
                yield event
        for event in self._closing(final):
            yield event
