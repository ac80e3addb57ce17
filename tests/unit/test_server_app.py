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
