"""The server's control flow on the fake backend (the real model and the openai client are in
tests/integration/test_server.py): a bug in the engine is a 500 without a traceback and the
server keeps serving; errors are OpenAI's error object; hostile input (issue 22) is a 4xx naming what is wrong."""

import asyncio
import re
import time

import pytest

from fakes import FakeModel
from fake_server import SETTINGS, app_client
from localspec.config import DraftParams, SamplingParams, ServerSettings
from localspec.core.engine import SpeculativeEngine
from localspec.server.app import bearer_token
from localspec.server.bodies import parse_request
from localspec.server.errors import ApiError
from localspec.server.openai_api import MAX_JSON_DEPTH, check_json
from localspec.server.worker import RELAY, EngineWorker, Failed, Finished, Job



class BrokenOnce(SpeculativeEngine):
    """Fails with an unexpected error inside the first generation."""

    failed = False

    def generate(self, *a, **kw):
        if not self.failed:
            self.failed = True
            raise RuntimeError("secret internal detail")
        return super().generate(*a, **kw)


def test_a_bug_is_a_500_without_traceback_and_the_server_lives(caplog):
    served = app_client(FakeModel(), engine=BrokenOnce)
    with served as c:
        r = c.post("/v1/completions", json={"prompt": "t3 t5 t7", "max_tokens": 4})
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        assert "secret" not in r.text and "Traceback" not in r.text
        assert "secret internal detail" in caplog.text  # the server's log has it
        r = c.post("/v1/completions", json={"prompt": "t3 t5 t7", "max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4


def test_prediction_counts_on_the_fake(tmp_path):
    """Greedy output is the same with a prediction; a prediction equal to it is accepted in full."""
    with app_client(FakeModel()) as c:
        body = {"prompt": "t3 t5 t7", "max_tokens": 20}
        plain = c.post("/v1/completions", json=body).json()
        text = plain["choices"][0]["text"]
        pred = c.post("/v1/completions", json={**body, "prediction": {"type": "content", "content": text}}).json()
        assert pred["choices"][0]["text"] == text
        details = pred["usage"]["completion_tokens_details"]
        assert details["accepted_prediction_tokens"] >= 15 and details["rejected_prediction_tokens"] == 0
        assert pred["speculation"]["drafters"]["prediction"]["accepted"] == details["accepted_prediction_tokens"]
        metrics = c.get("/metrics").text
        assert 'localspec_spec_decode_num_accepted_tokens_total{drafter="prediction"}' in metrics
        assert "localspec_requests_deferred 0.0" in metrics


# -- issue 22: hostile input ----------------------------------------------------------------------
@pytest.mark.parametrize("header, token", [
    ("Bearer k", "k"), ("bearer k", "k"), ("BEARER k", "k"), ("Bearer   k ", "k"), (" bEaReR k", "k"),
    ("Basic k", None), ("Bearer", None), ("Bearer ", None), ("k", None), ("", None), ("Bearerk", None),
])
def test_bearer_token_scheme_is_case_insensitive(header, token):
    assert bearer_token(header) == token


def nested(depth: int):
    v: list = []
    for _ in range(depth - 1):
        v = [v]
    return v


@pytest.mark.parametrize("body, param, code", [
    ({"messages": [{"role": "user", "content": "a\ud800"}]}, "messages[0].content", "invalid_unicode"),
    ({"prompt": ["x", "\udfff"]}, "prompt[1]", "invalid_unicode"),
    ({"prediction": {"type": "content", "content": "\ud83d"}}, "prediction.content", "invalid_unicode"),
    ({"metadata": {"k\ud800": 1}}, "metadata", "invalid_unicode"),
    ({"a": "ok", "b": "\ud800", "c": "\udc00"}, "b", "invalid_unicode"),  # the first one in document order
    ({"metadata": nested(MAX_JSON_DEPTH)}, None, "invalid_json"),
])
def test_check_json_names_the_field(body, param, code):
    with pytest.raises(ApiError) as e:
        check_json(body)
    assert e.value.status == 400 and e.value.param == param and e.value.code == code


def test_check_json_passes_ordinary_bodies():
    assert check_json({"messages": [{"role": "user", "content": "smile 😀"}],
                       "metadata": nested(MAX_JSON_DEPTH - 1)}) is None  # no ApiError raised


def test_integral_numbers_are_integers():
    assert parse_request({"prompt": "x", "max_tokens": 4.0, "seed": 7.0}, "completion").max_tokens == 4
    with pytest.raises(ApiError) as e:
        parse_request({"prompt": "x", "max_tokens": 4.5}, "completion")
    assert e.value.param == "max_tokens"


def test_openapi_documents_the_request_bodies():
    with app_client(FakeModel(), ServerSettings(api_key="k")) as c:
        doc = c.get("/openapi.json").json()
    for path, model in (("/v1/chat/completions", "ChatCompletionBody"), ("/v1/completions", "CompletionBody"),
                        ("/v1/responses", "ResponsesBody")):
        ref = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{model}" and model in doc["components"]["schemas"]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def make_job(loop, n: int = 0) -> Job:
    return Job(parse_request({"prompt": f"t{3 + n}", "max_tokens": 2}, "completion"), SamplingParams(), loop)


def drain_messages(loop, job) -> list:
    assert RELAY.flush()  # the worker's messages reach the loop through the relay's thread
    loop.run_until_complete(asyncio.sleep(0))
    out = []
    while not job.out.empty():
        out.append(job.out.get_nowait())
    return out


def test_a_cancelled_waiter_frees_its_place_at_once():
    """No worker thread runs: every job waits, so only cancellation can free a place."""
    loop = asyncio.new_event_loop()
    try:
        worker = EngineWorker(SpeculativeEngine(FakeModel(), None), SETTINGS, max_queue=2)
        a, b, c = make_job(loop, 0), make_job(loop, 1), make_job(loop, 2)
        worker.submit(a)
        worker.submit(b)
        with pytest.raises(ApiError) as e:
            worker.submit(c)
        assert e.value.status == 429 and worker.waiting == 2
        a.cancel()
        b.cancel()
        assert worker.waiting == 0
        worker.submit(c)
        assert worker.waiting == 1 and c.arrival == 2
        # a shutdown answers the waiting job 503 and refuses new ones
        worker.drain(grace=1.0)
        assert worker.waiting == 0 and worker.draining
        (msg,) = drain_messages(loop, c)
        assert isinstance(msg, Failed) and msg.error.status == 503 and msg.error.code == "server_shutdown"
        with pytest.raises(ApiError) as e:
            worker.submit(make_job(loop, 3))
        assert e.value.status == 503
    finally:
        loop.close()


def test_queue_size_0_serves_one_at_a_time_and_queues_none():
    """--queue-size 0 (found by a newcomer: every request got 429): an idle engine takes the request,
    a second one while it waits or runs is refused."""
    loop = asyncio.new_event_loop()
    try:
        worker = EngineWorker(SpeculativeEngine(FakeModel(), None), SETTINGS, max_queue=0)
        worker.submit(make_job(loop, 0))
        assert worker.waiting == 1
        with pytest.raises(ApiError) as e:
            worker.submit(make_job(loop, 1))
        assert e.value.status == 429 and e.value.code == "queue_full"
    finally:
        loop.close()


try:  # FastAPI keeps an included router nested in app.routes (0.16x); this walks into it
    from fastapi.routing import iter_route_contexts
except ImportError:  # older FastAPI: app.routes holds every route
    def iter_route_contexts(routes):
        return routes


#: the routes answered without the API key, and why: a liveness probe (a load balancer, a supervisor, the
#: ``localspec serve`` wrapper's own wait for the server) carries no key and learns nothing but busy/idle; the
#: OpenAPI document holds the request schemas, which are public (docs/server.md's), not the served model or data
PUBLIC_ROUTES = {"/health", "/openapi.json"}


def test_every_route_but_the_public_ones_needs_the_key():
    """Every route of the app, found by walking ``app.routes`` (so a route added later is covered), answers 401
    without the key and with a wrong one, before reading its body; with the key it is let through."""
    served = app_client(FakeModel(), ServerSettings(api_key="k"))
    walked = set()
    with served as c:
        for route in iter_route_contexts(served.app.routes):
            path = re.sub(r"{[^}]*}", "x", route.path)  # a path parameter: any value
            for method in sorted(route.methods):
                walked.add(route.path)
                for headers in ({}, {"Authorization": "Bearer nope"}):
                    r = c.request(method, path, headers=headers, content=b"{not json")
                    what = f"{method} {route.path} with {headers or 'no key'}: {r.status_code} {r.text[:200]}"
                    if route.path in PUBLIC_ROUTES:
                        assert r.status_code == 200, what
                    else:
                        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", what
                        if method != "HEAD":
                            assert r.json()["error"]["code"] == "invalid_api_key", what
                r = c.request(method, path, headers={"Authorization": "Bearer k"},
                              json={"prompt": "t3", "max_tokens": 1} if method == "POST" else None)
                assert r.status_code != 401, f"{method} {route.path} with the key: {r.status_code}"
    assert walked >= {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/infill", "/v1/models",
                      "/v1/models/{name:path}", "/metrics", *PUBLIC_ROUTES}, walked


def test_401s_are_counted_in_the_metrics():
    with app_client(FakeModel(), ServerSettings(api_key="k")) as c:
        for headers in ({}, {"Authorization": "Bearer nope"}):
            assert c.post("/v1/completions", json={"prompt": "t3"}, headers=headers).status_code == 401
        assert c.post("/v1/completions", json={"prompt": "t3 t5", "max_tokens": 2},
                      headers={"Authorization": "bearer k"}).status_code == 200
        metrics = c.get("/metrics", headers={"Authorization": "Bearer k"}).text
    assert 'localspec_requests_total{endpoint="completions",status="401"} 2.0' in metrics
    assert 'localspec_requests_total{endpoint="completions",status="200"} 1.0' in metrics


def test_a_job_cancelled_as_it_is_taken_is_skipped():
    """The flag is set before the withdrawal: a job the worker pops in between is not run."""
    loop = asyncio.new_event_loop()
    try:
        worker = EngineWorker(SpeculativeEngine(FakeModel(), None), SETTINGS, max_queue=2)
        a, b = make_job(loop, 0), make_job(loop, 1)
        worker.submit(a)
        worker.submit(b)
        a._cancelled.set()  # cancel() half done: flagged, not yet withdrawn
        taken = worker._next()
        assert taken is b and worker.current is b and worker.waiting == 0
    finally:
        loop.close()


def test_the_next_job_is_taken_before_the_last_message_goes_out():
    """A client that sends its next request as soon as its answer arrives finds a free place
    (issue 22: a full queue must not refuse it while the worker is between two jobs)."""
    loop = asyncio.new_event_loop()
    worker = EngineWorker(SpeculativeEngine(FakeModel(), None), SETTINGS, max_queue=2)
    seen = []

    class Recording(Job):
        def post(self, msg):
            if isinstance(msg, (Finished, Failed)):
                seen.append((self.arrival, worker.waiting))
            super().post(msg)

    def job(n):
        return Recording(parse_request({"prompt": f"t{3 + n}", "max_tokens": 2}, "completion"), SamplingParams(),
                         loop)

    try:
        worker.submit(job(0))
        worker.submit(job(1))
        worker.start()
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen[:2] == [(0, 0), (1, 0)]  # job 1 left the queue before job 0's answer was posted
    finally:
        worker.stop()
        loop.close()


def test_tools_on_a_template_without_tool_support_are_a_400_naming_the_model():
    with app_client(FakeModel()) as c:
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "t3"}], "tools": tools})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "tools" and err["code"] == "tools_not_supported"
        assert "fake.gguf" in err["message"] and "no tool support" in err["message"]
        history = [{"role": "user", "content": "t3"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "t5"}]
        r = c.post("/v1/chat/completions", json={"messages": history})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_model_retrieve_cors_and_context_wording():
    with app_client(FakeModel()) as c:
        listed = c.get("/v1/models").json()["data"][0]
        assert c.get("/v1/models/fake.gguf").json() == listed
        assert c.get("/v1/models/openai/any-name").json() == listed  # names are not checked, as in chat
        pre = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
        r = c.options("/v1/chat/completions", headers=pre)  # CORS off by default
        assert r.status_code == 405 and "--cors-origin" in r.json()["error"]["message"]
        assert "access-control-allow-origin" not in c.get("/v1/models", headers=pre).headers
        r = c.post("/v1/completions", json={"prompt": "t3 " * 300, "max_tokens": 4})
        err = r.json()["error"]
        assert r.status_code == 400 and err["code"] == "context_length_exceeded"
        assert err["message"].startswith("This model's maximum context length is 256 tokens. However, your prompt "
                                         "resulted in 300 tokens")
        # max_tokens over the room left is capped there, as llama.cpp's server does (Qwen Code asks for 32768)
        r = c.post("/v1/completions", json={"prompt": "t3 " * 200, "max_tokens": 100, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] == "length"
        assert r.json()["usage"]["prompt_tokens"] == 200 and r.json()["usage"]["completion_tokens"] == 56
    with app_client(FakeModel(), ServerSettings(cors_origins=("http://localhost:3000",))) as c:
        r = c.options("/v1/chat/completions", headers={**pre, "Access-Control-Request-Headers": "authorization"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        r = c.get("/v1/models", headers={"Origin": "http://localhost:3000"})
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
        r = c.options("/v1/chat/completions", headers={**pre, "Origin": "http://evil.example"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers


def test_an_idle_server_measures_a_disturbed_calibration_again_when_the_machine_is_quiet(monkeypatch):
    """A curve measured while another process held a core is flat (long drafts look free); a
    server started then would use it for its whole life. Idle and quiet, it measures again, at most
    max_remeasures times, and never while busy or while the costs in use are clean."""
    from localspec.backend.calibration import ModelCosts
    from localspec.core.costmodel import EngineCosts
    from localspec.server import worker as worker_mod

    def costs(other_cpu):
        mc = ModelCosts(seconds=[0.1] * 9, other_cpu=other_cpu)
        return EngineCosts(verify=list(mc.seconds), draft_token=None, target=mc, draft=None)

    class Measuring(SpeculativeEngine):
        def __init__(self, *a):
            super().__init__(*a)
            self.asked: list[tuple[int, bool]] = []
            self.next_other = 0.5

        def calibrated_costs(self, draft_max, remeasure=False, progress=None):
            self.asked.append((draft_max, remeasure))
            self._costs = costs(self.next_other)
            return self._costs

    quiet = [False]
    monkeypatch.setattr(worker_mod, "machine_is_quiet", lambda *a, **k: quiet[0])
    eng = Measuring(FakeModel(), None)
    eng._costs = costs(0.5)
    assert eng.cost_model.disturbed
    worker = EngineWorker(eng, SETTINGS)
    worker._remeasure_if_disturbed()
    assert eng.asked == []  # the machine is busy: measuring now would be disturbed again
    quiet[0] = True
    worker._remeasure_if_disturbed()
    assert eng.asked == [(8, True)] and eng.cost_model.disturbed  # measured again, for the same cap; still busy
    for _ in range(5):
        worker._remeasure_if_disturbed()
    assert len(eng.asked) == worker.max_remeasures == 3  # a bounded number of tries
    worker._remeasures = 0
    eng.next_other = 0.01
    worker._remeasure_if_disturbed()
    assert len(eng.asked) == 4 and not eng.cost_model.disturbed
    worker._remeasure_if_disturbed()
    assert len(eng.asked) == 4  # clean costs are kept
    # the worker thread does it on its own once no request came for idle_seconds
    eng._costs, eng.next_other, worker._remeasures = costs(0.5), 0.01, 0
    worker.idle_seconds = 0.05
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while len(eng.asked) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(eng.asked) == 5 and not eng.cost_model.disturbed
        loop = asyncio.new_event_loop()
        try:  # and it still serves
            job = make_job(loop)
            worker.submit(job)
            while job.out.empty() and time.monotonic() < deadline:
                loop.run_until_complete(asyncio.sleep(0.01))
            assert job.out.qsize() >= 1
        finally:
            loop.close()
    finally:
        worker.stop()


def test_the_servers_own_log_lines_reach_stderr(capsys):
    """uvicorn configures only its own loggers: the worker's INFO lines (a calibration measured while
    serving) went nowhere until serve() gave the ``localspec`` logger a handler."""
    import logging

    from localspec.server.app import log_to_stderr

    logger = logging.getLogger("localspec")
    before = (list(logger.handlers), logger.level)
    try:
        log_to_stderr("info")
        log_to_stderr("info")  # idempotent: one handler, one line per record
        logging.getLogger("localspec.server").info("measuring again")
        logging.getLogger("localspec.server").debug("not at info")
        err = capsys.readouterr().err
        assert err.count("measuring again") == 1 and err.startswith("INFO:     measuring again")
        assert "not at info" not in err
    finally:
        logger.handlers[:], _ = before[0], logger.setLevel(before[1])


# -- issue 30: the server on declared schemas ------------------------------------------------------
@pytest.mark.parametrize("body, param, message", [
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role",
     "messages with role 'robot' are not supported (system, developer, user, assistant, tool)"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0].type",
     "content parts of type 'image_url' are not supported (text only)"),
    ({"messages": [{"role": "user", "content": "t3"}], "temperature": 5}, "temperature",
     "temperature: Input should be less than or equal to 2 (got 5)"),
    ({"messages": [{"role": "user", "content": "t3"}], "n": 2}, "n",
     "n: only n = 1 is supported: one engine generates one answer at a time (send n requests)"),
    ({"messages": [{"role": "user", "content": "t3"}], "speculation": {"gamma": 4}}, "speculation.gamma",
     "speculation.gamma: Extra inputs are not permitted (got 4)"),
    ({"messages": [{"role": "user", "content": "t3"}], "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice.function.name",
     "tool_choice names the function 'g', which is not among the tools (f)"),
    ([1], None, "the request body must be a JSON object"),
])
def test_the_body_models_validate_and_name_the_parameter(body, param, message):
    """One declaration: FastAPI validates with the body model, the translator gives OpenAI's error
    object, and parse_request (the same model) says the same."""
    with app_client(FakeModel()) as c:
        err = c.post("/v1/chat/completions", json=body).json()["error"]
    assert (err["param"], err["message"], err["type"]) == (param, message, "invalid_request_error")
    with pytest.raises(ApiError) as e:
        parse_request(body, "chat")
    assert (e.value.param, e.value.message) == (param, message)


def test_a_body_without_a_json_content_type_is_read_as_json():
    """``curl -d`` sends application/x-www-form-urlencoded; the body is JSON all the same."""
    with app_client(FakeModel()) as c:
        for headers in ({}, {"Content-Type": "application/x-www-form-urlencoded"}, {"Content-Type": "text/plain"}):
            r = c.post("/v1/completions", content=b'{"prompt": "t3 t5", "max_tokens": 2}', headers=headers)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_openapi_documents_the_error_object_not_fastapis_422():
    with app_client(FakeModel()) as c:
        doc = c.get("/openapi.json").json()
    responses = doc["paths"]["/v1/completions"]["post"]["responses"]
    assert "422" not in responses and responses["4XX"]["content"]["application/json"]["schema"]["$ref"] == \
        "#/components/schemas/ErrorBody"
    assert "securitySchemes" not in doc.get("components", {})  # no API key, no bearer scheme


def test_serve_flags_come_from_the_server_settings(monkeypatch):
    from localspec.app.flags import server_settings_from_args
    from localspec.cli import build_parser
    from localspec.errors import ConfigError

    ns = build_parser().parse_args(["serve", "--port", "9000", "--cors-origin", "http://a", "--cors-origin", "*",
                                    "--queue-size", "2", "--max-tokens", "7", "--log-level", "warning"])
    server = server_settings_from_args(ns, api_key_env="from-env")
    assert server == ServerSettings(port=9000, cors_origins=("http://a", "*"), queue_size=2, default_max_tokens=7,
                                    log_level="warning", api_key="from-env")
    assert server.max_body == 8 << 20 and "from-env" not in repr(server)
    ns = build_parser().parse_args(["serve", "--port", "70000", "--shutdown-grace", "-1"])
    with pytest.raises(ConfigError) as e:
        server_settings_from_args(ns)
    assert "--port: Input should be less than or equal to 65535 (got 70000)" in e.value.message
    assert "--shutdown-grace: Input should be greater than or equal to 0 (got -1.0)" in e.value.message


def test_one_translator_drops_pydantics_value_error_prefix():
    from pydantic import ValidationError

    from localspec.config import format_validation_error, invalid_values

    with pytest.raises(ValidationError) as e:
        DraftParams(draft_max=4, draft_min=8)
    (v,) = invalid_values(e.value)
    assert v.reason == "draft_min (8) must not exceed draft_max (4)" and not v.written
    assert format_validation_error(e.value) == "settings: draft_min (8) must not exceed draft_max (4)"


@pytest.mark.parametrize("body, kind, check", [
    ({"prompt": "t3", "logprobs": 2.0}, "completion", lambda r: r.logprobs == 2),
    ({"prompt": "t3", "speculation": {"draft_max": 6.0}}, "completion", lambda r: r.speculation["draft_max"] == 6),
    ({"messages": [{"role": "user", "content": "t3"}], "speculation": {"draft_max": 6.0}}, "chat",
     lambda r: r.speculation["draft_max"] == 6),
])
def test_an_integral_float_is_the_integer_wherever_the_schema_says_integer(body, kind, check):
    """Found by the fuzz (issue 32): /openapi.json says integer, which JSON Schema satisfies with 6.0;
    completions' logprobs and speculation.draft_max refused it while max_tokens took it."""
    req = parse_request(body, kind)
    assert check(req), req
    with pytest.raises(ApiError) as e:
        parse_request({**body, **({"logprobs": 2.5} if "logprobs" in body else {"speculation": {"draft_max": 6.5}})},
                      kind)
    assert e.value.param in ("logprobs", "speculation.draft_max")


def test_openapi_declares_the_new_endpoints_and_fields_the_fuzz_generates_from():
    """Issue 32 item 7: the fuzz (tests/integration/test_server_fuzz.py) draws from /openapi.json, so
    what it must reach is declared there with its shape (not as an untyped value)."""
    with app_client(FakeModel()) as c:
        doc = c.get("/openapi.json").json()
    assert {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/infill"} <= set(doc["paths"])
    schemas = doc["components"]["schemas"]
    chat, completion = schemas["ChatCompletionBody"]["properties"], schemas["CompletionBody"]["properties"]
    responses, infill = schemas["ResponsesBody"], schemas["InfillBody"]["properties"]
    assert {"logprobs", "top_logprobs", "response_format"} <= set(chat)
    assert {"logprobs", "suffix", "response_format"} <= set(completion)
    assert {"input_prefix", "input_suffix", "input_extra", "n_predict"} <= set(infill)
    assert "anyOf" in chat["response_format"] and "anyOf" in completion["response_format"]
    assert responses["required"] == ["input"]
    for name in ("input", "tools", "tool_choice", "text", "max_output_tokens"):
        assert set(responses["properties"][name]) & {"anyOf", "type"}, name
    assert "content" in schemas["ChatMessage"]["required"]
