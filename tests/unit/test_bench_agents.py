"""scripts/bench_agents.py's pure pieces (issue 45 item 1): session files, the reusable tokens of a session,
the body it replays, a streamed answer's figures, and the goals. The scripts folder is no package: loaded
from its file. The replay against a real server is in tests/integration/test_bench_agents_replay.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SESSIONS = Path(__file__).resolve().parents[1] / "data" / "agent-sessions"


@pytest.fixture(scope="module")
def bench(bench_agents):
    return bench_agents


def line(turn=1, path="/v1/chat/completions", **body):
    body = body or {"messages": [{"role": "user", "content": "hi"}]}
    return json.dumps({"turn": turn, "method": "POST", "path": path, "body": body})


def test_the_synthetic_session_parses_and_grows_turn_by_turn(bench):
    turns = bench.read_session(SESSIONS / "synthetic-fix-test.jsonl")
    assert [t.turn for t in turns] == [1, 2, 3, 4, 5, 6]
    sizes = [len(t.body["messages"]) for t in turns]
    assert sizes == [2, 4, 6, 8, 10, 12]  # each turn: the conversation again, a call and its result appended
    for a, b in zip(turns, turns[1:]):
        assert b.body["messages"][: len(a.body["messages"])] == a.body["messages"]


@pytest.mark.parametrize("text, why", [
    ("", "no request"),
    ("{not json", ":1: not JSON"),
    ("[1, 2]", ":1: a line is one JSON object"),
    (line() + "\n" + line(turn=1), ":2: turn must be an integer larger"),
    (line(turn="1"), ":1: turn must be an integer"),
    (json.dumps({"turn": 1, "method": "GET", "path": "/v1/models", "body": {}}), ":1: method 'GET'"),
    (line(path="/v1/completions", prompt="x"), ":1: path '/v1/completions'"),
    (line(path="/v1/responses", messages=[]), ":1: body must be the JSON object the server received, with 'input'"),
])
def test_a_bad_session_line_is_named_with_its_number(bench, text, why):
    with pytest.raises(bench.SessionError, match=why.replace("[", r"\[").replace("(", r"\(")):
        bench.parse_session(text, "s.jsonl")


def test_blank_lines_are_skipped_and_a_missing_file_is_a_session_error(bench, tmp_path):
    assert [t.turn for t in bench.parse_session(line(turn=1) + "\n\n" + line(turn=3) + "\n")] == [1, 3]
    with pytest.raises(bench.SessionError, match="missing.jsonl"):
        bench.read_session(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("prompts, expected", [
    ([[1, 2, 3]], [0]),
    ([[1, 2, 3], [1, 2, 3, 4, 5]], [0, 3]),                  # an agent's next turn: all of the first
    ([[1, 2, 3], [1, 2, 3]], [0, 2]),                        # the same prompt again: all but its last token
    ([[1, 2, 3, 4], [9, 9], [1, 2, 3, 7]], [0, 0, 3]),        # with ANY earlier prompt, not only the last
    ([[1, 2, 5, 6], [1, 2, 3, 4], [1, 2, 3, 4, 5]], [0, 2, 4]),  # the longest of them
    ([[5], [5]], [0, 0]),
])
def test_reusable_tokens_is_the_longest_common_prefix_with_any_earlier_prompt(bench, prompts, expected):
    assert bench.reusable_tokens(prompts) == expected


def test_replayed_bodies_stream_and_cap_the_answer_only(bench):
    chat = bench.Turn(1, "POST", "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4096, "stream": False,
                       "stream_options": {"foo": 1}, "tools": [{"type": "function"}], "temperature": 0.7})
    body = bench.replay_body(chat, 16)
    assert body == {**chat.body, "max_tokens": 16, "stream": True, "stream_options": {"foo": 1, "include_usage": True}}
    assert chat.body["max_tokens"] == 4096  # the recorded body is left as it was
    assert bench.replay_body(bench.Turn(1, "POST", "/v1/chat/completions", {"messages": [], "max_tokens": 8}),
                             16)["max_tokens"] == 8
    newer = bench.replay_body(bench.Turn(1, "POST", "/v1/chat/completions",
                                         {"messages": [], "max_completion_tokens": 900}), 16)
    assert newer["max_completion_tokens"] == 16 and "max_tokens" not in newer
    resp = bench.replay_body(bench.Turn(1, "POST", "/v1/responses", {"input": "x"}), 16)
    assert resp == {"input": "x", "stream": True, "max_output_tokens": 16}


def sse(*events, done=True):
    lines = [f"data: {json.dumps(e)}" for e in events] + (["data: [DONE]"] if done else [])
    return [(0.5 * (i + 1), x) for i, x in enumerate(lines)]


def test_a_chat_stream_times_the_first_answer_chunk_not_keepalives(bench):
    keepalive = {"choices": [{"index": 0, "delta": {}, "finish_reason": None}]}
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    call = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 850}},
             "speculation": {"prefill_seconds": 0.25}}
    s = bench.read_stream(sse(keepalive, role, keepalive, call, usage))
    assert s.ttft == 2.0 and s.error is None
    assert bench.reuse_of(s) == (900, 850) and bench.prefill_seconds(s) == 0.25


def test_llama_server_timings_give_its_reuse(bench):
    text = {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
            "timings": {"cache_n": 700, "prompt_n": 12, "prompt_ms": 1500.0}, "usage": {"prompt_tokens": 712}}
    s = bench.read_stream(sse(text, last))
    assert s.ttft == 0.5 and bench.reuse_of(s) == (712, 700) and bench.prefill_seconds(s) == 1.5


def test_a_responses_stream_and_an_error_event(bench):
    events = [{"type": "response.created", "response": {}},
              {"type": "response.output_item.added", "item": {"type": "message"}},
              {"type": "response.output_item.added", "item": {"type": "function_call"}},
              {"type": "response.completed",
               "response": {"usage": {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 40}},
                            "speculation": {"prefill_seconds": 0.25}}}]
    s = bench.read_stream(sse(*events))
    assert s.ttft == 1.5 and bench.reuse_of(s) == (50, 40)
    assert bench.prefill_seconds(s) == 0.25  # localspec's statistics ride in the completed response
    failed = bench.read_stream(sse({"error": {"message": "context overflow"}}))
    assert "context overflow" in failed.error and failed.ttft is None


def test_an_answer_that_ends_at_once_still_has_a_first_token_time(bench):
    s = bench.read_stream(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    assert s.ttft == 0.5


def row(bench, server, turn, reusable, reused, phase="warm", ttft=1.0, bound=2.0, error=None):
    return bench.Row("s", server, phase, turn, 100, 100, reusable, reused, ttft, 0.0, bound, error)


def test_goals_pass_at_95_percent_and_ignore_each_phases_first_turn(bench):
    rows = [row(bench, "ls", 1, 0, 0), row(bench, "ls", 2, 1000, 950), row(bench, "ls", 1, 0, 0, "restart"),
            row(bench, "ls", 2, 1000, 960, "restart"), row(bench, "peer", 2, 1000, 950)]
    goals = bench.check_goals(rows, ["ls"], ["peer"])
    assert [g.ok for g in goals] == [True, True, True], goals


def test_goals_fail_below_95_percent_slow_first_tokens_errors_and_fewer_than_the_peer(bench):
    rows = [row(bench, "ls", 1, 0, 0), row(bench, "ls", 2, 1000, 949), row(bench, "ls", 3, 1000, 1000, ttft=2.5),
            row(bench, "ls", 4, 10, None, error="HTTP 500"), row(bench, "peer", 3, 1000, 1001),
            row(bench, "peer", 2, 1000, 900)]
    reuse, ttft, peer = bench.check_goals(rows, ["ls"], ["peer"])
    assert not reuse.ok and reuse.missed == ["s warm turn 2: 949/1000", "s warm turn 4: None/10"]
    assert not ttft.ok and ttft.missed == ["s warm turn 3: 2.50 s > 2.00 s"]
    assert not peer.ok and peer.missed == ["s warm turn 3: 1000 < 1001"]


def test_the_bound_at_the_turns_depth_is_a_goal_of_its_own_when_measured(bench):
    rows = [row(bench, "ls", 1, 0, 0), row(bench, "ls", 2, 1000, 1000, ttft=2.5),
            row(bench, "ls", 3, 1000, 1000, ttft=2.5)]
    rows[1].depth_bound, rows[2].depth_bound = 3.0, 2.4
    reuse, ttft, depth = bench.check_goals(rows, ["ls"], [])
    assert not ttft.ok and len(ttft.missed) == 2  # the cold read's average rate: both turns too slow
    assert "depth" in depth.name and not depth.ok and depth.missed == ["s warm turn 3: 2.50 s > 2.40 s"]
    rows[2].depth_bound = 2.5
    assert bench.check_goals(rows, ["ls"], [])[2].ok


def test_ttft_bound_and_cache_reuse_gain(bench):
    assert bench.ttft_bound(300, 100.0) == pytest.approx(4.0)
    assert bench.ttft_bound(0, 100.0, read_seconds=0.25) == pytest.approx(1.25)
    rows = [row(bench, "a", 2, 10, 5), row(bench, "b", 2, 10, 9), row(bench, "b", 3, 10, 9)]
    assert bench.cache_reuse_gain(rows, "a", "b") == [("s", "warm", 2, 4)]


@pytest.mark.parametrize("text, expected", [
    ("llama serve --port {port}", ("localspec", "localspec", ["llama", "serve", "--port", "{port}"], None)),
    ("mine=llama serve --port {port} -x a=b", ("localspec", "mine", ["llama", "serve", "--port", "{port}", "-x", "a=b"],
                                                None)),
    ("http://127.0.0.1:8080/v1/", ("localspec", "localspec", None, "http://127.0.0.1:8080/v1")),
    ("ls=http://h:1", ("localspec", "ls", None, "http://h:1")),
])
def test_server_specs(bench, text, expected):
    s = bench.parse_server("localspec", text)
    assert (s.kind, s.label, s.argv, s.url) == expected


def test_a_server_command_without_its_port_is_refused(bench):
    with pytest.raises(bench.SessionError, match=r"\{port\}"):
        bench.parse_server("llama-server", "llama-server -m x.gguf")
    assert bench.parse_server("llama-server", "/bin/ls --port {port}", 1).label == "llama-server-2"


def test_the_isolated_cache_links_all_but_the_snapshots(bench, tmp_path):
    real = tmp_path / "real"
    (real / "costs").mkdir(parents=True)
    (real / "prompts").mkdir()
    (real / "repack.json").write_text("{}")
    got = bench.isolated_cache(real, tmp_path / "iso")
    assert sorted(p.name for p in got.iterdir()) == ["costs", "repack", "repack.json"]
    assert (got / "costs").is_symlink() and not (got / "prompts").exists()


def test_stored_bytes_reads_the_longest_match_per_role(bench, tmp_path):
    for i, (role, tokens, nbytes) in enumerate([("target", [1, 2, 3], 300), ("target", [1, 2, 9, 9], 999),
                                                ("draft", [1, 2, 3], 100), ("target", [7], 5)]):
        (tmp_path / f"{i}.json").write_text(json.dumps({"role": role, "tokens": tokens, "nbytes": nbytes}))
    (tmp_path / "junk.json").write_text("{")
    assert bench.stored_bytes(tmp_path, [1, 2, 3, 4]) == 400
    assert bench.stored_bytes(tmp_path / "none", [1]) == 0


def test_runs_of_different_servers_merge_into_one_verdict(bench, tmp_path, capsys):
    ours, theirs = tmp_path / "ours.json", tmp_path / "theirs.json"
    ours.write_text(json.dumps({"servers": {"ls": "localspec"},
                                "rows": [vars(row(bench, "ls", 1, 0, 0)), vars(row(bench, "ls", 2, 100, 99))]}))
    theirs.write_text(json.dumps({"servers": {"peer": "llama-server", "peer-reuse": "llama-server"},
                                  "rows": [vars(row(bench, "peer", 2, 100, 99)),
                                           vars(row(bench, "peer-reuse", 2, 100, 100))]}))
    assert bench.main(["--merge", str(ours), str(theirs)]) == 1  # peer-reuse reused one token more on turn 2
    out = capsys.readouterr().out
    assert "PASS  ls: reused >= peer's" in out and "FAIL  ls: reused >= peer-reuse's" in out
    assert "peer-reuse reused tokens less peer's, per turn: s warm 2: +1" in out
