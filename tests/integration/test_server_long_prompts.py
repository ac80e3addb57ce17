"""Long prompts against ``localspec serve``, as agents send them, with the real ``openai`` client on
the tiny model (n_ctx 2048, one thread, so the prompt takes a few seconds to read):

- ``max_tokens`` over the room the prompt leaves in the context window is capped there, as
  llama.cpp's server does (Qwen Code asks for 32,768 on top of a ~17,700-token prompt): the answer
  ends at the window with finish_reason ``length`` on chat, completions and responses; a prompt
  that alone does not fit is still a 400 ``context_length_exceeded``;
- a streamed answer sends its first chunk (the role) before the prompt is read, and a chunk
  without content every ``--stream-keepalive`` seconds while nothing else comes (Qwen Code's and
  Codex's idle timers count parsed events, not SSE comments); the client parses the stream as
  before: the same text as the answer not streamed.
"""

from __future__ import annotations

import openai
import pytest

pytestmark = pytest.mark.tiny

N_CTX = 2048
#: seconds between keepalive chunks: far below the prompt's reading time here
KEEPALIVE = 0.1


KEY = "long-key"
#: the flags of this module's server (fixture ``server``)
SERVE = ("--n-ctx", str(N_CTX), "--stream-keepalive", str(KEEPALIVE), "--draft-memory-tokens", "0")


@pytest.fixture(scope="module")
def counting(tiny_engine):
    """A counting prompt that leaves 40-90 tokens of the window (the model goes on counting)."""
    text = "Count from 1 to 5000, separated by commas: " + ", ".join(str(i) for i in range(1, 900)) + ","
    while len(tiny_engine.tokenize(text)) > N_CTX - 60:
        text = text[: text[:-1].rindex(",") + 1]
    assert N_CTX - 90 < len(tiny_engine.tokenize(text)) <= N_CTX - 60
    return text


def test_completion_max_tokens_over_the_room_ends_at_the_window(client, counting):
    r = client.completions.create(model="tiny", prompt=counting, max_tokens=32768, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens + r.usage.completion_tokens == N_CTX
    assert r.usage.completion_tokens > 30


def test_chat_streamed_with_keepalives_parses_as_not_streamed(client, counting):
    messages = [{"role": "user", "content": counting}]
    t_chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=32768,
                                                   temperature=0, stream=True,
                                                   extra_body={"cache_prompt": False}))
    assert t_chunks[0].choices[0].delta.role == "assistant"  # sent before the prompt was read
    first_text = next(i for i, c in enumerate(t_chunks) if c.choices and c.choices[0].delta.content)
    keepalives = [c for c in t_chunks[1:first_text] if c.choices[0].delta.content is None
                  and c.choices[0].finish_reason is None and not c.choices[0].delta.tool_calls]
    assert len(keepalives) >= 3, f"{len(keepalives)} keepalive chunks while the prompt was read"
    assert all(c.id == t_chunks[0].id and c.object == "chat.completion.chunk" for c in keepalives)
    streamed = "".join(c.choices[0].delta.content or "" for c in t_chunks if c.choices)
    assert t_chunks[-1].choices[0].finish_reason == "length"
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=32768, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens + r.usage.completion_tokens == N_CTX
    assert r.choices[0].message.content == streamed


def test_completion_stream_keepalives_are_empty_text(client, counting):
    chunks = list(client.completions.create(model="tiny", prompt=counting, max_tokens=32768, temperature=0,
                                            stream=True, extra_body={"cache_prompt": False}))
    first_text = next(i for i, c in enumerate(chunks) if c.choices[0].text)
    assert first_text >= 3 and all(c.choices[0].text == "" for c in chunks[:first_text])
    assert chunks[-1].choices[0].finish_reason == "length"


def test_responses_max_output_tokens_over_the_room_and_keepalive_events(client, counting):
    # not the chat test's message (its prompt would be in the KV cache, with nothing to read)
    events = list(client.responses.create(model="tiny", input="Go on. " + counting, max_output_tokens=32768,
                                          temperature=0, stream=True))
    kinds = [e.type for e in events]
    first_delta = kinds.index("response.output_text.delta")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[:first_delta].count("response.in_progress") >= 3
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[-1] == "response.incomplete"
    done = events[-1].response
    assert done.incomplete_details.reason == "max_output_tokens"
    assert done.usage.input_tokens + done.usage.output_tokens <= N_CTX


def test_a_prompt_that_alone_does_not_fit_is_still_a_400(client, counting):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": counting * 2}],
                                       max_tokens=8)
    err = e.value.body
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert f"maximum context length is {N_CTX} tokens" in err["message"]
