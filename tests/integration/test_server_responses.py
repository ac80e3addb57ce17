"""``POST /v1/responses`` through ``localspec serve`` on the tiny model with the real ``openai``
client's ``responses.create``: plain text and streamed (the same greedy answer), an item list with
instructions, ``max_output_tokens`` (incomplete) and a refusal. The fake backend:
tests/unit/server/test_responses_api.py."""

from __future__ import annotations

import openai
import pytest


pytestmark = pytest.mark.tiny

#: this module's server (fixture ``server``): the defaults of helpers.tiny_lookup_process
SERVE = ()
KEY = "responses-key"
PROMPT = "List the first five days of the week, one per line."


def test_plain_and_streamed_give_the_same_answer(client):
    whole = client.responses.create(model="tiny", input=PROMPT, temperature=0, max_output_tokens=40)
    assert whole.object == "response" and whole.status in ("completed", "incomplete") and whole.output_text
    assert whole.usage.output_tokens > 0 and whole.usage.input_tokens > 0
    assert whole.model_extra["speculation"]["mode"] == "lookup"
    with client.responses.create(model="tiny", input=PROMPT, temperature=0, max_output_tokens=40,
                                 stream=True) as stream:
        events = list(stream)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens


def test_items_with_instructions_and_an_incomplete_answer(client):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
             {"type": "message", "role": "user", "content": "Now count from one to twenty in words."}]
    r = client.responses.create(model="tiny", input=items, instructions="You are terse.", temperature=0,
                                max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output[0].status == "incomplete"


def test_what_is_not_served_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="tiny", input="hi", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="tiny", input="hi", tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0].type"


#: a history with a call, sent without tools: SmolLM2's template cannot render calls (a 400 raised once the
#: request reaches the server's model, after the request's own checks)
HISTORY_WITH_A_CALL = [{"role": "user", "content": "What is the weather?"},
                       {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
                       {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]


@pytest.mark.parametrize("case, kw, param", [
    ("context overflow", {"input": "word " * 1500}, "input"),
    ("context overflow, streamed", {"input": "word " * 1500, "stream": True}, "input"),
    ("history the template cannot render", {"input": HISTORY_WITH_A_CALL}, "input"),
    ("max_output_tokens", {"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ("text.format", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}},
     "text.format.schema"),
    ("tools[i]", {"input": "hi", "tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
])
def test_errors_name_the_responses_fields(client, case, kw, param):
    """Issue 43, fault 5: every error of a /v1/responses request names the Responses API's fields (Codex
    CLI keys on them), not the chat request's it runs as (``messages``, ``max_tokens``,
    ``response_format``, ``tools[i].function``); before, a context overflow (raised by the worker) and a
    history the model cannot render (raised by the route) said ``messages``."""
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="tiny", **kw)
    err = e.value.body
    assert err["param"] == param, (case, err)
    for chat_name in ("messages", "max_tokens", "response_format", "function."):
        assert chat_name not in err["message"], (case, err)
    if case.startswith("context overflow"):
        assert err["code"] == "context_length_exceeded" and "your input resulted in" in err["message"], err


def test_top_k_is_honoured(client):
    """llama-server's ``top_k`` (its /v1/responses passes the body on to chat): with ``top_k`` 1 a hot
    temperature samples only the most probable token, so the answer is the greedy one; an invalid value is a
    400 naming it (the field's range comes from the engine's SamplingParams)."""
    greedy = client.responses.create(model="tiny", input=PROMPT, temperature=0, max_output_tokens=24).output_text
    hot = dict(model="tiny", input=PROMPT, temperature=2, max_output_tokens=24)
    for _ in range(2):
        assert client.responses.create(**hot, extra_body={"top_k": 1}).output_text == greedy
    assert any(client.responses.create(**hot).output_text != greedy for _ in range(3)), \
        "temperature 2 without top_k gave the greedy answer: the check above proves nothing"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="tiny", input="hi", extra_body={"top_k": -1})
    assert e.value.body["param"] == "top_k"
