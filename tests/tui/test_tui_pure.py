"""Pure helpers of the TUI: live statistics, the race driver (code edit: tests/unit/app/test_codeedit.py)."""

from __future__ import annotations

import pytest

from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.tui.driver import RaceSide, drive, race, warm_up
from localspec.tui.stats import LiveStats, RoundView, median_spread, race_speedup
from tui_fakes import DRAFT_P_MIN, REPLY, FakeClock, FakeEngine


def _prompt(eng):
    return eng.chat_tokens([{"role": "user", "content": "q"}])


def _gen(eng, mode="draft", max_tokens=512, prompt=None):
    return eng.generate(prompt or _prompt(eng), SamplingParams(), DraftParams(mode=mode, draft_p_min=DRAFT_P_MIN),
                        GenerationParams(max_tokens=max_tokens))


def test_drive_batches_and_final_stats():
    clock = FakeClock()
    eng = FakeEngine(clock)
    posts = []
    stats, rounds = drive(_gen(eng), eng, lambda p, r, s: posts.append((p, r, s)), clock, batch_seconds=0.2)
    assert "".join(t for p, _r, _s in posts for t, _k, _n in p) == REPLY
    assert 1 < len(posts) < len(rounds)  # batched: fewer posts than rounds
    assert stats.final and stats.tokens == sum(len(p) for p, _r, _s in posts)
    assert stats.drafted == sum(r.drafted for r in rounds) and 0 <= stats.acceptance_rate <= 1
    assert all(isinstance(r, RoundView) and len(r.draft_texts) == r.drafted for r in rounds)


def test_acceptance_rate_none_when_nothing_drafted():
    clock = FakeClock()
    eng = FakeEngine(clock)
    stats, _ = drive(_gen(eng, mode="none"), eng, lambda *a: None, clock)
    assert stats.drafted == 0 and stats.acceptance_rate is None and stats.mean_accepted_length is None


def test_race_times_each_side_over_its_own_rounds():
    clock = FakeClock()
    a, b = FakeEngine(clock), FakeEngine(clock)
    sides = [RaceSide("target", _gen(a, "none"), a), RaceSide("spec", _gen(b, "draft"), b)]
    results = race(sides, lambda *x: None, clock)
    t, s = results["target"], results["spec"]
    assert t.tokens == s.tokens == len(sides[0].gen.token_ids) > 0
    # the fake models' fixed costs: target-only pays the prefill and one pass per round (a
    # token each, and a last one that gave the end of generation); the prefill is excluded
    # from the decode time
    passes = len(sides[0].gen.rounds)
    assert passes == t.tokens + 1
    assert abs(t.elapsed_seconds - (a.prefill_seconds + passes * a.verify_seconds)) < 1e-9
    assert abs(t.decode_seconds - passes * a.verify_seconds) < 1e-9
    assert s.decode_seconds < t.decode_seconds
    assert race_speedup(t, s) > 1


def _decode_seconds(gen) -> float:
    """What the fake engine's rounds cost on its clock: drafting plus verification."""
    return sum(r.draft_seconds + r.verify_seconds for r in gen.rounds)


def test_race_speedup_is_the_decode_ratio_with_one_cache_warm_and_one_cold():
    """issue 8: the speculative side already holds the prompt (asked in chat first), the
    target-only side is cold. The race warms both before timing; the speedup is decode
    rate over decode rate, not the wall-time ratio that charges one side a prefill."""
    clock = FakeClock()
    only = FakeEngine(clock, prefill_seconds=2.0)
    spec = FakeEngine(clock, prefill_seconds=2.0)
    prompt = _prompt(spec)
    assert _prompt(only) == prompt
    spec.prefill(prompt)  # warm from the chat screen
    assert spec.target.cached_tokens == prompt[:-1] and only.target.cached_tokens == []
    warm = {"target": warm_up(only, prompt), "spec": warm_up(spec, prompt)}
    # the cold side's prefill (target, and the draft model's catch-up), shown and untimed
    assert warm == {"target": pytest.approx(2.0 + only.catchup_seconds), "spec": 0.0}
    sides = [RaceSide("target", _gen(only, "none", prompt=prompt), only, warm["target"]),
             RaceSide("spec", _gen(spec, "draft", prompt=prompt), spec, warm["spec"])]
    results = race(sides, lambda *x: None, clock)
    t, s = results["target"], results["spec"]
    expect = (s.tokens / _decode_seconds(sides[1].gen)) / (t.tokens / _decode_seconds(sides[0].gen))
    assert race_speedup(t, s) == pytest.approx(expect, rel=1e-9)
    assert t.warmup_seconds == pytest.approx(2.0 + only.catchup_seconds) and s.warmup_seconds == 0.0
    # without the warm-up the cold side would have paid 2 s inside its timed rounds: the
    # generation's own prefill is excluded too, so the ratio is still the decode ratio
    clock2 = FakeClock()
    only2, spec2 = FakeEngine(clock2, prefill_seconds=2.0), FakeEngine(clock2, prefill_seconds=2.0)
    for eng in (only2, spec2):
        _prompt(eng)
    spec2.prefill(prompt)
    sides2 = [RaceSide("target", _gen(only2, "none", prompt=prompt), only2),
              RaceSide("spec", _gen(spec2, "draft", prompt=prompt), spec2)]
    r2 = race(sides2, lambda *x: None, clock2)
    assert r2["target"].elapsed_seconds == pytest.approx(2.0 + _decode_seconds(sides2[0].gen))
    assert race_speedup(r2["target"], r2["spec"]) == pytest.approx(expect, rel=1e-9)
    wall = (r2["spec"].tokens / r2["spec"].elapsed_seconds) / (r2["target"].tokens / r2["target"].elapsed_seconds)
    assert wall > 1.5 * expect  # what the old race reported


def test_median_spread():
    assert median_spread([1.2, 0.9, 1.0]) == (1.0, 0.9, 1.2)
    assert median_spread([1.0, 2.0]) == (1.5, 1.0, 2.0)


def test_race_cancel_stops_both_sides():
    clock = FakeClock()
    a, b = FakeEngine(clock, reply="w " * 300), FakeEngine(clock, reply="w " * 300)
    sides = [RaceSide("target", _gen(a, "none"), a), RaceSide("spec", _gen(b), b)]
    n = {"calls": 0}

    def cancelled():
        n["calls"] += 1
        return n["calls"] > 3

    results = race(sides, lambda *x: None, clock, cancelled=cancelled)
    assert results["target"].end_reason == results["spec"].end_reason == "cancelled"
    assert results["target"].tokens < 300


def test_live_stats_round_trip():
    s = LiveStats(tokens=10, drafted=8, accepted=6, drafting_rounds=2, rounds=3, target_passes=3,
                  elapsed_seconds=2.0, prefill_seconds=0.5, catchup_seconds=0.5, catchup_tokens=40,
                  accepted_lengths=[3, 3, 0], final=True)
    back = LiveStats.from_dict(s.as_dict())
    assert back.acceptance_rate == 0.75 and back.accepted_lengths == [3, 3, 0] and back.tokens == 10
    assert back.tokens_per_second == s.tokens_per_second == 10.0  # 10 tokens / (2 - 0.5 - 0.5) s
    # a conversation saved before catch-up was measured ("seconds", no catch-up)
    old = LiveStats.from_dict({"tokens": 10, "seconds": 2.0, "prefill_seconds": 0.5, "end_reason": "eog"})
    assert old.tokens_per_second == 10 / 1.5 and old.end_text == "eog"


def test_wrap_rows_appending_equals_wrapping_everything():
    """TokenStream re-wraps only from its last row: that must give what a full wrap gives."""
    import random

    from localspec.tui.widgets import _cells, wrap_rows

    rng = random.Random(0)
    words = ["a", "bb", "word", " ", "  ", "\n", "\t", "x" * 25, "你好", "🙂", "def", "(", "):", "\n\n"]
    for width in (1, 5, 12, 40):
        text, rows = "", []
        for _ in range(300):
            text += "".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
            start = rows[-1][0] if rows else 0
            rows = rows[:-1] + wrap_rows(text, start, width)
            assert rows == wrap_rows(text, 0, width)
        for a, b in rows:
            row = text[a:b]
            assert "\n" not in row
            assert _cells(row.rstrip(" \t")) <= width or len(row.rstrip(" \t")) == 1
        # rows cover the text: joined with the newlines and soft breaks they came from
        assert "".join(text[a:b] for a, b in rows).replace("\n", "") == text.replace("\n", "")


def test_the_fake_engine_implements_the_engines_public_surface():
    """The TUI is tested against a fake: it must offer exactly what the real engine promises."""
    import inspect

    from localspec.core.engine import Engine, Generation, SpeculativeEngine

    members = [n for n in vars(Engine) if not n.startswith("_")]
    assert {"n_ctx", "has_draft_model", "token_text", "chat_tokens", "generate", "prefill"} <= set(members)
    fake = FakeEngine()
    # the real engine over fake models: it may only record what it was asked, never generate itself
    assert isinstance(fake, SpeculativeEngine)
    own = {n for n, v in vars(FakeEngine).items() if callable(v) and not n.startswith("__")}
    assert own <= {"chat_tokens", "generate", "close"}, own
    assert type(_gen(fake)) is Generation
    for name in members:
        assert hasattr(fake, name), name
        assert hasattr(SpeculativeEngine, name), name
        real = getattr(SpeculativeEngine, name)
        if callable(real) and not isinstance(real, property):
            want = list(inspect.signature(real).parameters)[1:]
            assert list(inspect.signature(getattr(fake, name)).parameters) == want, name


def test_redraw_pacer_keeps_the_ui_thread_under_its_budget():
    # what a redraw cycle costs decides how often the stream redraws: cheap ones every 0.2 s,
    # a scrolling pane that costs 12 ms of CPU every 12 / 0.025 = 0.48 s, never slower than 1 s
    from localspec.tui.screens.base import RedrawPacer

    t = {"wall": 100.0, "cpu": 5.0}
    pacer = RedrawPacer(budget=0.025, clock=lambda: t["wall"], cpu=lambda: t["cpu"])
    pacer.start()
    assert pacer.due()  # the first tokens of an answer show at once

    def cycle(cost: float, wait: float) -> None:
        t["wall"] += wait
        t["cpu"] += cost

    for _ in range(20):  # 2 ms per cycle: the floor
        cycle(0.002, 0.2)
        assert pacer.due()
        pacer.drew()
    assert pacer.interval == pytest.approx(0.2)
    for _ in range(30):  # 12 ms per cycle: spaced to the budget
        cycle(0.012, pacer.interval)
        pacer.drew()
    assert pacer.interval == pytest.approx(0.48, rel=0.01)
    assert pacer.cost / pacer.interval <= 0.025 + 1e-9
    t["wall"] += 0.3
    assert not pacer.due()  # 0.3 s after a redraw: not yet
    for _ in range(30):  # 100 ms per cycle: capped at max_seconds
        cycle(0.1, pacer.interval)
        pacer.drew()
    assert pacer.interval == pytest.approx(1.0)


def _side(tokens, seconds, drafted=0):
    return LiveStats(tokens=tokens, elapsed_seconds=seconds, drafted=drafted, accepted=drafted // 2)


def test_race_verdict_gives_no_figure_when_it_means_nothing():
    """Issue 23 item 11: nothing drafted, too few tokens: no speedup figure, and the line says why."""
    from localspec.tui.screens.race import race_verdict

    texts = {"target": "x", "spec": "x"}
    sp, line = race_verdict(_side(1, 0.5), _side(1, 0.25, drafted=0), texts)  # the race: 2.00x
    assert sp is None and "drafted nothing" in line and "2.00" not in line
    sp, line = race_verdict(_side(3, 0.5), _side(3, 0.25, drafted=2), texts)
    assert sp is None and "3 tokens on a side are too few" in line
    sp, line = race_verdict(_side(40, 1.0), _side(40, 0.98, drafted=30), texts)
    assert sp == pytest.approx(1 / 0.98) and "within measurement noise" in line and "faster" not in line
    sp, line = race_verdict(_side(40, 1.0), _side(40, 0.5, drafted=30), texts)
    assert sp == pytest.approx(2.0) and line.endswith("speculation was faster")


def test_plural():
    from localspec.tui.stats import plural

    assert [plural(n, "token") for n in (0, 1, 2)] == ["0 tokens", "1 token", "2 tokens"]


def test_saved_mode_label_names_the_modes_own_draft_length():
    """A kept conversation's settings have draft_max None: the mode's own length is said, never 'None'."""
    from localspec.tui.screens.chat import saved_mode_label

    assert saved_mode_label({"drafting": {"mode": "draft", "draft_max": None}}) == "draft, draft length 8"
    assert saved_mode_label({"drafting": {"mode": "auto", "draft_max": 12}}) == "auto, draft length 12"
    assert saved_mode_label({"drafting": {"mode": "none"}}) == "none (target only)"
    assert saved_mode_label({}) == ""
