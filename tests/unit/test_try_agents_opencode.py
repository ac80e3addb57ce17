"""scripts/try_agents.py's opencode pieces: the ``opencode.json`` it writes (a provider on
``@ai-sdk/openai-compatible`` pointing at the server, network features off, an optional tool subset)
and its verdict on ``opencode run --format json``'s events (PASS only when the read tool completed on
hello.py and the text after it names the function). The events below have the shape opencode 1.18.33
printed (``{type, timestamp, sessionID, part}``). The scripts folder is no package: the script is
loaded from its file."""

import json


def tool_event(tool: str, status: str, file_path: str, output: str = "") -> dict:
    state = {"status": status, "input": {"filePath": file_path}}
    state["output" if status == "completed" else "error"] = output
    return {"type": "tool_use", "sessionID": "ses_1", "part": {"type": "tool", "tool": tool, "callID": "call_1",
                                                                "state": state}}


def text_event(text: str) -> dict:
    return {"type": "text", "sessionID": "ses_1", "part": {"type": "text", "text": text}}


def lines(*events: dict) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


def test_the_config_names_the_server_as_the_default_model_and_turns_sharing_and_updates_off(try_agents):
    config = try_agents.opencode_config("http://127.0.0.1:8241/v1", "s3cret", "qwen2.5-coder-1.5b", 32768)
    provider = config["provider"]["localspec"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8241/v1", "apiKey": "s3cret"}
    assert provider["models"]["qwen2.5-coder-1.5b"]["limit"] == {"context": 32768, "output": 4096}
    assert config["model"] == "localspec/qwen2.5-coder-1.5b"
    assert config["autoupdate"] is False and config["share"] == "disabled"
    assert "tools" not in config  # all of opencode's tools, as it ships
    small = try_agents.opencode_config("http://h/v1", "k", "m", 2048)
    assert small["provider"]["localspec"]["models"]["m"]["limit"] == {"context": 2048, "output": 2048}


def test_a_tool_subset_turns_every_other_builtin_tool_off(try_agents):
    tools = try_agents.opencode_config("http://h/v1", "k", "m", 32768, tools=["read", "glob"])["tools"]
    assert {name for name, on in tools.items() if on} == {"read", "glob"}
    assert set(tools) == set(try_agents.OPENCODE_TOOLS)


def test_the_offline_switches_cover_updates_the_models_catalogue_and_sharing(try_agents):
    env = try_agents.OPENCODE_OFFLINE_ENV
    for name in ("OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_MODELS_FETCH", "OPENCODE_DISABLE_SHARE"):
        assert env[name] == "1"


def test_a_read_of_hello_py_then_an_answer_naming_the_function_passes(try_agents):
    out = lines({"type": "step_start", "part": {}},
                tool_event("read", "completed", "/w/hello.py", "1: def greet(name):"),
                text_event("The function defined in hello.py is `greet`."))
    ok, reason, calls, answer = try_agents.opencode_verdict("some log line\n" + out)
    assert ok, reason
    assert answer == "The function defined in hello.py is `greet`."
    assert calls == ['read completed {"filePath": "/w/hello.py"} -> \'1: def greet(name):\'']


def test_no_tool_call_fails_even_when_the_answer_guesses_the_name(try_agents):
    ok, reason, calls, answer = try_agents.opencode_verdict(lines(text_event("It defines greet.")))
    assert not ok and "never completed" in reason
    assert calls == [] and answer == "It defines greet."


def test_the_answer_is_the_text_after_the_last_tool_call(try_agents):
    out = lines(text_event("Let me read it. greet?"), tool_event("read", "completed", "/w/hello.py", "1: def greet"),
                text_event("Now the other file."), tool_event("glob", "completed", "/w/x.py", "none"),
                text_event("It is "), text_event("`greet`."))
    ok, reason, calls, answer = try_agents.opencode_verdict(out)
    assert ok, reason
    assert answer == "It is `greet`." and len(calls) == 2


def test_a_failed_read_or_a_read_of_another_file_fails(try_agents):
    ok, reason, calls, _ = try_agents.opencode_verdict(lines(
        tool_event("read", "error", "/elsewhere/hello.py", "File not found: /elsewhere/hello.py"),
        tool_event("read", "completed", "/w/other.py", "x = 1"), text_event("greet")))
    assert not ok and "never completed" in reason
    assert calls[0].startswith("read error") and "File not found" in calls[0]


def test_a_read_followed_by_a_wrong_answer_or_an_error_event_fails(try_agents):
    read = tool_event("read", "completed", "hello.py", "1: def greet(name):")
    ok, reason, _, answer = try_agents.opencode_verdict(lines(read, text_event("It defines hello.")))
    assert not ok and "does not name greet" in reason and answer == "It defines hello."
    ok, reason, _, _ = try_agents.opencode_verdict(lines(read, text_event("greet"), {
        "type": "error", "error": {"name": "APIError", "data": {"message": "400 bad request"}}}))
    assert not ok and "400 bad request" in reason


def test_each_step_finish_event_is_one_line_with_its_reason_and_tokens(try_agents):
    def finish(reason, prompt, answer):
        return {"type": "step_finish", "part": {"type": "step-finish", "reason": reason, "tokens": {
            "total": prompt + answer, "input": prompt, "output": answer, "cache": {"read": 7000 - prompt, "write": 0}}}}
    out = lines(finish("tool-calls", 7000, 30), text_event("greet"), finish("stop", 78, 12))
    assert try_agents.opencode_steps("not json\n" + out) == [
        "step 1: tool-calls, prompt tokens 7000 read + 0 cached, answer tokens 30",
        "step 2: stop, prompt tokens 78 read + 6922 cached, answer tokens 12"]
