"""The server's draft memory and ``cache_prompt`` on the fake backend (the tiny model and the openai client:
tests/integration/test_server_memory.py): a request drafts from what earlier requests said unless it opts out
(``speculation.memory: false``), the answer never changes, and ``cache_prompt: false`` neither reuses nor leaves
a cached prompt prefix."""

import pytest

from fakes import FakeModel
from fake_server import app_client
from localspec.config import ServerSettings

#: the fake model's next token depends on the last two: both prompts end "t5 t7", so their answers are the same
#: text, which the second prompt does not hold
FIRST, SECOND = "t3 t5 t7", "t11 t13 t5 t7"
OFF = {"enabled": False, "rounds": 0, "drafted": 0, "accepted": 0}


def complete(c, prompt, **extra):
    r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 30, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_request_drafts_from_an_earlier_ones_answer_unless_it_opts_out():
    served = app_client(FakeModel())
    memory = served.app.state.worker.memory
    with served as c:
        off = complete(c, SECOND, speculation={"memory": False})
        assert off["speculation"]["memory"] == OFF and memory.texts == 0  # neither read nor fed
        first = complete(c, FIRST)
        assert first["speculation"]["memory"]["enabled"] and memory.texts == 1
        on = complete(c, SECOND)
        assert on["choices"][0]["text"] == off["choices"][0]["text"]  # the same answer, faster
        mem = on["speculation"]["memory"]
        assert mem["enabled"] and mem["rounds"] > 0 and mem["accepted"] >= 20
        assert mem["accepted"] <= on["speculation"]["drafters"]["lookup"]["accepted"]
        assert on["speculation"]["rounds"] < off["speculation"]["rounds"]
        again_off = complete(c, SECOND, speculation={"memory": False, "mode": "lookup"})
        assert again_off["speculation"]["memory"] == OFF and again_off["choices"][0]["text"] == on["choices"][0]["text"]


def test_a_server_without_memory_reports_it_off():
    served = app_client(FakeModel(), ServerSettings(draft_memory_tokens=0))
    assert served.app.state.worker.memory is None
    with served as c:
        complete(c, FIRST)
        assert complete(c, SECOND)["speculation"]["memory"] == OFF


def test_cache_prompt_false_neither_reuses_nor_leaves_a_cached_prefix():
    with app_client(FakeModel()) as c:
        def cached(**extra):
            return complete(c, SECOND, **extra)["usage"]["prompt_tokens_details"]["cached_tokens"]

        assert cached() == 0
        assert cached() == 3  # the default reuses the prompt's prefix (all but its last token)
        assert cached(cache_prompt=False) == 0
        assert cached() == 0  # it left nothing in the cache either
        assert cached(cache_prompt=True) == 3


@pytest.mark.parametrize("endpoint, body, param, message", [
    ("completions", {"speculation": {"memory": "no"}}, "speculation.memory",
     "speculation.memory must be true or false"),
    ("chat/completions", {"speculation": {"memory": 0}}, "speculation.memory",
     "speculation.memory must be true or false"),
    ("completions", {"cache_prompt": 1}, "cache_prompt", "cache_prompt must be true or false"),
    ("chat/completions", {"cache_prompt": "false"}, "cache_prompt", "cache_prompt must be true or false"),
])
def test_invalid_memory_and_cache_prompt_values_are_a_400_naming_them(endpoint, body, param, message):
    with app_client(FakeModel()) as c:
        base = {"prompt": FIRST} if endpoint == "completions" else {"messages": [{"role": "user", "content": "hi"}]}
        r = c.post(f"/v1/{endpoint}", json={**base, **body})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == param and err["message"] == message


def test_the_memory_budget_is_a_serve_flag():
    from localspec.app.flags import server_settings_from_args
    from localspec.cli import build_parser
    from localspec.errors import ConfigError

    assert server_settings_from_args(build_parser().parse_args(["serve"])).draft_memory_tokens == 1 << 18
    ns = build_parser().parse_args(["serve", "--draft-memory-tokens", "0"])
    assert server_settings_from_args(ns).draft_memory_tokens == 0
    with pytest.raises(ConfigError, match="--draft-memory-tokens"):
        server_settings_from_args(build_parser().parse_args(["serve", "--draft-memory-tokens", "-1"]))
