"""scripts/record_agent_session.py in front of a real ``localspec serve`` (SmolLM2, mode lookup), started
as a user starts it: a streamed and a plain chat answer through the proxy equal the server's own
(greedy), the recording holds each body as sent and no key, the server's refusal of a wrong key comes
back as it was, and the log has each answer's text, usage and first-token time. The proxy's control flow
on a fake upstream: tests/unit/test_record_agent_session.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest

import helpers

KEY = "record-key"
SERVE: tuple[str, ...] = ()
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "record_agent_session.py"


@pytest.fixture(scope="module")
def proxy(server, tmp_path_factory):
    from localspec.server.process import ServerProcess

    tmp = tmp_path_factory.mktemp("proxy")
    argv = [sys.executable, str(SCRIPT), "--upstream", server.base_url, "--port", "{port}", "--out",
            str(tmp / "session.jsonl"), "--log", str(tmp / "log.jsonl")]
    with ServerProcess(argv, tmp / "proxy.log", headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as proc:
        yield proc, tmp


def read_lines(path: Path, at_least: int = 0) -> list[dict]:
    """The JSON lines of ``path``, once it has ``at_least`` (the log's line comes just after the answer ended)."""
    deadline = time.monotonic() + 10
    while len(path.read_text().splitlines() if path.exists() else []) < at_least:
        assert time.monotonic() < deadline, f"{path} never had {at_least} lines"
        time.sleep(0.05)
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_answers_through_the_proxy_equal_the_servers_and_each_body_is_recorded_as_sent(server, proxy):
    proc, tmp = proxy
    body = {"model": "tiny", "messages": [{"role": "system", "content": "You are terse."},
                                          {"role": "user", "content": "Name three colours."}],
            "max_tokens": 16, "temperature": 0}
    direct = helpers.openai_client(server.base_url, KEY)
    via = helpers.openai_client(proc.base_url, KEY)
    plain = via.chat.completions.create(**body)
    assert plain.choices[0].message.content == direct.chat.completions.create(**body).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       via.chat.completions.create(**body, stream=True, stream_options={"include_usage": True})
                       if c.choices)
    assert streamed == plain.choices[0].message.content and streamed
    wrong = httpx.post(proc.base_url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401, wrong.text
    recorded = read_lines(tmp / "session.jsonl")
    posts = [x for x in recorded if x["path"] == "/v1/chat/completions"]
    assert [x["turn"] for x in recorded] == list(range(len(recorded)))
    assert posts[0]["body"] == body and posts[1]["body"] == {**body, "stream": True,
                                                             "stream_options": {"include_usage": True}}
    assert KEY not in (tmp / "session.jsonl").read_text() and "nope" not in (tmp / "session.jsonl").read_text()
    log = {e["turn"]: e for e in read_lines(tmp / "log.jsonl", len(recorded))}
    first, second, third = (log[x["turn"]] for x in posts)
    assert first["text"] == second["text"] == streamed and second["usage"]["prompt_tokens"] > 0
    assert 0 < second["first_token_s"] <= second["end_s"] and first["finish_reason"] in ("stop", "length")
    assert third["status"] == 401 and third["error"]
