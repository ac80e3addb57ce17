"""KV-cache snapshots on the tiny model (LlamaModel.save_state / load_state) and the default context window.

A restored prompt prefix gives the logits of a fresh prefill bit for bit (the very cells come back, and the
same pass runs on them: the difference measured is 0.0 with flash attention on and off) and the same greedy output
through the engine.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from generation import run
from localspec.backend.llama import LlamaModel
from localspec.core.prefix_cache import PrefixCache

pytestmark = pytest.mark.tiny

TEXT_A = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n" * 12 + "# the tenth number:"
TEXT_B = "Shopping list: apples, pears, bread, milk, eggs, rice, beans.\n" * 12 + "Also buy"


def test_a_restored_prefix_gives_the_logits_of_a_fresh_prefill(tiny_engine):
    model = tiny_engine.target
    a, b = model.tokenize(TEXT_A), model.tokenize(TEXT_B)
    model.reset()
    model.decode(a[:-1], logits_for=())
    state = model.save_state()
    fresh = model.decode(a[-1:], "last")[0]
    assert state.tokens == tuple(a[:-1]) and state.nbytes >= len(a) * model.kv_bytes_per_token() // 2
    model.reset()
    model.decode(b, logits_for=())  # another prompt in the cache meanwhile
    assert model.load_state(state) and model.cached_tokens == a[:-1]
    restored = model.decode(a[-1:], "last")[0]
    np.testing.assert_array_equal(restored, fresh)  # a cache restored wrong can keep the argmax: not enough
    # a snapshot taken under the other flash-attention setting (another V layout) is refused, the cache left as it was
    other = dataclasses.replace(state, flash_attn=not model.flash_attn)
    assert not model.load_state(other) and model.cached_tokens == a
    model.reset()


@pytest.mark.parametrize("mode", ["lookup", "draft"])
def test_alternating_prompts_through_the_engine_answer_as_from_an_empty_cache(tiny_engine, mode):
    """Mode draft: the draft model's snapshot comes back with the target's (SmolLM2 drafts for itself)."""
    eng = tiny_engine
    a, b = eng.tokenize(TEXT_A), eng.tokenize(TEXT_B)

    eng.clear_cache()
    eng.prefix_cache = PrefixCache(64 << 20)
    try:
        first = run(eng, a, mode, 24, draft_max=4)[0]
        run(eng, b, mode, 24, draft_max=4)
        again = run(eng, a, mode, 24, draft_max=4)[0]
        assert again.stats.cached_prompt_tokens == len(a) - 1
        assert eng.prefix_cache.stats.restored == (2 if mode == "draft" else 1)
        assert again.token_ids == first.token_ids
        if mode == "draft":
            assert again.rounds[0].catchup_tokens == 0  # the draft model's cache came back too
            eng.check_caches(again.committed)
    finally:
        eng.prefix_cache = None
        eng.clear_cache()


def test_the_default_window_is_the_training_context_capped_for_a_draft(tiny_path):
    model = LlamaModel(tiny_path, n_ctx=None, n_ctx_max=1024, n_threads=1)
    try:
        assert model.n_ctx_default and model.n_ctx == min(1024, model.n_ctx_train)
        assert model.kv_bytes_per_token() == 23_040  # 30 layers x 3 KV heads x (64 + 64) x 2 bytes
    finally:
        model.close()
