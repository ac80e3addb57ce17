"""Scopes on the tiny model through the real server and the ``openai`` client: nothing one API key (or one
``cache_salt``) sent shows in what another gets back (issue 42).

The oracle: client A sends a text; client B then sends the text cut 30 words in, followed by a guess at
the next word (the right one and wrong ones), on every endpoint, streamed and not. Before scopes, the right
guess drafted from A's text in the draft memory and reused A's cached prompt: ``speculation.memory``,
``speculation.drafters``, the token kinds, ``cached_tokens`` and ``/infill``'s ``draft_n`` told B the next
word. (SmolLM2 has no fill-in-the-middle tokens: ``/infill``'s figures are checked the same way on the
fake backend, tests/unit/server/test_scopes.py.) Now every text-dependent field B gets back (everything but wall-clock timings and queue figures) is
the very value a server on which A never spoke gives to the same requests: the test runs B's probes on two
servers, a fresh one and one where A spoke first, and compares. Within one scope the memory still works:
A's own probe with the right word drafts from what A sent.

``cache_prompt: false`` neither reads nor feeds the caches or the draft memory, and leaves the live cached
prefix of the conversation before it where it was (a short one too: below the 64 tokens a snapshot needs).

The server runs in mode lookup without a draft model, as in test_server_memory.py.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from answers import without_timing
from helpers import tiny_lookup_server

pytestmark = pytest.mark.tiny

KEY_A, KEY_B = "scope-key-alice", "scope-key-bob"
#: A's text: 120 words of a made-up inventory the tiny model cannot guess from its start
WORDS = ("The inventory of the northern storehouse lists seven copper kettles, eleven walnut crates, a violet "
         "lantern, nineteen linen sacks of barley, a brass compass, four oak barrels of cider, twelve iron "
         "hooks, a crimson saddle, thirty candles of beeswax, two spools of hemp rope, a silver bell, sixteen "
         "clay jars of honey, a green umbrella, eight wool blankets, a marble chessboard, five tin buckets, a "
         "broken harp, twenty bundles of firewood, a leather satchel, three glass bottles of ink, a painted "
         "drum, nine pewter plates, a cedar chest of maps, fourteen bars of soap, a velvet curtain, six "
         "baskets of apples, an ivory comb, and one yellow kite that nobody remembers buying for the spring "
         "festival in the valley below the old mill").split()
TEXT = " ".join(WORDS)
CUT = 30
PREFIX = " ".join(WORDS[:CUT])
RIGHT, WRONG = WORDS[CUT], ["pumpkin", "seventeen"]
class Client:
    """One side of the conversation: an API key and, optionally, a ``cache_salt`` sent with every request."""

    def __init__(self, base_url: str, key: str, salt: str | None = None) -> None:
        self.base_url, self.key, self.salt = base_url.rstrip("/"), key, salt
        self.openai = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=300)

    def extra(self, **more) -> dict | None:
        body = ({"cache_salt": self.salt} if self.salt else {}) | more
        return body or None

    def say(self, text: str) -> None:
        """Send ``text`` as a completion and as a chat message (what the probes could find)."""
        self.openai.completions.create(model="tiny", prompt=text, max_tokens=8, temperature=0,
                                       extra_body=self.extra())
        self.openai.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}],
                                            max_tokens=8, temperature=0, extra_body=self.extra())

    def probe(self, prompt: str) -> dict:
        """Every text-dependent field of the answers to ``prompt`` on each endpoint, streamed and not."""
        c, out = self.openai, {}
        whole = c.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0, logprobs=2,
                                     extra_body=self.extra())
        out["completions"] = whole.model_dump()
        chunks = list(c.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0, logprobs=2,
                                           stream=True, stream_options={"include_usage": True},
                                           extra_body=self.extra()))
        out["completions_stream"] = [ch.model_dump() for ch in chunks]
        messages = [{"role": "user", "content": prompt}]
        out["chat"] = c.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0,
                                                logprobs=True, top_logprobs=2, extra_body=self.extra()).model_dump()
        out["chat_stream"] = [ch.model_dump() for ch in c.chat.completions.create(
            model="tiny", messages=messages, max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body=self.extra())]
        out["responses"] = c.responses.create(model="tiny", input=prompt, max_output_tokens=12, temperature=0,
                                              extra_body=self.extra()).model_dump()
        return without_timing(out)

    def memory(self, prompt: str) -> dict:
        """The ``speculation.memory`` object of a greedy completion of ``prompt``."""
        r = self.openai.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0,
                                           extra_body=self.extra())
        return r.model_extra["speculation"]["memory"]

    def cached(self, prompt: str, **extra) -> int:
        """``cached_tokens`` of a short greedy completion of ``prompt``."""
        r = self.openai.completions.create(model="tiny", prompt=prompt, max_tokens=4, temperature=0,
                                           extra_body=self.extra(**extra))
        return r.usage.prompt_tokens_details.cached_tokens


def guesses() -> list[str]:
    return [f"{PREFIX} {word}" for word in (RIGHT, *WRONG)]


@pytest.fixture(scope="module")
def servers(tiny_path, tmp_path_factory):
    """Two fresh servers with keys A and B: (base URL of one where nobody spoke, of one where A spoke)."""
    extra = ("--api-key", KEY_B)
    with tiny_lookup_server(tiny_path, tmp_path_factory.mktemp("serve-fresh"), KEY_A, extra) as fresh, \
            tiny_lookup_server(tiny_path, tmp_path_factory.mktemp("serve-spoken"), KEY_A, extra) as spoken:
        yield str(fresh.base_url), str(spoken.base_url)


#: the listeners: another key; the same key with another salt; another key with a salt
LISTENERS = {"another key": (KEY_B, None), "another salt": (KEY_A, "bob"), "another key and salt": (KEY_B, "bob")}


def test_nothing_a_scope_sent_shows_in_another_scopes_answers(servers):
    fresh_url, spoken_url = servers
    for key, salt in ((KEY_A, None), (KEY_A, "alice")):  # A speaks, without a salt and with its own
        Client(spoken_url, key, salt).say(TEXT)
    for name, (key, salt) in LISTENERS.items():
        fresh, spoken = Client(fresh_url, key, salt), Client(spoken_url, key, salt)
        for prompt in guesses():
            expected, got = fresh.probe(prompt), spoken.probe(prompt)
            for endpoint in expected:
                assert got[endpoint] == expected[endpoint], (name, prompt.rsplit(" ", 1)[-1], endpoint)


def test_within_a_scope_the_memory_still_drafts_and_the_prefix_is_reused(servers):
    _, url = servers
    alice = Client(url, KEY_A, "carol")  # a scope of its own on this server
    alice.say(TEXT)
    mem = alice.memory(f"{PREFIX} {RIGHT}")
    assert mem["enabled"] and mem["rounds"] > 0 and mem["drafted"] > 0, mem
    assert alice.cached(TEXT) > 0
    assert Client(url, KEY_A, "dave").cached(TEXT) == 0  # another salt: nothing of it


def test_cache_salt_must_be_a_non_empty_string(servers):
    _, url = servers
    c = Client(url, KEY_A)
    for bad in ("", 3, ["x"]):
        with pytest.raises(openai.BadRequestError) as e:
            c.openai.completions.create(model="tiny", prompt="hi", max_tokens=2, extra_body={"cache_salt": bad})
        assert e.value.body["param"] == "cache_salt" and "non-empty string" in e.value.body["message"]


def test_cache_prompt_false_neither_reads_nor_feeds_and_leaves_the_cached_prefix(servers):
    _, url = servers
    c = Client(url, KEY_B, "erin")
    short = "Here are the numbers in order: 1, 2, 3, 4, 5, 6,"  # under 64 tokens: no snapshot, only the live cache
    c.cached(short)
    before = c.cached(short)
    assert before > 0
    assert c.cached(TEXT, cache_prompt=False) == 0
    assert c.cached(short) == before  # the live prefix is where it was
    # fed nothing: TEXT said with cache_prompt false is not in the memory, nor its prompt in a cache
    assert c.cached(TEXT, cache_prompt=False) == 0
    assert c.memory(f"{PREFIX} {RIGHT}")["rounds"] == 0
    c.say(TEXT)
    assert c.memory(f"{PREFIX} {RIGHT}")["rounds"] > 0  # the same scope, fed normally: it drafts
    r = c.openai.completions.create(model="tiny", prompt=f"{PREFIX} {RIGHT}", max_tokens=12, temperature=0,
                                    extra_body=c.extra(cache_prompt=False))
    assert r.model_extra["speculation"]["memory"]["rounds"] == 0  # and it reads none


def test_metrics_show_the_draft_memory_bytes_and_nothing_per_scope(servers):
    _, url = servers
    r = httpx.get(url.rstrip("/").removesuffix("/v1") + "/metrics", headers={"Authorization": f"Bearer {KEY_A}"})
    lines = [ln for ln in r.text.splitlines() if ln.startswith("localspec_draft_memory_bytes ")]
    assert lines and float(lines[0].split()[1]) > 0
    for secret in (KEY_A, KEY_B, "alice", "bob"):
        assert secret not in r.text
