"""localspec.core.events: drafter ids are one str-valued enum (DrafterId), the same strings in JSON, the CLI and the
server; per-drafter tallies counted once."""

import json

import pytest

from localspec.core.drafters import DraftModelDrafter, PredictionDrafter, PromptLookupDrafter
from localspec.core.events import DrafterId
from localspec.core.policy import FixedPolicy


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


def test_per_drafter_tallies_are_counted_once_for_the_server_and_the_bench():
    from localspec.bench.runner import drafter_tallies as bench_tallies
    from localspec.core.events import RoundStats, drafter_tallies
    from localspec.server.shapes import drafter_counts

    def rs(i, drafter, drafted, accepted):
        return RoundStats(i, drafter, (1,) * drafted, (1,) * (accepted + 1), drafted, accepted, accepted + 1, 0.0, 0.0)

    rounds = [rs(0, DrafterId.NONE, 0, 0), rs(1, DrafterId.LOOKUP, 4, 2), rs(2, DrafterId.LOOKUP, 3, 3),
              rs(3, DrafterId.PREDICTION, 5, 1)]
    t = drafter_tallies(rounds)
    assert t == {"none": {"rounds": 1, "drafted": 0, "accepted": 0},
                 "lookup": {"rounds": 2, "drafted": 7, "accepted": 5},
                 "prediction": {"rounds": 1, "drafted": 5, "accepted": 1}}
    assert all(type(k) is str for k in t)  # plain names: a dict's repr in the bench report is unchanged
    assert drafter_counts(rounds) == {k: v for k, v in t.items() if k != "none"}
    assert bench_tallies is drafter_tallies
