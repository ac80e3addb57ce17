"""Helpers shared by the TUI tests."""

from __future__ import annotations

from localspec.config import Settings

from tui_fakes import FakeClock, FakeEngine, factory_for


def build(fake=None, *, settings=None, clock=None, engines=(), **kw):
    """make_app with scripted fakes (the test helper every TUI test uses)."""
    from tui.app import make_app

    fake = fake or FakeEngine(clock or FakeClock())
    factory = factory_for(fake, *engines)
    app = make_app(settings or Settings(), factory, clock=fake.clock, **kw)
    app.factory = factory
    return app

