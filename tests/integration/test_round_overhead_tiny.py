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
