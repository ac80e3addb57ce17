"""Fill in the middle end to end on real models: ``localspec serve`` with the Qwen2.5-Coder 0.5B
(the default pair's draft, a fast real FIM model, alone as target) completes a function body
between a prefix and a suffix, through the real ``openai`` client (``completions.create(...,
suffix=...)``) and llama.cpp's ``POST /infill`` (whole and streamed); prompt lookup drafts from
the suffix; SmolLM2 (no FIM tokens) answers 400 saying so.

Marked ``tiny``: the 0.5B loads in the server's child process in a few seconds, a cost like the
tiny model's (the 1.5B target is not loaded).
"""

from __future__ import annotations

import json
import sys

import httpx
import openai
import pytest

from localspec.server.process import ServerProcess

pytestmark = pytest.mark.tiny

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))"


def serve(model, tmp, name: str) -> ServerProcess:
    argv = [sys.executable, "-m", "localspec.cli", "serve", "--target", str(model), "--mode", "lookup",
            "--port", "{port}", "--n-ctx", "2048", "--n-threads", "2", "--log-level", "warning"]
    return ServerProcess(argv, tmp / f"{name}.log", env={"LOCALSPEC_CACHE": str(tmp / "cache")}, timeout=180)


@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    """A server on the Qwen2.5-Coder 0.5B; yields its base URL."""
    from localspec.app.catalog import load_catalog, resolve_model

    tmp = tmp_path_factory.mktemp("fim")
    with serve(resolve_model(load_catalog().default.draft), tmp, "coder") as proc:
        yield proc.base_url


def test_openai_client_completions_with_suffix(coder):
    client = openai.OpenAI(base_url=coder + "/v1", api_key="none", max_retries=0, timeout=120)
    r = client.completions.create(model="coder", prompt=PREFIX, suffix=SUFFIX, max_tokens=24, temperature=0)
    text = r.choices[0].text
    assert "return" in text.splitlines()[0], text  # the body, where the cursor is (the 0.5B may ramble after it)
    plain = client.completions.create(model="coder", prompt=PREFIX, max_tokens=24, temperature=0)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens  # FIM tokens and the suffix are in the prompt


def test_infill_whole_and_streamed(coder):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 24, "temperature": 0}
    whole = httpx.post(coder + "/infill", json=body, timeout=120).json()
    assert "return" in whole["content"] and whole["stop"] is True, whole
    assert whole["stop_type"] in ("eos", "limit") and whole["tokens_predicted"] > 0
    assert whole["timings"]["predicted_n"] == whole["tokens_predicted"]
    with httpx.stream("POST", coder + "/infill", json={**body, "stream": True}, timeout=120) as r:
        data = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
    chunks = [json.loads(d) for d in data]  # no "[DONE]": every event is JSON
    assert chunks[-1]["stop"] is True and all(c["stop"] is False for c in chunks[:-1])
    assert "".join(c["content"] for c in chunks) == whole["content"]


def test_infill_with_extra_files_and_lookup_from_the_suffix(coder):
    """The repo-level form (another file in the prompt); the body repeats code of the prompt, which
    prompt lookup drafts and the target accepts (the 0.5B copies the suffix's ``return a - b`` as
    often as the other file's ``return a + b``: only the shape of the line is asserted)."""
    helper = "def add(a, b):\n    return a + b\n"
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\ndef sub(a, b):\n    return a - b\n",
            "n_predict": 24, "temperature": 0}
    r = httpx.post(coder + "/infill", json={**body, "input_extra": [{"filename": "mathlib.py", "text": helper}]},
                   timeout=120).json()
    assert r["content"].lstrip().startswith("return a "), r
    assert r["speculation"]["drafters"]["lookup"]["accepted"] > 0, r["speculation"]
    assert r["timings"]["draft_n_accepted"] == r["speculation"]["drafters"]["lookup"]["accepted"]
    alone = httpx.post(coder + "/infill", json={**body, "n_predict": 1}, timeout=120).json()
    assert r["tokens_evaluated"] > alone["tokens_evaluated"] + 10  # the other file is in the prompt


def test_a_model_without_fim_tokens_is_a_400(tiny_path, tmp_path):
    with serve(tiny_path, tmp_path, "tiny") as proc:
        r = httpx.post(proc.base_url + "/infill", json={"input_prefix": "a", "input_suffix": "b"}, timeout=60)
        c = httpx.post(proc.base_url + "/v1/completions", json={"prompt": "a", "suffix": "b"}, timeout=60)
    for answer, param in ((r, "input_suffix"), (c, "suffix")):
        assert answer.status_code == 400
        err = answer.json()["error"]
        assert "has no fill-in-the-middle tokens" in err["message"] and "Qwen2.5-Coder" in err["message"]
        assert err["param"] == param
