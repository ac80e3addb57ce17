"""The round's fixed cost on the real tiny model: a consumer that takes 100 ms over every event (a slow
client, a terminal that renders slowly) is not charged to the rounds, so mode auto's policy learns the
engine's own overhead (a few ms on SmolLM2), not the consumer's."""

from __future__ import annotations

import statistics
import time

from localspec.backend.llama import LlamaModel
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.engine import SpeculativeEngine

from cost_curves import costs_for

SLOW = 0.1  # seconds the consumer takes over every event


def test_a_slow_consumer_is_not_charged_to_the_rounds(tiny_path):
    model = LlamaModel(tiny_path, n_ctx=512, n_batch=256, n_threads=2, huge_pages=False)
    try:
        engine = SpeculativeEngine(model, costs=costs_for([0.01 * (1 + 0.2 * b) for b in range(9)]))
        prompt = model.tokenize("def add(a, b):\n    return a + b\n\ndef add(a, b):\n")
        gen = engine.generate(prompt, SamplingParams(temperature=0.0), DraftParams(mode="auto", draft_max=8),
                              GenerationParams(max_tokens=24))
        events = 0
        for _ in gen:
            events += 1
            time.sleep(SLOW)
        assert len(gen.rounds) >= 3 and events > len(gen.rounds)
        beside = [rs.round_seconds - rs.verify_seconds - rs.catchup_seconds for rs in gen.rounds[1:]]
        assert statistics.median(beside) < SLOW / 2, beside
        assert gen.policy.overhead < SLOW / 2
    finally:
        model.close()


def test_rows_and_their_argmax_are_llama_cpps_and_a_rounds_passes_are_timed(tiny_path):
    """The rows a verification pass returns (copied once from llama.cpp's output buffer) are llama.cpp's row by
    row (``llama_get_logits_ith``), over two ``n_batch`` chunks too; ``decode_argmax`` (taken in that buffer,
    nothing copied) is their argmax; and a real generation's rounds count their time inside llama_decode."""
    import llama_cpp
    import numpy as np

    model = LlamaModel(tiny_path, n_ctx=512, n_batch=32, n_threads=2, huge_pages=False)
    try:
        tokens = model.tokenize("def add(a, b):\n    return a + b\n" * 4)[:40]  # two chunks: 32 + 8
        rows = model.decode(tokens, "all")
        last = np.stack([np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(model._ctx, j), shape=(model.n_vocab,))
                         for j in range(8)])  # the second chunk's rows, as llama.cpp holds them
        assert rows.shape == (40, model.n_vocab) and np.array_equal(rows[32:], last)
        model.reset()
        assert np.array_equal(model.decode_argmax(tokens), rows.argmax(axis=1))
        model.reset()
        picked = model.decode(tokens, [3, 33, 39])
        assert np.array_equal(picked, rows[[3, 33, 39]])
        model.reset()
        engine = SpeculativeEngine(model)
        before = model.llama_decode_seconds
        gen = engine.generate(tokens, SamplingParams(temperature=0.0), DraftParams(mode="lookup", draft_max=8),
                              GenerationParams(max_tokens=24)).run()
        s = gen.stats
        assert 0 < s.pass_seconds <= s.round_seconds and s.pass_seconds <= model.llama_decode_seconds - before
        assert all(0 < rs.pass_seconds <= rs.round_seconds for rs in gen.rounds)
        assert s.overhead_seconds_per_round is not None and s.overhead_seconds_per_round < s.round_seconds
    finally:
        model.close()
