"""scripts/replay_tool_calls.py's pure pieces: which recorded requests it replays and which text answers
hold a call left as text (issue 45 item 3). The scripts folder is no package: loaded from its file."""

from __future__ import annotations

import json

import pytest

NAMES = ["read_file", "run_shell_command"]
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in NAMES]


@pytest.fixture(scope="module")
def replay(replay_tool_calls):
    return replay_tool_calls


@pytest.mark.parametrize("content, held", [
    ('<tool_call>\n{"name": "read_file", "arguments": {}}\n</tool_call>', True),
    ("<tool_call>\n<function=edit>\n<parameter=file_path>\n/w/hello.py", True),   # Qwen3-Coder's XML, as text
    ('```json\n{\n  "name": "read_file",\n  "arguments": {"path": "a"}\n}\n```', True),
    ('{"name":"run_shell_command","arguments":{"command":"ls"}}', True),
    ('{"name": "John", "age": 30}', False),   # JSON naming no tool
    ("The function is hello().", False),
    (None, False),
])
def test_call_as_text(replay, content, held):
    assert replay.call_as_text(content, NAMES) is held


def test_verdict(replay):
    call = {"id": "c", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    assert replay.verdict({"content": None, "tool_calls": [call]}, NAMES) == "call"
    assert replay.verdict({"content": '{"name": "read_file", "arguments": {}}'}, NAMES) == "call as text"
    assert replay.verdict({"content": "hello"}, NAMES) == "text"


def test_requests_with_tools_from_bodies_logs_and_lines(replay, tmp_path):
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
    answer = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    (tmp_path / "a.json").write_text(json.dumps(body))
    (tmp_path / "b.json").write_text(json.dumps({"request": body, "response": answer}))  # Qwen Code's log
    (tmp_path / "c.jsonl").write_text(json.dumps(body) + "\n\n" + json.dumps(dict(body, tools=[])) + "\n")
    got = replay.requests_in([str(tmp_path)])
    assert [(w, r) for w, _, r in got] == [("a.json", None), ("b.json", answer), ("c.jsonl:0", None)]
    assert all(b == body for _, b, _ in got) and replay.tool_names(body) == NAMES
