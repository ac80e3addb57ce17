"""Real GGUF models: the tiny SmolLM2-135M (fast) and the Qwen2.5-Coder 1.5B/0.5B pair."""

import pytest

from localspec.app.loader import make_engine
from localspec.backend.llama import LlamaModel


@pytest.fixture(scope="session")
def tiny_engine(tiny_path):
    """SmolLM2 drafting for itself."""
    target = LlamaModel(tiny_path, n_ctx=2048, n_batch=512)
    draft = LlamaModel(tiny_path, n_ctx=2048, n_batch=512)
    engine = make_engine(target, draft)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def pair_engine(pair_paths):
    target = LlamaModel(pair_paths[0], n_ctx=2048, n_batch=512)
    draft = LlamaModel(pair_paths[1], n_ctx=2048, n_batch=512)
    engine = make_engine(target, draft)
    yield engine
    engine.close()
