"""Conversations kept by themselves (the store) and the browser (Ctrl+O): reopen, search, rename,
delete, export, open a file. Driven by the real engine over the scripted fake models."""

from __future__ import annotations

import json

import pytest

from localspec.app.store import ConversationStore
from localspec.tui.browser import ConversationBrowser

from tui_fakes import REPLY, FakeClock, FakeEngine
from tui_helpers import build, idle, running, submit, until_started

pytestmark = pytest.mark.asyncio


def _store(app) -> ConversationStore:
    return app.conversation_store()


def _texts(app) -> list[str]:
    return [m["content"] for m in app.screen.messages]


async def _browse(pilot):
    await pilot.press("ctrl+o")
    await pilot.pause()
    assert isinstance(pilot.app.screen, ConversationBrowser)
    return pilot.app.screen


async def test_each_message_is_kept_as_it_completes(fake):
    """The question is in the store while its answer streams; the answer, with the engine's statistics
    and the models, once it ends: a kill loses at most the answer being streamed."""
    fake.round_delay = 0.05
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "reverse a string in python", wait=False)
        await until_started(pilot, fake)
        store = _store(app)
        (info,) = store.list()
        assert info.title == "reverse a string in python"
        assert [m.role for m in store.load(info.id).messages] == ["user"]
        fake.round_delay = 0
        await idle(pilot)
        msgs = store.load(info.id).messages
        assert [m.role for m in msgs] == ["user", "assistant"] and msgs[1].content == REPLY
        answer = app.screen.messages[-1]
        assert msgs[1].stats == answer["stats"].as_dict() and msgs[1].stats["tokens"] > 0
        assert msgs[1].models == {"target": app.settings.target.model, "draft": app.settings.draft.model,
                                  "mode": "draft"}
        assert [tuple(s) for s in msgs[1].segments] == [tuple(p) for p in answer["segments"]]
        # a retry replaces the answer in the store too
        await pilot.press("f6")
        await idle(pilot)
        assert [m.role for m in store.load(info.id).messages] == ["user", "assistant"]


async def test_browser_reopens_with_history_and_continues(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "tell me about Fibonacci")
        first = app.screen.conv_id
        await pilot.press("ctrl+n")  # kept already: no question asked
        await pilot.pause()
        assert app.screen.messages == []
        await submit(pilot, "sort a list")
        second = app.screen.conv_id
        browser = await _browse(pilot)
        assert [r.id for r in browser.rows] == [second, first]  # newest first
        browser.query_one("#browser-search").value = "fibonacci"
        await pilot.pause()
        assert [r.id for r in browser.rows] == [first]
        await pilot.press("enter")  # from the search box: opens the highlighted one
        await pilot.pause()
        assert app.screen.conv_id == first and _texts(app) == ["tell me about Fibonacci", REPLY]
        await submit(pilot, "and the golden ratio?")
        assert fake.calls[-1]["messages"][0]["content"] == "tell me about Fibonacci"  # the history is asked
        assert len(_store(app).load(first).messages) == 4


async def test_browser_rename_delete_export(fake, tmp_path):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "first question")
        await pilot.press("ctrl+n")
        await submit(pilot, "second question")
        browser = await _browse(pilot)
        # rename the highlighted (newest) one with r
        await pilot.press("r")
        await pilot.pause()
        app.screen.query_one("#path-input").value = "my [b]title[/b]"
        await pilot.press("enter")
        await pilot.pause()
        assert browser.rows[0].title == "my [b]title[/b]"  # plain text, not markup
        # export it as Markdown and as JSON (the conversation format)
        for name in ("out.md", "out.json"):
            await pilot.press("e")
            await pilot.pause()
            app.screen.query_one("#path-input").value = str(tmp_path / name)
            await pilot.press("enter")
            await pilot.pause()
        assert "## Assistant" in (tmp_path / "out.md").read_text()
        data = json.loads((tmp_path / "out.json").read_text())
        assert [m["role"] for m in data["messages"]] == ["user", "assistant"] and data["messages"][1]["stats"]
        # delete the one shown on the chat screen: Esc first keeps it, y deletes it
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert len(browser.rows) == 2
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert [r.title for r in browser.rows] == ["first question"]
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.messages == [] and app.screen.conv_id is None  # the chat shown was deleted


async def test_browser_opens_a_file_and_keeps_it(fake, tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": "hello"},
                                             {"role": "assistant", "content": "hi there"}]}))
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await _browse(pilot)
        await pilot.click("#browser-file")  # the mouse works as the keys do
        await pilot.pause()
        app.screen.query_one("#path-input").value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert "hi there" in _texts(app)
        info = _store(app).info(app.screen.conv_id)
        assert info.title == "old" and info.system == "be brief"
        # a file that is not a conversation: a clear error, nothing kept
        bad = tmp_path / "bad.json"
        bad.write_text("[1, 2")
        await _browse(pilot)
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one("#path-input").value = str(bad)
        await pilot.press("enter")
        await pilot.pause()
        assert len(_store(app).list()) == 1
        assert any("is not JSON" in n.message for n in app._notifications)


async def test_without_a_store_chat_still_works(fake, tmp_path, monkeypatch):
    """A data folder that cannot be made: said once, the chat works, Ctrl+O asks for a file path."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LOCALSPEC_DATA", str(blocker / "data"))
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "hello")
        await submit(pilot, "again")
        assert app.screen.messages[-1]["content"] == REPLY
        errors = [n for n in app._notifications if "conversation store" in n.message]
        assert len(errors) == 1 and "LOCALSPEC_DATA" in errors[0].message
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.screen.query_one("#path-input") is not None
