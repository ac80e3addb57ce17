"""No module of localspec over MAX_LINES lines, and every one over EXPLAIN_LINES says why it holds together.

A module that grows past EXPLAIN_LINES must say, in its docstring's first two paragraphs (the summary
line and the one after it), in a sentence beginning with WHY, what its parts share that makes them one
module; past MAX_LINES it is split by job instead (issue 46, item 6).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: most lines of a module
MAX_LINES = 600
#: a module over this many lines says why it holds together
EXPLAIN_LINES = 400
#: the sentence that says it, at the start of the docstring's second paragraph (or in the first)
WHY = "Why these hold together:"


def module_problems(path: Path) -> list[str]:
    """What is wrong with the module at ``path``: too long, or long without saying why (empty: nothing)."""
    text = path.read_text()
    lines = len(text.splitlines())
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    if lines > MAX_LINES:
        return [f"{name}: {lines} lines (over {MAX_LINES}: split it by job)"]
    if lines > EXPLAIN_LINES:
        doc = ast.get_docstring(ast.parse(text)) or ""
        if WHY not in "\n\n".join(doc.split("\n\n")[:2]):
            return [f"{name}: {lines} lines and its docstring's first paragraphs lack {WHY!r}"]
    return []


def test_no_module_is_too_long_or_unexplained():
    problems = [p for path in sorted((ROOT / "localspec").rglob("*.py")) for p in module_problems(path)]
    assert not problems, "\n".join(problems)


def test_the_rule_catches_a_long_module_and_an_unexplained_one(tmp_path):
    body = "x = 1\n"
    too_long = tmp_path / "too_long.py"
    too_long.write_text(f'"""Doc.\n\n{WHY} one job."""\n' + body * MAX_LINES)
    unexplained = tmp_path / "unexplained.py"
    unexplained.write_text('"""Doc.\n\nWhat it does.\n\n' + WHY + ' too late."""\n' + body * EXPLAIN_LINES)
    explained = tmp_path / "explained.py"
    explained.write_text(f'"""Doc.\n\n{WHY} one job."""\n' + body * EXPLAIN_LINES)
    short = tmp_path / "short.py"
    short.write_text('"""Doc."""\n' + body * (EXPLAIN_LINES - 1))
    assert "split it by job" in module_problems(too_long)[0]
    assert "lack" in module_problems(unexplained)[0]
    assert module_problems(explained) == [] and module_problems(short) == []
