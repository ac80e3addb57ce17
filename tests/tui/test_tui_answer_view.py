"""Answers read as Markdown (Ctrl+T), the answer_view setting, copying a code block (Ctrl+B) or the
whole answer (Ctrl+G). Driven by the real engine over the scripted fake models."""

from __future__ import annotations

import pytest
from textual.widgets import Markdown

from localspec.config import DraftParams, Settings, UISettings
from localspec.tui.screens import AssistantMessage

from tui_fakes import DRAFT_P_MIN, REPLY, FakeClock, FakeEngine
from tui_helpers import build, idle, running, submit, until_started

pytestmark = pytest.mark.asyncio

CODE = "def reverse(s: str) -> str:\n    return s[::-1]\n"
MARKUP = "Try [bold red]this[/] and [@click=app.quit]that[/]\n\n```sh\necho '[b]x[/b]'\n```\n"


def _screen_text(app) -> str:
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


def _answers(app) -> list[AssistantMessage]:
    return list(app.screen.query(AssistantMessage))


def _copies(app, monkeypatch) -> list[str]:
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    return copied


async def test_ctrl_t_switches_an_answer_between_tokens_and_markdown(fake):
    app = build(fake, remember=False)
    async with running(app, size=(80, 24)) as pilot:
        await submit(pilot, "reverse a string in python")
        (answer,) = _answers(app)
        assert answer.view == "tokens" and answer.markdown is None and "```python" in _screen_text(app)
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert answer.view == "markdown" and not answer.stream.display and answer.markdown.display
        assert answer.markdown.source == REPLY
        shown = _screen_text(app)
        assert "def reverse(s: str) -> str:" in shown and "```" not in shown  # rendered: no fences
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert answer.view == "tokens" and answer.stream.display and "```python" in _screen_text(app)


async def test_the_keys_act_on_the_clicked_answer(monkeypatch, clock):
    eng = FakeEngine(clock, replies={"first": "one\n```\nA = 1\n```\n", "second": "two, no code"})
    app = build(eng, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "first")
        await submit(pilot, "second")
        first, second = _answers(app)
        copied = _copies(app, monkeypatch)
        await pilot.press("ctrl+b")  # the latest answer has no code block: nothing copied, said so
        assert copied == [] and any("no code block" in n.message for n in app._notifications)
        await pilot.click(first)
        await pilot.press("ctrl+b", "ctrl+t")
        await pilot.pause()
        assert copied == ["A = 1\n"]
        assert first.view == "markdown" and second.view == "tokens"
        await pilot.press("ctrl+g")
        assert copied[-1] == "one\n```\nA = 1\n```\n"


async def test_copy_the_last_code_block_and_the_answer(fake, monkeypatch):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        copied = _copies(app, monkeypatch)
        await pilot.press("ctrl+b")  # no answer yet
        assert copied == []
        await submit(pilot, "reverse a string in python")
        await pilot.press("ctrl+b")
        await pilot.press("ctrl+g")
        assert copied == [CODE, REPLY]


async def test_markdown_is_the_default_with_the_setting_and_streams_as_tokens(clock):
    eng = FakeEngine(clock, round_delay=0.05)
    settings = Settings(drafting=DraftParams(mode="draft", draft_p_min=DRAFT_P_MIN),
                        ui=UISettings(answer_view="markdown"))
    app = build(eng, settings=settings, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "reverse a string in python", wait=False)
        await until_started(pilot, eng)
        (answer,) = _answers(app)
        await pilot.press("ctrl+t")  # while it streams: nothing to switch yet
        assert answer.view == "tokens" and not answer.finished
        eng.round_delay = 0
        await idle(pilot)
        assert answer.view == "markdown" and answer.markdown.source == REPLY
        # a reopened conversation shows its answers the same way
        await pilot.press("ctrl+n")
        app.screen.open_kept(app.conversation_store().list()[0].id)
        await pilot.pause()
        assert [a.view for a in _answers(app)] == ["markdown"]


async def test_model_text_is_never_markup(clock):
    """Textual markup in an answer stays text in both views, and its click action does nothing."""
    app = build(FakeEngine(clock, reply=MARKUP), remember=False)
    async with running(app, size=(80, 24)) as pilot:
        await submit(pilot, "hi")
        assert "[bold red]this[/] and [@click=app.quit]that[/]" in _screen_text(app)
        await pilot.press("ctrl+t")
        await pilot.pause()
        shown = _screen_text(app)
        assert "[bold red]this[/] and [@click=app.quit]that[/]" in shown and "echo '[b]x[/b]'" in shown
        (md,) = app.screen.query(Markdown)
        await pilot.click(md)
        await pilot.pause()
        assert app.is_running


async def test_answer_view_in_the_settings_screen(fake):
    app = build(fake, remember=True)
    async with running(app) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        app.screen.query_one("#f-ui-answer_view").value = "markdown"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.settings.ui.answer_view == "markdown"
        from localspec.app.settings_file import load_settings

        assert load_settings().ui.answer_view == "markdown"  # remembered in the settings file
        await submit(pilot, "reverse a string in python")
        assert _answers(app)[-1].view == "markdown"
