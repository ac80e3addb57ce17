"""Engine control flow on a deterministic fake backend: exactness, rollback, ending, statistics."""

import numpy as np
import pytest

from fakes import EOG, FakeModel, greedy_reference
from generation import run as checked_run
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.drafters import Draft
from localspec.core.engine import SpeculativeEngine
from localspec.errors import ConfigError, ContextOverflowError
from localspec.core.events import DrafterId, EndReason, RoundStats, TokenEvent, TokenKind
from localspec.core.policy import Choice, FixedPolicy

PROMPT = [3, 5, 7, 3, 5]


def run(engine, prompt=PROMPT, mode="draft", draft_max=4, max_tokens=30, **kw):
    """:func:`generation.run` with this file's defaults."""
    return checked_run(engine, prompt, mode, max_tokens, draft_max=draft_max, **kw)


class PlantingDrafter:
    """Proposes the right tokens but plants a wrong one every ``every`` positions."""

    name = DrafterId.DRAFT
    last_catchup = (0, 0.0)

    def catchup_tokens(self, context):
        return 0

    def __init__(self, every=3):
        self.every = every
        self.calls = 0

    def begin(self, sampling, rng):
        pass

    def draft(self, context, draft_len, drafting):
        seq = list(context)
        out = []
        from fakes import next_token

        for i in range(draft_len):
            t = next_token(seq)
            self.calls += 1
            if self.calls % self.every == 0:
                t = (t + 5) % (EOG - 1)
            out.append(t)
            seq.append(t)
        return Draft(tuple(out), None, DrafterId.DRAFT)

    def rollback(self, committed):
        pass

    def reset(self):
        pass


@pytest.mark.parametrize("mode", ["none", "draft", "lookup"])
def test_greedy_equals_reference(mode):
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen, events = run(eng, mode=mode)
    assert gen.token_ids == greedy_reference(PROMPT, 30)
    assert [e.token_id for e in events if isinstance(e, TokenEvent)] == gen.token_ids
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == gen.text


def test_planted_wrong_tokens_are_corrected():
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    eng.drafter = PlantingDrafter(every=3)
    gen, events = run(eng, mode="draft", draft_max=5)
    assert gen.token_ids == greedy_reference(PROMPT, 30)
    kinds = {e.kind for e in events if isinstance(e, TokenEvent)}
    assert TokenKind.RESAMPLED in kinds and TokenKind.ACCEPTED in kinds
    assert 0 < gen.stats.acceptance_rate < 1


def test_draft_equal_to_target_shows_full_acceptance():
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen, _ = run(eng, mode="draft", draft_max=4, max_tokens=25)
    assert gen.stats.acceptance_rate == 1.0
    assert gen.stats.kinds.get("bonus", 0) > 0


def test_drafter_that_always_fails_shows_zero():
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    eng.drafter = PlantingDrafter(every=1)
    gen, _ = run(eng, mode="draft")
    assert gen.stats.acceptance_rate == 0.0
    assert gen.stats.drafted > 0


def test_no_draft_shows_na_not_100_percent():
    eng = SpeculativeEngine(FakeModel())
    gen, _ = run(eng, mode="none")
    assert gen.stats.acceptance_rate is None and gen.stats.drafted == 0
    assert gen.stats.kinds == {"target": 30}


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 7])
@pytest.mark.parametrize("mode", ["draft", "lookup", "none"])
def test_max_tokens_exact(max_tokens, mode):
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen, _ = run(eng, mode=mode, draft_max=8, max_tokens=max_tokens)
    assert len(gen.token_ids) == max_tokens
    assert gen.stats.end_reason == EndReason.MAX_TOKENS
    assert eng.target.cached_tokens == (PROMPT + gen.token_ids)[:-1]


@pytest.mark.parametrize("mode", ["draft", "lookup", "none"])
def test_eog_ends_and_is_not_emitted(mode):
    eng = SpeculativeEngine(FakeModel(eog_after=12), FakeModel(eog_after=12))
    gen, _ = run(eng, mode=mode, draft_max=6)
    assert gen.stats.end_reason == EndReason.EOG
    assert EOG not in gen.token_ids
    assert len(PROMPT) + len(gen.token_ids) == 12
    assert eng.target.cached_tokens == (PROMPT + gen.token_ids)[:-1]


@pytest.mark.parametrize("mode", ["draft", "lookup", "none"])
@pytest.mark.parametrize("cut", [1, 2, 5, 9])
def test_stop_string_inside_accepted_block(mode, cut):
    ref = greedy_reference(PROMPT, 30)
    full_text = "".join(f"t{t} " for t in ref)
    # a stop string made of the text of tokens cut..cut+2 (spans token boundaries)
    stop = "".join(f"t{t} " for t in ref[cut : cut + 3])[1:-1]
    expected_end = full_text.index(stop)
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen, events = run(eng, mode=mode, draft_max=8, stop=[stop])
    assert gen.stats.end_reason == EndReason.STOP
    assert gen.text == full_text[:expected_end]
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == gen.text
    # tokens: those that start before the stop
    assert gen.token_ids == ref[: cut + 1]
    assert eng.target.cached_tokens == (PROMPT + gen.token_ids)[:-1]
    assert eng.draft_model.cached_tokens == (PROMPT + gen.token_ids)[: eng.draft_model.n_cached]
    assert eng.draft_model.n_cached <= len(PROMPT) + len(gen.token_ids) - 1


def test_context_full_ends_without_overflow():
    eng = SpeculativeEngine(FakeModel(n_ctx=20), FakeModel(n_ctx=20))
    gen, _ = run(eng, mode="draft", draft_max=8, max_tokens=100)
    assert gen.stats.end_reason == EndReason.CONTEXT
    assert len(PROMPT) + len(gen.token_ids) == 20
    assert gen.token_ids == greedy_reference(PROMPT, 15)


def test_prompt_errors():
    eng = SpeculativeEngine(FakeModel(n_ctx=8))
    with pytest.raises(ConfigError, match="empty"):
        run(eng, prompt=[], mode="none")
    with pytest.raises(ContextOverflowError, match="context window"):
        run(eng, prompt=list(range(8)), mode="none")


def test_draft_mode_without_draft_model_is_refused():
    with pytest.raises(ConfigError, match="draft model"):
        SpeculativeEngine(FakeModel()).generate(PROMPT, drafting=DraftParams(mode="draft"))


@pytest.mark.parametrize("n", [1, 2])
def test_short_prompts(n):
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    for mode in ("none", "draft", "lookup"):
        gen, _ = run(eng, prompt=PROMPT[:n], mode=mode, max_tokens=12)
        assert gen.token_ids == greedy_reference(PROMPT[:n], 12)


def test_cancel_keeps_caches_consistent_and_reproducible():
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen = eng.generate(PROMPT, SamplingParams(temperature=0.9, seed=3), DraftParams(mode="draft", draft_max=4),
                       GenerationParams(max_tokens=40))
    seen = []
    for ev in gen:
        if isinstance(ev, TokenEvent):
            seen.append(ev.token_id)
        if len(seen) >= 5:
            break
    gen.close()
    assert gen.stats.end_reason == EndReason.CANCELLED
    assert gen.token_ids == seen
    assert eng.target.cached_tokens == (PROMPT + seen)[:-1]
    again, _ = run(eng, mode="draft", temperature=0.9, seed=3, max_tokens=40)
    fresh_engine = SpeculativeEngine(FakeModel(), FakeModel())
    fresh, _ = run(fresh_engine, mode="draft", temperature=0.9, seed=3, max_tokens=40)
    assert again.token_ids == fresh.token_ids


def test_rounds_never_accept_more_than_drafted():
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    eng.drafter = PlantingDrafter(every=4)
    gen, events = run(eng, mode="draft", temperature=1.0, seed=1)
    for rs in (e for e in events if isinstance(e, RoundStats)):
        assert 0 <= rs.accepted <= rs.drafted
        assert rs.committed <= rs.accepted + 1


def test_chosen_draft_length_reported():
    class Half(FixedPolicy):
        free_drafters = ()

        def choose(self, state):
            return Choice(DrafterId.DRAFT, min(2, state.limit), "test policy")

    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen = eng.generate(PROMPT, drafting=DraftParams(mode="draft"), policy=Half("draft", 4),
                       generation=GenerationParams(max_tokens=10))
    rounds = [e for e in gen if isinstance(e, RoundStats)]
    assert all(r.draft_len_chosen <= 2 and r.reason == "test policy" for r in rounds)
    assert gen.token_ids == greedy_reference(PROMPT, 10)


def test_draft_is_cut_after_an_end_of_generation_token():
    """Draft tokens after an EOG can never be committed, so they are never verified or counted."""

    class EogDrafter(PlantingDrafter):
        def draft(self, context, draft_len, drafting):
            return Draft((EOG, 3, 4, 5)[:draft_len], None, DrafterId.DRAFT)

    eng = SpeculativeEngine(FakeModel(eog_after=7), FakeModel())
    eng.drafter = EogDrafter()
    gen, events = run(eng, mode="draft", draft_max=4)
    rounds = [e for e in events if isinstance(e, RoundStats)]
    assert all(r.drafted <= 1 for r in rounds)
    assert rounds[-1].accepted == 1 and gen.stats.end_reason == EndReason.EOG
    assert rounds[-1].target_tokens == (EOG,)  # no bonus shown after the end-of-generation token


def test_draft_catchup_is_timed_apart_and_excluded_from_the_rate():
    """issue 8: the draft model's catch-up (its cold cache) is its own figure, not drafting."""
    prompt = list(range(1, 30))
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen, events = run(eng, prompt=prompt, mode="draft", draft_max=4, max_tokens=30)
    rounds = [e for e in events if isinstance(e, RoundStats)]
    # round 0 evaluates the prompt but its newest token in one batch: the catch-up
    assert rounds[0].catchup_tokens == len(prompt) - 1
    assert eng.draft_model.decode_calls[0] == len(prompt) - 1
    # the steady state never counts as catch-up (the draft lacks only the newest one or two)
    assert all(r.catchup_tokens == 0 for r in rounds[1:])
    s = gen.stats
    assert s.catchup_tokens == len(prompt) - 1
    assert s.catchup_seconds == sum(r.catchup_seconds for r in rounds)
    assert s.draft_seconds == pytest.approx(sum(r.draft_seconds for r in rounds))
    assert s.decode_seconds == pytest.approx(s.elapsed_seconds - s.prefill_seconds - s.catchup_seconds)
    assert s.tokens_per_second == pytest.approx(s.tokens / s.decode_seconds)
    # a second generation on the warm engine: nothing to catch up
    gen2, _ = run(eng, prompt=prompt, mode="draft", draft_max=4, max_tokens=10)
    assert gen2.stats.catchup_tokens == 0


class TimedModel(FakeModel):
    """A FakeModel whose decode advances ``clock`` (a one-element list, seconds) by ``seconds`` per token."""

    def __init__(self, clock, seconds):
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def decode(self, tokens, logits_for="last", progress=None):
        self.clock[0] += self.seconds * len(tokens)
        return super().decode(tokens, logits_for, progress)


def test_prefill_warms_both_caches():
    prompt = list(range(1, 20))
    clock = [0.0]
    eng = SpeculativeEngine(TimedModel(clock, 0.010), TimedModel(clock, 0.002), clock=lambda: clock[0])
    t_target, t_draft, n_cached = eng.prefill(prompt)
    # each model's prefill is timed apart: the 18 tokens before the newest, at its own cost per token
    assert (t_target, t_draft, n_cached) == (pytest.approx(18 * 0.010), pytest.approx(18 * 0.002), 0)
    assert eng.target.cached_tokens == prompt[:-1] and eng.draft_model.cached_tokens == prompt[:-1]
    gen, _ = run(eng, prompt=prompt, mode="draft", max_tokens=10)
    assert gen.stats.catchup_tokens == 0


def test_stats_are_counted_live_by_the_one_accumulator():
    """The engine's GenerationStats is up to date after every round (the TUI shows it live)."""
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen = eng.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="draft", draft_max=3),
                       GenerationParams(max_tokens=20))
    n_tokens = n_rounds = drafted = 0
    for ev in gen:
        if isinstance(ev, TokenEvent):
            n_tokens += 1
        else:
            n_rounds += 1
            drafted += ev.drafted
            assert (gen.stats.tokens, gen.stats.rounds, gen.stats.drafted) == (n_tokens, n_rounds, drafted)
            assert sum(gen.stats.kinds.values()) == n_tokens
            assert gen.stats.elapsed_seconds > 0
    assert gen.stats.tokens == len(gen.token_ids) == n_tokens


def test_policy_is_asked_at_the_current_position_with_the_lookup_match_length():
    """The policy predicts costs where the round runs (tokens committed) and sees each lookup proposal's match length."""

    class Recorder(FixedPolicy):
        free_drafters = ("lookup",)

        def __init__(self):
            super().__init__("lookup", 2)
            self.positions, self.matches = [], []

        def choose(self, state):
            assert set(state.proposals) <= {"lookup"}
            self.positions.append(state.position)
            self.matches += [(len(state.committed), tuple(p.tokens), p.match_length) for p in state.proposals.values()]
            return Choice(DrafterId.LOOKUP, min(2, state.limit), "test policy")

    eng = SpeculativeEngine(FakeModel(), None)
    pol = Recorder()
    gen = eng.generate(PROMPT, drafting=DraftParams(mode="lookup"), policy=pol,
                       generation=GenerationParams(max_tokens=12)).run()
    committed = len(PROMPT)
    for pos, rs in zip(pol.positions, gen.rounds):
        assert pos == committed
        committed += rs.committed
    from localspec.core.drafters.lookup import find_match

    # the match length the engine passes is the lookup drafter's, for the same committed tokens
    seq = PROMPT + gen.token_ids
    assert any(m > 0 for _, _, m in pol.matches)
    for n, proposal, m in pol.matches:
        cand, _, m_ref = find_match(seq[:n], 3, 1, len(proposal))
        assert (list(proposal), m) == (cand, m_ref)


def test_draft_model_drafter_reports_the_catchup_it_will_do():
    """The policy prices exactly the catch-up draft() then does (more than the steady gap: all but the newest)."""
    from localspec.core.drafters import DraftModelDrafter

    model = FakeModel()
    d = DraftModelDrafter(model)
    context = list(range(1, 40))
    assert d.catchup_tokens(context) == len(context) - 1  # cold cache
    model.sync(context)
    model.decode(context[:-1], logits_for=())
    assert d.catchup_tokens(context) == 0  # steady state: only the newest one is missing
    assert d.catchup_tokens(context + [5]) == 0  # two missing: still the steady gap
    assert d.catchup_tokens(context + [5, 6, 7]) == 3
    d.begin(SamplingParams(), np.random.default_rng(0))
    d.draft(context + [5, 6, 7], 2, DraftParams())
    assert d.last_catchup[0] == 3


def test_debug_runs_assert_the_cache_invariant_every_round(monkeypatch):
    """With LOCALSPEC_DEBUG set, a target cache that keeps rejected draft tokens stops the generation."""
    monkeypatch.setenv("LOCALSPEC_DEBUG", "1")
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    assert eng.debug
    eng.drafter = PlantingDrafter(every=2)
    eng.target.truncate = lambda n: None  # a rollback that silently fails
    with pytest.raises(AssertionError, match="target cache"):
        run(eng, mode="draft", check_invariant=False)
    # the check itself, on a healthy engine
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen, _ = run(eng, mode="draft")
    eng.check_caches(gen.committed)
    eng.draft_model.cached_tokens.append(12345)
    with pytest.raises(AssertionError, match="draft cache"):
        eng.check_caches(gen.committed)


def test_statistics_of_several_generations_add_up_in_the_one_accumulator():
    """localspec bench pools its repetitions with GenerationStats.add: the rates are the pooled ones."""
    from localspec.core.events import GenerationStats

    eng = SpeculativeEngine(FakeModel(), FakeModel())
    eng.drafter = PlantingDrafter(every=3)
    a, _ = run(eng, mode="draft", max_tokens=20)
    b, _ = run(eng, prompt=[4, 6, 8, 4, 6], mode="draft", max_tokens=25)
    total = GenerationStats()
    total.add(a.stats)
    total.add(b.stats)
    assert total.tokens == a.stats.tokens + b.stats.tokens == 45
    assert total.drafted == a.stats.drafted + b.stats.drafted > 0
    assert total.acceptance_rate == (a.stats.accepted + b.stats.accepted) / total.drafted
    assert total.mean_accepted_length == total.accepted / (a.stats.drafting_rounds + b.stats.drafting_rounds)
    assert sum(total.kinds.values()) == total.tokens


def test_mode_auto_never_measures_inside_generate():
    """#20 item 4: costs come from the engine, its cost source's cache, or an explicit calibrated_costs;
    generate refuses mode auto without them (naming what to do) rather than measuring silently. The
    engine reads no cache and measures nothing itself: its cost source (the loader's) does."""
    from localspec.backend.calibration import ModelCosts
    from localspec.core.costmodel import EngineCosts

    curve = [0.01 * (1 + 0.1 * b) for b in range(9)]
    costs = EngineCosts(verify=curve, draft_token=None, target=ModelCosts(seconds=curve), draft=None)

    class Source:
        def __init__(self):
            self.measured, self.cache = [], {}

        def cached(self, draft_max):
            return self.cache.get(draft_max)

        def measure(self, draft_max, existing=None, remeasure=False, progress=None):
            self.measured.append(draft_max)
            return costs

    source = Source()
    eng = SpeculativeEngine(FakeModel(), cost_source=source)
    assert not eng.has_costs(8)
    with pytest.raises(ConfigError, match="not measured yet") as e:
        run(eng, mode="auto", draft_max=8)
    assert "calibrate" in e.value.hint and source.measured == []
    eng.calibrated_costs(8)  # the explicit, visible measurement
    assert source.measured == [8] and eng.has_costs(8) and not eng.has_costs(16)
    gen, _ = run(eng, mode="auto", draft_max=8)
    assert gen.token_ids == greedy_reference(PROMPT, 30) and source.measured == [8]
    # costs the source has cached are used without measuring; an engine without a source cannot measure
    cached = SpeculativeEngine(FakeModel(), cost_source=source)
    source.cache[8] = costs
    assert cached.has_costs(8) and cached.cost_model is costs and source.measured == [8]
    bare = SpeculativeEngine(FakeModel())
    with pytest.raises(ConfigError, match="cannot measure"):
        bare.calibrated_costs(8)
    assert SpeculativeEngine(FakeModel(), costs=costs).calibrated_costs(8) is costs


# -- the editor plugins' line rules: n_indent (IndentLimit) and t_max_predict_ms ------------------

from fakes import N_VOCAB  # noqa: E402


def _line_texts():
    """Token i's text: a newline, then i % 7 spaces and a word (every token starts a line)."""
    return [f"\n{' ' * (i % 7)}w{i}".encode() for i in range(N_VOCAB - 1)] + [b""]


@pytest.mark.parametrize("mode", ["none", "draft", "lookup"])
@pytest.mark.parametrize("min_indent", [1, 3, 5])
def test_min_indent_cuts_like_a_stop_string(mode, min_indent):
    texts = _line_texts()
    ref = greedy_reference(PROMPT, 30)
    full = "".join(texts[t].decode() for t in ref)
    # the reference: the first line after the first newline indented less than min_indent
    starts = [i + 1 for i, c in enumerate(full) if c == "\n"]  # the first line (before it) is empty
    cut = next(s + len(full[s:]) - len(full[s:].lstrip(" ")) for s in starts
               if len(full[s:]) - len(full[s:].lstrip(" ")) < min_indent)
    eng = SpeculativeEngine(FakeModel(texts=texts), FakeModel(texts=texts))
    gen = eng.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode=mode, draft_max=8),
                       GenerationParams(max_tokens=30, min_indent=min_indent))
    events = [e for e in gen if isinstance(e, TokenEvent)]
    assert gen.stats.end_reason == EndReason.INDENT
    assert gen.text == full[:cut]
    assert "".join(e.text for e in events) == gen.text  # nothing past the cut was released
    n_kept = sum(1 for i in range(len(ref)) if len("".join(texts[t].decode() for t in ref[:i])) < cut)
    assert gen.token_ids == ref[:n_kept]
    assert eng.target.cached_tokens == (PROMPT + gen.token_ids)[:-1]


class StepClock:
    """A clock that moves one second each time it is read."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.0
        return self.t


@pytest.mark.parametrize("mode", ["none", "draft", "lookup"])
def test_newline_time_limit_ends_at_the_next_newline(mode):
    texts = [f"a{i} ".encode() if i % 5 else f"b{i}\n".encode() for i in range(N_VOCAB - 1)] + [b""]
    ref = greedy_reference(PROMPT, 30)
    first_nl = next(i for i, t in enumerate(ref) if b"\n" in texts[t])
    eng = SpeculativeEngine(FakeModel(texts=texts), FakeModel(texts=texts), clock=StepClock())
    gen = eng.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode=mode, draft_max=8),
                       GenerationParams(max_tokens=30, newline_time_limit=0.5))
    gen.run()
    assert gen.stats.end_reason == EndReason.TIME_LIMIT
    assert gen.token_ids == ref[:first_nl + 1]  # the token with the newline is the last one
    assert gen.text.endswith("\n")
    # a limit far away: the output runs to max_tokens
    eng = SpeculativeEngine(FakeModel(texts=texts), FakeModel(texts=texts), clock=StepClock())
    gen = eng.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode=mode, draft_max=8),
                       GenerationParams(max_tokens=30, newline_time_limit=1e9))
    gen.run()
    assert gen.stats.end_reason == EndReason.MAX_TOKENS and gen.token_ids == ref
