"""Writes ``synthetic-fix-test.jsonl``: a SYNTHETIC agent session (no client recorded it), for
``scripts/bench_agents.py`` and its tests until sessions recorded with real clients are here.

What it imitates: a coding agent's chat session (the shape Qwen Code and opencode send): a ~7 KB system prompt
and 8 tool schemas (~10 KB together), a user task, then on every turn the whole conversation again with the
assistant's tool call and the tool's result appended. Six requests, one JSON line each:
``{"turn": n, "method": "POST", "path": "/v1/chat/completions", "body": {...}}``. Run from the repository root:
``python tests/data/agent-sessions/make_synthetic.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

RULES = [
    "Read a file before you change it, and never guess at its contents.",
    "Prefer small, focused edits; keep the style of the surrounding code.",
    "Run the project's tests after every change and report what they say.",
    "Use absolute paths in every tool call; the working directory is /work/scratch.",
    "Never run commands that delete files outside the working directory.",
    "Explain what you are about to do in one sentence before each tool call.",
    "When a test fails, read the failure message in full before editing anything.",
    "Do not add new dependencies; the standard library is available.",
    "Keep answers short: the user reads them in a terminal.",
    "If a command needs confirmation, ask the user instead of assuming.",
]


def system_prompt() -> str:
    head = ("You are a coding agent running in the user's terminal. You help with software engineering tasks: "
            "fixing bugs, adding features, refactoring, explaining code. You have tools to read and write files, "
            "search the repository and run shell commands. Follow these rules exactly.\n\n")
    body = "".join(f"## Rule {i + 1}.{j + 1}\n{r} This applies to every file type, including configuration "
                   f"files, scripts and documentation (section {i + 1}, item {j + 1}).\n"
                   for i in range(3) for j, r in enumerate(RULES))
    env = ("\n# Environment\nPlatform: linux\nShell: bash\nWorking directory: /work/scratch\n"
           "Is a git repository: yes\nToday's date: 2026-12-06\n")
    return head + body + env


def tool(name: str, text: str, **props: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": text,
        "parameters": {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
                       "required": list(props)}}}


TOOLS = [
    tool("read_file", "Reads a file from the local filesystem and returns its contents with line numbers. "
         "Use it before editing a file.", absolute_path="The absolute path of the file to read."),
    tool("write_file", "Writes content to a file, replacing what it held. Creates parent folders.",
         file_path="The absolute path of the file.", content="The new content of the file."),
    tool("edit", "Replaces one exact occurrence of old_string with new_string in a file. old_string must match "
         "the file's text exactly, including whitespace and indentation.",
         file_path="The absolute path of the file.", old_string="The exact text to replace.",
         new_string="The text to put in its place."),
    tool("run_shell_command", "Runs a bash command in the working directory and returns its stdout, stderr and "
         "exit code. Use it to run tests, linters and git.", command="The command line to run.",
         description="One sentence saying what the command does."),
    tool("glob", "Finds files whose path matches a glob pattern, newest first.",
         pattern="The glob pattern, e.g. src/**/*.py.", path="The folder to search in (absolute)."),
    tool("grep", "Searches file contents with a regular expression and returns matching lines with their "
         "file and line number.", pattern="The regular expression.", path="The folder or file to search."),
    tool("list_directory", "Lists the files and folders in a folder.", path="The absolute path of the folder."),
    tool("todo_write", "Keeps a short to-do list for the current task, shown to the user.",
         todos="The whole list, one item a line, [x] for done items."),
]

CALC = '''"""Small arithmetic helpers."""


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / len(values) - 1


def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    return max(lo, min(x, hi))
'''

PYTEST_FAIL = '''============================= test session starts ==============================
collected 2 items

test_calc.py F.                                                          [100%]

=================================== FAILURES ===================================
__________________________________ test_mean ___________________________________

    def test_mean():
>       assert mean([1, 2, 3]) == 2
E       assert 1.0 == 2
E        +  where 1.0 = mean([1, 2, 3])

test_calc.py:5: AssertionError
=========================== short test summary info ============================
FAILED test_calc.py::test_mean - assert 1.0 == 2
========================= 1 failed, 1 passed in 0.02s ==========================
'''


def call(i: int, name: str, **arguments: str) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


#: (assistant content, its tool call, the tool's result) of each step after the first request
STEPS = [
    ("", call(1, "list_directory", path="/work/scratch"), "calc.py\ntest_calc.py\nREADME.md"),
    ("I'll read calc.py first.", call(2, "read_file", absolute_path="/work/scratch/calc.py"), CALC),
    ("", call(3, "run_shell_command", command="python -m pytest -q test_calc.py", description="Run the tests."),
     PYTEST_FAIL),
    ("mean() subtracts 1 from the result; I'll remove that.",
     call(4, "edit", file_path="/work/scratch/calc.py", old_string="len(values) - 1", new_string="len(values)"),
     "Edited /work/scratch/calc.py: 1 replacement."),
    ("", call(5, "run_shell_command", command="python -m pytest -q test_calc.py", description="Run the tests again."),
     "..                                                                       [100%]\n2 passed in 0.01s"),
]


def session() -> list[dict]:
    messages = [{"role": "system", "content": system_prompt()},
                {"role": "user", "content": "The test for mean() in /work/scratch fails. Find out why and fix it."}]
    lines = []
    for turn in range(len(STEPS) + 1):
        body = {"model": "qwen2.5-coder", "messages": json.loads(json.dumps(messages)), "tools": TOOLS,
                "tool_choice": "auto", "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        lines.append({"turn": turn + 1, "method": "POST", "path": "/v1/chat/completions", "body": body})
        if turn < len(STEPS):
            content, tool_call, result = STEPS[turn]
            messages.append({"role": "assistant", "content": content or None, "tool_calls": [tool_call]})
            messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": result})
    return lines


if __name__ == "__main__":
    out = Path(__file__).with_name("synthetic-fix-test.jsonl")
    out.write_text("".join(json.dumps(line) + "\n" for line in session()))
    print(f"{out}: {len(session())} requests, {out.stat().st_size:,} bytes")
