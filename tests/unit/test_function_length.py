"""No new long functions: a function of localspec or tui over MAX_LINES lines fails here.

The functions already longer are listed with their length today (ALLOWED): they may
shrink, not grow. A function that has to be long gets a line in ALLOWED and a reason in
the commit that adds it; shortening one lets its entry go (or lowers its number).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: most lines of a function (``def`` through its last line, nested functions included)
MAX_LINES = 60

#: "path:qualified name" -> its length when this check was added (issue 20)
ALLOWED = {
    "localspec/backend/llama.py:LlamaModel.__init__": 74,
    "localspec/bench/command.py:cli_bench": 95,
    "localspec/bench/report.py:summarise": 86,
    "localspec/bench/report.py:format_table": 81,
    "localspec/bench/runner.py:run_bench": 114,
    "localspec/backend/calibration.py:measure_decode_costs": 63,
    "localspec/cli.py:cmd_generate": 76,
    "localspec/cli.py:build_parser": 62,
    "localspec/cli.py:cmd_calibrate": 73,
    "localspec/tui/widgets.py:StatsPanel._redraw": 63,
}


def function_lengths(path: Path) -> dict[str, int]:
    """Every function and method of the file at ``path``: "qualified name" -> lines."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[prefix + child.name] = child.end_lineno - child.lineno + 1
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return out


def long_functions() -> dict[str, int]:
    files = sorted(ROOT.glob("localspec/**/*.py"))
    return {f"{f.relative_to(ROOT).as_posix()}:{name}": n
            for f in files for name, n in function_lengths(f).items() if n > MAX_LINES}


def test_no_function_is_new_over_the_limit_or_longer_than_allowed():
    found = long_functions()
    new = {k: n for k, n in found.items() if k not in ALLOWED}
    grown = {k: (ALLOWED[k], n) for k, n in found.items() if k in ALLOWED and n > ALLOWED[k]}
    assert not new, f"functions over {MAX_LINES} lines (split them, or list them in ALLOWED with a reason): {new}"
    assert not grown, f"listed functions that grew (allowed, now): {grown}"


def test_the_check_counts_lines_of_nested_and_method_functions(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    src = tmp_path / "m.py"
    src.write_text(f"class A:\n    def f(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n\n"
                   f"def g():\n    def h():\n        pass\n    return h\n")
    lengths = function_lengths(src)
    assert lengths["A.f"] == MAX_LINES + 1 and lengths["g"] == 4 and lengths["g.h"] == 2
