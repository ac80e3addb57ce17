"""Robustness tests: bad input and faults (bad model files, settings, prompts and user files; cancelling).

Real-model tests use the tiny SmolLM2-135M (``tiny_engine_ctx512``, tests/conftest.py); everything else
runs on fakes.
"""

import pytest


@pytest.fixture
def isolated_env(tmp_path, monkeypatch):
    """No user config, an empty cache and weights folder, the hub offline."""
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "settings.json"))
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LOCALSPEC_MODELS_DIR", str(tmp_path / "weights"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


@pytest.fixture
def tiny_env(isolated_env, tiny_path):
    """isolated_env with SmolLM2 in its weights folder (no copy into the cache)."""
    (isolated_env / "weights").mkdir(exist_ok=True)
    (isolated_env / "weights" / tiny_path.name).symlink_to(tiny_path)
    return isolated_env
