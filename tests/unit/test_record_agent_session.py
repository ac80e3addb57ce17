"""scripts/record_agent_session.py against a tiny fake upstream (control flow only; the real server's
recording is tests/integration/test_record_agent_session_server.py): what a line of the recording holds and
leaves out, answers passed on chunk by chunk, a client's disconnect reaching the upstream, the stable
placeholders of values that differ between runs, and the answer summaries of the log. Both the proxy and
the fake upstream are served by uvicorn on loopback ports, as in use."""

import asyncio
import datetime as dt
import json
import socket
import threading
import time

import httpx
import pytest
import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """An ASGI app served by uvicorn in a thread on a free loopback port, until :meth:`stop`."""

    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


class Upstream:
    """The fake upstream: records what it received; ``/stream`` sends one chunk, waits until the test sets
    ``release``, sends a second; ``/hang`` sends one chunk and waits until its client goes (``gone``)."""

    def __init__(self):
        self.received: list[dict] = []
        self.release = threading.Event()
        self.gone = threading.Event()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.received.append({"method": scope["method"], "path": scope["path"], "query": scope["query_string"],
                              "headers": dict(scope["headers"]), "body": body})
        headers = [(b"content-type", b"text/event-stream")]
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
            while not self.release.is_set():
                await asyncio.sleep(0.01)
            await send({"type": "http.response.body", "body": b"data: two\n\n"})
        elif scope["path"] == "/hang":
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
            self.gone.set()
        else:
            await send({"type": "http.response.start", "status": 418, "headers": [(b"content-type", b"application/json"),
                                                                                (b"x-upstream", b"yes")]})
            await send({"type": "http.response.body", "body": b'{"error": {"message": "teapot"}}'})


@pytest.fixture
def proxied(tmp_path, record_agent_session):
    upstream = Upstream()
    up = Served(upstream)
    recorder = record_agent_session.Recorder(tmp_path / "s.jsonl", tmp_path / "log.jsonl")
    proxy = Served(record_agent_session.Proxy(up.url, recorder))
    yield upstream, proxy.url, tmp_path
    upstream.release.set()
    proxy.stop()
    up.stop()


def lines(path, at_least=0):
    """The JSON lines of ``path``, once it has ``at_least`` (the log's line comes just after the answer ended)."""
    deadline = time.monotonic() + 10
    while at_least and (not path.exists() or len(path.read_text().splitlines()) < at_least):
        assert time.monotonic() < deadline, f"{path} never had {at_least} lines"
        time.sleep(0.02)
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_each_request_is_forwarded_unchanged_and_written_without_its_headers(proxied):
    upstream, url, tmp = proxied
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(url + "/v1/chat/completions?x=1", json=body, headers={"Authorization": "Bearer s3cret-key"})
    assert r.status_code == 418 and r.json() == {"error": {"message": "teapot"}} and r.headers["x-upstream"] == "yes"
    httpx.get(url + "/v1/models", headers={"Authorization": "Bearer s3cret-key"})
    got = upstream.received[0]
    assert got["path"] == "/v1/chat/completions" and got["query"] == b"x=1"
    assert got["headers"][b"authorization"] == b"Bearer s3cret-key" and json.loads(got["body"]) == body
    assert lines(tmp / "s.jsonl") == [
        {"turn": 0, "method": "POST", "path": "/v1/chat/completions?x=1", "content_type": "application/json",
         "body": body},
        {"turn": 1, "method": "GET", "path": "/v1/models", "content_type": None, "body": None}]
    log = lines(tmp / "log.jsonl", 2)
    assert "s3cret" not in (tmp / "s.jsonl").read_text() + (tmp / "log.jsonl").read_text()
    assert [(e["turn"], e["status"]) for e in log] == [(0, 418), (1, 418)] and log[0]["error"] == {"message": "teapot"}


def test_an_answer_is_passed_on_chunk_by_chunk(proxied):
    upstream, url, _ = proxied
    with httpx.stream("POST", url + "/stream", json={}, timeout=10) as r:
        chunks = r.iter_raw()
        # the upstream sends its second chunk only once the first reached the client: a buffering proxy times out
        assert next(chunks) == b"data: one\n\n"
        upstream.release.set()
        assert b"".join(chunks) == b"data: two\n\n"


def test_a_client_that_disconnects_disconnects_the_upstream_request(proxied):
    upstream, url, tmp = proxied
    with httpx.stream("POST", url + "/hang", json={}, timeout=10) as r:
        assert next(r.iter_raw()) == b"data: {}\n\n"
    assert upstream.gone.wait(10), "the upstream never saw its client go"
    assert lines(tmp / "log.jsonl", 1)[0]["disconnected"] is True


def test_values_that_differ_between_runs_become_the_same_placeholder_everywhere(record_agent_session):
    norm = record_agent_session.Normalizer(today=dt.date(2026, 12, 6))
    call, uuid = "call_0123456789abcdef01234567", "3F2504E0-4F89-41D3-9A0C-0305E82C3301"
    first = norm.value({"prompt_cache_key": uuid, "messages": [
        {"role": "system", "content": "Today's date is Sunday, December 6, 2026 (2026-12-06)."},
        {"role": "assistant", "tool_calls": [{"id": call, "type": "function"}]},
        {"role": "tool", "tool_call_id": call, "content": "12", "n": 3, "ok": True}]})
    second = norm.value({"call": call, "other": "call_ffffffffffffffffffffffff", "key": uuid.lower()})
    assert first == {"prompt_cache_key": "00000000-0000-4000-8000-000000000001", "messages": [
        {"role": "system", "content": "Today's date is Thursday, January 1, 2026 (2026-01-01)."},
        {"role": "assistant", "tool_calls": [{"id": "call_000000000000000000000001", "type": "function"}]},
        {"role": "tool", "tool_call_id": "call_000000000000000000000001", "content": "12",
         "n": 3, "ok": True}]}
    assert second == {"call": "call_000000000000000000000001", "other": "call_000000000000000000000002",
                      "key": "00000000-0000-4000-8000-000000000001"}


def test_codex_ids_and_timestamps_become_placeholders_and_normalizing_twice_changes_nothing(record_agent_session):
    now = 1796527488.0  # 2026-12-06, when Codex's first session here was recorded
    norm = record_agent_session.Normalizer(today=dt.date(2026, 12, 6), now=now)
    body = {"input": [{"type": "message", "id": "msg_6d87c758-037e-5168-a9f3-c0450af0c53b"}],
            "client_metadata": {"meta": '{"turn_started_at_unix_ms":1796527488802,"n":1234567890123}'},
            "created": 1796527400, "max_tokens": 32768, "seed": 1796527488802 * 10}
    once = norm.value(body)
    assert once == {"input": [{"type": "message", "id": "msg_00000000-0000-4000-8000-000000000001"}],
                    "client_metadata": {"meta": '{"turn_started_at_unix_ms":1767225600000,"n":1234567890123}'},
                    "created": 1767225600, "max_tokens": 32768, "seed": 17965274888020}
    assert record_agent_session.Normalizer(today=dt.date(2026, 12, 6), now=now).value(once) == once


def test_the_summary_joins_streamed_text_and_tool_calls_and_skips_keepalives(record_agent_session):
    m = record_agent_session
    keepalive = {"choices": [{"index": 0, "delta": {}}]}
    events = [keepalive, {"choices": [{"delta": {"role": "assistant", "content": "I will "}}]},
              {"choices": [{"delta": {"content": "read it"}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "read",
                                                                                            "arguments": "{\"pa"}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "th\": 1}"}}]},
                            "finish_reason": "tool_calls"}]},
              {"choices": [], "usage": {"prompt_tokens": 9}}]
    assert not m.carries_output(keepalive) and m.carries_output(events[1])
    assert m.answer_summary(events) == {"text": "I will read it", "tool_calls": [["read", "{\"path\": 1}"]],
                                        "finish_reason": "tool_calls", "usage": {"prompt_tokens": 9}, "error": None}
    responses = [{"type": "response.output_text.delta", "delta": "ok"},
                 {"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 5},
                  "output": [{"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"}]}}]
    assert m.answer_summary(responses) == {"text": "ok", "tool_calls": [["shell", "{}"]], "finish_reason": "completed",
                                           "usage": {"input_tokens": 5}, "error": None}
    assert m.sse_events(b"event: x\ndata: {\"a\": 1}\n\ndata: [DONE]\n\n") == [{"a": 1}]
