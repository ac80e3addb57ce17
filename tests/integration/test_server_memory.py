"""The server's draft memory and ``cache_prompt`` on the tiny model, through the real ``openai`` client:
a request whose answer repeats an earlier request's answer drafts it from the memory (lookup rounds
``from_memory``, counted in ``speculation.memory``), token for token the answer of a request that opts out
(``speculation.memory: false``); ``cache_prompt: false`` reuses no cached prompt prefix and leaves the one
before it where it was.

The server runs in mode lookup without a draft model, as in test_server_speculation.py.
"""

from __future__ import annotations

import openai
import pytest

from helpers import assert_greedy_equal

pytestmark = pytest.mark.tiny

#: this module's server (fixture ``server``): the defaults of helpers.tiny_lookup_process
SERVE = ()
KEY = "memory-key"
#: two prompts that end alike: the tiny model continues both with the same count, which neither prompt holds
FIRST = "1, 2, 3, 4, 5, 6,"
SECOND = "Here are the numbers in order: 1, 2, 3, 4, 5, 6,"


def complete(client, prompt, max_tokens=60, **extra):
    """(token ids, the last chunk's ``speculation``, text) of a streamed greedy completion."""
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                            stream=True, extra_body=extra or None))
    ids = [t["id"] for c in chunks if c.choices for t in (c.choices[0].model_extra or {}).get("tokens", [])]
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    return ids, chunks[-1].model_extra["speculation"], text


def test_an_answer_said_before_is_drafted_from_memory_and_does_not_change(client, tiny_engine):
    off_ids, off, off_text = complete(client, SECOND, speculation={"memory": False})
    assert off["memory"] == {"enabled": False, "rounds": 0, "drafted": 0, "accepted": 0}
    _, first, first_text = complete(client, FIRST)  # remembered: its prompt and answer
    assert first["memory"]["enabled"]
    on_ids, on, on_text = complete(client, SECOND)
    assert_greedy_equal(tiny_engine, tiny_engine.tokenize(SECOND), off_ids, on_ids, "draft memory")
    mem = on["memory"]
    assert mem["enabled"] and mem["rounds"] > 0 and mem["accepted"] >= 20, (mem, first_text, on_text)
    assert on["drafters"]["lookup"]["accepted"] > off["drafters"]["lookup"]["accepted"]
    assert on["target_passes"] < off["target_passes"]
    # the memory holds the answer now; a request that opts out does not read it
    again_ids, again, _ = complete(client, SECOND, speculation={"memory": False})
    assert again["memory"]["rounds"] == 0 and again_ids == off_ids


def test_cache_prompt_false_neither_reuses_nor_leaves_a_cached_prefix(client):
    def cached(**extra):
        r = client.completions.create(model="tiny", prompt=SECOND, max_tokens=4, temperature=0,
                                      extra_body=extra or None)
        return r.usage.prompt_tokens_details.cached_tokens

    cached()
    before = cached()
    assert before > 0  # the default reuses the prompt's prefix
    assert cached(cache_prompt=False) == 0
    assert cached() == before  # and it left the cached prefix where it was (issue 42)


@pytest.mark.parametrize("extra, param", [({"speculation": {"memory": "no"}}, "speculation.memory"),
                                          ({"cache_prompt": 1}, "cache_prompt")])
def test_invalid_values_are_a_400_naming_the_field(client, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       extra_body=extra)
    err = e.value.body
    assert e.value.status_code == 400 and err["param"] == param and "must be true or false" in err["message"]
