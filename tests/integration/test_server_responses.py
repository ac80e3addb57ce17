"""``POST /v1/responses`` through ``localspec serve`` on the tiny model with the real ``openai``
client's ``responses.create``: plain text and streamed (the same greedy answer), an item list with
instructions, ``max_output_tokens`` (incomplete) and a refusal. The fake backend:
tests/unit/server/test_responses_api.py."""

from __future__ import annotations

import openai
import pytest

from helpers import tiny_lookup_server

pytestmark = pytest.mark.tiny

KEY = "responses-key"
PROMPT = "List the first five days of the week, one per line."


@pytest.fixture(scope="module")
def client(tiny_path, tmp_path_factory):
    with tiny_lookup_server(tiny_path, tmp_path_factory.mktemp("serve-responses"), KEY) as client:
        yield client


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
