"""Mode auto end to end on the Qwen pair: greedy output token-identical to target-only."""

import pytest

from localspec.core.costmodel import EngineCosts
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.policy import AdaptivePolicy

pytestmark = pytest.mark.pair

EDIT_PROMPT = (
    "Here is a class:\n\nclass Stack:\n    def __init__(self):\n        self.items = []\n"
    "    def push(self, x):\n        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n"
    "    def size(self):\n        return len(self.items)\n\n"
    "Rename `size` to `length` and show the whole class, code only."
)


def test_auto_greedy_identical_to_target_only(pair_engine):
    engine = pair_engine
    prompt = engine.chat_tokens([{"role": "user", "content": EDIT_PROMPT}])
    greedy = SamplingParams(temperature=0.0)
    gen = GenerationParams(max_tokens=128)
    reference = engine.generate(prompt, greedy, DraftParams(mode="none"), gen).run()
    engine.calibrated_costs(8)  # measured (or read from the cache) here, visibly: generate never measures
    auto = engine.generate(prompt, greedy, DraftParams(mode="auto", draft_max=8), gen)
    assert isinstance(auto.policy, AdaptivePolicy)
    auto.run()
    assert auto.token_ids == reference.token_ids
    assert auto.text == reference.text
    assert isinstance(engine.cost_model, EngineCosts) and len(engine.cost_model.verify) >= 9
    # every round says what it chose and why; the draft length obeys the choice
    for rs in auto.rounds:
        assert rs.reason
        assert rs.drafted <= rs.draft_len_chosen
        if rs.draft_len_chosen == 0:
            assert rs.reason.startswith("no speculation")
        else:
            assert rs.reason.startswith(f"g={rs.draft_len_chosen} ")
    s = auto.stats
    assert s.tokens == len(reference.token_ids)
    assert s.acceptance_rate is None or 0.0 <= s.acceptance_rate <= 1.0
