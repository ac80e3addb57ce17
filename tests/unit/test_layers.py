"""The layers contracts of pyproject.toml ([tool.importlinter]): packages import only downward.

docs/architecture.md draws the same layers. A new upward import (the engine importing the
loader, the cost model importing the engine, ...) fails here. import-linter runs in a child
process: it reconfigures logging, which other tests read.
"""

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def lint_imports(config: Path) -> subprocess.CompletedProcess:
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))")
    return subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, timeout=120)


def test_every_module_imports_only_from_the_layers_below():
    r = lint_imports(ROOT / "pyproject.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in r.stdout


def test_the_contract_catches_an_upward_import(tmp_path):
    """The same contract with the core put above the app breaks (the loader -> the engine is then upward)."""
    text = (ROOT / "pyproject.toml").read_text()
    config = text[text.index("[tool.importlinter]"):]
    swapped = re.sub(r'("localspec\.app"),\n(\s*)("localspec\.backend"),\n(\s*)("localspec\.core"),',
                     r'\5,\n\2\3,\n\4\1,', config, count=1)
    assert swapped != config
    path = tmp_path / "contract.toml"
    path.write_text(swapped)
    r = lint_imports(path)
    assert r.returncode == 1
    assert "BROKEN" in r.stdout and "localspec.app.loader -> localspec.core.engine" in r.stdout


def _named(contract: dict) -> set[str]:
    return {name.strip() for layer in contract["layers"] for name in layer.split("|")}


def _children(package: Path, prefix: str) -> set[str]:
    modules = {f"{prefix}.{p.stem}" for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return modules | {f"{prefix}.{p.name}" for p in package.iterdir() if (p / "__init__.py").exists()}


def test_every_module_is_in_a_layer():
    """A new module or package of localspec must be placed in a contract: the top-level one for
    localspec's own children, the package's own contract for the children of core, backend and app."""
    top = _named(CONTRACTS[0])
    assert _children(ROOT / "localspec", "localspec") - top == set(), "outside the top-level layers"
    for package in ("core", "backend", "app"):
        contract = next(c for c in CONTRACTS if c["layers"][0].startswith(f"localspec.{package}."))
        missing = _children(ROOT / "localspec" / package, f"localspec.{package}") - _named(contract)
        assert missing == set(), f"modules of localspec.{package} outside its layers: {sorted(missing)}"


def test_llama_cpp_is_imported_by_the_three_modules_docs_architecture_names():
    """llama.py (the native model), grammar.py (llama-cpp-python's JSON-schema converter) and the
    bench's peer (llama-cpp-python's ``Llama``): no other module of localspec imports llama_cpp."""
    importers = set()
    for path in (ROOT / "localspec").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "llama_cpp" or n.startswith("llama_cpp.") for n in names):
                importers.add(path.relative_to(ROOT).as_posix())
    assert importers == {"localspec/backend/llama.py", "localspec/backend/grammar.py", "localspec/bench/peer.py"}


def test_docs_architecture_names_every_module_of_the_core_the_backend_the_app_and_the_server():
    """The tree in docs/architecture.md is the newcomer's map: a module added (or renamed) there is
    named there, with what it does."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = [f"localspec/{p}/{m.name}" for p in ("core", "backend", "app", "server")
               for m in sorted((ROOT / "localspec" / p).glob("*.py"))
               if m.stem != "__init__" and not re.search(rf"^\s+{re.escape(m.name)}\s", doc, re.M)]
    assert unnamed == [], "add them to docs/architecture.md's tree"
