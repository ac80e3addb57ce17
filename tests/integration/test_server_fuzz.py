"""Fuzz ``localspec serve`` on the tiny model (issue 22): schemathesis generates requests from the
server's own ``/openapi.json`` (bodies that fit the schema, and bodies that break it), hypothesis
sends raw JSON with hostile strings and shapes. Expected: no 5xx for any input, no traceback in
the server's log, and the engine answers as before afterwards.

Bounded for CI (derandomized, 170 requests, each answer at most 4 tokens, a context of 384
tokens; about a minute);
``scripts/fuzz.py --scale N`` runs the same checks N times longer with random seeds
(``LOCALSPEC_FUZZ_SCALE``)."""

from __future__ import annotations

import json
import os
from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from helpers import assert_greedy_equal

pytestmark = pytest.mark.tiny

KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: a bound on every generated answer (the fuzz is about the input, not long generations)
MAX_TOKENS = 4
PROBE = [{"role": "user", "content": "Name a colour."}]
#: examples = the CI count x SCALE; a scaled run draws new random examples each time
SCALE = float(os.environ.get("LOCALSPEC_FUZZ_SCALE", "1"))
FUZZ = settings(derandomize=SCALE == 1, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])
#: status codes seen, by test (printed at the end; the lead's note quotes them)
SEEN: dict[str, Counter] = {}
#: (method, path) -> status codes seen by schemathesis: every operation must be reached
REACHED: dict[tuple[str, str], Counter] = {}


#: the flags of this module's server (fixture ``server``)
SERVE = ("--n-ctx", "384", "--max-tokens", str(MAX_TOKENS), "--log-level", "info")


@pytest.fixture(scope="module")
def reference(server):
    """The probe's greedy answer before any fuzzing."""
    return probe(server.base_url)


@pytest.fixture(scope="module")
def schema(server):
    return schemathesis.openapi.from_url(server.base_url + "/openapi.json")


def probe(base: str) -> dict:
    r = httpx.post(base + "/v1/chat/completions", headers=AUTH, timeout=120,
                   json={"messages": PROBE, "max_tokens": 8, "temperature": 0, "stream": True,
                         "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    return {"ids": [t["id"] for e in events if e["choices"] for t in e["choices"][0].get("tokens", [])],
            "text": "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])}


def bound(body):
    """Cap a generated body's answer length (the server's own --max-tokens covers a body without one)."""
    if isinstance(body, dict):
        for key in ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict"):
            if isinstance(body.get(key), (int, float)) and not isinstance(body[key], bool) and (
                    body[key] > MAX_TOKENS or key == "n_predict" and body[key] < 0):
                body[key] = MAX_TOKENS
    return body


def record(test: str, status: int, what) -> None:
    SEEN.setdefault(test, Counter())[status] += 1
    assert status < 500, f"{status} for {what!r}"


@pytest.mark.parametrize("mode, examples", [(GenerationMode.POSITIVE, 40), (GenerationMode.NEGATIVE, 50)])
def test_schemathesis_no_server_errors(server, reference, schema, mode, examples):
    @settings(FUZZ, max_examples=int(examples * SCALE))
    @given(data=st.data())
    def run(data):
        case = data.draw(schema.as_strategy(mode))
        case.body = bound(case.body)
        response = case.call(base_url=server.base_url, headers=AUTH, timeout=60)
        REACHED.setdefault((case.method.upper(), case.path), Counter())[response.status_code] += 1
        record(f"schemathesis-{mode.value}", response.status_code, (case.method, case.path, case.body))

    run()
    seen = SEEN[f"schemathesis-{mode.value}"]
    assert sum(seen.values()) > 0 and not any(status >= 500 for status in seen)


def test_schemathesis_reached_every_operation(schema):
    """Runs after the two generation modes: each operation of /openapi.json (the generation endpoints
    /v1/responses and /infill included) got requests."""
    operations = {(op.method.upper(), op.path) for op in (r.ok() for r in schema.get_all_operations())}
    print("\nschemathesis reached: " + "; ".join(f"{m} {p}: {dict(sorted(c.items()))}"
                                                for (m, p), c in sorted(REACHED.items())))
    assert operations and operations <= set(REACHED), operations - set(REACHED)


# hostile JSON: lone surrogates, control characters, deep and wide nesting, wrong types everywhere
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(st.characters(codec=None), max_size=12),  # surrogates included
                    st.sampled_from(["<|im_start|>", "<|im_end|>\n<|im_start|>system\n", "\ud800", "\x00", ""]))
JSONISH = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) |
                       st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "developer", "tool", 3]),
                                 "content": JSONISH})
CHAT = st.fixed_dictionaries({"messages": st.lists(MESSAGE, max_size=3) | JSONISH},
                             optional={"max_tokens": JSONISH, "stop": JSONISH, "prediction": JSONISH,
                                       "temperature": JSONISH, "stream": st.booleans(), "seed": JSONISH})
COMPLETION = st.fixed_dictionaries({"prompt": JSONISH}, optional={"max_tokens": JSONISH, "stop": JSONISH,
                                                                  "stream": st.booleans()})
RAW = st.one_of(st.binary(max_size=64), st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
                st.integers(1, 3000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n))


@settings(FUZZ, max_examples=int(60 * SCALE))
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]), body=st.one_of(CHAT, COMPLETION))
def test_hostile_json_bodies(server, reference, path, body):
    data = json.dumps(bound(body), ensure_ascii=True).encode()  # lone surrogates as \ud800 escapes
    r = httpx.post(server.base_url + path, content=data, headers={**AUTH, "Content-Type": "application/json"},
                   timeout=60)
    record("hostile-json", r.status_code, body)
    if r.status_code >= 400:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


@settings(FUZZ, max_examples=int(20 * SCALE))
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]), data=RAW)
def test_hostile_raw_bodies(server, reference, path, data):
    r = httpx.post(server.base_url + path, content=data, headers={**AUTH, "Content-Type": "application/json"},
                   timeout=60)
    record("hostile-raw", r.status_code, data[:80])
    assert r.status_code < 500


def test_after_the_fuzz_the_server_is_healthy(server, reference, tiny_engine):
    """Runs last in this module: the log holds no traceback and no 5xx, and the engine answers the probe as before."""
    after = probe(server.base_url)
    prompt = tiny_engine.chat_tokens(PROBE)
    assert_greedy_equal(tiny_engine, prompt, reference["ids"], after["ids"], "after the fuzz")
    log = server.log_tail(1 << 22)
    assert "Traceback" not in log and "unexpected error" not in log
    assert " 500 " not in log and " 503 " not in log
    total = sum(sum(c.values()) for c in SEEN.values())
    print(f"\nfuzz: {total} requests; " + "; ".join(f"{k}: {dict(sorted(v.items()))}" for k, v in SEEN.items()))
    assert total >= 170 * SCALE, SEEN
