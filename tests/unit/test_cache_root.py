"""localspec's cache folder, ``$LOCALSPEC_CACHE``: one rule (localspec.config.cache_root) for every cache in it."""

from pathlib import Path

from localspec.app.catalog import cache_dir
from localspec.backend.calibration import cost_cache_path
from localspec.backend.repack import verdict_path

KEY = {"path": "/models/m.gguf", "n_threads": 2}


def test_every_cache_expands_a_tilde_and_variables_in_localspec_cache(monkeypatch, tmp_path):
    """The costs and the repack verdicts did not expand ``~`` (a folder named "~" in the current one) while the
    models did: a value written as in a shell profile, quoted, now means the same folder to all of them."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SUB", "lc")
    monkeypatch.setenv("LOCALSPEC_CACHE", "~/$SUB")
    root = tmp_path / "lc"
    assert cost_cache_path(KEY).parent == root / "costs"
    assert verdict_path(KEY).parent == root / "repack"
    assert cache_dir() == root / "models"


def test_the_cache_defaults_to_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LOCALSPEC_CACHE", raising=False)
    assert cost_cache_path(KEY).parent == tmp_path / ".cache" / "localspec" / "costs"
    assert cache_dir() == Path(tmp_path, ".cache", "localspec", "models")
