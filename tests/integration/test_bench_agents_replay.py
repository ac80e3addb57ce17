"""scripts/bench_agents.py replays the synthetic agent session against a real ``localspec serve`` (SmolLM2, whose
chat template has no tools: the session's calls and results as text, its tool schemas in the system prompt): every
turn after the first reuses >= 95 % of the tokens it shares with an earlier request (the longest common
prefix), on a server that ran the whole session and on one restarted before every turn (the disk tier),
and the bench's own token count of each prompt is the server's. This checks the server's prefix reuse
(live cache, kept snapshots, disk tier), not only the script: with ``--prompt-cache-mb 0`` the restarted
turns read everything again, and this fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tiny

SESSION = Path(__file__).resolve().parents[1] / "data" / "agent-sessions" / "synthetic-fix-test.jsonl"


def as_text(body: dict) -> dict:
    """A chat body without tools: the tool schemas at the end of the system prompt, each call and result as text."""
    messages = []
    for m in body["messages"]:
        if m["role"] == "tool":
            m = {"role": "user", "content": "Tool result:\n" + m["content"]}
        elif m.get("tool_calls"):
            calls = "".join(f"\nCall {c['function']['name']} {c['function']['arguments']}" for c in m["tool_calls"])
            m = {"role": "assistant", "content": (m["content"] or "") + calls}
        messages.append(m)
    messages[0] = {"role": "system", "content": messages[0]["content"] + "\n# Tools\n" + json.dumps(body["tools"])}
    return {**{k: v for k, v in body.items() if k not in ("tools", "tool_choice")}, "messages": messages}


def test_the_synthetic_session_reuses_its_prefix_on_every_turn_also_after_restarts(bench_agents, tiny_path, tmp_path):
    serve = (f"tiny={sys.executable} -m localspec.cli serve --target {tiny_path} --mode lookup --port {{port}} "
             "--n-ctx 8192 --n-threads 1 --log-level warning")
    session = tmp_path / "synthetic-as-text.jsonl"
    session.write_text("".join(json.dumps({**t, "body": as_text(t["body"])}) + "\n"
                               for t in map(json.loads, SESSION.read_text().splitlines())))
    out = tmp_path / "rows.json"
    bench_agents.main([str(session), "--localspec", serve, "--gguf", str(tiny_path), "--read-test-mib", "8",
                       "--timeout", "600", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["phase"], r["turn"]) for r in rows] == [(p, t) for p in ("warm", "restart") for t in range(1, 7)]
    for r in rows:
        assert r["error"] is None and r["prompt"] == r["ids"], r  # the bench renders the prompt as the server does
        if r["turn"] > 1:
            assert r["reusable"] > 1400, r  # the ~10 KB system prompt and tools at least
            assert r["reused"] >= 0.95 * r["reusable"], r
            assert r["depth_bound"] > 1.0, r  # the prefill rate measured at the turn's depth, for every later turn
