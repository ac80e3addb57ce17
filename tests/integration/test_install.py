"""localspec installs the way command-line tools are installed: a wheel built from a clean tree,
installed into a fresh virtual environment outside the checkout, runs from any folder.

What an editable install hides: data read from the repository (the model catalog), a weights
folder inside site-packages, and top-level package names other than ``localspec``. The wheel's
dependencies come from pip's cache (llama-cpp-python's wheel, built once by the README's
test command), so this costs about a minute, not a compile.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.tiny


def _clean_tree(dest: Path) -> Path:
    """The files git tracks or would track (no build folders, no egg-info, no venv), copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _run(cmd: list, cwd: Path, env: dict, timeout: int) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, wheel, env, cwd): the wheel built from a clean copy of the tree and installed with its
    ``tiny`` extra into a new venv; env points HOME, the cache and the data folders into the test's
    own folder, and cwd is a folder with no checkout in it."""
    base = tmp_path_factory.mktemp("install")
    tree = _clean_tree(base / "tree")
    dist = base / "dist"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCALSPEC_", "VIRTUAL_ENV", "PYTHON"))}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, tree], base, env, 600)
    wheel = next(dist.glob("localspec-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", venv], base, env, 300)
    _run([venv / "bin" / "pip", "install", "-q", f"localspec[tiny] @ {wheel.as_uri()}"], base, env, 1500)
    home = base / "home"
    (home / "elsewhere").mkdir(parents=True)
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"),
               LOCALSPEC_CACHE=str(home / "cache"), HF_HUB_OFFLINE="1", COLUMNS="300")
    env.pop("XDG_CACHE_HOME", None)
    return venv, wheel, env, home / "elsewhere"


def test_the_wheel_carries_the_catalog_and_only_localspec(installed):
    _, wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"localspec"}, f"top-level names other than localspec: {sorted(top - {'localspec'})}"
    assert "localspec/catalog.toml" in names
    assert "localspec/tui/app.tcss" in names


def test_localspec_models_runs_from_any_folder_and_keeps_weights_out_of_site_packages(installed):
    venv, _, env, cwd = installed
    out = _run([venv / "bin" / "localspec", "models"], cwd, env, 120).stdout
    assert "smollm2-135m" in out and "qwen2.5-coder-1.5b" in out
    home = Path(env["HOME"])
    assert f"local weights folder: {home / 'data' / 'localspec' / 'models'}" in out
    assert "site-packages" not in out.split("local weights folder:")[1].splitlines()[0]
    # the installed copy answered, not the checkout
    where = _run([venv / "bin" / "python", "-c", "import localspec, localspec.tui.app; print(localspec.__file__)"],
                 cwd, env, 120).stdout
    assert where.startswith(str(venv)), where


def test_a_short_generate_on_the_tiny_model_from_the_installed_package(installed):
    venv, _, env, cwd = installed
    r = _run([venv / "bin" / "localspec", "generate", "--target", "smollm2-135m", "--mode", "lookup",
              "--n-threads", "1", "--max-tokens", "12", "--temperature", "0", "--json",
              "Repeat after me: one two three four five six"], cwd, env, 300)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    stats = [e for e in events if e.get("type") == "stats"]
    assert stats and stats[-1]["tokens"] >= 1, r.stdout[-2000:]
    # the tiny model was assembled from the installed mirror package into the user's cache
    assert (Path(env["LOCALSPEC_CACHE"]) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
