"""Helpers shared by the TUI tests."""

from __future__ import annotations

from localspec.config import DraftParams, Settings

from tui_fakes import FakeClock, FakeEngine, factory_for


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
    from tui.app import make_app

    fake = fake or FakeEngine(clock or FakeClock())
    factory = factory_for(fake, *engines)
    # the scripted fake drafts like a draft model: pin that mode (the product default is auto)
    settings = settings or Settings(drafting=DraftParams(mode="draft"))
    app = make_app(settings, factory, clock=fake.clock, **kw)
    app.factory = factory
    return app

