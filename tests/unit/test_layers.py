"""The layers contract of pyproject.toml ([tool.importlinter]): modules import only downward.

README "How it works" draws the same layers. A new upward import (the engine importing the
loader, the cost model importing the engine, ...) fails here. import-linter runs in a child
process: it reconfigures logging, which other tests read.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def lint_imports(config: Path) -> subprocess.CompletedProcess:
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))")
    return subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, timeout=120)


def test_every_module_imports_only_from_the_layers_below():
    r = lint_imports(ROOT / "pyproject.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 kept, 0 broken" in r.stdout


def test_the_contract_catches_an_upward_import(tmp_path):
    """The same contract with the engine put above the loader breaks (loader -> engine is then upward)."""
    text = (ROOT / "pyproject.toml").read_text()
    config = text[text.index("[tool.importlinter]"):]
    chat_layer = r'("localspec\.chat \| localspec\.loader[^"]*")'
    swapped = re.sub(chat_layer + r',\n(\s*)("localspec\.engine \| localspec\.models"),', r'\3,\n\2\1,', config)
    assert swapped != config
    path = tmp_path / "contract.toml"
    path.write_text(swapped)
    r = lint_imports(path)
    assert r.returncode == 1
    assert "BROKEN" in r.stdout and "localspec.loader -> localspec.engine" in r.stdout


def test_every_module_is_in_a_layer():
    """A new module of localspec (or a tui module outside the tui package) must be placed in the contract."""
    text = (ROOT / "pyproject.toml").read_text()
    layers = text[text.index("layers = ["):]
    layers = layers[: layers.index("]")]
    named = set(re.findall(r"(localspec\.\w+|tui)\b", layers))
    modules = {f"localspec.{p.stem}" for p in (ROOT / "localspec").glob("*.py") if p.stem != "__init__"}
    modules |= {f"localspec.{p.name}" for p in (ROOT / "localspec").iterdir() if (p / "__init__.py").exists()}
    assert modules - named == set(), f"modules outside the layers contract: {sorted(modules - named)}"
    assert "tui" in named
