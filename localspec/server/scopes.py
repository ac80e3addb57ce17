"""Scopes: whose state a request may read and feed.

The server keeps three kinds of state across requests: the draft memory (earlier prompts and answers
that prompt lookup copies from), the live KV caches and their kept prompt prefixes, and the snapshots
on disk. Each of them shows in what a request gets back (``speculation.*``, ``cached_tokens``, the
token kinds, logprobs, ``/infill``'s draft figures), so a request must only find there what its own
side sent before. A scope is that side: one API key (``--api-key``, ``--api-key-file``), narrowed by a
request's ``cache_salt`` (vLLM's field: reuse only where prefix and salt both match). Without a key
there is one scope, ``""``, as with one user.

A scope id is a hash (never the key itself: ids go into snapshot files and may reach a log), and
the engine, the prefix cache, the disk store and the draft memory treat it as an opaque string.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Sequence


def key_scope(key: str | None) -> str:
    """The scope of API key ``key`` (None, no key: ``""``): 32 hex digits of its SHA-256, tagged ``k:``."""
    if key is None:
        return ""
    return "k:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def scope_id(key_scope_id: str, salt: str | None = None) -> str:
    """The scope of a request: its key's (:func:`key_scope`), narrowed by ``salt`` (``cache_salt``; None or
    absent: the key's own scope). Two requests share state only when both the key and the salt match."""
    if salt is None:
        return key_scope_id
    h = hashlib.sha256(key_scope_id.encode() + b"\0" + salt.encode()).hexdigest()[:32]
    return f"{key_scope_id}/s:{h}"


def matching_key(token: str | None, keys: Sequence[str]) -> str | None:
    """The key of ``keys`` equal to ``token``, or None. Every key is compared, each in constant time, so the
    time taken does not say which key (or how much of one) matched."""
    found = None
    for key in keys:
        if hmac.compare_digest((token or "").encode(), key.encode()) and token is not None:
            found = key
    return found
