"""The drafting modes, declared once (localspec.config.DRAFT_MODES): the settings, the engine's drafters and the UI
read that one list."""

from typing import get_args

from localspec.config import DRAFT_MODES, FIXED_DRAFT_MODES, DraftMode, DraftParams
from localspec.core.events import DrafterId
from localspec.tui.dialogs import MODE_CYCLE, MODES


def test_each_fixed_mode_is_the_drafter_it_drafts_with():
    """The engine runs a fixed mode as ``FixedPolicy(DrafterId(mode))``: a mode no drafter answers to would fail there."""
    assert [DrafterId(m).value for m in FIXED_DRAFT_MODES] == list(FIXED_DRAFT_MODES)
    assert get_args(DraftMode) == DRAFT_MODES == ("auto", *FIXED_DRAFT_MODES)
    assert DraftParams.model_fields["mode"].default in DRAFT_MODES


def test_the_ui_offers_every_mode_once_fixed_modes_first():
    assert [value for _, value in MODES] == list(MODE_CYCLE) == [*FIXED_DRAFT_MODES, "auto"]
    assert sorted(MODE_CYCLE) == sorted(DRAFT_MODES)
