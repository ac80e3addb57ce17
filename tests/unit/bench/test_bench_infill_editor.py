"""scripts/bench_infill.py's ``--editor``: the n_indent llama.vim computes for a cut."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench_infill.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_infill", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cursor_indent_is_the_cursor_lines_leading_whitespace():
    bench = load()
    assert bench.cursor_indent("def f():\n    x = fo") == 4
    assert bench.cursor_indent("class A:\n\tdef g(self):\n\t\t") == 2
    assert bench.cursor_indent("def f():\n    return 1\n") == 0  # the cursor at a line's start
    assert bench.cursor_indent("  no newline") == 2
    # every drawn request of the default run gets a value llama.vim would send (>= 0, within its line)
    for req in bench.cuts(20, 0, 16, 8):
        line = req["input_prefix"].rsplit("\n", 1)[-1]
        assert 0 <= bench.cursor_indent(req["input_prefix"]) <= len(line)
