"""Pure helpers of the TUI: live statistics, the race driver (code edit: tests/unit/test_codeedit.py)."""

from __future__ import annotations

from localspec.config import DraftParams, GenerationParams, SamplingParams
from tui.driver import RaceSide, drive, race
from tui.stats import LiveStats, RoundView, race_speedup
from tui_fakes import REPLY, FakeClock, FakeEngine


def _gen(eng, mode="draft", max_tokens=512):
    eng.chat_tokens([{"role": "user", "content": "q"}])
    return eng.generate([1, 2, 3], SamplingParams(), DraftParams(mode=mode), GenerationParams(max_tokens=max_tokens))


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
    # the fake's fixed costs: target-only pays prefill + one verify per token
    assert abs(t.seconds - (a.prefill_seconds + t.tokens * a.verify_seconds)) < 1e-9
    assert s.seconds < t.seconds
    assert race_speedup(t, s) > 1


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
    s = LiveStats(tokens=10, drafted=8, accepted=6, drafting_rounds=2, rounds=3, target_passes=3, seconds=2.0,
                  accepted_lengths=[3, 3, 0], final=True)
    back = LiveStats.from_dict(s.as_dict())
    assert back.acceptance_rate == 0.75 and back.accepted_lengths == [3, 3, 0] and back.tokens == 10
