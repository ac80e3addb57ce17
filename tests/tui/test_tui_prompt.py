"""Issue 23 items 2, 3 and 5: what the user types or pastes is all sent; what the user
selects in an answer is what is copied; after a click on a token, typing still goes to
the prompt."""

from __future__ import annotations

import pytest
from textual import events
from textual.geometry import Offset
from textual.selection import Selection

from localspec.tui.prompt import PromptArea
from localspec.tui.screens import AssistantMessage
from localspec.tui.widgets import TokenStream
from tui_fakes import FakeEngine
from tui_helpers import build, edit_app, idle, running, submit

pytestmark = pytest.mark.asyncio
PASTED = "first line\r\nsecond line [b]\r\n\r\n    indented third\rfourth"
SENT = "first line\nsecond line [b]\n\n    indented third\nfourth"


async def paste(pilot, widget, text):
    widget.post_message(events.Paste(text))
    await pilot.pause()


async def test_chat_paste_and_ctrl_j_send_every_line(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        prompt = app.screen.query_one("#prompt", PromptArea)
        assert app.focused is prompt
        await paste(pilot, prompt, PASTED)
        assert prompt.value == SENT  # nothing submitted by the pasted line ends
        await pilot.press("enter")
        await idle(pilot)
        assert fake.calls[-1]["messages"][-1]["content"] == SENT
        assert prompt.value == ""
        await pilot.press("a", "ctrl+j", "b", "ctrl+j", "ctrl+j", "c")
        assert prompt.value == "a\nb\n\nc"
        await pilot.press("enter")
        await idle(pilot)
        assert fake.calls[-1]["messages"][-1]["content"] == "a\nb\n\nc"


async def test_edit_instruction_paste_keeps_every_line(clock, tmp_path, monkeypatch):
    app, eng = edit_app(tmp_path, monkeypatch, "a.py", "x = 1\n", "```python\nx = 2\n```", clock=clock)
    async with running(app) as pilot:
        box = app.screen.query_one("#edit-instruction", PromptArea)
        assert app.focused is box
        await paste(pilot, box, PASTED)
        await pilot.press("enter")
        await idle(pilot)
        assert SENT in eng.calls[-1]["messages"][0]["content"]


async def test_race_prompt_paste_keeps_every_line(clock):
    spec, only = FakeEngine(clock), FakeEngine(clock)
    app = build(spec, engines=(only,), race=True, remember=False)
    async with running(app) as pilot:
        await paste(pilot, app.screen.query_one("#race-prompt", PromptArea), PASTED)
        await pilot.press("enter")
        await idle(pilot)
        assert spec.calls[-1]["messages"] == [{"role": "user", "content": SENT}]


LONG = ("The answer's first line is long enough to wrap in the chat column several times over, "
        "and the copy must not add line breaks where it wrapped.\n\tA tab, then the second line.")


async def test_copying_a_selection_of_an_answer_gives_its_text(clock):
    """Selecting over wrapped rows and a tab copies the text as generated (no wrap breaks)."""
    eng = FakeEngine(clock, reply=LONG)
    app = build(eng, remember=False)
    async with running(app, (80, 30)) as pilot:
        await submit(pilot, "hi")
        stream = app.screen.query(AssistantMessage).last().stream
        rows = stream._rows
        assert len(rows) >= 3  # the first line wrapped
        # from "first" on row 0 to the end of "second" on the last row (a tab drawn as 4 cells)
        last = len(rows) - 1
        start_x = LONG.index("first")
        end_x = LONG.index("second line") + len("second") - rows[last][0] + 3  # the tab: 1 char, 4 cells
        app.screen.selections = {stream: Selection(Offset(start_x, 0), Offset(end_x, last))}
        await pilot.pause()
        expected = LONG[start_x:LONG.index("second line") + len("second")]
        assert app.screen.get_selected_text() == expected
        await pilot.press("ctrl+c")  # the prompt has focus: it has nothing selected, the screen copies
        assert app.clipboard == expected
        assert stream.get_selection(Selection(None, None)) == (LONG, "\n")


async def test_mouse_drag_over_an_answer_copies_its_words(clock):
    eng = FakeEngine(clock, reply="alpha beta gamma delta")
    app = build(eng, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "hi")
        stream = app.screen.query(AssistantMessage).last().stream
        await pilot.mouse_down(stream, offset=(6, 0))
        await pilot.hover(stream, offset=(15, 0))  # the last "a" of gamma (Textual's end is inclusive)
        await pilot.mouse_up(stream, offset=(15, 0))
        await pilot.pause()
        assert app.screen.get_selected_text() == "beta gamma"


async def test_typing_after_a_token_click_goes_to_the_prompt(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "hi")
        await pilot.click(TokenStream, offset=(1, 0))
        await pilot.pause()
        assert app.screen.query_one("#inspector").index == 0  # the click opened round 1
        await pilot.press("n", "e", "x", "t")
        assert app.screen.query_one("#prompt").value == "next"
