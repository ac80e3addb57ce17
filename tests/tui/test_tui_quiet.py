"""While an answer streams the app does no redraw work of its own (issue 8, UI overhead):
no blinking cursor, no animation in the hidden load bar, and the GIL handed to the engine's
worker quickly; all as before once it ends."""

from __future__ import annotations

import sys

import pytest
from textual.widgets import ProgressBar

from localspec.tui.prompt import PromptArea

from tui_fakes import FakeClock, FakeEngine
from tui_helpers import build, idle, running, submit, until_started

pytestmark = pytest.mark.asyncio


async def test_no_blink_and_no_hidden_animation_while_streaming():
    fake = FakeEngine(FakeClock(), round_delay=0.2)
    app = build(fake)
    async with running(app) as pilot:
        box = app.screen.query_one("#prompt", PromptArea)
        box.cursor_blink = True  # the tests' conftest turns blinking off for stable snapshots
        before = sys.getswitchinterval()
        # loaded: the hidden load bar is determinate, so its 15-per-second animation is off
        assert all(bar.percentage is not None for bar in app.screen.query(ProgressBar))
        await submit(pilot, "hello", wait=False)
        await until_started(pilot, fake)
        assert app.busy is not None
        assert box.cursor_blink is False
        from localspec.tui.app import STREAM_SWITCH_INTERVAL
        assert sys.getswitchinterval() == pytest.approx(STREAM_SWITCH_INTERVAL) != pytest.approx(before)
        await idle(pilot)
        assert box.cursor_blink is True
        assert sys.getswitchinterval() == pytest.approx(before)
        from localspec.tui.screens import AssistantMessage
        assert app.screen.query(AssistantMessage).last().stream.text  # the answer was shown


async def test_paced_stream_shows_every_token_by_the_end(monkeypatch):
    # tokens held back between redraws are all drawn, in order, when the answer ends
    import localspec.tui.screens.base as base

    paced = []
    pacer_class = base.RedrawPacer

    def slow_pacer():
        paced.append(pacer_class(min_seconds=30.0, max_seconds=30.0))  # only the first batch draws early
        return paced[-1]

    monkeypatch.setattr(base, "RedrawPacer", slow_pacer)
    fake = FakeEngine(FakeClock(), round_delay=0.05)
    app = build(fake)
    async with running(app) as pilot:
        await submit(pilot, "hello")
        from localspec.tui.screens import AssistantMessage
        answer = app.screen.query(AssistantMessage).last()
        assert paced and paced[0].cost is not None  # the pacer ran
        assert answer.stream.text == fake.reply
