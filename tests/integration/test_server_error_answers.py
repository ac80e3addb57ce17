"""One request per error kind to every generation endpoint of ``localspec serve`` on the tiny model,
streamed and not: the status and the error object's ``type``, ``param`` and ``code`` on the real path
(localspec/server/errors.py). The engine's own failures, which a healthy model does not raise, are
made on the fake engine: tests/unit/server/test_error_answers.py.

SmolLM2 has neither fill-in-the-middle tokens nor a chat template that renders tools: /infill answers
``fim_unsupported`` once its body is valid, and tools are ``tools_not_supported``."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.tiny

KEY = "errors-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: the flags of this module's server (fixture ``server``): a body limit of about 10 KiB
SERVE = ("--max-body-mb", "0.01")

ENDPOINTS = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 2},
    "/v1/completions": {"prompt": "Hello", "max_tokens": 2},
    "/v1/responses": {"input": "Say hello.", "max_output_tokens": 2},
    "/infill": {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 2},
}
#: the prompt's parameter (the Responses API's name for the chat messages)
PROMPT = {"/v1/chat/completions": "messages", "/v1/completions": "prompt", "/v1/responses": "input"}
LONG = "one two three four five six seven eight nine ten " * 110  # over the 1,024-token window
TOO_LONG = {"/v1/chat/completions": {"messages": [{"role": "user", "content": LONG}]}, "/v1/completions": {"prompt": LONG},
            "/v1/responses": {"input": LONG}, "/infill": {"input_prefix": LONG}}
TOOL = {"/v1/chat/completions": {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        "/v1/responses": {"tools": [{"type": "function", "name": "f", "parameters": {}}]}}
FIM = (400, "invalid_request_error", "input_suffix", "fim_unsupported")


def answer(r: httpx.Response) -> tuple:
    assert r.status_code != 200, r.text[:300]
    err = r.json()["error"]
    return r.status_code, err["type"], err["param"], err["code"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("path", ENDPOINTS)
def test_each_error_kind_on_every_endpoint(server, path, stream):
    url = server.base_url + path
    body = ENDPOINTS[path] | ({"stream": True} if stream else {})

    def post(extra=None, headers=AUTH, content=None) -> tuple:
        sent = {"content": content} if content is not None else {"json": body | (extra or {})}
        return answer(httpx.post(url, **sent, headers=headers, timeout=120))

    assert post(headers={}) == (401, "authentication_error", None, "invalid_api_key")
    assert answer(httpx.get(url, headers=AUTH)) == (405, "invalid_request_error", None, None)
    assert post(content=b"{") == (400, "invalid_request_error", None, "invalid_json")
    assert post({"user": "x" * 20_000}) == (413, "invalid_request_error", None, "request_too_large")
    assert post({"temperature": 9}) == (400, "invalid_request_error", "temperature", None)
    assert post({"speculation": {"mode": "draft"}}) == (
        FIM if path == "/infill" else (400, "invalid_request_error", "speculation.mode", None))
    assert post(TOO_LONG[path]) == (
        FIM if path == "/infill" else (400, "invalid_request_error", PROMPT[path], "context_length_exceeded"))
    if path in TOOL:
        assert post(TOOL[path]) == (400, "invalid_request_error", "tools", "tools_not_supported")
    if path == "/infill":
        assert post() == FIM
    else:  # and the server serves on
        assert httpx.post(url, json=body, headers=AUTH, timeout=120).status_code == 200
