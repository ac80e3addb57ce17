"""Replay recorded agent requests that carry tools and count the tool calls left as text.

Issue 45, item 3: every answer that begins a call must end as a structured call. This reads
recorded ``/v1/chat/completions`` request bodies (files or folders: a ``.json`` file holding one body,
or a Qwen Code ``--openai-logging`` entry ``{"request": body, "response": ...}``; a ``.jsonl`` file with
one per line), sends each one that has ``tools`` to a running server (not streamed, greedy unless the
body says otherwise), and prints one line per request: structured calls, or the answer as text, and
whether that text holds a call (:func:`call_as_text`: a ``<tool_call>`` marker, Qwen3-Coder's
``<function=...>``, or a JSON object whose ``name`` is one of the request's tools). ``--recorded``
counts the same in the recorded responses instead, without a server (the "before")::

    localspec serve --port 8080 &
    python scripts/replay_tool_calls.py --base-url http://127.0.0.1:8080/v1 tests/data/agent-sessions
    python scripts/replay_tool_calls.py --recorded LOGS    # the answers the client got at the time

Exits 1 when any call is left as text.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from pathlib import Path


def call_as_text(content: str | None, names: list[str]) -> bool:
    """Whether a text answer holds a tool call: the Hermes marker, Qwen3-Coder's XML function, or a JSON
    object naming one of ``names`` (fenced or bare)."""
    if not content:
        return False
    if "<tool_call>" in content or re.search(r"<function=\w", content):
        return True
    return any(re.search(r'"name"\s*:\s*' + re.escape(json.dumps(n)), content) for n in names)


def requests_in(paths: list[str]) -> list[tuple[str, dict, dict | None]]:
    """(where, request body, recorded response or None) for every recorded request with tools."""
    out = []
    files = [f for p in map(Path, paths) for f in (sorted(p.rglob("*.json*")) if p.is_dir() else [p])]
    for f in files:
        lines = f.read_text(encoding="utf-8").splitlines() if f.suffix == ".jsonl" else [f.read_text("utf-8")]
        for i, line in enumerate(x for x in lines if x.strip()):
            entry = json.loads(line)
            body = entry.get("request", entry) if isinstance(entry, dict) else None
            if isinstance(body, dict) and body.get("tools") and body.get("messages"):
                out.append((f"{f.name}:{i}" if f.suffix == ".jsonl" else f.name, body, entry.get("response")))
    return out


def tool_names(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body["tools"] if t.get("type") == "function"]


def verdict(message: dict, names: list[str]) -> str:
    """``call`` (structured calls), ``text`` or ``call as text``."""
    if message.get("tool_calls"):
        return "call"
    return "call as text" if call_as_text(message.get("content"), names) else "text"


def send(base_url: str, body: dict, max_tokens: int | None, timeout: float) -> dict:
    body = dict(body, stream=False)
    body.pop("stream_options", None)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", "Authorization": "Bearer none"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="recorded request files or folders")
    p.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    p.add_argument("--recorded", action="store_true", help="judge the recorded responses, send nothing")
    p.add_argument("--max-tokens", type=int, default=None, help="override each request's max_tokens")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per request")
    ns = p.parse_args()
    counts = {"call": 0, "text": 0, "call as text": 0}
    for where, body, recorded in requests_in(ns.paths):
        t0 = time.perf_counter()
        response = recorded if ns.recorded else send(ns.base_url, body, ns.max_tokens, ns.timeout)
        if not response or not response.get("choices"):
            print(f"{where}: no answer recorded")
            continue
        message = response["choices"][0]["message"]
        kind = verdict(message, tool_names(body))
        counts[kind] += 1
        shown = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
        print(f"{where}: {kind:12} {time.perf_counter() - t0:6.1f} s  {shown or repr((message.get('content') or '')[:100])}",
              flush=True)
    print(f"{counts['call']} answers with structured calls, {counts['text']} text, "
          f"{counts['call as text']} calls left as text")
    return 1 if counts["call as text"] else 0


if __name__ == "__main__":
    sys.exit(main())
