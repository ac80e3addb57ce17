"""One checked run of an engine's generation, shared by the unit (fake backend) and the real-model tests."""

from __future__ import annotations

from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.events import RoundStats, TokenEvent


def run(engine, prompt, mode, max_tokens, draft_max=6, temperature=0.0, seed=0, stop=(), sampling=None,
        check_invariant=True, constraint=None, cache_prompt=True):
    """Generate, checking as it goes: after every round the released tokens are the committed ones after
    the prompt and both KV caches hold what they should (``check_invariant``); at the end the events'
    tokens and text are the generation's. ``cache_prompt``: the engine's (False: from empty caches, put back
    after). Returns (Generation, events)."""
    sampling = sampling or SamplingParams(temperature=temperature, seed=seed)
    gen = engine.generate(prompt, sampling, DraftParams(mode=mode, draft_max=draft_max),
                          GenerationParams(max_tokens=max_tokens, stop=tuple(stop)), constraint=constraint,
                          cache_prompt=cache_prompt)
    events = []
    for ev in gen:
        events.append(ev)
        if check_invariant and isinstance(ev, RoundStats):
            released = [e.token_id for e in events if isinstance(e, TokenEvent)]
            assert gen.committed[len(prompt): len(prompt) + len(released)] == released
            engine.check_caches(gen.committed)
    assert [e.token_id for e in events if isinstance(e, TokenEvent)] == gen.token_ids
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == gen.text
    return gen, events
