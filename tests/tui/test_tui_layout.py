"""Issue 23 items 14 and 15: everything reachable at 80x24, and the small words right."""

from __future__ import annotations

import pytest
from textual.widgets import Button, HelpPanel
from textual.widgets._footer import FooterKey

from localspec.tui.dialogs import Confirm, PathPrompt
from localspec.tui.prompt import PromptArea
from localspec.tui.widgets import MiniStats
from tui_fakes import FakeEngine
from tui_helpers import build, running, submit

pytestmark = pytest.mark.asyncio
NARROW, WIDE = (80, 24), (160, 45)


def footer_fits(app) -> list[str]:
    """Every footer key is whole: inside the screen and left of the palette key."""
    keys = list(app.screen.query(FooterKey))
    palette = [k for k in keys if k.has_class("-command-palette")]
    assert palette, "the command palette key is shown"
    limit = palette[0].region.x
    for key in keys:
        if key is not palette[0] and key.display:
            assert key.region.right <= limit, f"{key.description!r} runs under the palette key"
    assert palette[0].region.right <= app.size.width
    labels = [k.description for k in keys]
    assert not {"◀Rnd", "Rnd▶", "Set"} & set(labels)
    return labels


async def test_chat_at_80x24_folds_the_panel_and_f10_shows_it(fake):
    app = build(fake, remember=False)
    async with running(app, NARROW) as pilot:
        await submit(pilot, "hi")
        scr = app.screen
        side, main = scr.query_one("#side"), scr.query_one("#main")
        assert not side.display or side.region.width == 0
        assert main.region.width == 80  # the chat has the whole width
        mini = scr.query_one(MiniStats)
        assert mini.region.height == 1 and "tok/s" in str(mini.render()) and "F10" in str(mini.render())
        footer_fits(app)
        await pilot.press("f10")
        await pilot.pause()
        assert side.region.width == 80 and main.region.width == 0
        await pilot.press("f10")
        await pilot.pause()
        assert main.region.width == 80 and isinstance(app.focused, PromptArea)


async def test_chat_at_160x45_keeps_the_panel_beside_it(fake):
    app = build(fake, remember=False)
    async with running(app, WIDE) as pilot:
        await submit(pilot, "hi")
        scr = app.screen
        assert scr.query_one("#side").region.width == 46
        assert scr.query_one(MiniStats).region.height == 0
        footer_fits(app)
        keys = {k.key for k in scr.query(FooterKey)}
        assert {"f1", "f2", "f3", "f6", "f5"} <= keys and "f10" not in keys  # room for all; no panel to fold
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert scr.query_one("#side").region.width == 0 and scr.query_one(MiniStats).region.height == 1


@pytest.mark.parametrize("mode", ["edit", "race"])
async def test_other_screens_fit_80x24(clock, tmp_path, monkeypatch, mode):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    spec, only = FakeEngine(clock), FakeEngine(clock)
    app = build(spec, engines=(only,), remember=False, edit_file="a.py" if mode == "edit" else None,
                race=mode == "race")
    async with running(app, NARROW):
        assert "Quit" in footer_fits(app)  # every key whole, checked inside
        box = app.screen.query_one("#edit-instruction" if mode == "edit" else "#race-prompt")
        assert box.region.width >= 60 and box.region.bottom <= 23


async def test_settings_buttons_are_on_an_80x24_screen(fake):
    app = build(fake, remember=False)
    async with running(app, NARROW) as pilot:
        await pilot.press("f4")
        await pilot.pause()
        for button in app.screen.query(Button):
            r = button.region
            assert r.height and r.bottom <= 24 and r.right <= 80, button.id
        await pilot.click("#cancel")
        await pilot.pause()
        assert app.screen.id != "settings" and app.screen.query("#prompt")


async def test_ctrl_n_asks_before_clearing_an_unsaved_chat(fake, tmp_path, monkeypatch):
    """Without a conversation store (its folder cannot be made) a chat is kept only when saved."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("LOCALSPEC_DATA", str(tmp_path / "file" / "data"))
    app = build(fake, remember=False)
    async with running(app, WIDE) as pilot:
        await submit(pilot, "hi")
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert isinstance(app.screen, Confirm) and "not been saved" in app.screen.question
        await pilot.press("n")
        await pilot.pause()
        assert len(app.screen.messages) == 2
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, PathPrompt) and "saves" in app.screen.hint
        app.screen.query_one("#path-input").value = str(tmp_path / "c.json")
        await pilot.press("enter")
        await pilot.pause()
        note = app._notifications
        assert any(n.message == f"saved c.json in {tmp_path}" for n in note)
        await pilot.press("ctrl+n")  # saved: cleared at once
        await pilot.pause()
        assert not isinstance(app.screen, Confirm) and app.screen.messages == []
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, PathPrompt) and "opens" in app.screen.hint and "saves" not in app.screen.hint


async def test_escape_closes_the_keys_panel(fake):
    app = build(fake, remember=False)
    async with running(app, WIDE) as pilot:
        app.action_show_help_panel()
        await pilot.pause()
        assert app.screen.query(HelpPanel)
        await pilot.press("escape")
        await pilot.pause()
        assert not app.screen.query(HelpPanel)


@pytest.mark.parametrize("width", [80, 100, 119, 120, 140, 200])
@pytest.mark.parametrize("mode", ["chat", "edit", "race"])
async def test_footer_fits_at_every_width(clock, tmp_path, monkeypatch, mode, width):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    spec, only = FakeEngine(clock), FakeEngine(clock)
    app = build(spec, engines=(only,), remember=False, edit_file="a.py" if mode == "edit" else None,
                race=mode == "race")
    async with running(app, (width, 30)):
        assert "Quit" in footer_fits(app)  # every key whole, checked inside
