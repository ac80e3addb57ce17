"""What two servers' answers to the same request may differ in: wall-clock figures and the queue.

One rule for the tests that compare answers across servers or scopes (tests/unit/server/test_scopes.py,
tests/integration/test_server_scopes.py): a key is left out when it is a duration or a rate (its name has
``second`` in it or ends in ``_ms``: ``prefill_seconds``, ``overhead_seconds_per_round``,
``predicted_per_second``, ...) or one of :data:`PER_ANSWER` (ids, times, the queue)."""
from __future__ import annotations

#: keys that differ between any two answers whatever the server did
PER_ANSWER = frozenset({"time_to_first_token", "queue", "id", "created", "created_at", "system_fingerprint"})


def is_timing(key: str) -> bool:
    """Whether ``key`` names a wall-clock figure or a per-answer field (see the module's docstring)."""
    return key in PER_ANSWER or "second" in key or key.endswith("_ms")


def without_timing(value):
    """``value`` (a JSON answer) with every wall-clock and per-answer field left out, recursively."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if not is_timing(k)}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value
