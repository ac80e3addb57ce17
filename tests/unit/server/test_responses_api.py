"""``POST /v1/responses`` on the fake backend (issue 32, item 4), driven by the real ``openai``
client's ``responses.create``: input items to chat messages (function_call / function_call_output
round trip), the 400s, the response shape, the stream's events, their order and
``sequence_number``s (localspec/server/responses.py). The real model: tests/integration/test_server_responses.py."""

from __future__ import annotations

import json

import openai
import pytest

from chat_fakes import SEP, FakeChatModel
from fakes import EOG, TEXTS
from localspec.server.errors import ApiError
from localspec.server.responses import ResponsesBody, ResponsesShape, _renamed, generation_request, input_messages

CALL_START, CALL_END = 30, 31
TOOL_TEXTS = list(TEXTS)
TOOL_TEXTS[CALL_START] = b'<tool_call>\n{"name": "get_weather", '
TOOL_TEXTS[CALL_END] = b'"arguments": {"city": "Paris"}}\n</tool_call>'
TEXT_REPLY = [4, 5, 6]  # "t4 t5 t6 "
CALL_REPLY = [CALL_START, CALL_END]
TOOLS = [{"type": "function", "name": "get_weather", "description": "the weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": True}]


class ScriptedToolModel(FakeChatModel):
    """A chat model with a Hermes tool template that answers ``script`` and records what it was asked."""

    def __init__(self) -> None:
        super().__init__(texts=TOOL_TEXTS)
        self.template = "{% if tools %}{{ tools }}{% endif %}<tool_call>"
        self.script: list[int] = TEXT_REPLY
        self.asked: list[tuple[list[dict], list | None]] = []

    def logits_after(self, seq):
        logits = super().logits_after(seq) * 0
        since = len(seq) - 1 - max(i for i, t in enumerate(seq) if t == SEP)
        logits[self.script[since] if since < len(self.script) else EOG] = 10.0
        return logits

    def tokenize_chat(self, messages, add_generation_prompt=True, tools=None) -> list[int]:
        self.asked.append((messages, tools))
        return [SEP, 2, 7, 8, SEP]


#: the fake target of fixture ``client`` (tests/conftest.py)
MODEL = ScriptedToolModel


@pytest.fixture(scope="module")
def served(client):
    """(the fake target, the TestClient, an ``openai`` client through it)."""
    return (client.app.state.served.engine.target, client,
            openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=client, max_retries=0))


def reply(model, script):
    model.script = script
    model.asked.clear()


def test_text_answer_shape_and_what_the_model_was_asked(served):
    model, _, client = served
    reply(model, TEXT_REPLY)
    r = client.responses.create(model="any", input="hello", instructions="be brief", metadata={"k": "v"})
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.output_text == "t4 t5 t6 " and r.model == "fake.gguf" and r.metadata == {"k": "v"}
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.id.startswith("msg_") and item.content[0].type == "output_text" and item.content[0].annotations == []
    assert r.usage.input_tokens == 5 and r.usage.output_tokens == 3 and r.usage.total_tokens == 8
    assert r.incomplete_details is None and r.store is False
    body = r.model_dump()
    assert body["speculation"]["mode"] == "lookup" and "queue" in body
    assert model.asked == [([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}], None)]


def test_max_output_tokens_makes_it_incomplete(served):
    model, _, client = served
    reply(model, TEXT_REPLY)
    r = client.responses.create(model="any", input="hello", max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "t4 t5 " and r.output[0].status == "incomplete"


def test_a_function_call_and_its_output_round_trip(served):
    model, _, client = served
    reply(model, CALL_REPLY)
    first = client.responses.create(model="any", input=[{"role": "user", "content": "weather?"}], tools=TOOLS)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id.startswith("call_")
    assert model.asked[0][1] == [{"type": "function", "function": {k: TOOLS[0][k] for k in
                                                                     ("name", "description", "parameters")}}]
    reply(model, TEXT_REPLY)
    history = [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
               call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    second = client.responses.create(model="any", input=history, tools=TOOLS)
    assert second.output_text == "t4 t5 t6 "
    messages = model.asked[0][0]
    assert messages == [{"role": "user", "content": "weather?"},
                        {"role": "assistant", "content": "", "tool_calls": [
                            {"id": call.call_id, "type": "function",
                             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                        {"role": "tool", "content": "sunny", "tool_call_id": call.call_id, "name": "get_weather"}]


def test_input_items_to_chat_messages():
    items = [{"type": "message", "role": "developer", "content": "rules"},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"a": 1}'},
             {"type": "reasoning", "summary": []},
             {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "2"}]},
             {"type": "function_call_output", "call_id": "c1", "output": "1"}]
    assert input_messages(items, "sys") == [
        {"role": "system", "content": "sys"}, {"role": "developer", "content": "rules"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "c2", "name": "g", "content": "2"},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "1"}]


def test_text_format_becomes_the_chat_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = generation_request(ResponsesBody(input="x", text={"format": {"type": "json_schema", "name": "n",
                                                                        "schema": schema, "strict": True}}))
    assert req.grammar is not None and req.include_usage and req.kind == "chat"
    assert generation_request(ResponsesBody(input="x", text={"format": {"type": "json_object"}})).grammar
    assert generation_request(ResponsesBody(input="x", text={"verbosity": "low"})).grammar is None
    with pytest.raises(ApiError) as e:
        generation_request(ResponsesBody(input="x", text={"format": {"type": "json_schema", "schema": {
            "type": "integer", "minimum": 1}}}))
    assert e.value.param == "text.format.schema" and "minimum" in e.value.message
    prefill = [{"role": "user", "content": "x"}, {"role": "assistant", "content": '{"a": '}]
    with pytest.raises(ApiError) as e:  # a prefill the format cannot continue: named as the input item it is
        generation_request(ResponsesBody(input=prefill, text={"format": {"type": "json_object"}}))
    assert e.value.param == "input[1]" and e.value.message.startswith("input[1]: the final assistant message")


BAD = [
    ({"input": ""}, "input", "invalid_value"),
    ({"input": []}, "input", "invalid_value"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]},
     "input[0].content[0].type", "unsupported_content"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", "unsupported_item"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "invalid_value"),
    ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id",
     "unknown_call_id"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id", "invalid_value"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_tool"),
    ({"input": "x", "tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name", None),
    ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "other"}}, "tool_choice.name", None),
    ({"input": "x", "tool_choice": {"type": "web_search"}}, "tool_choice", "invalid_value"),
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id", "unsupported_parameter"),
    ({"input": "x", "background": True}, "background", "unsupported_parameter"),
    ({"input": "x", "include": ["file_search_call.results"]}, "include", "unsupported_parameter"),
    ({"input": "x", "truncation": "auto"}, "truncation", "unsupported_parameter"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    ({"input": "x", "temperature": "hot"}, "temperature", None),
    ({"input": "x", "instructions": 3}, "instructions", "invalid_value"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format", "invalid_value"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format", "invalid_value"),
    ({"input": "x", "metadata": 3}, "metadata", "invalid_value"),
    ({"input": "x", "speculation": {"mode": "fast"}}, "speculation.mode", None),
    ({"input": "x", "cache_prompt": "no"}, "cache_prompt", None),
]


@pytest.mark.parametrize("value, want", [(None, True), (True, True), (False, False)])
def test_cache_prompt_reaches_the_request(value, want):
    """llama-server's ``cache_prompt`` opt-out, as on the chat endpoint (it was dropped here)."""
    body = ResponsesBody.model_validate({"input": "x", **({} if value is None else {"cache_prompt": value})})
    assert generation_request(body).cache_prompt is want


@pytest.mark.parametrize("body, param, code", BAD)
def test_what_is_not_served_is_a_400_naming_the_field(served, body, param, code):
    _, c, _ = served
    r = c.post("/v1/responses", json={"model": "m", **body})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param, err
    assert code is None or err["code"] == code
    assert err["type"] == "invalid_request_error" and err["message"]


def test_accepted_and_ignored_fields(served):
    model, c, _ = served
    reply(model, TEXT_REPLY)
    r = c.post("/v1/responses", json={"model": "m", "input": "x", "store": True, "reasoning": {"effort": "high"},
                                      "include": ["reasoning.encrypted_content"], "user": "u",
                                      "prompt_cache_key": "k", "parallel_tool_calls": False})
    assert r.status_code == 200 and r.json()["store"] is False and r.json()["parallel_tool_calls"] is False
    assert 'localspec_requests_total{endpoint="responses",status="200"}' in c.get("/metrics").text


def stream(client, **kw) -> list:
    with client.responses.create(model="any", stream=True, **kw) as events:
        return list(events)


OPENING = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done",
           "response.completed"]


def test_stream_of_text_events_in_order(served):
    model, _, client = served
    reply(model, TEXT_REPLY)
    events = stream(client, input="hello")
    kinds = [e.type for e in events]
    assert kinds[:4] == OPENING and kinds[-4:] == CLOSING and set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "t4 t5 t6 "
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    added, done = events[2].item, events[-2].item
    assert added.id == done.id == events[4].item_id and added.status == "in_progress" and done.status == "completed"
    final = events[-1].response
    assert final.output_text == "t4 t5 t6 " and final.usage.output_tokens == 3 and final.id == events[0].response.id
    assert final.model_dump()["speculation"]["mode"] == "lookup"


def test_stream_of_a_call_and_an_incomplete_stream(served):
    model, _, client = served
    reply(model, CALL_REPLY)
    events = stream(client, input="weather?", tools=TOOLS)
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert set(kinds[3:-3]) == {"response.function_call_arguments.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"} == json.loads(events[-3].arguments)
    call = events[-1].response.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == args
    reply(model, TEXT_REPLY)
    events = stream(client, input="hello", max_output_tokens=1)
    assert events[-1].type == "response.incomplete" and events[-1].response.incomplete_details.reason == \
        "max_output_tokens"
    assert events[-2].item.status == "incomplete" and events[-1].response.output_text == "t4 "


def chunk(content=None, calls=None, finish=None) -> dict:
    delta = {k: v for k, v in (("content", content), ("tool_calls", calls)) if v is not None}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def run_events(chunks) -> list[dict]:
    import asyncio

    async def source():
        for c in chunks:
            yield c

    async def collect():
        return [json.loads(e["data"]) for e in [e async for e in ResponsesShape("m", ResponsesBody()).events(source())]]

    return asyncio.run(collect())


def test_text_then_calls_close_the_message_first_and_an_error_ends_the_stream():
    calls = [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}},
             {"index": 0, "function": {"arguments": '{"a": '}}, {"index": 0, "function": {"arguments": "1}"}},
             {"index": 1, "id": "call_2", "type": "function", "function": {"name": "g", "arguments": ""}},
             {"index": 1, "function": {"arguments": "{}"}}]
    usage = {"prompt_tokens": 4, "completion_tokens": 9, "total_tokens": 13, "prompt_tokens_details":
             {"cached_tokens": 2}}
    events = run_events([chunk(""), chunk("Let me look."), *[chunk(calls=[c]) for c in calls],
                         chunk(finish="tool_calls"), {"choices": [], "usage": usage, "speculation": {"rounds": 3}},
                         "[DONE]"])
    kinds = [(e["type"], e.get("output_index")) for e in events]
    assert kinds == [("response.created", None), ("response.in_progress", None),
                     ("response.output_item.added", 0), ("response.content_part.added", 0),
                     ("response.output_text.delta", 0), ("response.output_text.done", 0),
                     ("response.content_part.done", 0), ("response.output_item.done", 0),
                     ("response.output_item.added", 1), ("response.function_call_arguments.delta", 1),
                     ("response.function_call_arguments.delta", 1), ("response.function_call_arguments.done", 1),
                     ("response.output_item.done", 1), ("response.output_item.added", 2),
                     ("response.function_call_arguments.delta", 2), ("response.function_call_arguments.done", 2),
                     ("response.output_item.done", 2), ("response.completed", None)]
    final = events[-1]["response"]
    assert [(o["type"], o.get("call_id"), o.get("arguments")) for o in final["output"]] == [
        ("message", None, None), ("function_call", "call_1", '{"a": 1}'), ("function_call", "call_2", "{}")]
    assert final["usage"] == {"input_tokens": 4, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 9,
                              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 13}
    assert final["speculation"] == {"rounds": 3} and final["status"] == "completed"
    failed = run_events([chunk(""), chunk("Hi"), ApiError(503, "the server is shutting down", None, "server_shutdown")])
    assert failed[-1] == {"type": "error", "sequence_number": 5, "code": "server_shutdown",
                          "message": "the server is shutting down", "param": None}


@pytest.mark.parametrize("with_instructions", [False, True])
def test_an_error_the_chat_checks_find_names_the_input_item_it_came_from(served, with_instructions):
    """A bad item is named by its place in ``input`` whether or not instructions come first."""
    _, c, _ = served
    items = ('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}, '
             '{"role": "user", "content": "x \\ud800 y"}]')
    body = '{"model": "m", %s"input": %s}' % ('"instructions": "be brief", ' if with_instructions else "", items)
    r = c.post("/v1/responses", content=body.encode(), headers={"content-type": "application/json"})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "input[2].content", err
    assert err["message"].startswith("input[2].content"), err


def test_a_chat_checks_message_index_is_mapped_back_to_the_responses_field():
    """The chat checks name ``messages[k]``; instructions come first and function_call items join the
    assistant message before them, so k is not the item's index in ``input``: the origins map it."""
    from localspec.server.responses import _renamed, input_messages

    origins = []
    messages = input_messages([{"role": "user", "content": "a"},
                               {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                               {"type": "function_call_output", "call_id": "c", "output": "x"},
                               {"role": "user", "content": "b"}], "be brief", origins)
    assert len(messages) == len(origins) == 5
    assert origins == ["instructions", "input[0]", "input[1]", "input[2]", "input[3]"]
    e = _renamed(ApiError(400, "messages[4].content: bad", "messages[4].content", "invalid_value"), origins)
    assert (e.param, e.message) == ("input[3].content", "input[3].content: bad")


def test_a_call_is_named_by_its_own_item():
    """Calls joined to one assistant message keep their own items (issue 43): a check of the chat
    request's ``messages[k].tool_calls[j]`` names the function_call item it came from."""
    origins, calls = [], {}
    input_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"type": "reasoning"},
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}], None, origins, calls)
    e = _renamed(ApiError(400, "messages[1].tool_calls[1] holds special-token text", "messages[1].tool_calls[1]"),
                 origins, calls)
    assert (e.param, e.message) == ("input[4]", "input[4] holds special-token text")
