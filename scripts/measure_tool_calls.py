"""How often a running ``localspec serve`` answers with a valid tool call, per ``tool_choice``, and
what speculation accepts on tool calls.

For docs/server.md's figures on ``tool_choice`` (auto / required / named: calls, malformed or other
answers) and on acceptance with tools. Greedy; every prompt asks for something one of the
tools does, so a good answer is a call::

    localspec serve --mode lookup --port 8080 &
    python scripts/measure_tool_calls.py --base-url http://127.0.0.1:8080/v1

Prints one line per request and a summary per ``tool_choice``; the speculation figures are
sums over the requests (acceptance = accepted / drafted). ``--off-topic`` adds prompts that
call for no tool ("Say hello."): with ``required`` or named the grammar must still give a
call whose arguments follow the schema (``schema-valid`` counts them); ``--temperature 1
--seeds 1,2,3`` samples instead of greedy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the project",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the project's tests, optionally only those matching a pattern",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "replace_in_file", "description": "Replace text in a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"},
                                                        "new": {"type": "string"}},
                       "required": ["path", "old", "new"]}}},
]
#: (prompt, the tool a good answer calls)
PROMPTS = [
    ("Show me the contents of src/app.py.", "read_file"),
    ("Run the tests that match 'parser'.", "run_tests"),
    ("In config.py, replace DEBUG = True with DEBUG = False.", "replace_in_file"),
    ("What does README.md say about installation? Look at the file.", "read_file"),
]
#: prompts no tool answers: a call is still due with ``required`` / named (None: any tool)
OFF_TOPIC = [("Say hello.", None), ("What is 2 + 2?", None)]


def schema_valid(name: str, args: dict) -> bool:
    """``args`` has the tool's required keys, only its keys, and strings where it says string."""
    params = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    props = params.get("properties", {})
    return (set(params.get("required", ())) <= set(args) and set(args) <= set(props)
            and all(isinstance(args[k], str) for k in args if props[k].get("type") == "string"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    p.add_argument("--api-key", default="none")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--choices", default="auto,required,named")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seeds", default="0", help="comma-separated seeds (sampled runs)")
    p.add_argument("--off-topic", action="store_true", help="also prompts that call for no tool")
    ns = p.parse_args()
    prompts = PROMPTS + (OFF_TOPIC if ns.off_topic else [])
    seeds = [int(x) for x in ns.seeds.split(",")]
    client = openai.OpenAI(base_url=ns.base_url, api_key=ns.api_key, max_retries=0, timeout=1800)
    summary = {}
    for choice in ns.choices.split(","):
        counts = {"call": 0, "wrong tool": 0, "content": 0, "schema-valid": 0, "requests": 0,
                  "seconds": 0.0, "drafted": 0, "accepted": 0, "tokens": 0, "passes": 0}
        for (prompt, tool), seed in ((pt, sd) for pt in prompts for sd in seeds):
            named = tool or TOOLS[0]["function"]["name"]
            tool_choice = {"type": "function", "function": {"name": named}} if choice == "named" else choice
            t0 = time.perf_counter()
            r = client.chat.completions.create(model="localspec", messages=[{"role": "user", "content": prompt}],
                                               tools=TOOLS, tool_choice=tool_choice, temperature=ns.temperature,
                                               seed=seed, max_tokens=ns.max_tokens)
            m, s = r.choices[0].message, r.model_extra["speculation"]
            calls = [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls or []]
            right = tool or (named if choice == "named" else None)
            kind = "content" if not calls else ("call" if right in (None, calls[0][0]) else "wrong tool")
            counts[kind] += 1
            counts["requests"] += 1
            counts["seconds"] += time.perf_counter() - t0
            counts["schema-valid"] += bool(calls) and all(schema_valid(n, a) for n, a in calls)
            counts["drafted"] += s["drafted"]
            counts["accepted"] += s["accepted"]
            counts["tokens"] += r.usage.completion_tokens
            counts["passes"] += s["target_passes"]
            print(f"{choice:8} {kind:10} {time.perf_counter() - t0:5.1f} s  {r.choices[0].finish_reason:10} "
                  f"{calls or repr((m.content or '')[:80])}  drafted {s['drafted']} accepted {s['accepted']}",
                  flush=True)
        summary[choice] = counts
    print()
    for choice, c in summary.items():
        acc = c["accepted"] / c["drafted"] if c["drafted"] else None
        print(f"{choice}: {c['call']}/{c['requests']} calls to the right tool (any tool for an off-topic prompt), "
              f"{c['wrong tool']} to another, {c['content']} answered as content, {c['schema-valid']} with "
              f"schema-valid arguments; {c['seconds'] / max(1, c['requests']):.1f} s a request; drafted {c['drafted']}, accepted {c['accepted']} "
              f"(acceptance {acc if acc is None else round(acc, 2)}), "
              f"tokens per target pass {c['tokens'] / max(1, c['passes']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
