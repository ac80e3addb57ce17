"""Issue 23 item 1: no text from the user, a file or the model is ever read as markup.

Hypothesis writes the texts (brackets, closing tags, backslashes, any Unicode); each runs
through the whole app: the transcript, the token stream, the round inspector, a
notification, a conversation saved and opened again (JSON and Markdown), and the
code-edit screen's file header, answer and diff.
"""

from __future__ import annotations

import asyncio
import io
import tempfile
from pathlib import Path

from rich.console import Console
from hypothesis import HealthCheck, example, given, settings, strategies as st

from localspec.app.conversation import load_conversation, save_conversation
from localspec.tui.screens.base import AssistantMessage, UserMessage
from localspec.tui.widgets import RoundInspector, show_token
from tui_fakes import FakeClock, FakeEngine
from tui_helpers import build, idle, running, submit

#: markup's own characters, often, and anything else printable
TEXT = st.text(st.one_of(st.sampled_from(list("[]/=@:#\\ \nbold$'\"")),
                         st.characters(exclude_categories=("Cs", "Cc"))),
               min_size=1, max_size=60).filter(lambda t: t.strip())
SLOW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def shown(widget) -> str:
    """What a Static-like widget draws, as plain text."""
    return str(widget.render())


def printed(static) -> str:
    """A Static holding a Rich renderable (a table, a group), printed as plain text."""
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(static.content)
    return console.file.getvalue()


def toasts(app) -> list[str]:
    return [shown(t) for t in app.screen.query("Toast")]


async def _chat(user: str, reply: str) -> list[str]:
    eng = FakeEngine(FakeClock(), reply=reply)
    app = build(eng, remember=False)
    async with running(app, notifications=True) as pilot:
        await submit(pilot, user)
        assert eng.calls[-1]["messages"][-1]["content"] == user.strip()  # the model got the right text
        assert shown(app.screen.query_one(UserMessage)) == user.strip()  # and the transcript shows it
        answer = app.screen.query(AssistantMessage).last()
        assert answer.stream.text == reply
        app.screen.query_one(RoundInspector).set_rounds(answer.rounds, 0)  # the first round's tokens
        await pilot.pause()
        first = answer.rounds[0]
        inspector = printed(app.screen.query_one(RoundInspector))
        assert "round 1/" in inspector and show_token(first.target_texts[0])[:11] in inspector
        app.notify(f"note: {user}")
        app.notify_error(reply, hint=user)
        await pilot.pause(0.1)
        assert f"note: {user}" in toasts(app)
        assert any(reply in t and user in t for t in toasts(app))
        return toasts(app)
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("c.json", "c.md"):
                path = save_conversation(app.screen.conversation(), Path(tmp) / name)
                conv = load_conversation(path)
                app.screen.show_conversation(conv)
                await pilot.pause()
                users = [shown(m) for m in app.screen.query(UserMessage)]
                assert users == [m.content for m in conv.messages if m.role == "user"]
                answers = [a.stream.text for a in app.screen.query(AssistantMessage)]
                assert answers == [m.content for m in conv.messages if m.role == "assistant"]
                if name == "c.json":  # JSON keeps every character
                    assert users == [user.strip()] and answers == [reply]


@SLOW
@given(user=TEXT, reply=TEXT)
@example(user="[/bold] closes a tag that was never opened", reply="a [/] and [/red] too")
@example(user="list[int] and [bold]bold[/bold]", reply="def f(x: list[int]) -> dict[str, int]: ...")
@example(user="[link=https://x]x[/link] [@click=app.quit]q[/]", reply="\\[escaped] [on red]x")
def test_user_and_model_text_is_never_markup(user, reply):
    shown = asyncio.run(_chat(user, reply))  # each screen's text is checked inside, as printed
    assert any(user in t for t in shown)


async def _edit(name: str, body: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text("x = 1\n")
        reply = f"```\n{body}\n```"
        app = build(FakeEngine(FakeClock(), reply=reply), edit_file=str(path), remember=False)
        async with running(app, notifications=True) as pilot:
            screen = app.screen
            assert shown(screen.query_one("#edit-file")).startswith(str(path))
            box = screen.query_one("#edit-instruction")
            box.value = body
            await box.action_submit()
            await idle(pilot)
            assert screen.current.stream.text == reply
            # the diff as drawn is the diff as computed (compared without whitespace: line ends are redrawn)
            drawn = shown(screen.query_one("#edit-diff"))
            assert "".join(drawn.split()) == "".join((screen.result.diff or "no changes").split())
            await pilot.press("ctrl+d")
            await pilot.pause()
        assert path.read_text() == "x = 1\n"
        return path.read_text()


@SLOW
@given(body=TEXT)
@example(body="[/b] [red]x")
def test_file_names_and_code_are_never_markup(body):
    """The edit screen: a file whose name has brackets, an instruction and a model answer
    with markup's characters (header, stream and diff)."""
    assert asyncio.run(_edit("[b]odd [red]name[] [@click=app.quit].py", body)) == "x = 1\n"  # file untouched
