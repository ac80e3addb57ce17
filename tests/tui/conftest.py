from __future__ import annotations

import pytest

from tui_fakes import FakeClock, FakeEngine


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """Keep the developer's own config and conversations out, and stop the cursor blinking (stable snapshots)."""
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config" / "settings.json"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LOCALSPEC_DATA", str(tmp_path / "data"))  # the conversation store
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    from textual.widgets import Input, TextArea

    monkeypatch.setattr(Input, "cursor_blink", False, raising=False)
    monkeypatch.setattr(TextArea, "cursor_blink", False, raising=False)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def fake(clock):
    return FakeEngine(clock)

