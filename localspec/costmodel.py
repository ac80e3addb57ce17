"""Measured cost model and the adaptive draft policy of mode ``auto``.

The textbook speedup of speculative decoding (Leviathan et al. 2022, section 3.4, eq. 1
and Theorem 3.8) assumes a verification pass of g + 1 tokens costs one target pass and
a draft token costs a fixed fraction c of one. On a small CPU neither holds: a verify
pass of 5 tokens costs ~3.2 single-token passes and the 0.5B draft costs ~0.7 of the
1.5B target (``shared/models.md``). So this module

1. measures, on the running machine with the loaded models and settings, the time of a
   target decode of b tokens for b = 1..draft_max+1 and of one draft-model token, and
   caches it as JSON under ``$LOCALSPEC_CACHE/costs/`` (default ``~/.cache/localspec``),
   keyed by model file (path, size, mtime), settings (n_threads, n_batch, n_gpu_layers)
   and machine (hostname, CPU count, platform);
2. computes, with pure functions, the expected tokens per round from per-position
   acceptance estimates (the generalisation of (1 - a^(g+1)) / (1 - a)) and the
   expected tokens per second of each draft length g given the measured verify cost
   T_verify(g + 1) and draft cost g * T_draft, and takes the argmax over g, 0 included;
3. :class:`AdaptivePolicy` uses them every round to pick prompt lookup, the draft model
   or no speculation, and the draft length.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .drafters.model import STEADY_GAP
from .errors import ConfigError
from .policy import Choice

#: models.md: time of one decode of b tokens / time of one token, Qwen2.5-Coder-1.5B Q4_K_M,
#: 2 threads. Used only until a measurement exists (see :func:`default_curve`).
DEFAULT_TARGET_RATIOS = {1: 1.0, 2: 1.68, 3: 2.26, 4: 2.57, 5: 3.21, 8: 5.95, 16: 8.53}
COST_FORMAT = 1


# ---------------------------------------------------------------------------------------
# pure functions
# ---------------------------------------------------------------------------------------
def expected_tokens(accept: Sequence[float]) -> float:
    """Expected tokens committed by one round that drafts ``len(accept)`` tokens.

    ``accept[i]`` is the probability that draft token i + 1 is accepted given that the
    i tokens before it were (conditional, per-position acceptance). A round commits the
    accepted prefix plus exactly one target token, so

        E = 1 + sum_{k=1..g} prod_{i<k} accept[i].

    With a constant ``a`` this is 1 + a + ... + a^g = (1 - a^(g+1)) / (1 - a)
    (Leviathan et al. 2022, eq. 1).
    """
    total, run = 1.0, 1.0
    for a in accept:
        run *= min(max(float(a), 0.0), 1.0)
        total += run
    return total


def expected_tokens_constant(a: float, g: int) -> float:
    """(1 - a^(g+1)) / (1 - a), the expected tokens of a round with constant acceptance ``a``."""
    if g <= 0:
        return 1.0
    if a >= 1.0:
        return float(g + 1)
    return (1.0 - a ** (g + 1)) / (1.0 - a)


def verify_cost(verify_seconds: Sequence[float], b: int) -> float:
    """Time of a target pass over b tokens from a curve ``verify_seconds[b-1]`` (seconds).

    Beyond the end of the curve it extrapolates linearly with the slope of the last two
    points (never below the last point).
    """
    n = len(verify_seconds)
    if n == 0:
        raise ValueError("empty cost curve")
    if b <= n:
        return float(verify_seconds[max(b, 1) - 1])
    slope = verify_seconds[-1] - verify_seconds[-2] if n >= 2 else verify_seconds[-1]
    return float(verify_seconds[-1] + max(slope, 0.0) * (b - n))


def round_rate(g: int, accept: Sequence[float], verify_seconds: Sequence[float],
               draft_token_seconds: float, overhead_seconds: float = 0.0) -> float:
    """Expected tokens per second of a round drafting ``g`` tokens.

    rate(g) = E[tokens | accept[:g]] / (T_verify(g + 1) + g * T_draft + overhead)

    Args:
        g: draft length (0 = target-only decoding).
        accept: per-position conditional acceptance probabilities, length >= g.
        verify_seconds: ``verify_seconds[b-1]`` = seconds of a target pass over b tokens.
        draft_token_seconds: seconds per drafted token (0 for prompt lookup).
        overhead_seconds: fixed per-round cost (engine bookkeeping), seconds.
    """
    seconds = verify_cost(verify_seconds, g + 1) + g * draft_token_seconds + overhead_seconds
    return expected_tokens(list(accept)[:g]) / seconds


def best_draft_length(accept: Sequence[float], verify_seconds: Sequence[float], draft_token_seconds: float,
                      g_max: int, overhead_seconds: float = 0.0) -> tuple[int, float, float]:
    """The draft length in 0..g_max with the highest expected tokens per second.

    Returns:
        (g, rate(g), rate(0)) in tokens per second. Ties go to the shorter draft.
    """
    g_max = max(0, min(g_max, len(accept)))
    rate0 = round_rate(0, accept, verify_seconds, draft_token_seconds, overhead_seconds)
    best_g, best = 0, rate0
    for g in range(1, g_max + 1):
        r = round_rate(g, accept, verify_seconds, draft_token_seconds, overhead_seconds)
        if r > best * (1.0 + 1e-9):
            best_g, best = g, r
    return best_g, best, rate0


def predicted_speedup(g: int, accept: Sequence[float], verify_seconds: Sequence[float],
                      draft_token_seconds: float) -> float:
    """rate(g) / rate(0) from the measured cost curve (no per-round overhead)."""
    return round_rate(g, accept, verify_seconds, draft_token_seconds) / round_rate(0, [], verify_seconds, 0.0)


def textbook_speedup(a: float, g: int, c: float) -> float:
    """Leviathan et al. 2022, Theorem 3.8: (1 - a^(g+1)) / ((1 - a)(g c + 1)).

    Assumes a verification pass of g + 1 tokens costs one target pass.
    """
    return expected_tokens_constant(a, g) / (g * c + 1.0)


def acceptance_by_position(rounds: Sequence[tuple[int, int]], g_max: int) -> list[float | None]:
    """Per-position conditional acceptance from (drafted, accepted) pairs of rounds.

    Position i (0-based) was *tried* in a round when drafted > i and accepted >= i; it
    was accepted when accepted > i. Returns accepted/tried per position (None if never tried).
    """
    tried = [0] * g_max
    ok = [0] * g_max
    for drafted, accepted in rounds:
        for i in range(min(drafted, g_max)):
            if accepted < i:
                break
            tried[i] += 1
            if accepted > i:
                ok[i] += 1
    return [ok[i] / tried[i] if tried[i] else None for i in range(g_max)]


class EWAcceptance:
    """Per-position, exponentially weighted estimates of conditional acceptance.

    ``values[i]`` estimates P(draft token i+1 accepted | tokens 1..i accepted).

    Args:
        n: positions tracked (draft_max).
        prior: starting estimate for every position.
        weight: weight of a new observation (0 < weight <= 1).
    """

    def __init__(self, n: int, prior: float, weight: float) -> None:
        self.prior = prior
        self.weight = weight
        self.values = [prior] * n
        self.counts = [0] * n

    def update(self, drafted: int, accepted: int) -> None:
        """Learn from one verified draft: positions < accepted accepted, position ``accepted`` rejected."""
        w = self.weight
        for i in range(min(drafted, len(self.values))):
            x = 1.0 if i < accepted else 0.0
            self.values[i] += w * (x - self.values[i])
            self.counts[i] += 1
            if i >= accepted:
                break

    def relax(self, rate: float) -> None:
        """Move every estimate a fraction ``rate`` back towards the prior (unobserved rounds)."""
        for i, v in enumerate(self.values):
            self.values[i] = v + rate * (self.prior - v)


class ProposalScorer:
    """Scores a free drafter's proposals against the tokens the target committed.

    A proposal is kept until the committed tokens that follow it decide its fate (first
    mismatch, or every proposed token matched), then scored into ``est`` as if it had
    been drafted: positions before the first mismatch accepted, the mismatch rejected.
    Proposals made while one is pending fall inside it and are skipped, so each
    committed token is scored once, as in rounds that draft back to back. Comparing
    with the committed tokens is the acceptance rule of a point-mass draft (exact in
    greedy and sampled modes).
    """

    def __init__(self, est: EWAcceptance) -> None:
        self.est = est
        self._pending: tuple[int, tuple[int, ...]] | None = None

    def see(self, committed: Sequence[int], proposal: Sequence[int]) -> None:
        """Score what the committed tokens decided; then keep ``proposal`` (possibly empty)."""
        pend = self._pending
        if pend is not None:
            start, prop = pend
            new = committed[start : start + len(prop)]
            k = 0
            while k < len(new) and prop[k] == new[k]:
                k += 1
            if k < len(new):  # first mismatch at k
                self.est.update(k + 1, k)
                pend = None
            elif len(new) == len(prop):  # every proposed token matched
                self.est.update(len(prop), len(prop))
                pend = None
        if pend is None and proposal:
            pend = (len(committed), tuple(proposal))
        self._pending = pend


# ---------------------------------------------------------------------------------------
# measurement and cache
# ---------------------------------------------------------------------------------------
def cache_root() -> Path:
    return Path(os.environ.get("LOCALSPEC_CACHE") or Path.home() / ".cache" / "localspec")


def model_cost_key(model) -> dict:
    """What a measurement depends on: model file, settings, machine."""
    path = Path(model.path)
    try:
        st = path.stat()
        size, mtime = st.st_size, int(st.st_mtime)
    except OSError:
        size, mtime = -1, 0
    try:
        import importlib.metadata as md

        backend_version = md.version("llama-cpp-python")
    except Exception:  # pragma: no cover
        backend_version = "?"
    return {
        "format": COST_FORMAT,
        "path": str(path.resolve()),
        "size": size,
        "mtime": mtime,
        "n_threads": int(getattr(model, "n_threads", 0) or 0),
        "n_batch": int(getattr(model, "n_batch", 0) or 0),
        "n_gpu_layers": int(getattr(model, "n_gpu_layers", 0) or 0),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count() or 0,
        "platform": platform.platform(),
        "llama_cpp_python": backend_version,
    }


def cost_cache_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "costs" / f"{Path(key['path']).stem}-{digest}.json"


@dataclass
class ModelCosts:
    """Measured decode cost of one model.

    Attributes:
        seconds: ``seconds[b-1]`` = median wall time of one decode of b tokens, seconds.
        key: what the measurement depends on (:func:`model_cost_key`).
        measured: False when the curve is a default scaled by one measured token.
    """

    seconds: list[float]
    key: dict = field(default_factory=dict)
    repeats: int = 0
    measured: bool = True
    created: float = 0.0
    load: float = -1.0  #: 1-minute load average when measured (-1 unknown)

    def t(self, b: int) -> float:
        return verify_cost(self.seconds, b)

    @property
    def ratios(self) -> list[float]:
        return [s / self.seconds[0] for s in self.seconds]

    def to_json(self) -> dict:
        return {"key": self.key, "seconds": self.seconds, "repeats": self.repeats,
                "measured": self.measured, "created": self.created, "load": self.load}

    @classmethod
    def from_json(cls, d: dict) -> "ModelCosts":
        return cls(seconds=[float(x) for x in d["seconds"]], key=d.get("key", {}), repeats=int(d.get("repeats", 0)),
                   measured=bool(d.get("measured", True)), created=float(d.get("created", 0.0)),
                   load=float(d.get("load", -1.0)))


def _filler_tokens(model, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    hi = max(2, min(model.n_vocab, 30000))
    toks = [int(t) for t in rng.integers(1, hi, size=n)]
    return [t if not model.is_eog(t) else 1 for t in toks]


def measure_decode_costs(model, max_batch: int, repeats: int = 3, context: int = 64) -> ModelCosts:
    """Time one decode of b tokens for b = 1..max_batch at a fixed position.

    Decodes ``context`` filler tokens first when the cache is shorter than that (so the
    attention is not over an empty cache), then for each repetition and each b (order
    alternating forwards and backwards) decodes b tokens with logits for all of them,
    as the engine's verification pass does, and truncates back. The model's KV cache is
    left exactly as it was found.

    Returns:
        :class:`ModelCosts` with the median seconds per b.

    Raises:
        ContextOverflowError: the model's context cannot hold ``context + max_batch`` tokens.
    """
    load = _load1()
    n0 = model.n_cached
    base = n0
    if n0 < context:
        model.decode(_filler_tokens(model, context - n0, seed=1), logits_for=())
        base = context
    toks = _filler_tokens(model, max_batch, seed=2)
    samples: list[list[float]] = [[] for _ in range(max_batch)]
    try:
        model.decode(toks[:1], logits_for="all")  # warm up
        model.truncate(base)
        for r in range(max(1, repeats)):
            order = range(1, max_batch + 1) if r % 2 == 0 else range(max_batch, 0, -1)
            for b in order:
                t0 = time.perf_counter()
                model.decode(toks[:b], logits_for="all")
                samples[b - 1].append(time.perf_counter() - t0)
                model.truncate(base)
    finally:
        model.truncate(n0)
    # a decode of more tokens never costs less: keep the curve non-decreasing (noise on a shared machine)
    seconds = np.maximum.accumulate([float(np.median(s)) for s in samples]).tolist()
    return ModelCosts(seconds=seconds, key=model_cost_key(model), repeats=max(1, repeats), measured=True,
                      created=time.time(), load=load)


def _load1() -> float:
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # pragma: no cover - not on every platform
        return -1.0


def load_costs(model, max_batch: int) -> ModelCosts | None:
    """The cached measurement for this model, settings and machine, if it covers max_batch."""
    key = model_cost_key(model)
    path = cost_cache_path(key)
    try:
        costs = ModelCosts.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if costs.key != key or len(costs.seconds) < max_batch or not costs.measured:
        return None
    return costs


def save_costs(costs: ModelCosts) -> Path | None:
    """Write the measurement to the cache (atomically); None when the cache is not writable."""
    path = cost_cache_path(costs.key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(costs.to_json(), indent=1))
        tmp.replace(path)
        return path
    except OSError:
        return None


def get_costs(model, max_batch: int, remeasure: bool = False, repeats: int = 3) -> ModelCosts:
    """Cached costs, or a fresh measurement (saved to the cache)."""
    if not remeasure:
        cached = load_costs(model, max_batch)
        if cached is not None:
            return cached
    costs = measure_decode_costs(model, max_batch, repeats=repeats)
    save_costs(costs)
    return costs


def default_curve(t1: float, max_batch: int, ratios: dict[int, float] = DEFAULT_TARGET_RATIOS) -> list[float]:
    """A cost curve from one measured single-token time and the ratios of models.md (linear in between)."""
    xs = sorted(ratios)
    out = []
    for b in range(1, max_batch + 1):
        r = float(np.interp(b, xs, [ratios[x] for x in xs]))
        if b > xs[-1]:
            r = ratios[xs[-1]] * b / xs[-1]
        out.append(t1 * r)
    return out


@dataclass
class EngineCosts:
    """The costs an engine's adaptive policy uses, shared by its generations.

    ``verify[b-1]`` is the predicted seconds of a verification pass over b tokens. It
    starts from the measured curve and follows observed verification times: a batch
    size observed at least ``min_obs`` times uses its own exponentially weighted
    average; the others use the measured curve times an exponentially weighted scale
    (observed / measured over all batch sizes), so a machine that got busier or
    quieter since calibration moves the whole curve. ``draft_token`` likewise follows
    the drafting rounds.
    """

    verify: list[float]
    draft_token: float | None
    target: ModelCosts
    draft: ModelCosts | None
    weight: float = 0.1
    overhead: float = 0.0
    min_obs: int = 3
    scale: float = 1.0
    #: seconds per token of a draft-model catch-up (a prefill batch without logits). Until a
    #: catch-up is observed: the draft's one-token time scaled by the target curve's cost per
    #: token at its largest batch, an overestimate for long catch-ups (prefill batches are cheaper)
    draft_prefill_token: float | None = None

    def __post_init__(self) -> None:
        if self.draft_prefill_token is None and self.draft_token is not None and self.verify:
            b = len(self.verify)
            self.draft_prefill_token = self.draft_token * self.verify[-1] / (b * self.verify[0])
        self._n_catchup = 0
        self._base = list(self.verify)
        self._own = list(self.verify)
        self._n = [0] * len(self.verify)
        self._n_all = 0
        self._n_draft = 0

    def _w(self, n: int) -> float:
        # the first observations are averaged (weight 1/n), later ones weighted exponentially:
        # a calibration taken on a busy machine is corrected within a few rounds
        return max(self.weight, 1.0 / n)

    def observe_verify(self, b: int, seconds: float) -> None:
        if not (1 <= b <= len(self.verify)) or seconds <= 0:
            return
        i = b - 1
        self._n_all += 1
        self.scale += self._w(self._n_all + 1) * (seconds / self._base[i] - self.scale)
        self._n[i] += 1
        self._own[i] += self._w(self._n[i]) * (seconds - self._own[i])
        for j in range(len(self.verify)):
            self.verify[j] = self._own[j] if self._n[j] >= self.min_obs else self._base[j] * self.scale
        # a pass over more tokens never costs less
        for j in range(1, len(self.verify)):
            self.verify[j] = max(self.verify[j], self.verify[j - 1])

    def observe_draft(self, drafted: int, seconds: float) -> None:
        if drafted > 0 and seconds > 0 and self.draft_token is not None:
            self._n_draft += 1
            self.draft_token += self._w(self._n_draft) * (seconds / drafted - self.draft_token)

    def observe_catchup(self, tokens: int, seconds: float) -> None:
        """Learn the draft model's per-token catch-up cost from one catch-up of ``tokens``."""
        if tokens > 0 and seconds > 0:
            self._n_catchup += 1
            prev = self.draft_prefill_token if self.draft_prefill_token is not None else seconds / tokens
            self.draft_prefill_token = prev + self._w(self._n_catchup) * (seconds / tokens - prev)

    def observe_overhead(self, seconds: float) -> None:
        if seconds >= 0:
            self.overhead += self.weight * (seconds - self.overhead)


def engine_costs(engine, draft_max: int, remeasure: bool = False, repeats: int = 3) -> EngineCosts:
    """Measure (or load) the target curve b = 1..draft_max+1 and the draft-token time.

    The result is kept on ``engine.cost_model`` and reused while it covers draft_max.
    """
    existing = getattr(engine, "cost_model", None)
    if (isinstance(existing, EngineCosts) and not remeasure and len(existing.verify) >= draft_max + 1
            and (existing.draft is not None or engine.draft_model is None)):
        return existing
    target = get_costs(engine.target, draft_max + 1, remeasure=remeasure, repeats=repeats)
    draft = None
    if engine.draft_model is not None:
        draft = get_costs(engine.draft_model, 2, remeasure=remeasure, repeats=max(repeats, 5))
    ec = EngineCosts(verify=list(target.seconds[: draft_max + 1]), draft_token=draft.seconds[0] if draft else None,
                     target=target, draft=draft)
    engine.cost_model = ec
    return ec


# ---------------------------------------------------------------------------------------
# the adaptive policy
# ---------------------------------------------------------------------------------------
class AdaptivePolicy:
    """Mode ``auto``: each round, the drafter and draft length with the most expected tokens/s.

    For each candidate drafter (prompt lookup when it has a proposal, the draft model when
    loaded) it takes :func:`best_draft_length` over g = 0..limit with that drafter's
    per-position exponentially weighted acceptance estimates (:class:`EWAcceptance`),
    the verify cost curve and the drafter's cost per token, and compares with target-only
    decoding (g = 0). It speculates only when the expected gain exceeds ``margin``.

    Prompt lookup and a predicted output (a request's ``prediction``, tried before prompt
    lookup: it wins a tie) cost no model pass, so the policy also scores their proposals
    of every round against the tokens the target then committed (:meth:`see_lookup`,
    :meth:`see_prediction`, called by the engine), whether they were used or not: their
    estimates follow the text even while they are off. The draft model has no such free signal; while unused its estimates
    relax towards the prior, and it is never tried when even a perfect draft (acceptance
    1 at every position) could not beat target-only decoding with the measured costs, as
    with the 0.5B/1.5B pair on a 2-core CPU.

    A draft model whose KV cache lags the committed tokens must first catch up (its
    prefill: :meth:`see_draft_cache`, told by the engine every round). That one-off cost,
    pending tokens x the measured per-token catch-up cost, counts as drafting cost spread
    over the tokens still expected: the draft model is chosen only if its rate over that
    horizon, catch-up included, beats target-only decoding. The horizon is the number of
    tokens generated so far (an answer is expected to run about as long again), at least
    ``catchup_horizon`` and at most the tokens left; so a 1,000-token catch-up is not paid
    for a short answer.

    Args:
        costs: the engine's :class:`EngineCosts` (shared, refined as rounds run).
        draft_max: most tokens drafted per round.
        has_draft: a draft model is loaded.
        weight: weight of a new acceptance observation.
        prior_draft, prior_lookup, prior_prediction: starting acceptance estimates (a
            predicted output is given by the user as what the answer repeats: high).
        relax: per unobserved round, fraction of the way back to the prior (draft model).
        margin: speculate only if the expected speedup is at least ``1 + margin``.
        catchup_horizon: fewest tokens a draft-model catch-up is spread over.
    """

    uses_lookup = True

    def __init__(self, costs: EngineCosts, draft_max: int, has_draft: bool, *, weight: float = 0.3,
                 prior_draft: float = 0.6, prior_lookup: float = 0.5, prior_prediction: float = 0.8,
                 relax: float = 0.01, margin: float = 0.03, catchup_horizon: int = 64) -> None:
        self.costs = costs
        self.draft_max = draft_max
        self.has_draft = has_draft and costs.draft_token is not None
        self.draft_est = EWAcceptance(draft_max, prior_draft, weight)
        self.lookup_est = EWAcceptance(draft_max, prior_lookup, weight)
        self.prediction_est = EWAcceptance(draft_max, prior_prediction, weight)
        self.relax = relax
        self.margin = margin
        self._lookup_scorer = ProposalScorer(self.lookup_est)
        self._prediction_scorer = ProposalScorer(self.prediction_est)
        self.last: Choice | None = None
        self.catchup_horizon = catchup_horizon
        self.draft_pending = 0  #: committed tokens the draft cache lacks (see_draft_cache)
        self.generated = 0

    @classmethod
    def for_engine(cls, engine, drafting) -> "AdaptivePolicy":
        """Build the policy for one generation; measures costs once per engine (cached on disk)."""
        costs = engine_costs(engine, drafting.draft_max)
        return cls(costs, drafting.draft_max, has_draft=engine.drafter is not None)

    # -- the choice -------------------------------------------------------------------
    def draft_can_pay(self, g_max: int) -> bool:
        """Whether a perfect draft (acceptance 1) beats target-only decoding at some g <= g_max."""
        if not self.has_draft:
            return False
        c = self.costs
        g, best, rate0 = best_draft_length([1.0] * g_max, c.verify, c.draft_token or 0.0, g_max, c.overhead)
        return g > 0 and best > rate0 * (1.0 + self.margin)

    def choose(self, limit: int, lookup_match: int | None = None, prediction_match: int | None = None) -> Choice:
        c = self.costs
        g_cap = max(0, min(limit, self.draft_max, len(c.verify) - 1))
        options = []  # (rate, drafter, g, expected tokens); on a tie the first wins
        rate0 = None
        notes = []
        # free drafters (no model pass), a predicted output before prompt lookup
        for name, match, est in (("prediction", prediction_match, self.prediction_est),
                                 ("lookup", lookup_match, self.lookup_est)):
            if g_cap > 0 and match:
                g, r, r0 = best_draft_length(est.values, c.verify, 0.0, min(g_cap, match), c.overhead)
                rate0 = r0
                options.append((r, name, g, expected_tokens(est.values[:g])))
                notes.append(f"{name} {r / r0:.2f}x")
        if g_cap > 0 and self.draft_can_pay(g_cap):
            g, r, r0 = best_draft_length(self.draft_est.values, c.verify, c.draft_token or 0.0, g_cap, c.overhead)
            rate0 = r0
            n_catch, r = self._with_catchup(r, limit)
            options.append((r, "draft", g, expected_tokens(self.draft_est.values[:g])))
            notes.append(f"draft {r / r0:.2f}x" + (f" incl. catch-up of {n_catch} tok" if n_catch else ""))
        elif self.has_draft and g_cap > 0:
            notes.append("draft cannot pay")
        best = max(options, default=None, key=lambda o: o[0])
        if best is not None and best[2] > 0 and best[0] >= rate0 * (1.0 + self.margin):
            r, drafter, g, e = best
            choice = Choice(drafter, g, f"g={g} {drafter}: est {e:.2f} tok/pass, {r / rate0:.2f}x")
        else:
            why = ", ".join(notes) if notes else ("no lookup match" if g_cap > 0 else "at limit")
            choice = Choice("none", 0, f"no speculation: best g=0 ({why})")
        self.last = choice
        return choice

    def catchup_seconds(self) -> tuple[int, float]:
        """(tokens, expected seconds) of the catch-up the draft model needs before drafting now."""
        n = self.draft_pending - 1 if self.draft_pending > STEADY_GAP else 0
        return n, n * (self.costs.draft_prefill_token or 0.0)

    def _with_catchup(self, rate: float, limit: int) -> tuple[int, float]:
        """A draft-model rate with the pending catch-up spread over the expected remaining tokens."""
        n, seconds = self.catchup_seconds()
        if n == 0 or rate <= 0:
            return 0, rate
        horizon = max(1, min(max(self.generated, self.catchup_horizon), limit))
        return n, horizon / (horizon / rate + seconds)

    # -- learning ---------------------------------------------------------------------
    def see_draft_cache(self, pending: int, generated: int) -> None:
        """Before a round: the draft cache lacks ``pending`` committed tokens; ``generated`` so far."""
        self.draft_pending = max(0, int(pending))
        self.generated = max(0, int(generated))

    def observe_catchup(self, tokens: int, seconds: float) -> None:
        """Learn from a draft-model catch-up of ``tokens`` that took ``seconds``."""
        self.costs.observe_catchup(tokens, seconds)

    def see_lookup(self, committed: Sequence[int], proposal: Sequence[int]) -> None:
        """Score prompt-lookup proposals against the tokens the target committed; free of model passes.

        Called by the engine every round with the committed tokens and this round's
        prompt-lookup proposal (possibly empty); see :class:`ProposalScorer`.
        """
        self._lookup_scorer.see(committed, proposal)

    def see_prediction(self, committed: Sequence[int], proposal: Sequence[int]) -> None:
        """Score the predicted output's proposals like :meth:`see_lookup` (every round, used or not)."""
        self._prediction_scorer.see(committed, proposal)

    def observe(self, drafter: str, drafted: int, accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        c = self.costs
        c.observe_verify(drafted + 1, verify_seconds)
        if drafter == "draft":
            self.draft_est.update(drafted, accepted)
            c.observe_draft(drafted, draft_seconds)
        else:
            self.draft_est.relax(self.relax)
            c.observe_overhead(draft_seconds)
        # lookup estimates learn from see_lookup (every round), not here, to count each round once


# ---------------------------------------------------------------------------------------
# CLI: localspec calibrate
# ---------------------------------------------------------------------------------------
def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model and thread options shared with :class:`localspec.config.Settings`."""
    p.add_argument("--target", default=None, help="target model: preset name or .gguf path (default qwen2.5-coder-1.5b)")
    p.add_argument("--draft", default=None, help="draft model: preset name or .gguf path (default qwen2.5-coder-0.5b)")
    p.add_argument("--n-ctx", type=int, default=None, help="context window, tokens")
    p.add_argument("--n-threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--n-gpu-layers", type=int, default=None, help="target layers on the GPU (-1 = all)")
    p.add_argument("--draft-n-gpu-layers", type=int, default=None, help="draft layers on the GPU (-1 = all)")
    p.add_argument("--draft-max", type=int, default=None, help="most tokens drafted per round")


def settings_from_args(args: argparse.Namespace, **drafting):
    """Settings from the shared options (pydantic validation errors become ConfigError)."""
    from pydantic import ValidationError

    from .config import DraftParams, ModelSettings, Settings, format_validation_error

    base = Settings()

    def model(ms: ModelSettings, name, gpu) -> ModelSettings:
        upd = {}
        if name is not None:
            upd["model"] = name
        if args.n_ctx is not None:
            upd["n_ctx"] = args.n_ctx
        if args.n_threads is not None:
            upd["n_threads"] = args.n_threads
        if gpu is not None:
            upd["n_gpu_layers"] = gpu
        return ModelSettings(**{**ms.model_dump(), **upd})

    try:
        d = base.drafting.model_dump()
        if args.draft_max is not None:
            d["draft_max"] = args.draft_max
        d.update(drafting)
        return Settings(target=model(base.target, args.target, args.n_gpu_layers),
                        draft=model(base.draft, args.draft, args.draft_n_gpu_layers),
                        sampling=base.sampling, drafting=DraftParams(**d), generation=base.generation)
    except ValidationError as e:
        raise ConfigError(f"invalid settings:\n{format_validation_error(e)}", "see localspec calibrate --help") from None


def format_curve(costs: ModelCosts, title: str) -> str:
    lines = [title, f"{'b':>3}  {'ms':>8}  {'ratio':>6}  {'ms/token':>8}"]
    t1 = costs.seconds[0]
    for b, s in enumerate(costs.seconds, start=1):
        lines.append(f"{b:>3}  {s * 1e3:8.2f}  {s / t1:6.2f}  {s * 1e3 / b:8.2f}")
    return "\n".join(lines)


def cli_calibrate(argv: list[str]) -> int:
    """``localspec calibrate``: measure (or show the cached) cost curve of the loaded models."""
    p = argparse.ArgumentParser(prog="localspec calibrate",
                                description="Measure the target's verify cost for b = 1..draft_max+1 tokens and the "
                                            "draft model's cost per token on this machine; cached per model, "
                                            "settings and machine.")
    add_model_arguments(p)
    p.add_argument("--remeasure", action="store_true", help="measure again even if a cached measurement exists")
    p.add_argument("--repeats", type=int, default=5, help="repetitions per batch size (median)")
    p.add_argument("--no-draft", action="store_true", help="measure the target only")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    settings = settings_from_args(args)
    from .loader import load_model

    draft_max = settings.drafting.draft_max
    out: dict = {}
    target = load_model(settings.target)
    try:
        tc = get_costs(target, draft_max + 1, remeasure=args.remeasure, repeats=args.repeats)
        out["target"] = tc
    finally:
        target.close()
    if not args.no_draft:
        draft = load_model(settings.draft)
        try:
            out["draft"] = get_costs(draft, 2, remeasure=args.remeasure, repeats=max(args.repeats, 5))
        finally:
            draft.close()
    if args.json:
        print(json.dumps({k: v.to_json() for k, v in out.items()}, indent=1))
        return 0
    tc = out["target"]
    if tc.load > 0.5 * (os.cpu_count() or 1) and time.time() - tc.created < 120:
        print(f"warning: load average {tc.load:.2f} on {os.cpu_count()} CPUs while measuring; other processes "
              "distort these numbers (rerun with --remeasure on an idle machine)", file=sys.stderr)
    src = "measured now" if time.time() - tc.created < 120 else "cached " + time.strftime(
        "%Y-%m-%d %H:%M", time.localtime(tc.created))
    print(format_curve(tc, f"target {settings.target.model} ({src}, {tc.key.get('n_threads')} threads, "
                           f"median of {tc.repeats}); cache: {cost_cache_path(tc.key)}"))
    if "draft" in out:
        dc = out["draft"]
        c = dc.seconds[0] / tc.seconds[0]
        print(f"\ndraft {settings.draft.model}: {dc.seconds[0] * 1e3:.2f} ms/token = {c:.2f} of a target pass")
        best = []
        for g in range(1, draft_max + 1):
            best.append((expected_tokens([1.0] * g) / (tc.t(g + 1) + g * dc.seconds[0]) * tc.seconds[0], g))
        bound, g = max(best)
        verdict = "can pay" if bound > 1.0 else "cannot pay on this machine: auto will not use it"
        print(f"upper bound with a perfect draft (every token accepted): {bound:.2f}x at g={g} -> draft model {verdict}")
    lk = max((expected_tokens([1.0] * g) * tc.seconds[0] / tc.t(g + 1), g) for g in range(1, draft_max + 1))
    print(f"upper bound for prompt lookup (free drafts, every token accepted): {lk[0]:.2f}x at g={lk[1]}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_calibrate(sys.argv[1:]))
