"""The layers contract of pyproject.toml ([tool.importlinter]): modules import only downward.

README "How it works" draws the same layers. A new upward import (the engine importing the
loader, the cost model importing the engine, ...) fails here.
"""

import re
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_imports_only_from_the_layers_below(capsys):
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0, capsys.readouterr().out
    assert "1 kept, 0 broken" in capsys.readouterr().out


def test_the_contract_catches_an_upward_import(tmp_path, capsys):
    """The same contract with the engine put above the loader breaks (loader -> engine is then upward)."""
    text = (ROOT / "pyproject.toml").read_text()
    config = text[text.index("[tool.importlinter]"):]
    swapped = re.sub(r'"localspec\.chat \| localspec\.loader",\n(\s*)"localspec\.engine",',
                     r'"localspec.engine",\n\1"localspec.chat | localspec.loader",', config)
    assert swapped != config
    path = tmp_path / "contract.toml"
    path.write_text(swapped)
    assert lint_imports(config_filename=str(path), no_cache=True) == 1
    out = capsys.readouterr().out
    assert "BROKEN" in out and "localspec.loader -> localspec.engine" in out
