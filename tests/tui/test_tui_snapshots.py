"""Snapshots at a fixed terminal size, driven by the scripted fake engine (fixed timings)."""

from __future__ import annotations

from localspec.config import DraftParams, ModelSettings, Settings
from tui_fakes import FakeClock, FakeEngine
from tui_helpers import build, idle

SIZE = (120, 40)


async def _idle(pilot):
    await idle(pilot)
    pilot.app.clear_notifications()
    await pilot.pause()


async def _ask(pilot, text="reverse a string in python"):
    await _idle(pilot)
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.value = text
    await prompt.action_submit()
    await _idle(pilot)


async def _settle(pilot):
    pilot.app.clear_notifications()
    await pilot.pause()


def test_chat_stream_stats_legend(snap_compare):
    """All four token kinds in the stream, the legend, the statistics panel, the inspector."""

    async def run_before(pilot):
        await _ask(pilot)
        await _settle(pilot)

    assert snap_compare(build(FakeEngine(FakeClock()), remember=False), run_before=run_before, terminal_size=SIZE)


def test_round_inspector_rejection(snap_compare):
    """Stepping back to a round with a rejection: draft row, target row, verdicts; its tokens highlighted."""

    async def run_before(pilot):
        await _ask(pilot)
        for _ in range(4):
            await pilot.press("f7")
        await _settle(pilot)

    assert snap_compare(build(FakeEngine(FakeClock()), remember=False), run_before=run_before, terminal_size=SIZE)


def _race(snap_compare, size) -> bool:
    clock = FakeClock()
    spec, only = FakeEngine(clock), FakeEngine(clock)

    async def run_before(pilot):
        await _idle(pilot)
        prompt = pilot.app.screen.query_one("#race-prompt")
        prompt.value = "reverse a string in python"
        await prompt.action_submit()
        await _idle(pilot)
        await _settle(pilot)

    app = build(spec, engines=(only,), race=True, remember=False)
    return snap_compare(app, run_before=run_before, terminal_size=size)


def test_race_mode(snap_compare):
    """Target-only and speculative side by side, decode rates and the measured speedup."""
    assert _race(snap_compare, SIZE)


def test_settings_invalid_value(snap_compare):
    """The settings dialog refusing an invalid draft length in place, with pydantic's reason."""

    async def run_before(pilot):
        await _idle(pilot)
        await pilot.press("f4")
        await pilot.pause()
        field = pilot.app.screen.query_one("#f-drafting-draft_max")
        field.value = "100"
        await pilot.pause()
        await _settle(pilot)

    # thread counts default to this machine's CPU count: pin them so the snapshot is portable
    settings = Settings(target=ModelSettings(model="qwen2.5-coder-1.5b", n_threads=4),
                        draft=ModelSettings(model="qwen2.5-coder-0.5b", n_threads=4),
                        drafting=DraftParams(mode="draft"))
    app = build(FakeEngine(FakeClock()), settings=settings, remember=False)
    assert snap_compare(app, run_before=run_before, terminal_size=SIZE)


def test_code_edit_diff(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    """Code-edit mode after a rewrite: the diff of the extracted code block."""
    src = tmp_path / "greet.py"
    src.write_text("def greet(name):\n    print('hello ' + name)\n\n\ngreet('world')\n")
    reply = ("```python\ndef greet(name: str) -> None:\n    print('hello ' + name)\n\n\ngreet('world')\n```")
    eng = FakeEngine(FakeClock(), reply=reply)

    async def run_before(pilot):
        await _idle(pilot)
        box = pilot.app.screen.query_one("#edit-instruction")
        box.value = "add type hints"
        await box.action_submit()
        await _idle(pilot)
        await _settle(pilot)

    app = build(eng, edit_file="greet.py", remember=False)
    assert snap_compare(app, run_before=run_before, terminal_size=SIZE)


def test_chat_stream_light_theme(snap_compare):
    """The token colours on a light theme (they are theme-relative CSS, not fixed colours)."""

    async def run_before(pilot):
        pilot.app.theme = "textual-light"
        await _ask(pilot)
        await _settle(pilot)

    assert snap_compare(build(FakeEngine(FakeClock()), remember=False), run_before=run_before, terminal_size=SIZE)


#: a policy reason long enough to wrap, and a draft-model catch-up in the first round
LONG_REASON = "g=4 draft: est 2.31 tok/pass, 1.45x (lookup 0.93x, no lookup match for 12 rounds)"


def _stats_engine():
    return FakeEngine(FakeClock(), reason=LONG_REASON, catchup=(412, 0.61))


def test_stats_panel_80_columns(snap_compare):
    """issue 8: at the narrowest supported width every label is whole, the reason wraps on
    its own line, catch-up and prefill are shown beside the decode rate (issue 23: at 80
    columns the panel is folded away; F10 shows it)."""

    async def run_before(pilot):
        await _ask(pilot)
        await pilot.press("f10")
        await _settle(pilot)

    assert snap_compare(build(_stats_engine(), remember=False), run_before=run_before, terminal_size=(80, 34))


def test_stats_panel_150_columns(snap_compare):
    async def run_before(pilot):
        await _ask(pilot)
        for _ in range(15):  # back to round 1: the inspector's catch-up line
            await pilot.press("f7")
        await _settle(pilot)

    assert snap_compare(build(_stats_engine(), remember=False), run_before=run_before, terminal_size=(150, 40))


def test_stats_panel_before_first_answer_150_columns(snap_compare):
    """Before the first answer the sparkline draws nothing."""

    async def run_before(pilot):
        await _idle(pilot)
        await _settle(pilot)

    assert snap_compare(build(FakeEngine(FakeClock()), remember=False), run_before=run_before,
                        terminal_size=(150, 40))


def test_race_mode_80_columns(snap_compare):
    """Race at 80 columns: decode rates, untimed prefill, the verdict and the repeat control."""
    assert _race(snap_compare, (80, 34))


# -- issue 23: the layouts at 80x24 and 160x45 ------------------------------------------
SMALL, LARGE = (80, 24), (160, 45)


def _chat_snap(snap_compare, size, keys=()):
    async def run_before(pilot):
        await _ask(pilot, "reverse a string in python:\nkeep [bold] and list[int] as typed")
        for key in keys:
            await pilot.press(key)
        await _settle(pilot)

    return snap_compare(build(FakeEngine(FakeClock()), remember=False), run_before=run_before, terminal_size=size)


def test_chat_80x24(snap_compare):
    """The side panel folded away, one line of figures, a multi-line message shown as typed, the footer whole."""
    assert _chat_snap(snap_compare, SMALL)


def test_chat_80x24_panel_open(snap_compare):
    """F10 on a narrow screen: the statistics panel and the inspector in place of the chat."""
    assert _chat_snap(snap_compare, SMALL, keys=("f10",))


def test_chat_160x45(snap_compare):
    assert _chat_snap(snap_compare, LARGE)


def _edit_snap(snap_compare, tmp_path, monkeypatch, size):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "greet.py").write_text("def greet(name):\n    print('hello ' + name)\n\n\ngreet('world')\n")
    reply = "```python\ndef greet(name: str) -> None:\n    print('hello ' + name)\n\n\ngreet('world')\n```"

    async def run_before(pilot):
        await _idle(pilot)
        box = pilot.app.screen.query_one("#edit-instruction")
        box.value = "add type hints"
        await box.action_submit()
        await _idle(pilot)
        await _settle(pilot)

    app = build(FakeEngine(FakeClock(), reply=reply), edit_file="greet.py", remember=False)
    return snap_compare(app, run_before=run_before, terminal_size=size)


def test_code_edit_80x24(snap_compare, tmp_path, monkeypatch):
    assert _edit_snap(snap_compare, tmp_path, monkeypatch, SMALL)


def test_code_edit_160x45(snap_compare, tmp_path, monkeypatch):
    assert _edit_snap(snap_compare, tmp_path, monkeypatch, LARGE)


def test_race_80x24(snap_compare):
    assert _race(snap_compare, SMALL)


def test_race_160x45(snap_compare):
    assert _race(snap_compare, LARGE)


def test_settings_80x24(snap_compare):
    """The settings dialog on a 24-row screen: the form scrolls, the buttons are on screen."""

    async def run_before(pilot):
        await _idle(pilot)
        await pilot.press("f4")
        await _settle(pilot)

    settings = Settings(target=ModelSettings(model="qwen2.5-coder-1.5b", n_threads=4),
                        draft=ModelSettings(model="qwen2.5-coder-0.5b", n_threads=4),
                        drafting=DraftParams(mode="draft"))
    app = build(FakeEngine(FakeClock()), settings=settings, remember=False)
    assert snap_compare(app, run_before=run_before, terminal_size=SMALL)
