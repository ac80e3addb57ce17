"""The per-request ``speculation`` extension of ``localspec serve`` (``{"mode", "draft_max"}``),
through the real ``openai`` client's ``extra_body`` against a server on the tiny model.

The server runs in mode lookup without a draft model; requests switch to other modes and caps.
"""

from __future__ import annotations

import openai
import pytest

import helpers
from helpers import assert_greedy_equal

pytestmark = pytest.mark.tiny

#: this module's server (fixture ``server``): the defaults of helpers.tiny_lookup_process
SERVE = ()
KEY = "spec-key"
#: a prompt whose answer repeats itself: prompt lookup drafts long accepted runs on it
LIST = [{"role": "user", "content": "Repeat exactly, ten times, one per line: the cat sat on the mat."}]


def chat(client, speculation=None, stream=False, **kw):
    """:func:`helpers.chat` of :data:`LIST` (at most 48 tokens unless ``kw`` says otherwise), with the
    ``speculation`` field when given."""
    extra = {"speculation": speculation} if speculation is not None else None
    return helpers.chat(client, LIST, stream=stream, extra_body=extra, **{"max_tokens": 48, **kw})


def test_without_the_field_the_server_settings_are_reported(client):
    r = chat(client)
    spec = r.model_extra["speculation"]
    assert spec["mode"] == "lookup" and spec["draft_max"] == 8  # the fixed modes' default cap


def test_a_request_chooses_its_mode_and_cap_and_the_answer_does_not_change(client):
    base = chat(client)
    none = chat(client, {"mode": "none"})
    spec = none.model_extra["speculation"]
    assert spec["mode"] == "none" and spec["drafted"] == 0 and spec["drafters"] == {}
    assert none.choices[0].message.content == base.choices[0].message.content  # greedy: the same text
    capped = chat(client, {"draft_max": 2})
    spec = capped.model_extra["speculation"]
    assert spec["mode"] == "lookup" and spec["draft_max"] == 2
    lk = spec["drafters"]["lookup"]
    assert lk["drafted"] > 0 and lk["drafted"] <= 2 * lk["rounds"]  # every round drafted at most 2
    assert capped.choices[0].message.content == base.choices[0].message.content
    wide = chat(client, {"mode": "lookup", "draft_max": 32}).model_extra["speculation"]
    assert wide["draft_max"] == 32 and wide["drafters"]["lookup"]["drafted"] > 2 * wide["drafters"]["lookup"]["rounds"]


def test_a_request_in_mode_auto_is_exact_and_reports_auto(client, tiny_engine):
    prompt = tiny_engine.chat_tokens(LIST)
    ref = chat(client, {"mode": "none"}, stream=True, stream_options={"include_usage": True})
    ref_ids = [t["id"] for c in ref if c.choices for t in (c.choices[0].model_extra or {}).get("tokens", [])]
    chunks = list(chat(client, {"mode": "auto", "draft_max": 16}, stream=True, stream_options={"include_usage": True}))
    ids = [t["id"] for c in chunks if c.choices for t in (c.choices[0].model_extra or {}).get("tokens", [])]
    assert_greedy_equal(tiny_engine, prompt, ref_ids, ids, "speculation auto")
    spec = chunks[-1].model_extra["speculation"]  # the usage chunk carries it, as the last content chunk does
    assert spec["mode"] == "auto" and spec["draft_max"] == 16


@pytest.mark.parametrize("speculation, param", [
    ({"mode": "fast"}, "speculation.mode"),
    ({"mode": "draft"}, "speculation.mode"),  # this server has no draft model
    ({"draft_max": 0}, "speculation.draft_max"),
    ({"draft_max": 65}, "speculation.draft_max"),
    ({"draft_max": "8"}, "speculation.draft_max"),  # JSON types are checked strictly
    ({"draft_max": 8.5}, "speculation.draft_max"),
    ({"gamma": 4}, "speculation.gamma"),
    ("auto", "speculation"),
])
def test_bad_speculation_gets_400_naming_the_key(client, speculation, param):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, speculation, max_tokens=4)
    err = e.value.body
    assert e.value.status_code == 400 and err["param"] == param and err["type"] == "invalid_request_error"
    assert err["message"] and "Traceback" not in err["message"]


def test_completions_take_it_too(client):
    r = client.completions.create(model="tiny", prompt="1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=24, temperature=0,
                                  extra_body={"speculation": {"mode": "lookup", "draft_max": 3}})
    spec = r.model_extra["speculation"]
    assert spec["mode"] == "lookup" and spec["draft_max"] == 3
    assert spec["drafted"] <= 3 * spec["rounds"]
