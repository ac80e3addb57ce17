"""The acceptance traces kept in ``tests/data/traces`` (``scripts/record_traces.py``) load as :class:`traces.Trace`
and say what they are."""

import pytest

from traces import load_trace, trace_names


@pytest.mark.parametrize("name", trace_names())
def test_a_recorded_trace_loads(name):
    t = load_trace(name)
    assert t.prompt and t.answer
    assert t.prediction or name.startswith(("chat-", "prose-"))  # an edit's prediction is the file; chat and prose have none
    assert t.meta["task"] in name and t.target.endswith(".gguf")
    assert len(t.prompt) + len(t.answer) < t.meta["n_ctx"]
    assert (t.eog is None) == (t.meta["end_reason"] != "eog")
