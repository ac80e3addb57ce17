"""The server's control flow on the fake backend (the real model and the openai client are in
tests/integration/test_server.py): a bug in the engine is a 500 without a traceback and the
server keeps serving; errors are OpenAI's error object."""

from fastapi.testclient import TestClient

from fakes import FakeModel
from localspec.config import DraftParams, ModelSettings, Settings
from localspec.engine import SpeculativeEngine
from localspec.server import create_app

SETTINGS = Settings(target=ModelSettings(model="fake.gguf"), drafting=DraftParams(mode="lookup"))


class BrokenOnce(SpeculativeEngine):
    """Fails with an unexpected error inside the first generation."""

    failed = False

    def generate(self, *a, **kw):
        if not self.failed:
            self.failed = True
            raise RuntimeError("secret internal detail")
        return super().generate(*a, **kw)


def test_a_bug_is_a_500_without_traceback_and_the_server_lives(caplog):
    app = create_app(BrokenOnce(FakeModel(), None), SETTINGS)
    with TestClient(app) as c:
        r = c.post("/v1/completions", json={"prompt": "t3 t5 t7", "max_tokens": 4})
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        assert "secret" not in r.text and "Traceback" not in r.text
        assert "secret internal detail" in caplog.text  # the server's log has it
        r = c.post("/v1/completions", json={"prompt": "t3 t5 t7", "max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4


def test_prediction_counts_on_the_fake(tmp_path):
    """Greedy output is the same with a prediction; a prediction equal to it is accepted in full."""
    with TestClient(create_app(SpeculativeEngine(FakeModel(), None), SETTINGS)) as c:
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


def test_tools_on_a_template_without_tool_support_are_a_400_naming_the_model():
    with TestClient(create_app(SpeculativeEngine(FakeModel(), None), SETTINGS)) as c:
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
    with TestClient(create_app(SpeculativeEngine(FakeModel(), None), SETTINGS)) as c:
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
        r = c.post("/v1/completions", json={"prompt": "t3 " * 200, "max_tokens": 100})
        assert r.json()["error"]["message"].startswith("This model's maximum context length is 256 tokens. However, "
                                                       "you requested 300 tokens (200 in the prompt, 100 in the "
                                                       "completion).")
    app = create_app(SpeculativeEngine(FakeModel(), None), SETTINGS, cors_origins=["http://localhost:3000"])
    with TestClient(app) as c:
        r = c.options("/v1/chat/completions", headers={**pre, "Access-Control-Request-Headers": "authorization"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        r = c.get("/v1/models", headers={"Origin": "http://localhost:3000"})
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
        r = c.options("/v1/chat/completions", headers={**pre, "Origin": "http://evil.example"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
