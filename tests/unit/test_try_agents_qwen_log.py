"""scripts/try_agents.py's reading of Qwen Code's ``--openai-logging`` files: one line per request,
oldest first, naming the tool calls of the answer (how a run shows that a tool really ran). The
scripts folder is no package: the script is loaded from its file. The log below has the shape
Qwen Code 0.24.4 wrote (``{timestamp, request, response, error, context, system}``)."""

import json
from pathlib import Path


def write_log(folder: Path, name: str, message: dict, n_messages: int, error=None) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps({
        "timestamp": "2026-12-03T21:57:04.503Z",
        "request": {"model": "qwen2.5-coder-1.5b", "messages": [{"role": "user", "content": "x"}] * n_messages},
        "response": {"object": "chat.completion", "choices": [{"index": 0, "message": message,
                                                               "finish_reason": "stop"}]},
        "error": error, "context": {"promptId": "s1########0", "sessionId": "s1"}, "system": {}}))


def test_each_request_is_one_line_oldest_first_with_its_tool_calls_and_only_once(try_agents, tmp_path):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"file_path": "/w/hello.py"}'}}
    write_log(tmp_path, "openai-2026-12-03T21-57-09.109Z-b.json", {"role": "assistant", "content": "greet"}, 4)
    write_log(tmp_path, "openai-2026-12-03T21-57-04.503Z-a.json",
              {"role": "assistant", "content": None, "tool_calls": [call]}, 2)
    seen: set[str] = set()
    lines = try_agents.qwen_log_lines(tmp_path, seen)
    assert len(lines) == 2
    assert lines[0].startswith("s1########0: 2 messages")
    assert "tool_calls [('read_file', '{\"file_path\": \"/w/hello.py\"}')]" in lines[0]
    assert "tool_calls []" in lines[1] and "content 'greet'" in lines[1]
    assert try_agents.qwen_log_lines(tmp_path, seen) == []  # already printed
    write_log(tmp_path, "openai-2026-12-03T21-58-00.000Z-c.json", {"role": "assistant", "content": ""}, 2,
              error={"message": "stream ended"})
    (new,) = try_agents.qwen_log_lines(tmp_path, seen)
    assert "error {'message': 'stream ended'}" in new


def test_a_missing_log_folder_reads_as_no_requests(try_agents, tmp_path):
    assert try_agents.qwen_log_lines(tmp_path / "absent", set()) == []
