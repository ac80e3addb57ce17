"""Pure helpers of the TUI: code-block extraction, diffs, live statistics, the race driver."""

from __future__ import annotations

from localspec.config import DraftParams, GenerationParams, SamplingParams
from tui.driver import RaceSide, drive, race
from tui.screens import edit_prompt, edited_path, extract_code, unified_diff
from tui.stats import LiveStats, RoundView, race_speedup
from tui_fakes import REPLY, FakeClock, FakeEngine


def test_extract_code_variants():
    assert extract_code("Sure:\n```python\nx = 1\n```\nbye", "a\n") == "x = 1\n"
    assert extract_code("```\nx = 1\ny = 2", "") == "x = 1\ny = 2\n"  # unclosed: runs to the end
    assert extract_code("x = 1", "a") == "x = 1"  # no fence: the answer; keeps the missing final newline
    assert extract_code("````md\n```py\ninner\n```\n````\n", "") == "```py\ninner\n```\n"


def test_edit_prompt_and_paths(tmp_path):
    from pathlib import Path

    p = edit_prompt(Path("a/b.py"), "x = 1\n", " rename x ")
    assert "Instruction: rename x" in p and "```python\nx = 1\n```" in p and "one fenced code block" in p
    f = tmp_path / "m.py"
    assert edited_path(f).name == "m.edited.py"
    (tmp_path / "m.edited.py").write_text("")
    assert edited_path(f).name == "m.edited-2.py"
    d = unified_diff("a\nb\n", "a\nc\n", "m.py")
    assert "-b\n" in d and "+c\n" in d and d.startswith("--- a/m.py")


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
