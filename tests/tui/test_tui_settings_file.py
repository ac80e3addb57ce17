"""The UI writes to the settings file only what the user changed in its settings screen: a value given on
the command line for this run (``localspec --rpc HOST:PORT``) stays out of the file, and what the file held
stays in it."""

from __future__ import annotations

import json

import pytest

from localspec.app.settings_file import config_path, load_settings
from localspec.config import DraftParams, Settings
from tui_helpers import build, running

pytestmark = pytest.mark.asyncio


async def test_a_settings_change_does_not_save_the_command_lines_rpc(fake):
    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().write_text(json.dumps({"target": {"model": "smollm2-135m", "n_ctx": 1024},
                                         "draft": {"model": "smollm2-135m"}}))
    file = load_settings()
    # what `localspec --rpc 10.9.9.9:50052 --mode draft` resolves: the file under the flags
    flagged = file.model_copy(update={"target": file.target.model_copy(update={"rpc": ("10.9.9.9:50052",)}),
                                      "drafting": DraftParams(mode="draft")})
    app = build(fake, settings=flagged)
    async with running(app) as pilot:
        await pilot.press("f4")
        app.screen.query_one("#f-drafting-draft_max").value = "5"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.settings.drafting.draft_max == 5
        assert app.settings.target.rpc == ("10.9.9.9:50052",)  # still in effect for this run
    saved = json.loads(config_path().read_text())
    assert saved["drafting"] == {"draft_max": 5}  # the change, not the --mode flag
    assert "rpc" not in saved["target"] and saved["target"]["n_ctx"] == 1024  # the file's own value kept
    assert load_settings().target.rpc == ()


async def test_a_change_in_the_targets_section_saves_that_field_alone(fake):
    """The user changes the target's threads: the target section is written with that field, without the
    --rpc the run was started with."""
    flagged = Settings(drafting=DraftParams(mode="draft"))
    flagged = flagged.model_copy(update={"target": flagged.target.model_copy(update={"rpc": ("10.9.9.9:50052",),
                                                                                     "rpc_timeout": 30})})
    app = build(fake, settings=flagged)
    async with running(app) as pilot:
        await pilot.press("f4")
        app.screen.query_one("#f-target-n_threads").value = "3"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.settings.target.n_threads == 3 and app.settings.target.rpc == ("10.9.9.9:50052",)
    saved = json.loads(config_path().read_text())
    assert saved["target"]["n_threads"] == 3 and "rpc" not in saved["target"] and "rpc_timeout" not in saved["target"]
    assert "drafting" not in saved
