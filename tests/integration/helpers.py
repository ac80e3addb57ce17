"""Shared checks for the real-model tests."""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager

import numpy as np

from generation import run  # noqa: F401  (re-exported: the integration tests import it from here)

#: cases.md C1: where batched verification rounds differently from one-token decoding,
#: a greedy difference is allowed only where the target's top-2 logits are this close.
NEAR_TIE = 0.25

PROMPTS = [
    "Write a Python function `merge_intervals(intervals)` that merges overlapping intervals, "
    "with a docstring, type hints and three doctest examples. Then explain its complexity.",
    "Here is a class:\n\nclass Stack:\n    def __init__(self):\n        self.items = []\n"
    "    def push(self, x):\n        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n\n"
    "Rewrite it with type hints, docstrings, an `is_empty` method, a `peek` method and a `__len__` method. "
    "Show the whole class.",
    "Explain, step by step, how a hash map handles collisions with open addressing and with chaining, "
    "and give a small C implementation of chaining.",
]


def top2_gap(model, tokens) -> float:
    """Target top-1 minus top-2 logit after ``tokens``, by one-token decoding from scratch."""
    model.reset()
    model.decode(tokens[:-1], logits_for=()) if len(tokens) > 1 else None
    row = model.decode(tokens[-1:], "last")[0]
    model.reset()
    top = np.sort(row)[-2:]
    return float(top[1] - top[0])


def assert_greedy_equal(engine, prompt, reference, got, label=""):
    """Token-identical, or the first difference sits at a near-tie of the target (C1)."""
    if got == reference:
        return None
    n = min(len(got), len(reference))
    first = next((i for i in range(n) if got[i] != reference[i]), n)
    if first == n:
        raise AssertionError(f"{label}: lengths differ ({len(got)} vs {len(reference)}) with equal prefix")
    gap = top2_gap(engine.target, list(prompt) + reference[:first])
    assert gap < NEAR_TIE, f"{label}: greedy output differs at token {first} where the top-2 gap is {gap:.3f}"
    return first, gap


def assert_first_token_follows_target(engine, prompt, params, n_seeds=240) -> dict[str, int]:
    """cases.md C6: with the engine's real draft and target at temperature > 0, the first sampled token's
    histogram over ``n_seeds`` seeds (draft mode, one drafted token a run) matches the target's exact
    distribution after ``prompt`` (chi-square goodness of fit at the 0.999 level, bins expecting fewer than 5
    pooled).

    Args:
        engine: a SpeculativeEngine with a draft model; its target's vocabulary may be wider or narrower
            than the draft's by padding.
        prompt: token ids.
        params: the SamplingParams (temperature > 0; a top-k keeps the bins few).

    Returns:
        How the first token came, over the runs: ``{"accepted": a, "resampled": r}`` (a + r = n_seeds); a
        test of the residual path asks for ``r > 0``.
    """
    from localspec.core.events import TokenEvent, TokenKind
    from localspec.core.sampling import logits_to_probs

    # the exact target distribution of the first answer token
    t = engine.target
    t.sync(prompt)
    row = t.decode(prompt[t.n_cached:], "last")[0]
    t.truncate(len(prompt) - 1)
    target = logits_to_probs(row, params)
    support = np.flatnonzero(target)
    counts = {int(k): 0 for k in support}
    kinds = {"accepted": 0, "resampled": 0}
    for seed in range(n_seeds):
        sampling = params.model_copy(update={"seed": seed})
        gen, events = run(engine, prompt, "draft", 2, draft_max=1, sampling=sampling, check_invariant=False)
        assert gen.rounds[0].drafted == 1
        first = gen.token_ids[0]
        assert first in counts, "sampled a token outside the target's top-k"
        counts[first] += 1
        kind = next(e.kind for e in events if isinstance(e, TokenEvent))
        kinds["resampled" if kind == TokenKind.RESAMPLED else "accepted"] += 1
    exp = target[support] * n_seeds
    obs = np.array([counts[int(k)] for k in support])
    # pool bins with small expectation into one
    big = exp >= 5
    o = np.append(obs[big], obs[~big].sum())
    e = np.append(exp[big], exp[~big].sum())
    keep = e > 0
    chi2 = float((((o - e) ** 2)[keep] / e[keep]).sum())
    dof = max(int(keep.sum()) - 1, 1)
    # Wilson-Hilferty approximation of the chi-square 0.999 quantile
    z = 3.09
    crit = dof * (1 - 2 / (9 * dof) + z * np.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < crit, (chi2, crit, dict(zip(support.tolist(), obs.tolist())), exp)
    return kinds


#: flash attention off: what a batched verification pass is held to (measured up to 0.12 on an AMD
#: EPYC Zen 3 without AVX-512, 0.264 on a Zen 4 with AVX-512: the kernels differ by CPU); a row taken
#: from the wrong position differs by nats, and fails this too. test_logprobs.py and test_server.py hold
#: every mode's logprobs to it against mode none's.
TOL_FLASH_OFF = 0.5


def tiny_lookup_process(tiny_path, tmp, key, extra=(), timeout=120):
    """``localspec serve`` on SmolLM2 (or another model file, ``tiny_path``) in mode lookup (one thread,
    1,024 tokens of context; ``extra``: more flags, a repeated one wins) as a
    :class:`~localspec.server.process.ServerProcess` (not started; ``timeout``: seconds it may take to
    start), with ``$LOCALSPEC_CACHE`` at ``tmp / "cache"`` and its log at ``tmp / "server.log"``."""
    from localspec.server.process import ServerProcess

    argv = [sys.executable, "-m", "localspec.cli", "serve", "--target", str(tiny_path), "--mode", "lookup",
            "--port", "{port}", "--api-key", key, "--n-ctx", "1024", "--n-threads", "1", "--log-level", "warning",
            *extra]
    return ServerProcess(argv, tmp / "server.log", env={"LOCALSPEC_CACHE": str(tmp / "cache")}, timeout=timeout)


def openai_client(base_url: str, key: str):
    """An ``openai`` client of a server at ``base_url`` (no retries; 10 minutes a request at most)."""
    import openai

    return openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=key, max_retries=0, timeout=600)


@contextmanager
def tiny_lookup_server(tiny_path, tmp, key, extra=()):
    """:func:`tiny_lookup_process` started, and an ``openai`` client for it (:func:`openai_client`)."""
    with tiny_lookup_process(tiny_path, tmp, key, extra) as proc:
        yield openai_client(proc.base_url, key)


def metric(base_url: str, name: str, key: str, **labels: str) -> float:
    """The sum of a server's ``/metrics`` samples named ``name`` (read with API key ``key``) whose labels
    include ``labels`` (``status="500"``); 0.0 when there is none."""
    import httpx

    r = httpx.get(base_url.rstrip("/").removesuffix("/v1") + "/metrics", headers={"Authorization": f"Bearer {key}"},
                  timeout=30)
    r.raise_for_status()
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$", r.text, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def chat(client, messages, **kw):
    """A chat completion of an ``openai`` client: greedy and at most 24 tokens unless ``kw`` says otherwise."""
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model="tiny", messages=messages, **kw)
