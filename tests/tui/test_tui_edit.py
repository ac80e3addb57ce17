"""Pilot tests of the code-edit screen on inputs people really have (issue 9, A1-A4):
the screen only shows and asks; the logic is localspec.app.codeedit (tests/unit/app/test_codeedit.py)."""

from __future__ import annotations

import pytest

from localspec.tui.dialogs import Choose, Confirm
from localspec.tui.screens import EditScreen
from tui_helpers import edit_app, idle, running, submit, until_started

pytestmark = pytest.mark.asyncio

README = "# Title\n\nBuild it with:\n\n```sh\nmake all\n```\n\nThen run `./app`.\n"
README_NEW = README.replace("# Title", "# Project")


def edit_screen(app):
    return next(s for s in app.screen_stack if isinstance(s, EditScreen))


def notes(app):
    return [n.message for n in app._notifications]


async def test_markdown_with_inner_fence_and_crlf_replaced_whole(clock, tmp_path, monkeypatch):
    """A1 + A2: a CRLF Markdown file holding a ```sh block; the model answers LF in a ``` fence."""
    src = tmp_path / "README.md"
    app, eng = edit_app(tmp_path, monkeypatch, "README.md", README.replace("\n", "\r\n").encode(),
                        "```markdown\n" + README_NEW + "```\n", clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "Change the heading Title to Project.", "#edit-instruction")
        scr = app.screen
        prompt = eng.calls[-1]["messages"][0]["content"]
        assert "````markdown\n" + README + "````" in prompt  # LF, in a fence longer than the file's
        assert scr.result.complete and scr.result.text == README_NEW.replace("\n", "\r\n")
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, Confirm)
        await pilot.press("y")
        await pilot.pause()
    assert src.read_bytes() == README_NEW.replace("\n", "\r\n").encode()
    assert (tmp_path / "README.md.bak").read_bytes() == README.replace("\n", "\r\n").encode()


async def test_answer_cut_at_max_tokens_says_why_and_continues(clock, tmp_path, monkeypatch):
    """A4: cut by max_tokens -> the screen says why, refuses to replace, and F9/'c' continues
    the same answer to a whole file."""
    original = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(6))
    new = original.replace("def f0(x)", "def f0(x: int)")
    # a budget the answer does not fit in: it needs two parts
    monkeypatch.setattr("localspec.tui.screens.edit.edit_max_tokens", lambda n_prompt, max_tokens: 60)
    app, eng = edit_app(tmp_path, monkeypatch, "m.py", original, "```python\n" + new + "```\n", clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "add a type hint", "#edit-instruction")
        scr = edit_screen(app)
        assert scr.result is not None and not scr.result.complete
        assert "ended at max_tokens" in scr.result.incomplete[0]
        assert "incomplete" in scr.current.border_subtitle
        dialog = app.screen
        assert isinstance(dialog, Choose) and "not a whole file" in dialog.question
        assert "ended at max_tokens" in dialog.question and "original was not changed" in dialog.question
        await pilot.press("escape")  # look first
        await pilot.pause()
        await pilot.press("ctrl+r")  # refused: nothing written, the reason shown
        await pilot.pause()
        assert (tmp_path / "m.py").read_text() == original
        assert any("not replacing m.py" in m and "max_tokens" in m for m in notes(app))
        assert not isinstance(app.screen, Confirm)
        n_calls = len(eng.calls)
        await pilot.press("f9")
        await idle(pilot)
        # the continuation extends the same token sequence (prompt + answer so far)
        first, cont = eng.calls[n_calls - 1], eng.calls[n_calls]
        assert cont["prompt"][:len(first["prompt"])] == first["prompt"] and len(cont["prompt"]) > len(first["prompt"])
        assert scr.result.complete and scr.result.text == new
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
    assert (tmp_path / "m.py").read_text() == new


async def test_incomplete_answer_kept_as_new_file(clock, tmp_path, monkeypatch):
    """A4: no closing fence -> 'keep as new file' writes name.edited.py, the original stays."""
    original = "x = 1\ny = 2\n"
    app, eng = edit_app(tmp_path, monkeypatch, "a.py", original, "```python\nx = 10\ny = 2\n", clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "x is ten", "#edit-instruction")
        dialog = app.screen
        assert isinstance(dialog, Choose) and "no closing fence" in dialog.question
        assert [c[0] for c in dialog.choices] == ["new", "close"]  # nothing to continue: it ended itself
        await pilot.press("k")
        await pilot.pause()
    assert (tmp_path / "a.py").read_text() == original
    assert (tmp_path / "a.edited.py").read_text() == "x = 10\ny = 2\n"


async def test_python_regression_is_named_before_replacing(clock, tmp_path, monkeypatch):
    """A4: the original parses, the result does not: the confirmation says so."""
    app, eng = edit_app(tmp_path, monkeypatch, "a.py", "def f(x):\n    return x\n",
                        "```python\ndef f(x:\n    return x\n```", clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "hint", "#edit-instruction")
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, Confirm)
        assert "parses as Python but the result does not" in app.screen.question
        await pilot.press("n")
        await pilot.pause()
    assert (tmp_path / "a.py").read_text() == "def f(x):\n    return x\n"


async def test_much_shorter_answer_is_asked_about_at_once(clock, tmp_path, monkeypatch):
    """A4: an answer that ended by itself but drops most of the file: the screen asks first."""
    original = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
    reply = "```python\ndef g0(x):\n    return x\n\n# ... rest of the file unchanged\n```"
    app, eng = edit_app(tmp_path, monkeypatch, "m.py", original, reply, clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "rename f0 to g0", "#edit-instruction")
        dialog = app.screen
        assert isinstance(dialog, Choose) and "may not be the whole file" in dialog.question
        assert "much shorter than the original" in dialog.question and "placeholder" in dialog.question
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, Confirm) and "much shorter" in app.screen.question
        await pilot.press("n")
        await pilot.pause()
    assert (tmp_path / "m.py").read_text() == original


async def test_dropped_variable_is_named_before_replacing(clock, tmp_path, monkeypatch):
    """Issue 23 item 8: the result still parses, but uses a name the model dropped: the
    notification and the confirmation name it (pyflakes, only what is new)."""
    original = "import os\n\nLIMIT = 3\n\n\ndef f(x):\n    return min(x, LIMIT) + missing_before\n"
    new = "import os\n\n\ndef f(x: int) -> int:\n    return min(x, LIMIT) + missing_before\n"
    app, eng = edit_app(tmp_path, monkeypatch, "a.py", original, "```python\n" + new + "```", clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "type hints", "#edit-instruction")
        scr = edit_screen(app)
        assert scr.result.warnings == ("the result uses names it no longer defines: LIMIT (line 5)",)
        assert any("LIMIT (line 5)" in m for m in notes(app))
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, Confirm)
        assert "no longer defines: LIMIT (line 5)" in app.screen.question
        assert "missing_before" not in app.screen.question  # undefined in the original too: not new
        await pilot.press("n")
        await pilot.pause()
    assert (tmp_path / "a.py").read_text() == original


async def test_stop_before_any_token_offers_nothing_to_keep(tmp_path, monkeypatch):
    """Issue 23 item 4: Esc before the first token: no all-deleted diff, no 'keep as new
    file' of an empty file; the screen says there is nothing to keep."""
    app, eng = edit_app(tmp_path, monkeypatch, "a.py", "x = 1\n", "```python\nx = 2\n```", round_delay=0.3)
    async with running(app) as pilot:
        await submit(pilot, "x is two", "#edit-instruction", wait=False)
        await until_started(pilot, eng)
        await pilot.press("escape")
        await idle(pilot)
        scr = edit_screen(app)
        assert scr.current.stats.tokens == 0 and scr.current.stats.end_reason == "cancelled"
        assert app.screen is scr  # no dialog offering to keep anything
        assert scr.result is None and scr.query_one("#edit-diff").diff == ""
        assert any("nothing to keep" in m and "a.py was not changed" in m for m in notes(app))
        await pilot.press("ctrl+s")
        await pilot.pause()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]


async def test_replace_updates_the_header_and_a_second_replace_writes_nothing(clock, tmp_path, monkeypatch):
    """Issue 23 item 7: after Ctrl+R the header counts the new file's lines; a second
    Ctrl+R says the file already holds the result and adds no backup."""
    app, eng = edit_app(tmp_path, monkeypatch, "a.py", "x = 1\n", "```python\nx = 1\ny = 2\nz = 3\n```", clock=clock)
    async with running(app) as pilot:
        header = app.screen.query_one("#edit-file")
        assert str(header.render()).endswith("(1 line)")
        await submit(pilot, "add y and z", "#edit-instruction")
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert str(header.render()).endswith("(3 lines)")
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert not isinstance(app.screen, Confirm)
        assert any("already holds this result" in m for m in notes(app))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "a.py.bak"]


async def test_ctrl_d_toggles_the_diff_from_the_instruction_box(clock, tmp_path, monkeypatch):
    """Issue 23 item 13: Ctrl+D works while the instruction box has focus (the default),
    the footer shows it there, and the command palette offers it."""
    app, eng = edit_app(tmp_path, monkeypatch, "a.py", "x = 1\n", "```python\nx = 2\n```", clock=clock)
    async with running(app) as pilot:
        await submit(pilot, "x is two", "#edit-instruction")
        scr = edit_screen(app)
        assert app.focused is scr.query_one("#edit-instruction")
        switcher = scr.query_one("#edit-switcher")
        assert switcher.current == "edit-diff-scroll"
        await pilot.press("ctrl+d")
        assert switcher.current == "edit-stream-scroll"
        await pilot.press("ctrl+d")
        assert switcher.current == "edit-diff-scroll"
        shown = {b.key for (_n, b, enabled, _t) in app.active_bindings.values() if b.show and enabled}
        assert "ctrl+d" in shown
        assert "Diff / answer" in [c.title for c in app.get_system_commands(scr)]
