"""The suite's own layout. The test folders have no ``__init__.py``: pytest imports every test
file as a top-level module named after its file (and the tests import helpers such as ``fakes``
by that name), so two test files with one basename in different folders stop collection with
"import file mismatch" on a clean clone (CI failed on exactly that, ``test_logprobs.py`` in
``tests/unit/core`` and ``tests/integration``)."""

import ast
import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    by_name = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name == "conftest.py" or "__pycache__" in path.parts:
            continue  # pytest registers each conftest under its own path
        by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each: {clashes}"


def test_each_unit_test_folder_is_a_package_of_localspec():
    """``tests/unit/<name>/`` mirrors ``localspec/<name>/``: a folder named after no package (or after
    one that was renamed) fails."""
    root = TESTS.parent / "localspec"
    folders = {p.name for p in (TESTS / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders and {f for f in folders if not (root / f / "__init__.py").is_file()} == set()


def _fixtures(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list)}


def test_a_conftest_fixture_is_defined_once():
    """One shared fixture per model (``tiny_engine``, ``tiny_engine_ctx512``, ``pair_engine``, ...): a
    fixture of a conftest is not defined again in another conftest or a test module, where it would
    silently stand for something else in that folder."""
    defined = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        for name in _fixtures(path):
            defined[name].append(str(path.relative_to(TESTS)))
    shared = {name for path in TESTS.rglob("conftest.py") for name in _fixtures(path)}
    assert {"tiny_engine", "pair_engine", "tiny_env"} <= shared
    twice = {name: paths for name, paths in defined.items() if name in shared and len(paths) > 1}
    assert twice == {}, f"define each shared fixture once: {twice}"


#: the documents a newcomer reads, and the code's, tests' and scripts' comments: every file path they name exists
_CITED = re.compile(r"(?<![\w/.~$-])((?:localspec|tests|scripts|models|docs)/[\w./-]+\.(?:py|toml|md|tcss|jsonl|json))(?![\w])")


def test_the_paths_the_docs_and_docstrings_name_exist():
    """A moved module or test leaves no reference to its old path (README, docs/architecture.md,
    docs/benchmark.md, models/README.md, the code, the tests, the scripts)."""
    root = TESTS.parent
    texts = [root / "README.md", root / "models" / "README.md", *(root / "docs").glob("*.md"),
             *(root / "localspec").rglob("*.py"), *(root / "localspec").rglob("*.toml"),
             *(root / "tests").rglob("*.py"), *(root / "scripts").rglob("*.py")]
    missing = {f"{t.relative_to(root)}: {m}" for t in texts if t.name != "benchmark-history.md"
               for m in _CITED.findall(t.read_text(encoding="utf-8")) if not (root / m).exists()}
    assert missing == set()
