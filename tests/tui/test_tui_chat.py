"""Pilot tests of the chat screen against the scripted fake engine."""

from __future__ import annotations

import pytest

from localspec.config import Settings

from tui_helpers import build, idle, running, submit, until_started
from tui_fakes import REPLY, FakeEngine

pytestmark = pytest.mark.asyncio


async def ask(pilot, app, text):
    app.screen.query_one("#prompt").value = text
    await pilot.press("enter")
    await pilot.pause()
    await idle(pilot)


async def test_send_prompt_streams_coloured_text(fake):
    app = build(fake)
    async with running(app) as pilot:
        await ask(pilot, app, "reverse a string in python")
        from localspec.tui.screens import AssistantMessage

        answer = app.screen.query(AssistantMessage).last()
        assert answer.stream.text == REPLY
        kinds = {k for _t, k, _r in answer.stream.pieces}
        assert kinds == {"accepted", "resampled", "bonus", "target"}
        assert fake.calls[-1]["messages"] == [{"role": "user", "content": "reverse a string in python"}]
        # statistics come from the engine's final numbers
        st = answer.stats
        assert st.final and st.tokens == len(answer.stream.pieces)
        assert 0 <= st.acceptance_rate <= 1 and st.drafted > 0
        # a second question carries the history
        await ask(pilot, app, "and in rust?")
        msgs = fake.calls[-1]["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"] and msgs[1]["content"] == REPLY


async def test_mode_cycle_switches_drafter(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        assert app.settings.drafting.mode == "draft"
        await pilot.press("f5")
        assert app.settings.drafting.mode == "lookup"
        await ask(pilot, app, "hi")
        assert fake.calls[-1]["drafting"].mode == "lookup"
        await pilot.press("f5")
        assert app.settings.drafting.mode == "none"
        await ask(pilot, app, "hi again")
        assert fake.calls[-1]["drafting"].mode == "none"
        from localspec.tui.screens import AssistantMessage

        kinds = {k for _t, k, _r in app.screen.query(AssistantMessage).last().stream.pieces}
        assert kinds == {"target"}
        await pilot.press("f5")  # auto, or draft while localspec.core.costmodel is missing
        assert app.settings.drafting.mode in ("auto", "draft")


async def test_escape_stops_generation_cleanly(clock):
    slow = FakeEngine(clock, reply="word " * 400, round_delay=0.01)
    app = build(slow)
    async with running(app) as pilot:
        await submit(pilot, "talk", wait=False)  # (pilot.press would wait for the whole answer)
        await until_started(pilot, slow)
        await pilot.pause(0.05)
        await pilot.press("escape")
        await idle(pilot)
        from localspec.tui.screens import AssistantMessage

        ans = app.screen.query(AssistantMessage).last()
        assert ans.stats.end_reason == "cancelled"
        assert 0 < len(ans.stream.pieces) < 400
        assert ans.border_subtitle == "stopped"
        # the app still works: ask again
        slow.round_delay = 0
        await ask(pilot, app, "again")
        assert app.screen.query(AssistantMessage).last().stats.end_reason == "eog"


async def test_click_token_opens_its_round_and_keys_step(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await ask(pilot, app, "reverse a string")
        from localspec.tui.screens import AssistantMessage
        from localspec.tui.widgets import RoundInspector, TokenStream

        ans = app.screen.query(AssistantMessage).last()
        insp = app.screen.query_one(RoundInspector)
        assert insp.index == len(ans.rounds) - 1  # follows the latest round
        await pilot.click(TokenStream, offset=(1, 0))  # the first token: round 0
        await pilot.pause()
        assert insp.index == 0 and ans.stream.selected_round == 0
        await pilot.press("f8")
        assert insp.index == 1 and ans.stream.selected_round == 1
        await pilot.press("f7", "f7")
        assert insp.index == 0


async def test_long_history_drops_oldest_turns(clock):
    fake = FakeEngine(clock, n_ctx=700)  # the fake's tokens are words: a few long turns overflow it
    app = build(fake, remember=False, settings=Settings().model_copy(update={
        "generation": Settings().generation.model_copy(update={"max_tokens": 100})}))
    async with running(app) as pilot:
        for i in range(6):
            await ask(pilot, app, f"question {i} " + "blah " * 60)
        sent = fake.calls[-1]["messages"]
        assert len(fake.calls[-1]["prompt"]) <= 600
        assert len(app.screen.messages) == 12  # the transcript keeps everything
        assert any("oldest" in n.message for n in app._notifications)
        assert sent[-1]["content"].startswith("question 5")
