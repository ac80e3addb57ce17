"""One request per error kind to every generation endpoint, streamed and not: the status, and the error
object's ``type``, ``param`` and ``code`` (localspec/server/errors.py: one table, one translator).

The engine is the fake one; it fails on demand, either when the generation is asked for (before the
answer starts: the HTTP status says it) or at its first round (the answer has started: a stream ends
with an error event, a whole answer still gets the status)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from chat_fakes import FakeChatModel
from fakes import WithFimTokens
from localspec.config import ServerSettings
from localspec.core.engine import SpeculativeEngine
from localspec.errors import BackendError, ConfigError, ContextOverflowError, WorkerError
from localspec.server.errors import ANSWERS, INTERNAL, ApiError, answer_for, translate
from localspec.server.shapes import ResponseShape

KEY = {"Authorization": "Bearer k"}


class FimChatModel(WithFimTokens, FakeChatModel):
    """The fake chat model with FIM tokens, so that every endpoint serves it."""


class FailingGeneration:
    """A generation whose first step raises ``error`` (the answer has started: Started was posted)."""

    def __init__(self, gen, error: Exception) -> None:
        self.gen, self.error = gen, error

    def __iter__(self):
        raise self.error

    def __getattr__(self, name):
        return getattr(self.gen, name)


class FailingEngine(SpeculativeEngine):
    """Raises ``failure[0]`` when asked to generate (``failure[1]`` "before") or at the first round ("during");
    with ``hold``, the next generation waits until it is set (the running request a queued one waits behind)."""

    failure: tuple[Exception, str] | None = None
    hold: threading.Event | None = None
    #: raised by put_back (the caches set aside for a ``cache_prompt: false`` request), when set
    put_back_failure: Exception | None = None

    def put_back(self, kept):
        if self.put_back_failure is not None:
            raise self.put_back_failure
        super().put_back(kept)

    def generate(self, *a, **kw):
        hold, self.hold, failure = self.hold, None, self.failure
        if hold is not None:
            assert hold.wait(30), "the held generation was never released"
        if failure is None:
            return super().generate(*a, **kw)
        error, when = failure
        if when == "before":
            raise error
        return FailingGeneration(super().generate(*a, **kw), error)


ENDPOINTS = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "t3 t5"}], "max_tokens": 4},
    "/v1/completions": {"prompt": "t3 t5", "max_tokens": 4},
    "/v1/responses": {"input": "t3 t5", "max_output_tokens": 4},
    "/infill": {"input_prefix": "t3", "input_suffix": "t5", "n_predict": 4},
}
#: the parameter a request's prompt is named by (the Responses API's name for the chat messages)
PROMPT = {"/v1/chat/completions": "messages", "/v1/completions": "prompt", "/v1/responses": "input",
          "/infill": "prompt"}
#: a field of each endpoint that takes a temperature
TEMPERATURE = "temperature"
#: the body of each endpoint with far too long a prompt (the fake's window is 256 tokens)
LONG = " ".join(["t3"] * 300)
TOO_LONG = {"/v1/chat/completions": {"messages": [{"role": "user", "content": LONG}]}, "/v1/completions": {"prompt": LONG},
            "/v1/responses": {"input": LONG}, "/infill": {"input_prefix": LONG}}

#: what the engine raises -> (status, type, param (True: the prompt's), code)
ENGINE_ERRORS = {
    "localspec": (ConfigError("the model cannot do that", "ask another"), (400, "invalid_request_error", True, None)),
    "context": (ContextOverflowError("too long for the window"), (400, "invalid_request_error", True, None)),
    "backend": (BackendError("llama_decode returned -1"), (500, "server_error", None, None)),
    "worker": (WorkerError("the RPC worker 10.0.0.2:50052 is down", "start it"),
               (503, "server_error", None, "worker_unavailable")),
    "bug": (RuntimeError("secret internal detail"), (500, "server_error", None, None)),
}


#: the server of fixture ``client`` (tests/conftest.py): a body limit of 10 KiB
MODEL, ENGINE, SERVER = FimChatModel, FailingEngine, ServerSettings(api_key="k", max_body_mb=0.01)


def answered(r, path: str, stream: bool) -> tuple:
    """(status, type, param, code) of an error answer: the HTTP answer's, or a started stream's last event's
    (the Responses API's ``error`` event has no ``type``: None)."""
    if r.status_code != 200:
        err = r.json()["error"]
        return r.status_code, err["type"], err["param"], err["code"], err["message"]
    assert stream, r.text
    last = json.loads([ln[5:] for ln in r.text.splitlines() if ln.startswith("data:")][-1])
    err = last if path == "/v1/responses" else last["error"]
    assert path != "/v1/responses" or err["type"] == "error", last
    return 200, None if path == "/v1/responses" else err["type"], err["param"], err["code"], err["message"]


def post(c, path: str, body: dict, stream: bool, headers=KEY):
    return c.post(path, json=body | ({"stream": True} if stream else {}), headers=headers)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("kind", ENGINE_ERRORS)
@pytest.mark.parametrize("when", ["before", "during"])
def test_an_engine_error_is_answered_alike_on_every_endpoint(client, kind, path, stream, when, caplog):
    c, engine = client, client.app.state.served.engine
    error, (status, type_, param, code) = ENGINE_ERRORS[kind]
    engine.failure = (error, when)
    try:
        r = post(c, path, ENDPOINTS[path], stream)
    finally:
        engine.failure = None
    got = answered(r, path, stream)
    if stream and when == "during":  # the answer had started: its last event says it
        status, type_ = 200, None if path == "/v1/responses" else type_
    assert got[:4] == (status, type_, PROMPT[path] if param else None, code), got
    if kind == "bug":
        assert got[4] == INTERNAL and "secret internal detail" in caplog.text
    else:
        assert error.message in got[4]
    assert post(c, path, ENDPOINTS[path], stream).status_code == 200  # and the server goes on


def answered_within(c, path: str, body: dict, seconds: float = 30.0):
    """``post`` from another thread: its response, or None when none came within ``seconds``."""
    got = []
    t = threading.Thread(target=lambda: got.append(post(c, path, body, False)), daemon=True)
    t.start()
    t.join(seconds)
    return got[0] if got else None


def test_caches_lost_with_the_worker_leave_the_engine_thread_serving(client, caplog):
    """A ``cache_prompt: false`` request whose model lost its RPC worker: putting back the caches set aside
    for it fails too (the model went with its worker). The request gets its 503 and the next one its answer;
    that failure once ended the engine thread, and every later request waited forever (found with two real
    workers: tests/integration/test_rpc.py)."""
    c, engine = client, client.app.state.served.engine
    lost = WorkerError("the RPC worker 10.0.0.2:50052 is down", "start it")
    engine.failure, engine.put_back_failure = (lost, "before"), lost
    try:
        r = answered_within(c, "/v1/completions", ENDPOINTS["/v1/completions"] | {"cache_prompt": False})
    finally:
        engine.failure = engine.put_back_failure = None
    assert r is not None, "no answer: the engine thread ended"
    assert answered(r, "/v1/completions", False)[:4] == (503, "server_error", None, "worker_unavailable")
    assert "lost with the model" in caplog.text
    r = answered_within(c, "/v1/completions", ENDPOINTS["/v1/completions"])
    assert r is not None and r.status_code == 200, r


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_request_error_is_answered_alike_on_every_endpoint(client, path, stream):
    """The request's own faults, each checked where it is found: the route, the body limit, JSON, the
    body's validation, the worker's checks, the queue."""
    c = client
    body = ENDPOINTS[path] | ({"stream": True} if stream else {})

    def answer(r) -> tuple:
        return answered(r, path, stream)[:4]

    assert answer(c.post(path, json=body)) == (401, "authentication_error", None, "invalid_api_key")
    assert answer(c.get(path, headers=KEY)) == (405, "invalid_request_error", None, None)
    assert answer(c.post(path, content=b"{", headers=KEY)) == (400, "invalid_request_error", None, "invalid_json")
    big = json.dumps(body | {"user": "x" * 20_000}).encode()
    assert answer(c.post(path, content=big, headers=KEY)) == (413, "invalid_request_error", None, "request_too_large")
    assert answer(c.post(path, json=body | {TEMPERATURE: 9}, headers=KEY)) == (
        400, "invalid_request_error", TEMPERATURE, None)
    assert answer(c.post(path, json=body | {"speculation": {"mode": "draft"}}, headers=KEY)) == (
        400, "invalid_request_error", "speculation.mode", None)
    assert answer(c.post(path, json=body | TOO_LONG[path], headers=KEY)) == (
        400, "invalid_request_error", PROMPT[path], "context_length_exceeded")
    worker = c.app.state.worker
    worker.draining = True
    try:
        assert answer(c.post(path, json=body, headers=KEY)) == (503, "server_error", None, "server_shutdown")
    finally:
        worker.draining = False


def test_the_table_answers_each_exception_by_its_nearest_class():
    assert answer_for(WorkerError("down")) is ANSWERS[WorkerError]
    assert answer_for(ContextOverflowError("long")).status == 400  # a LocalspecError
    assert answer_for(KeyError("x")).type == "server_error"
    e = ApiError(429, "wait", None, "queue_full", {"Retry-After": "3"})
    assert translate(e) is e and e.body()["error"]["type"] == "rate_limit_error"
    assert translate(ConfigError("no FIM tokens", "use a coder model"), "suffix", "fim_unsupported").body() == {
        "error": {"message": "no FIM tokens (use a coder model)", "type": "invalid_request_error", "param": "suffix",
                  "code": "fim_unsupported"}}


# -- issue 45: a queued stream starts at once; what goes wrong later is its last event --------------------
def until(check, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"waited {seconds:g} s for {what}"
        time.sleep(0.005)


def behind_a_running_request(c, path: str, body: dict, while_queued=None):
    """POST ``body`` streamed to ``path`` while another request runs (its generation held until the streamed one
    waits in the queue; ``while_queued(worker)`` runs then); returns (the running answer, the streamed one)."""
    engine, worker = c.app.state.served.engine, c.app.state.worker
    hold = engine.hold = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(post, c, "/v1/completions", {"prompt": "t3 t5", "max_tokens": 2}, False)
        until(lambda: worker.busy and engine.hold is None, "the running request")
        queued = pool.submit(post, c, path, body, True)
        until(lambda: worker.waiting == 1, "the queued request")
        if while_queued is not None:
            while_queued(worker)
        hold.set()
        return running.result(30), queued.result(30)


STREAMED = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


@pytest.mark.parametrize("path", STREAMED)
def test_a_queued_streams_late_context_overflow_is_its_last_event(client, path):
    """Its headers went out while it waited, so the prompt found too long when its turn came cannot be a 400:
    the stream's last event is the error object of the same 400 (one translator), not a cut connection."""
    running, r = behind_a_running_request(client, path, ENDPOINTS[path] | TOO_LONG[path])
    assert running.status_code == 200
    assert answered(r, path, True)[:4] == (200, None if path == "/v1/responses" else "invalid_request_error",
                                           PROMPT[path], "context_length_exceeded")
    assert "[DONE]" not in r.text
    assert post(client, path, ENDPOINTS[path] | TOO_LONG[path], True).status_code == 400  # nothing ahead: the status


@pytest.mark.parametrize("path", STREAMED)
@pytest.mark.parametrize("kind", ["backend", "worker", "bug"])
def test_a_queued_streams_engine_error_is_its_last_event(client, path, kind, caplog):
    error, (status, type_, param, code) = ENGINE_ERRORS[kind]

    def fail_next(worker):
        client.app.state.served.engine.failure = (error, "before")

    try:
        _, r = behind_a_running_request(client, path, ENDPOINTS[path], fail_next)
    finally:
        client.app.state.served.engine.failure = None
    got = answered(r, path, True)
    assert got[:4] == (200, None if path == "/v1/responses" else type_, None, code), got
    assert got[4] == INTERNAL if kind == "bug" else error.message in got[4]


@pytest.mark.parametrize("path", STREAMED)
def test_a_queued_stream_at_shutdown_ends_with_server_shutdown(path):
    from fake_server import app_client

    with app_client(FimChatModel(), ServerSettings(api_key="k"), FailingEngine) as c:
        running, r = behind_a_running_request(c, path, ENDPOINTS[path], lambda worker: worker.drain(grace=30))
        assert running.status_code == 200  # within the grace period
        assert answered(r, path, True)[:4] == (200, None if path == "/v1/responses" else "server_error", None,
                                               "server_shutdown")


@pytest.mark.parametrize("path", STREAMED)
def test_a_bug_shaping_a_streamed_answer_is_its_last_event_not_a_cut(client, path, monkeypatch, caplog):
    real = ResponseShape.chunk

    def broken(self, text, *a, **kw):
        if text:  # the answer's text, not the opening chunk
            raise RuntimeError("secret shaping detail")
        return real(self, text, *a, **kw)

    monkeypatch.setattr(ResponseShape, "chunk", broken)
    r = post(client, path, ENDPOINTS[path], True)
    got = answered(r, path, True)
    assert got[:4] == (200, None if path == "/v1/responses" else "server_error", None, None), got
    assert got[4] == INTERNAL and "secret shaping detail" in caplog.text and "secret" not in r.text
