"""Robustness tests: bad input and faults (bad model files, settings, prompts and user files; cancelling).

Real-model tests use the tiny SmolLM2-135M; everything else runs on fakes.
"""

import pytest


@pytest.fixture(scope="session")
def tiny_engine(engines, tiny_path):
    """SmolLM2 drafting for itself, small context so overflow is cheap to reach (one thread)."""
    return engines.get(tiny_path, n_ctx=512, n_batch=128, n_threads=1)


@pytest.fixture
def isolated_env(tmp_path, monkeypatch):
    """No user config, an empty cache and weights folder, the hub offline."""
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "settings.json"))
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LOCALSPEC_MODELS_DIR", str(tmp_path / "weights"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path
