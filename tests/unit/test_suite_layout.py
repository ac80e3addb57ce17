"""The suite's own layout. The test folders have no ``__init__.py``: pytest imports every test
file as a top-level module named after its file (and the tests import helpers such as ``fakes``
by that name), so two test files with one basename in different folders stop collection with
"import file mismatch" on a clean clone (CI failed on exactly that, ``test_logprobs.py`` in
``tests/unit/core`` and ``tests/integration``)."""

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
