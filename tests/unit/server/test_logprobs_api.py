"""Logprobs on the server (issue 32, item 3) on the fake backend: OpenAI's shapes for chat and
completions, streamed and not, the values the engine computed, and the validation of the fields."""

import json
from functools import partial

import pytest

from chat_fakes import FakeChatModel
from localspec.core.sampling import log_softmax

PROMPT = "t3 t5 t7"


#: the fake target of fixture ``client`` (tests/conftest.py): 40-token replies
MODEL = partial(FakeChatModel, reply_len=40)


def expected(tokens: list[str]) -> list[float]:
    """The fake target's raw logprob of each generated token after the prompt (``"t9 "`` -> 9)."""
    seq, out = [3, 5, 7], []
    for t in tokens:
        tid = int(t.strip()[1:])
        out.append(float(log_softmax(FakeChatModel(reply_len=40).logits_after(seq))[tid]))
        seq.append(tid)
    return out


def sse(r) -> list[dict]:
    return [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and "[DONE]" not in line]


def test_off_by_default_is_null(client):
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4}).json()
    assert r["choices"][0]["logprobs"] is None


def test_completion_shape_and_values(client):
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "logprobs": 2}).json()
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(lp["tokens"]) == r["choices"][0]["text"] and len(lp["tokens"]) == 6
    assert lp["token_logprobs"] == pytest.approx(expected(lp["tokens"]), abs=1e-9)
    assert all(len(d) == 2 and max(d.values()) == d[tok] for d, tok in zip(lp["top_logprobs"], lp["tokens"]))
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(6)]
    streamed = sse(client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "logprobs": 2,
                                                        "stream": True}))
    parts = [c["choices"][0]["logprobs"] for c in streamed if c["choices"] and c["choices"][0]["logprobs"]]
    assert [t for p in parts for t in p["tokens"]] == lp["tokens"]
    assert [o for p in parts for o in p["text_offset"]] == lp["text_offset"]  # offsets continue across chunks


def test_chat_shape_and_values(client):
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 5, "logprobs": True, "top_logprobs": 3}
    r = client.post("/v1/chat/completions", json=body).json()
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 5 and "".join(e["token"] for e in content) == r["choices"][0]["message"]["content"]
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"} and bytes(e["bytes"]).decode() == e["token"]
        assert len(e["top_logprobs"]) == 3 and e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
    streamed = sse(client.post("/v1/chat/completions", json={**body, "stream": True}))
    chunks = [e for c in streamed if c["choices"] and c["choices"][0]["logprobs"]
              for e in c["choices"][0]["logprobs"]["content"]]
    assert chunks == content
    only = client.post("/v1/chat/completions", json={**body, "top_logprobs": None}).json()
    assert all(e["top_logprobs"] == [] for e in only["choices"][0]["logprobs"]["content"])


@pytest.mark.parametrize("path, kw, param", [
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": "yes"}, "logprobs"),
    ("/v1/completions", {"logprobs": 6}, "logprobs"),
    ("/v1/completions", {"logprobs": True}, "logprobs"),
])
def test_bad_values_are_400_naming_the_field(client, path, kw, param):
    body = {"messages": [{"role": "user", "content": PROMPT}]} if "chat" in path else {"prompt": PROMPT}
    r = client.post(path, json={**body, "max_tokens": 2, **kw})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param and err["type"] == "invalid_request_error", r.text


def test_no_op_values_are_accepted(client):
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2,
                                                  "logprobs": False, "top_logprobs": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["logprobs"] is None


def test_completion_keys_are_distinct_and_true():
    """Completions' keys (issue 43): a partial UTF-8 token is ``bytes:\\xNN``; two tokens with the same bytes
    keep distinct keys (the chosen one its own, the other ``token_id:N``); the chosen token is added when it
    is not among the k most probable, with its own logprob."""
    from localspec.server.shapes import TokenLogprob, completion_token_key, completion_top

    assert completion_token_key(list("🎉".encode())[:2]) == "bytes:\\xf0\\x9f"
    assert completion_token_key(list(b"ab")) == "ab"
    emoji = [list(b"\xf0\x9f"), list(b"\xf0\x9f\x8e"), list(b"A")]
    e = TokenLogprob("A", [65], -2.0, [("\ufffd", emoji[0], -0.5), ("\ufffd", emoji[1], -1.0), ("A", [65], -1.5)],
                     1, id=7, top_ids=(3, 4, 5))
    assert completion_top(e) == {"bytes:\\xf0\\x9f": -0.5, "bytes:\\xf0\\x9f\\x8e": -1.0, "token_id:5": -1.5, "A": -2.0}
    e = TokenLogprob("A", [65], -1.5, [("\ufffd", emoji[0], -0.5), ("A", [65], -1.5)], 1, id=5, top_ids=(3, 5))
    assert completion_top(e) == {"bytes:\\xf0\\x9f": -0.5, "A": -1.5}
    assert completion_top(TokenLogprob("A", [65], -1.5, [], 1, id=5)) == {}
