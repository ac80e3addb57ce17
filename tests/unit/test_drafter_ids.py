"""Drafter ids are one str-valued enum (DrafterId): the same strings in JSON, the CLI and the server."""

import json

import pytest

from localspec.drafters import DraftModelDrafter, PredictionDrafter, PromptLookupDrafter
from localspec.events import DrafterId
from localspec.policy import FixedPolicy


def test_a_drafter_id_is_its_name_everywhere():
    d = DrafterId.LOOKUP
    assert d == "lookup" and str(d) == "lookup" and f"{d}" == "lookup" and f"{d:>7}" == " lookup"
    assert {"lookup": 1}[d] == 1 and {d: 1}["lookup"] == 1  # hashes as its name
    assert json.dumps({d: d}) == '{"lookup": "lookup"}'


def test_one_name_to_id_map():
    assert [DrafterId(n) for n in ("draft", "lookup", "prediction", "none")] == list(DrafterId)
    with pytest.raises(ValueError):
        DrafterId("ngram")


def test_every_drafter_is_named_by_its_id():
    assert (DraftModelDrafter.name, PromptLookupDrafter.name, PredictionDrafter.name) == (
        DrafterId.DRAFT, DrafterId.LOOKUP, DrafterId.PREDICTION)
    assert FixedPolicy("lookup", 4).drafter is DrafterId.LOOKUP
