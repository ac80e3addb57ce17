"""A conversation's own system prompt and sampling preset (F9), the prompt's history (Up/Down), and
editing the last question (Ctrl+R). Driven by the real engine over the scripted fake models."""

from __future__ import annotations

import pytest

from localspec.config import SAMPLING_PRESETS
from localspec.tui.chat_options import ChatOptions
from localspec.tui.screens.base import UserMessage

from tui_fakes import REPLY
from tui_helpers import build, idle, running, submit

pytestmark = pytest.mark.asyncio


async def _set_options(pilot, system: str, preset: str) -> None:
    await pilot.press("f9")
    await pilot.pause()
    assert isinstance(pilot.app.screen, ChatOptions)
    pilot.app.screen.query_one("#options-system").text = system
    pilot.app.screen.query_one("#options-preset").value = preset
    await pilot.press("ctrl+s")
    await pilot.pause()


async def test_system_prompt_and_preset_are_the_conversations(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await _set_options(pilot, "You answer in [b]French[/b].", "creative")
        chat = app.screen
        assert chat.sub_title == "chat · preset creative · system prompt"
        await submit(pilot, "hello")
        call = fake.calls[-1]
        assert call["messages"][0] == {"role": "system", "content": "You answer in [b]French[/b]."}
        assert call["sampling"].temperature == SAMPLING_PRESETS["creative"].temperature
        assert call["sampling"].seed == app.settings.sampling.seed
        assert app.settings.sampling.temperature == 0.0  # the settings are untouched
        store = app.conversation_store()
        first = chat.conv_id
        info = store.info(first)
        assert (info.system, info.preset) == ("You answer in [b]French[/b].", "creative")
        # a new chat starts without them; reopening brings them back
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert chat.sub_title == "chat" and chat.system_prompt == ""
        await submit(pilot, "plain")
        assert fake.calls[-1]["messages"][0]["role"] == "user" and fake.calls[-1]["sampling"].temperature == 0.0
        chat.open_kept(first)
        await pilot.pause()
        assert (chat.system_prompt, chat.preset) == ("You answer in [b]French[/b].", "creative")
        await submit(pilot, "again")
        assert fake.calls[-1]["messages"][0]["role"] == "system"
        # changed on a kept conversation: stored at once; the JSON export carries the system message
        await _set_options(pilot, "", "greedy")
        assert (store.info(first).system, store.info(first).preset) == ("", "greedy")
        assert [m.role for m in chat.conversation().messages][:1] == ["user"]


async def test_options_cancel_changes_nothing(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await pilot.press("f9")
        await pilot.pause()
        app.screen.query_one("#options-system").text = "ignored"
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.system_prompt == "" and app.screen.sub_title == "chat"


async def test_up_and_down_walk_the_questions_sent(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "first question")
        await submit(pilot, "second\nin two lines")
        prompt = app.screen.query_one("#prompt")
        prompt.focus()
        prompt.value = "half typed"
        prompt.move_cursor((0, 0))
        await pilot.press("up")
        assert prompt.text == "second\nin two lines"
        await pilot.press("up")  # the cursor is on the last line: it moves up inside the text
        assert prompt.text == "second\nin two lines" and prompt.cursor_location[0] == 0
        await pilot.press("up")
        assert prompt.text == "first question"
        await pilot.press("up")  # the oldest: stays
        assert prompt.text == "first question"
        await pilot.press("down")
        assert prompt.text == "second\nin two lines"
        await pilot.press("down")  # past the newest: what was being typed
        assert prompt.text == "half typed"
        await pilot.press("down")
        assert prompt.text == "half typed"
        # a reopened conversation's questions are the history
        app.screen.open_kept(app.conversation_store().list()[0].id)
        await pilot.pause()
        prompt.value = ""
        await pilot.press("up")
        assert prompt.text == "second\nin two lines"


async def test_edit_the_last_question_replaces_the_last_turn(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "first question")
        await submit(pilot, "reverse a strng")
        chat = app.screen
        await pilot.press("ctrl+r")
        await pilot.pause()
        prompt = chat.query_one("#prompt")
        assert chat.editing and prompt.text == "reverse a strng" and "editing" in prompt.border_title
        prompt.value = "reverse a string in python"
        await pilot.press("enter")
        await idle(pilot)
        assert [m["content"] for m in chat.messages] == ["first question", REPLY, "reverse a string in python", REPLY]
        shown = [w.text if isinstance(w, UserMessage) else type(w).__name__ for w in chat.answer_scroll().children]
        assert shown == ["first question", "AssistantMessage", "reverse a string in python", "AssistantMessage"]
        assert not chat.editing
        msgs = app.conversation_store().load(chat.conv_id).messages
        assert [m.content for m in msgs] == ["first question", REPLY, "reverse a string in python", REPLY]
        asked = fake.calls[-1]["messages"]
        assert [m["content"] for m in asked] == ["first question", REPLY, "reverse a string in python"]


async def test_edit_cancels(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await pilot.press("ctrl+r")  # nothing asked yet
        assert not app.screen.editing
        await submit(pilot, "q")
        await pilot.press("ctrl+r")
        assert app.screen.editing
        await pilot.press("ctrl+r")  # again: cancelled, the prompt emptied
        assert not app.screen.editing and app.screen.query_one("#prompt").text == ""
        await pilot.press("ctrl+r")
        app.screen.query_one("#prompt").value = ""  # emptied: cancelled too
        await pilot.pause()
        assert not app.screen.editing
        await submit(pilot, "another")
        assert [m["content"] for m in app.screen.messages] == ["q", REPLY, "another", REPLY]
