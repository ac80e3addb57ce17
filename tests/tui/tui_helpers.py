"""Helpers shared by the TUI tests: build the app over a fake engine, run it, type into it, wait."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from localspec.config import DraftParams, Settings

from tui_fakes import DRAFT_P_MIN, FakeClock, FakeEngine, factory_for

SIZE = (120, 40)  #: the terminal size most tests run at


async def idle(pilot, timeout=10.0):
    """Wait until no answer runs and no engine loads."""
    app = pilot.app
    for _ in range(int(timeout / 0.02)):
        await pilot.pause(0.02)
        if app.busy is None and app.engine_state != "loading":
            await pilot.pause()
            return
    raise AssertionError(f"still busy: {app.busy}")


def build(fake=None, *, settings=None, clock=None, engines=(), **kw):
    """make_app with scripted fakes (the test helper every TUI test uses)."""
    from localspec.tui.app import make_app

    fake = fake or FakeEngine(clock or FakeClock())
    factory = factory_for(fake, *engines)
    # draft with the fake draft model (the product default is auto), and stop a draft where it
    # is unsure: so every token kind appears (tui_fakes)
    settings = settings or Settings(drafting=DraftParams(mode="draft", draft_p_min=DRAFT_P_MIN))
    app = make_app(settings, factory, clock=fake.clock, **kw)
    app.factory = factory
    return app


@asynccontextmanager
async def running(app, size=SIZE, **kw):
    """``app.run_test(size=size)``, entered once the engine has loaded."""
    async with app.run_test(size=size, **kw) as pilot:
        await idle(pilot)
        yield pilot


async def submit(pilot, text, selector="#prompt", wait=True):
    """Type ``text`` into the screen's box ``selector`` and send it; with ``wait``, until the answer ends."""
    box = pilot.app.screen.query_one(selector)
    box.value = text
    await box.action_submit()
    if wait:
        await idle(pilot)


async def until_started(pilot, fake, timeout=5.0):
    """Wait until a slowed fake (``round_delay``) runs a target pass: an answer is under way."""
    await asyncio.wait_for(asyncio.to_thread(fake.started.wait, timeout), timeout + 1)
    assert fake.started.is_set(), "the answer did not start"


def edit_app(tmp_path, monkeypatch, name, text, reply, *, clock=None, **kw):
    """The code-edit screen on a new file ``name`` holding ``text`` (str, or bytes as they are) in
    ``tmp_path`` (the working folder); the fake engine answers ``reply``. Returns (app, engine)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / name
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    eng = FakeEngine(clock or FakeClock(), reply=reply, **kw)
    return build(eng, edit_file=name, remember=False), eng
