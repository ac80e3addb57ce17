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


#: the packages whose children have their own layers contract (each in pyproject.toml)
LAYERED = ("core", "core.drafters", "backend", "app", "tui", "tui.screens", "bench", "server")
#: packages without a contract yet (none: a new package gets its contract when it is made)
PENDING: tuple[str, ...] = ()


def test_every_module_is_in_a_layer():
    """A new module or package of localspec must be placed in a contract: the top-level one for
    localspec's own children, the package's own contract for the children of every package."""
    top = _named(CONTRACTS[0])
    assert _children(ROOT / "localspec", "localspec") - top == set(), "outside the top-level layers"
    packages = {p.parent.relative_to(ROOT / "localspec").as_posix().replace("/", ".")
                for p in (ROOT / "localspec").rglob("__init__.py")} - {"."}
    assert packages == set(LAYERED) | set(PENDING), "a package without a layers contract: add one to pyproject.toml"
    for package in LAYERED:
        contract = next(c for c in CONTRACTS if c["layers"][0].split()[0].rpartition(".")[0] == f"localspec.{package}")
        missing = _children(ROOT / "localspec" / package.replace(".", "/"), f"localspec.{package}") - _named(contract)
        assert missing == set(), f"modules of localspec.{package} outside its layers: {sorted(missing)}"


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of localspec it imports, read with ast from every file under ``root``/localspec:
    imports inside functions and under ``TYPE_CHECKING`` included. ``from a.b import c`` is an edge to
    ``a.b.c`` where that is a module, else to ``a.b``; importing a module does not count as importing its
    parent packages (Python runs them first, but they are not a dependency of the file)."""
    files = {}
    for path in (root / "localspec").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    edges |= {f"{base}.{a.name}"} if f"{base}.{a.name}" in files else {base} & files.keys()
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_cycle_among_the_modules():
    """No file of localspec imports, directly or through others, a file that imports it back: not at the
    top, not inside a function (where import-linter's layers would not see a cycle within one layer).
    The packages of PENDING are let off until their contract lands."""
    pending = tuple(f"localspec.{p}." for p in PENDING)
    found = [sorted(c) for c in cycles(import_graph(ROOT)) if not all(m.startswith(pending) for m in c)]
    assert found == [], "import cycles (break them by moving what both need into a module below both)"


def test_the_cycle_check_finds_a_cycle_through_an_import_inside_a_function(tmp_path):
    """A copy of localspec where the cost model imports the engine inside a function: a cycle."""
    for path in (ROOT / "localspec").rglob("*.py"):
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    costmodel = tmp_path / "localspec" / "core" / "costmodel.py"
    costmodel.write_text(costmodel.read_text() + "\n\ndef _late():\n    from ..core import engine  # noqa\n")
    found = [c for c in cycles(import_graph(tmp_path)) if "localspec.core.costmodel" in c]
    assert len(found) == 1 and {"localspec.core.engine", "localspec.core.costmodel"} <= found[0]


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


def _tree_paths(doc: str) -> set[str]:
    """The files and folders the tree of docs/architecture.md names, as paths under localspec/
    (``server/app.py``): a line's indent (two spaces a level) places it under the folder above it."""
    tree = doc[doc.index("```\nlocalspec/\n") + 4:]
    folders: list[str] = []
    paths = set()
    for line in tree[:tree.index("```")].splitlines()[1:]:
        m = re.match(r"^( +)(\w+(?:/|\.py|\.toml|\.tcss))\s", line + " ")  # not a description's next line
        if not m:
            continue
        depth = len(m.group(1)) // 2
        folders = folders[:depth - 1]
        path = "/".join(folders + [m.group(2).rstrip("/")])
        paths.add(path)
        if m.group(2).endswith("/"):
            folders.append(m.group(2).rstrip("/"))
    return paths


def test_docs_architecture_names_every_module_of_every_package():
    """The tree in docs/architecture.md is the newcomer's map: every module of every package (``tui/screens``,
    ``core/drafters`` included), each under its own folder, with what it does; a module added or renamed is
    named there."""
    named = _tree_paths((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    modules = {m.relative_to(ROOT / "localspec").as_posix() for m in (ROOT / "localspec").rglob("*.py")
               if m.stem not in ("__init__", "__main__")}
    assert modules - named == set(), "add them to docs/architecture.md's tree, under their folder"
    assert named - modules - {m.relative_to(ROOT / "localspec").as_posix()
                              for m in (ROOT / "localspec").rglob("*") if m.is_dir() or m.suffix in (".toml", ".tcss")} == set(), \
        "the tree names modules that do not exist"
