"""Scopes (issue 42) on the fake backend: the scope ids (a hash, never the key), the draft memories (one per
scope, one budget, the least recently used scope evicted first), the kept prompt prefixes and the disk store
(a scope finds only its own), the engine's live caches (a scope switch sets the other scope's aside;
``cache_prompt: false`` puts them back), the keys (repeated, comma-separated, from a file), and through the
app: ``/infill``'s draft figures and every endpoint's ``cache_salt`` (the tiny model and the ``openai`` client:
tests/integration/test_server_scopes.py)."""

import ctypes
import json

import pytest

from answers import without_timing
from generation import run
from fakes import FakeModel, WithFimTokens
from fake_server import app_client
from localspec.backend.prompt_store import PromptStore
from localspec.config import ServerSettings
from localspec.core.drafters import DraftMemories
from localspec.core.engine import SpeculativeEngine
from localspec.core.prefix_cache import PrefixCache
from localspec.server.scopes import key_scope, matching_key, scope_id



# -- scope ids -----------------------------------------------------------------------------------------
def test_a_scope_id_is_a_hash_of_the_key_and_the_salt_never_the_key():
    a, b = key_scope("secret-a"), key_scope("secret-b")
    assert key_scope(None) == "" and a != b and "secret" not in a
    assert scope_id(a) == a and scope_id(a, "x") != scope_id(a, "y") != a
    assert scope_id(a, "x") != scope_id(b, "x") and "x" not in scope_id(a, "x").split("/")[-1][:2]
    assert matching_key("k2", ("k1", "k2")) == "k2" and matching_key("k3", ("k1", "k2")) is None
    assert matching_key(None, ("k1",)) is None


# -- draft memories ------------------------------------------------------------------------------------
def test_each_scope_drafts_only_from_its_own_texts():
    mem = DraftMemories(100)
    mem.scope("a").add([1, 2, 3, 4, 5])
    assert mem.scope("a").find([9, 2, 3], 2, 1, 4)[0] == [4, 5]
    assert mem.scope("b").find([9, 2, 3], 2, 1, 4) == ([], 0, 0)


def test_the_scopes_share_one_budget_the_least_recently_used_evicted_first():
    mem = DraftMemories(10)
    mem.scope("a").add([1] * 4)
    mem.scope("b").add([2] * 4)
    mem.scope("a")  # a is used again: b is now the least recently used
    mem.scope("c").add([3] * 4)
    assert mem.tokens <= 10 and mem.scope("b").tokens == 0 and mem.scope("a").tokens == 4
    mem.scope("c").add([4] * 9)  # the scope added to evicts its own oldest last
    assert mem.tokens <= 10 and mem.scope("c").tokens == 9
    assert mem.nbytes == sum(mem.scope(s).nbytes for s in "abc")


# -- prefix cache and disk store -----------------------------------------------------------------------
class Snap:
    def __init__(self, tokens, fill=7):
        self.tokens = tuple(tokens)
        self.nbytes = 4 * len(self.tokens)
        self.data = (ctypes.c_uint8 * self.nbytes)(*([fill] * self.nbytes))
        self.flash_attn = False


def test_a_scope_finds_only_its_own_snapshots_in_memory_and_on_disk(tmp_path):
    store = PromptStore(tmp_path, {"target": {"format": 1, "flash_attn": False}}, 1 << 20)
    cache = PrefixCache(1 << 20, min_tokens=8, store=store)
    cache.put("target", Snap(range(40)), scope="a")
    store.flush()
    assert cache.best("target", list(range(40)), scope="a")[1] == 40
    assert cache.best("target", list(range(40)), scope="b") is None and cache.best("target", list(range(40))) is None
    assert cache.snapshots("target", "a") and not cache.snapshots("target", "b")
    restarted = PromptStore(tmp_path, {"target": {"format": 1, "flash_attn": False}}, 1 << 20)
    assert restarted.best("target", list(range(40)), scope="a")[1] == 40
    assert restarted.best("target", list(range(40)), scope="b") is None


def test_the_scopes_share_the_prefix_cache_budget_least_recently_used_first():
    cache = PrefixCache(1000, min_tokens=8)
    cache.put("target", Snap(range(100)), scope="a")  # 400 bytes each
    cache.put("target", Snap(range(200, 300)), scope="b")
    cache.best("target", list(range(100)), scope="a")  # a used again
    cache.put("target", Snap(range(400, 500)), scope="c")
    assert cache.nbytes <= 1000 and not cache.snapshots("target", "b") and cache.snapshots("target", "a")


# -- the engine's live caches --------------------------------------------------------------------------
class SnapshotModel(FakeModel):
    """A fake model whose KV cache can be saved and restored (its state is the token list)."""

    def save_state(self):
        return Snap(self.cached_tokens) if self.cached_tokens else None

    def load_state(self, state) -> bool:
        self.cached_tokens[:] = state.tokens
        return True


def _run(eng, prompt, cache_prompt=True):
    """The generation of :func:`generation.run` in mode lookup, 6 tokens."""
    return run(eng, prompt, "lookup", 6, draft_max=4, cache_prompt=cache_prompt)[0]


A = [1] + [3, 5] * 30


def test_a_scope_switch_sets_the_live_caches_aside_for_their_scope():
    eng = SpeculativeEngine(SnapshotModel(n_ctx=512), None)
    eng.prefix_cache = PrefixCache(1 << 20, min_tokens=8)
    eng.enter_scope("a")
    _run(eng, A)
    assert _run(eng, A).stats.cached_prompt_tokens == len(A) - 1
    eng.enter_scope("b")
    assert eng.target.n_cached == 0 and _run(eng, A).stats.cached_prompt_tokens == 0  # nothing of a's
    eng.enter_scope("a")
    assert _run(eng, A).stats.cached_prompt_tokens == len(A) - 1  # a's came back from its snapshot


def test_set_aside_and_put_back_leave_a_short_live_prefix_where_it_was():
    eng = SpeculativeEngine(SnapshotModel(n_ctx=512), None)
    eng.prefix_cache = PrefixCache(1 << 20)  # 64 tokens at least: the short prompt gets no snapshot
    short = [1, 4, 6, 8]
    _run(eng, short)
    held = list(eng.target.cached_tokens)
    kept = eng.set_aside()
    assert eng.target.n_cached == 0 and _run(eng, A, cache_prompt=False).stats.cached_prompt_tokens == 0
    eng.put_back(kept)
    assert eng.target.cached_tokens == held and len(eng.prefix_cache) == 0


# -- keys ----------------------------------------------------------------------------------------------
def test_keys_repeated_comma_separated_and_from_a_file(tmp_path):
    from localspec.app.flags import server_settings_from_args
    from localspec.cli import build_parser
    from localspec.errors import ConfigError

    f = tmp_path / "keys"
    f.write_text("# the team\nkey-c\n\n  key-d  \n", encoding="utf-8")
    ns = build_parser().parse_args(["serve", "--api-key", "key-a,key-b", "--api-key", "key-a", "--api-key-file",
                                    str(f)])
    assert server_settings_from_args(ns).api_key == ("key-a", "key-b", "key-c", "key-d")
    assert server_settings_from_args(build_parser().parse_args(["serve"]), api_key_env="e1,e2").api_key == ("e1", "e2")
    assert ServerSettings().api_key == () and ServerSettings(api_key="k").api_key == ("k",)
    for content, said in ((None, "cannot read"), ("# none\n\n", "holds no key")):
        bad = tmp_path / "bad"
        if content is not None:
            bad.write_text(content, encoding="utf-8")
        with pytest.raises(ConfigError, match=f"--api-key-file: .*{said}"):
            server_settings_from_args(build_parser().parse_args(["serve", "--api-key-file", str(bad)]))
    assert "key-a" not in repr(ServerSettings(api_key="key-a"))



@pytest.mark.parametrize("given", [[""], [" "], [","], ["key-a", ""], ["key-a,,key-b", " , "]])
def test_an_empty_api_key_is_refused_without_repeating_the_keys_given(given):
    """``--api-key "$KEY"`` with KEY unset must not start a server open to everyone (as no key would), and the
    error never repeats the other keys (secrets) it was given. Empty parts between commas of a real key list
    are only separators (``"a,,b"``: a and b)."""
    from localspec.app.flags import server_settings_from_args
    from localspec.cli import build_parser
    from localspec.errors import ConfigError

    args = ["serve"] + [a for k in given for a in ("--api-key", k)]
    with pytest.raises(ConfigError, match="--api-key: an API key given is empty") as e:
        server_settings_from_args(build_parser().parse_args(args))
    assert "key-a" not in str(e.value) and "key-b" not in str(e.value)
    assert ServerSettings(api_key="a,,b").api_key == ("a", "b")


# -- through the app -----------------------------------------------------------------------------------
class FimFakeModel(WithFimTokens, SnapshotModel):
    """With FIM tokens, and a chat template that joins the messages' words (for chat and Responses)."""

    def tokenize_chat(self, messages, add_generation_prompt=True, tools=None) -> list[int]:
        return [t for m in messages for t in self.tokenize(m["content"] if isinstance(m["content"], str) else "")]


TEXT = "t3 t5 t7 t11 t13 t5 t7"
def two_keys():
    """A TestClient of the app over :class:`FimFakeModel` (512 tokens) with two API keys."""
    return app_client(FimFakeModel(n_ctx=512), ServerSettings(api_key=("key-a", "key-b")))


def probes(c, key, salt=None):
    """Every endpoint's answer (timings left out) to a prompt that continues A's text."""
    h, s = {"Authorization": f"Bearer {key}"}, ({"cache_salt": salt} if salt else {})
    out = {}
    for path, body in (("/v1/completions", {"prompt": "t11 t13 t5", "max_tokens": 12, "logprobs": 1}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "t5 t7"}], "max_tokens": 6}),
                       ("/v1/responses", {"input": "t11 t13", "max_output_tokens": 6}),
                       ("/infill", {"input_prefix": "t11 t13 t5", "input_suffix": "t2", "n_predict": 12}),
                       ("/v1/completions", {"prompt": "t11 t13 t5", "max_tokens": 12, "stream": True,
                                            "stream_options": {"include_usage": True}})):
        r = c.post(path, json=body | s, headers=h)
        assert r.status_code == 200, r.text
        if body.get("stream"):
            out[path + " stream"] = [without_timing(json.loads(ln[5:])) for ln in r.text.splitlines()
                                     if ln.startswith("data: {")]
        else:
            out[path] = without_timing(r.json())
    return out


@pytest.mark.parametrize("speaker, listener", [(("key-a", None), ("key-b", None)),
                                               (("key-a", "alice"), ("key-a", "bob")),
                                               (("key-a", None), ("key-a", "bob"))])
def test_what_one_scope_sent_shows_nowhere_in_another_scopes_answers(speaker, listener):
    with two_keys() as fresh:
        expected = probes(fresh, *listener)
    with two_keys() as spoken:
        h = {"Authorization": f"Bearer {speaker[0]}"}
        salt = {"cache_salt": speaker[1]} if speaker[1] else {}
        for _ in range(2):
            assert spoken.post("/v1/completions", json={"prompt": TEXT, "max_tokens": 20} | salt,
                               headers=h).status_code == 200
            assert spoken.post("/infill", json={"input_prefix": TEXT, "input_suffix": "t2", "n_predict": 20} | salt,
                               headers=h).status_code == 200
        mine = spoken.post("/infill", json={"input_prefix": "t11 t13 t5", "input_suffix": "t2", "n_predict": 12}
                           | salt, headers=h).json()
        assert mine["timings"]["draft_n"] > 0  # the speaker's own scope drafts from what it sent
        last = spoken.post("/v1/completions", json={"prompt": "t11 t13 t5 t7", "max_tokens": 2} | salt, headers=h)
        assert last.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # the live cache holds it now
        got = probes(spoken, *listener)
    for endpoint in expected:
        assert got[endpoint] == expected[endpoint], endpoint


def test_a_wrong_key_among_several_is_a_401_and_metrics_show_the_memory():
    with two_keys() as c:
        assert c.post("/v1/completions", json={"prompt": TEXT}, headers={"Authorization": "Bearer key-c"}
                      ).status_code == 401
        assert c.post("/v1/completions", json={"prompt": TEXT}, headers={"Authorization": "Bearer key-b"}
                      ).status_code == 200
        metrics = c.get("/metrics", headers={"Authorization": "Bearer key-a"}).text
        line = next(ln for ln in metrics.splitlines() if ln.startswith("localspec_draft_memory_bytes "))
        assert float(line.split()[1]) > 0 and "key-" not in metrics


@pytest.mark.parametrize("path, base", [("/v1/completions", {"prompt": "t1", "max_tokens": 2}),
                                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "t1"}],
                                                                  "max_tokens": 2}),
                                        ("/v1/responses", {"input": "t1", "max_output_tokens": 2}),
                                        ("/infill", {"input_prefix": "t1", "input_suffix": "t2", "n_predict": 2})])
@pytest.mark.parametrize("salt", ["", 5, None])
def test_cache_salt_is_a_non_empty_string_on_every_endpoint(path, base, salt):
    with two_keys() as c:
        r = c.post(path, json=base | {"cache_salt": salt}, headers={"Authorization": "Bearer key-a"})
        if salt is None:
            assert r.status_code == 200, r.text
        else:
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == "cache_salt" and "non-empty string" in err["message"]
