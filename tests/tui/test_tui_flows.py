"""Pilot tests: settings, conversations, code-edit, loading failures, race."""

from __future__ import annotations

import json

import pytest

from localspec.config import Settings
from localspec.errors import ModelError
from localspec.app.settings_file import config_path, load_settings
from tui_fakes import REPLY, FakeEngine
from tui_helpers import SIZE, build, edit_app, idle, running, submit, until_started

from localspec.tui.messages import LoadProgress

pytestmark = pytest.mark.asyncio


def messages(app):
    return [n.message for n in app._notifications]


async def test_change_setting_is_applied_and_remembered(fake):
    app = build(fake)
    async with running(app) as pilot:
        await pilot.press("f4")
        scr = app.screen
        scr.query_one("#f-drafting-draft_max").value = "5"
        scr.query_one("#f-sampling-temperature").value = "0.7"
        scr.query_one("#f-sampling-seed").value = "42"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.settings.drafting.draft_max == 5
        assert app.settings.sampling.temperature == 0.7 and app.settings.sampling.seed == 42
        await submit(pilot, "hello")
        call = fake.calls[-1]
        assert call["drafting"].draft_max == 5 and call["sampling"].seed == 42
    # remembered between runs, in the file LOCALSPEC_CONFIG points at
    assert config_path().is_file()
    assert load_settings().drafting.draft_max == 5
    assert len(app.factory.made) == 1  # sampling changes need no reload


async def test_invalid_setting_refused_in_place(fake):
    app = build(fake)
    before = app.settings
    async with running(app) as pilot:
        await pilot.press("f4")
        scr = app.screen
        scr.query_one("#f-drafting-draft_max").value = "100"
        scr.query_one("#f-sampling-top_p").value = "abc"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is scr  # refused: the dialog stays open
        assert "less than or equal to 64" in str(scr.query_one("#f-drafting-draft_max-error").render())
        assert "valid number" in str(scr.query_one("#f-sampling-top_p-error").render())
        assert scr.query_one("#f-drafting-draft_max").has_class("invalid")
        await pilot.press("escape")
        await pilot.pause()
        assert app.settings == before  # unchanged
    assert not config_path().exists()


async def test_model_change_reloads_engine(clock):
    first, second = FakeEngine(clock), FakeEngine(clock)
    app = build(first, engines=(second,), remember=False)
    async with running(app) as pilot:
        await pilot.press("f4")
        app.screen.query_one("#f-target-model").value = "smollm2-135m"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await idle(pilot)
        assert first.closed and app.engine is second
        assert second.settings.target.model == "smollm2-135m"


async def test_load_failure_is_a_notification(clock):
    app = build(FakeEngine(clock), remember=False)
    app.engine_factory = lambda s, p=None, st=None: (_ for _ in ()).throw(
        ModelError("model file not found: /nope.gguf", "check the path"))
    async with running(app) as pilot:
        assert app.engine_state == "failed"
        assert any("model file not found" in m and "check the path" in m for m in messages(app))
        await submit(pilot, "hello?")  # refused, no crash
        assert any("no model is loaded" in m for m in messages(app))


async def test_load_progress_bar_while_ui_stays_usable(clock):
    import threading

    release = threading.Event()
    fake = FakeEngine(clock)

    def slow_factory(settings, progress=None, stage=None):
        progress("assemble", 550_000_000, 1_100_000_000)
        release.wait(10)
        return fake

    app = build(fake, remember=False)
    app.engine_factory = slow_factory
    async with app.run_test(size=SIZE) as pilot:
        from textual.widgets import ProgressBar

        from localspec.tui.screens import LoadBar

        for _ in range(100):
            await pilot.pause(0.02)
            if app.load_fraction:
                break
        bar = app.screen.query_one(LoadBar)
        assert bar.display and app.engine_state == "loading"
        assert app.screen.query_one(ProgressBar).percentage == pytest.approx(0.5)
        assert "assembling the offline mirror: 550 / 1100 MB" in app.load_text
        # a calibration's steps: what is measured, and that it is kept only when undisturbed (get_costs)
        app.post_message(LoadProgress("measuring decode costs of m.gguf", 2, 5, "steps"))
        await pilot.pause()
        assert app.load_text == ("measuring decode costs of m.gguf (kept for later starts unless other programs "
                                 "disturb it): 2/5") and app.load_fraction == pytest.approx(0.4)
        # the UI answers while loading: typing works, sending is refused politely
        await pilot.press("h", "i")
        assert app.screen.query_one("#prompt").value == "hi"
        await app.screen.query_one("#prompt").action_submit()
        await pilot.pause()
        assert any("still loading" in m for m in messages(app))
        release.set()
        await idle(pilot)
        assert not bar.display and app.engine is fake


async def test_save_and_reopen_conversation(fake, tmp_path):
    app = build(fake, remember=False)
    json_path = tmp_path / "conv.json"
    md_path = tmp_path / "conv.md"
    async with running(app) as pilot:
        await submit(pilot, "reverse a string")
        for path in (json_path, md_path):
            await pilot.press("ctrl+s")
            await pilot.pause()
            app.screen.query_one("#path-input").value = str(path)
            await pilot.press("enter")
            await pilot.pause()
        assert json.loads(json_path.read_text())["messages"][1]["content"] == REPLY
        assert "## Assistant" in md_path.read_text()
        await pilot.press("ctrl+n")
        await pilot.pause()
        chat = app.screen
        assert chat.messages == []
        await pilot.press("ctrl+o", "f")  # the conversation browser, then "open a file"
        await pilot.pause()
        app.screen.query_one("#path-input").value = str(json_path)
        await pilot.press("enter")
        await pilot.pause()
        from localspec.tui.screens import AssistantMessage

        assert [m["role"] for m in chat.messages] == ["user", "assistant"]
        ans = chat.query(AssistantMessage).last()
        assert ans.stream.text == REPLY
        assert {k for _t, k, _r in ans.stream.pieces} >= {"accepted", "resampled", "bonus"}
        assert ans.rounds and ans.rounds[0].draft_texts  # the inspector works without a model
        # the reopened history is sent with the next question
        await submit(pilot, "thanks")
        assert [m["role"] for m in fake.calls[-1]["messages"]] == ["user", "assistant", "user"]
        # Markdown reopens as plain text
        await pilot.press("ctrl+o", "f")
        await pilot.pause()
        app.screen.query_one("#path-input").value = str(md_path)
        await pilot.press("enter")
        await pilot.pause()
        assert [m["content"] for m in chat.messages] == ["reverse a string", REPLY]


async def test_code_edit_save_new_and_replace(clock, tmp_path, monkeypatch):
    src = tmp_path / "mod.py"
    original = "def f(x):\n    return x+1\n"
    reply = "Sure:\n```python\ndef f(x: int) -> int:\n    return x + 1\n```\nDone."
    app, eng = edit_app(tmp_path, monkeypatch, "mod.py", original, reply, clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "add type hints", "#edit-instruction")
        call = eng.calls[-1]
        assert call["drafting"].mode == "lookup" and call["drafting"].draft_max >= 16
        prompt = call["messages"][0]["content"]
        assert "add type hints" in prompt and original.strip() in prompt and "fenced code block" in prompt
        scr = app.screen
        assert scr.result.text == "def f(x: int) -> int:\n    return x + 1\n" and scr.result.complete
        assert "+def f(x: int) -> int:" in scr.query_one("#edit-diff").diff
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert (tmp_path / "mod.edited.py").read_text() == scr.result.text
        assert src.read_text() == original
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("n")  # declined: nothing changes
        await pilot.pause()
        assert src.read_text() == original
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert src.read_text() == scr.result.text
        assert (tmp_path / "mod.py.bak").read_text() == original


async def test_code_edit_refuses_binary(clock, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02garbage")
    app = build(FakeEngine(clock), edit_file="blob.bin", remember=False)
    async with running(app):
        assert app.screen.path is None
        assert any("binary" in m for m in messages(app))


async def test_race_reports_speedup_and_feeds_chat_stats(clock):
    spec, only = FakeEngine(clock), FakeEngine(clock)
    app = build(spec, engines=(only,), race=True, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "reverse a string", "#race-prompt")
        assert only.calls[-1]["drafting"].mode == "none"
        assert spec.calls[-1]["drafting"].mode == "draft"
        assert app.last_speedup is not None and app.last_speedup > 1
        t = app.screen.query_one("#race-target").stats
        s = app.screen.query_one("#race-spec").stats
        assert t.tokens == s.tokens == len(only.calls[-1]["messages"][0]["content"]) * 0 + t.tokens
        assert s.decode_seconds < t.decode_seconds
        await pilot.press("f1")
        await pilot.pause()
        from localspec.tui.widgets import StatsPanel

        assert app.screen.query_one(StatsPanel).speedup == app.last_speedup
    assert only.closed is False  # closed by run_app's close_engines, not by the test harness
    app.close_engines()
    assert only.closed and spec.closed


async def test_command_palette_lists_actions(fake):
    app = build(fake, remember=False)
    async with running(app):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for want in ("Race mode", "Code-edit mode", "Settings", "Save conversation", "Conversations",
                     "Open conversation file", "Stop the answer"):
            assert want in titles


async def test_model_change_during_answer_reloads_after_it(clock):
    first = FakeEngine(clock, reply="word " * 200, round_delay=0.01)
    second = FakeEngine(clock)
    app = build(first, engines=(second,), remember=False)
    async with running(app) as pilot:
        await submit(pilot, "talk", wait=False)
        await until_started(pilot, first)
        new = app.settings.model_copy(update={"target": app.settings.target.model_copy(update={"model": "other"})})
        app.apply_settings(new)
        assert app.engine is first and not first.closed  # never swapped under a running answer
        await idle(pilot)
        for _ in range(100):
            await pilot.pause(0.02)
            if app.engine is second:
                break
        assert first.closed and app.engine is second


async def test_corrupt_user_config_is_reported_in_the_app(fake):
    from localspec.app.settings_file import load_settings

    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().write_text("{broken")
    settings = load_settings()  # what the CLI does before run_app
    assert settings == Settings()
    app = build(fake, settings=settings, remember=False)
    async with running(app):
        assert any("corrupt-" in m and "default settings" in m for m in messages(app))


async def test_race_too_short_for_a_figure_says_so_here_and_in_chat(clock):
    """Issue 23 item 11: a race whose sides produce a few tokens gives no speedup figure;
    the race screen and the chat panel say why instead."""
    spec, only = FakeEngine(clock, reply="Hi there."), FakeEngine(clock, reply="Hi there.")
    app = build(spec, engines=(only,), race=True, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "say hi", "#race-prompt")
        result = str(app.screen.query_one("#race-result").render())
        assert "no speedup figure" in result and "too few" in result and "x " not in result
        assert app.last_speedup is None
        await pilot.press("f1")
        await pilot.pause()
        from localspec.tui.widgets import StatsPanel

        panel = app.screen.query_one(StatsPanel)
        assert panel.speedup is None and "no figure" in panel.speedup_note


async def test_notices_of_the_engine_are_shown_once_loaded(clock):
    """What the engine wants the user told once (e.g. weight repacking turned off) is a notification."""
    fake = FakeEngine(clock)
    fake.notices = ["weight repacking is off: the probe [crashed] on this CPU"]
    app = build(fake, remember=False)
    async with running(app):
        assert fake.notices[0] in messages(app)


async def test_function_keys_work_while_a_prompt_has_focus(clock):
    """The prompts are TextAreas, which bind F6 and F7 themselves: the screens' F6 (retry,
    race again), F7 and F8 (rounds) still act while a prompt has focus."""
    spec, only = FakeEngine(clock), FakeEngine(clock)
    app = build(spec, engines=(only,), race=True, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "reverse a string", "#race-prompt")
        assert app.focused is app.screen.query_one("#race-prompt")
        n = len(spec.calls)
        await pilot.press("f6")
        await idle(pilot)
        assert len(spec.calls) == n + 1
        await pilot.press("f1")
        await pilot.pause()
        await submit(pilot, "hi")
        assert app.focused is app.screen.query_one("#prompt")
        n = len(spec.calls)
        await pilot.press("f6")  # retry
        await idle(pilot)
        assert len(spec.calls) == n + 1 and len(app.screen.messages) == 2
        insp = app.screen.query_one("#inspector")
        last = insp.index
        await pilot.press("f7")
        assert insp.index == last - 1
        await pilot.press("f8")
        assert insp.index == last
