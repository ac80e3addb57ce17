"""The round's fixed cost (issue 43, fault 9): learned per generation (its policy), starting from the
engine's calibrated value, never from the time the consumer held the generation between two events.
A scripted clock makes the engine's own work take no time at all, so whatever a round is charged comes
from the consumer."""

from __future__ import annotations

from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.engine import SpeculativeEngine
from localspec.core.events import RoundStats

from cost_curves import T1, costs_for
from fakes import FakeModel

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _generate(engine, consumer_seconds, clock, max_tokens=30):
    """Mode auto; the consumer takes ``consumer_seconds`` (of the scripted clock) over every event."""
    gen = engine.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="auto", draft_max=8),
                          GenerationParams(max_tokens=max_tokens))
    for _ in gen:
        clock.now += consumer_seconds
    return gen


def test_a_slow_consumers_time_is_not_the_rounds_cost():
    clock = Clock()
    costs = costs_for([T1 * (1 + 0.1 * b) for b in range(9)])
    engine = SpeculativeEngine(FakeModel(), costs=costs, clock=clock)
    gen = _generate(engine, 0.5, clock)  # half a second per event: 15 passes' worth
    assert gen.rounds and all(rs.round_seconds == 0.0 for rs in gen.rounds[1:])
    assert gen.policy.overhead == 0.0


def test_each_generation_learns_its_own_overhead_from_the_calibrated_value():
    clock = Clock()
    costs = costs_for([T1 * (1 + 0.1 * b) for b in range(9)])
    costs.overhead = 0.002  # the calibrated value
    engine = SpeculativeEngine(FakeModel(), costs=costs, clock=clock)
    first = engine.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="auto", draft_max=8),
                            GenerationParams(max_tokens=30))
    assert first.policy.overhead == 0.002  # where it starts
    for _ in range(3):
        first.policy.observe_overhead(0.010)  # costly rounds of this generation (20 top logprobs, say)
    assert abs(first.policy.overhead - 0.010) < 1e-12
    second = engine.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="auto", draft_max=8),
                             GenerationParams(max_tokens=30))
    assert costs.overhead == 0.002  # the engine's value is not moved by a generation
    assert second.policy is not first.policy and second.policy.overhead == 0.002
    second.run()  # rounds that cost nothing beside their passes (the scripted clock): it learns that
    assert second.policy.overhead < 0.002 and first.policy.overhead > 0.009 and costs.overhead == 0.002


def test_round_seconds_still_count_the_engines_own_time():
    """The exclusion takes only the consumer's time: a round's own work still counts."""
    clock = Clock()
    model = FakeModel()
    decode = model.decode

    def slow_decode(*a, **k):  # each pass takes 10 ms of the scripted clock
        clock.now += 0.010
        return decode(*a, **k)

    model.decode = slow_decode
    engine = SpeculativeEngine(model, clock=clock)
    gen = engine.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="none"),
                          GenerationParams(max_tokens=5))
    for ev in gen:
        clock.now += 1.0
    rounds = [rs for rs in gen.rounds]
    assert rounds and all(abs(rs.round_seconds - 0.010) < 1e-9 for rs in rounds[1:])
    assert all(isinstance(rs, RoundStats) for rs in rounds)


def test_a_rounds_passes_and_its_overhead_are_what_llama_decode_and_the_rest_took():
    """Each pass takes 10 ms of the scripted clock, 8 of them inside ``llama_decode`` (the model's
    ``llama_decode_seconds``, as LlamaModel counts it); the rest (2 ms a pass) is the round's overhead, summed
    into the generation's statistics and given per round and per drafted token."""
    clock = Clock()

    class Timed(FakeModel):
        llama_decode_seconds = 0.0

        def decode(self, tokens, logits_for="last", progress=None):
            clock.now += 0.010
            self.llama_decode_seconds += 0.008
            return super().decode(tokens, logits_for, progress)

    engine = SpeculativeEngine(Timed(), Timed(), clock=clock)
    gen = engine.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="draft", draft_max=3),
                          GenerationParams(max_tokens=12)).run()
    rounds, s = gen.rounds, gen.stats
    assert len(rounds) >= 2 and s.drafted > 0
    for rs in rounds:  # the target's verification pass and the draft model's passes (catch-up included)
        passes = round(rs.round_seconds / 0.010)
        assert passes >= 2 and abs(rs.pass_seconds - 0.008 * passes) < 1e-9
    assert abs(s.round_seconds - sum(rs.round_seconds for rs in rounds)) < 1e-9
    assert abs(s.pass_seconds - 0.8 * s.round_seconds) < 1e-9
    assert abs(s.overhead_seconds_per_round - 0.2 * s.round_seconds / len(rounds)) < 1e-9
    assert abs(s.overhead_seconds_per_drafted_token - 0.2 * s.round_seconds / s.drafted) < 1e-9
