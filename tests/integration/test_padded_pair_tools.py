"""An agent's requests on a larger pair's shape (issue 45 item 5), offline: the Qwen2.5-Coder 1.5B target with its
vocabulary padded by 128 ids past its 0.5B draft's, as Qwen2.5 7B-32B pad theirs (152,064 rows against 151,936;
``gguf_copies.pad_vocab``), served in mode draft at Qwen's recommended sampling (temperature 0.7, top_p 0.8,
top_k 20, what agents get from ``localspec serve --temperature 0.7 ...``), with tools: the lazy call grammar on
the target's padded rows, the draft model's unpadded probabilities, and the exact acceptance rule together.

No 7B+ GGUF is reachable offline here; a user's larger Qwen2.5 target differs from this copy in its weights,
not in the shapes these paths handle. The unpadded pair's tool tests: test_server_tools.py.
"""

from __future__ import annotations

import json

import pytest

import helpers

pytestmark = pytest.mark.pair

KEY = "padded-key"
TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the project",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_shell", "description": "Run a shell command in the project folder",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
]
READ = [{"role": "system", "content": "You are a coding agent. Use the tools to act."},
        {"role": "user", "content": "Read the file src/app.py and tell me what it does."}]
SAMPLED = {"temperature": 0.7, "top_p": 0.8, "extra_body": {"top_k": 20}}


@pytest.fixture(scope="module")
def padded_server(pair_paths, tmp_path_factory):
    """``localspec serve`` on the padded 1.5B copy drafted by the real 0.5B (mode draft, 4 tokens a round)."""
    from gguf_copies import pad_vocab
    from helpers import tiny_lookup_process

    tmp = tmp_path_factory.mktemp("padded-pair")
    target = pad_vocab(pair_paths[0], tmp / "qwen2.5-coder-1.5b-padded-152064.gguf", 128)
    flags = ("--draft", str(pair_paths[1]), "--mode", "draft", "--draft-max", "4", "--n-ctx", "4096",
             "--n-threads", "2", "--huge-pages", "off", "--repack", "off")
    with tiny_lookup_process(target, tmp, KEY, flags, timeout=300) as proc:
        yield helpers.openai_client(proc.base_url, KEY)
    target.unlink(missing_ok=True)  # 1.1 GB


def _checked_calls(message) -> list[tuple[str, dict]]:
    """The message's calls, each naming a requested tool with arguments that follow its schema."""
    out = []
    for c in message.tool_calls or []:
        args = json.loads(c.function.arguments)
        assert c.function.name in ("read_file", "run_shell"), c
        assert set(args) == {"path" if c.function.name == "read_file" else "command"}, args
        assert all(isinstance(v, str) for v in args.values()), args
        out.append((c.function.name, args))
    return out


def test_a_padded_target_answers_an_agents_requests_sampled_with_the_draft_model_and_valid_calls(padded_server):
    """Sampled answers with tools, streamed and not, over a few seeds: every one 200, no padding id's text, any
    call structured and valid; the draft model drafted (its 151,936-wide probabilities against the target's
    152,064-wide rows) and a call that required by tool_choice came out valid too."""
    drafted = 0
    for seed in (1, 2, 3):
        r = padded_server.chat.completions.create(model="qwen", messages=READ, tools=TOOLS, seed=seed, max_tokens=48,
                                                  **SAMPLED)
        choice = r.choices[0]
        calls = _checked_calls(choice.message)
        assert (choice.finish_reason == "tool_calls") == bool(calls), choice
        assert "[PAD" not in (choice.message.content or "") and "<tool_call>" not in (choice.message.content or "")
        spec = r.model_extra["speculation"]
        assert spec["mode"] == "draft" and 0 <= spec["accepted"] <= spec["drafted"]
        drafted += spec["drafted"]
    assert drafted > 0
    chunks = list(padded_server.chat.completions.create(model="qwen", messages=READ, tools=TOOLS, seed=4,
                                                        max_tokens=48, stream=True, **SAMPLED))
    assert chunks and chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls")
    r = padded_server.chat.completions.create(model="qwen", messages=READ, tools=TOOLS, tool_choice="required",
                                              seed=5, max_tokens=64, **SAMPLED)
    assert r.choices[0].finish_reason == "tool_calls" and _checked_calls(r.choices[0].message)
