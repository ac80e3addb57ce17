"""Measured cost model and the adaptive draft policy of mode ``auto``.

The textbook speedup of speculative decoding (Leviathan et al. 2022, section 3.4, eq. 1
and Theorem 3.8) assumes a verification pass of g + 1 tokens costs one target pass and
a draft token costs a fixed fraction c of one. On a small CPU neither holds: a verify
pass of 5 tokens costs ~3.2 single-token passes and the 0.5B draft costs ~0.7 of the
1.5B target (``shared/models.md``). So this module

1. measures, on the running machine with the loaded models and settings, the time of a
   target decode of b tokens for every b = 1..draft_max+1 (so kernel thresholds such as
   a jump between 7 and 8 tokens are seen) at a short and a long context (64 and 1,024
   cached tokens; interpolated by the current position), the draft model's time per
   token and per catch-up (prefill) token, with flash attention off and on (keeping the
   faster, unless ``--flash-attn`` says which), and caches it as JSON under
   ``$LOCALSPEC_CACHE/costs/`` (default ``~/.cache/localspec``), keyed by model file
   (path, size, mtime), context settings (n_ctx, n_batch, n_ubatch, n_threads,
   n_gpu_layers, flash attention), the llama.cpp build and the machine (hostname, CPU
   model and count, platform);
2. computes, with pure functions, the expected tokens per round from per-position
   acceptance estimates (the generalisation of (1 - a^(g+1)) / (1 - a)) and the
   expected tokens per second of each draft length g given the measured verify cost
   T_verify(g + 1) and draft cost g * T_draft, and takes the argmax over g, 0 included;
3. :class:`AdaptivePolicy` uses them every round to pick prompt lookup, the draft model
   or no speculation, and the draft length; a free drafter's acceptance starts from a
   prior set by its match length (:class:`MatchAcceptance`).
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
from .errors import ConfigError, LocalspecError
from .policy import Choice

#: models.md: time of one decode of b tokens / time of one token, Qwen2.5-Coder-1.5B Q4_K_M,
#: 2 threads. Used only until a measurement exists (see :func:`default_curve`).
DEFAULT_TARGET_RATIOS = {1: 1.0, 2: 1.68, 3: 2.26, 4: 2.57, 5: 3.21, 8: 5.95, 16: 8.53}
COST_FORMAT = 2
#: cache lengths (tokens) at which calibration times the verify curve (see calibration_contexts)
SHORT_CONTEXT = 64
LONG_CONTEXT = 1024


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


def ceiling(verify_seconds: Sequence[float], g_max: int) -> tuple[float, int]:
    """The best speedup a perfect free drafter reaches with this cost curve, and its draft length.

    max over g = 1..g_max of (g + 1) T(1) / T(g + 1): every drafted token accepted, drafting
    free (prompt lookup). No drafter can beat it on this machine; a curve with a jump
    (T(8) >> T(7)) puts the best g before the jump.

    Returns:
        (speedup over target-only decoding, g); (1.0, 0) when no g > 0 beats g = 0.
    """
    best, best_g = 1.0, 0
    for g in range(1, max(g_max, 0) + 1):
        x = (g + 1) * verify_seconds[0] / verify_cost(verify_seconds, g + 1)
        if x > best:
            best, best_g = x, g
    return best, best_g


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
        prior: starting estimate, one for every position or a sequence of n (per position).
        weight: weight of a new observation (0 < weight <= 1).
    """

    def __init__(self, n: int, prior: float | Sequence[float], weight: float) -> None:
        self.prior = [float(prior)] * n if isinstance(prior, (int, float)) else [float(x) for x in prior][:n]
        if len(self.prior) != n:
            raise ValueError(f"prior has {len(self.prior)} positions, expected {n}")
        self.weight = weight
        self.values = list(self.prior)
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
            self.values[i] = v + rate * (self.prior[i] - v)


#: lower edges of the match-length buckets of :class:`MatchAcceptance` (0 = no match length reported)
MATCH_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64)


def succession_prior(match_length: int, n: int) -> list[float]:
    """Prior conditional acceptance of draft positions 0..n-1 after a match of ``match_length`` tokens.

    Laplace's rule of succession on the run of agreement: the source of a free draft
    (an earlier place in the prompt, a prediction) agreed with the text over the last m
    tokens, so the next token agrees with probability (m + 1) / (m + 2); each accepted
    token lengthens the run, so position i gets (m + i + 1) / (m + i + 2). A long match is
    strong evidence from the first round, as in SuffixDecoding (Oliaro et al. 2024,
    section 4), which sets its speculation length from the match length.
    """
    m = max(int(match_length), 0)
    return [(m + i + 1) / (m + i + 2) for i in range(n)]


class MatchAcceptance:
    """Acceptance estimates of a free drafter (prompt lookup, a prediction), by match length.

    A free drafter copies what followed a place whose earlier context agrees with the
    end of the text over ``match_length`` tokens. Proposals are grouped by that length
    into buckets (:data:`MATCH_BUCKETS`: 0, 1, 2-3, 4-7, ..., 64+); each bucket has its own
    per-position :class:`EWAcceptance` starting from :func:`succession_prior` of its
    lower edge, so the start of a copy (a long match) is trusted at once and a short,
    common n-gram is not, and each bucket then follows what the text does. Bucket 0
    (a drafter that reports no match length) starts from ``prior`` at every position, and
    no bucket starts below it (a predicted output, given by the user as what the answer
    repeats, keeps its high prior after a short re-synchronised match).

    Args:
        n: positions tracked (draft_max).
        prior: starting estimate of bucket 0.
        weight: weight of a new observation (0 < weight <= 1).
    """

    def __init__(self, n: int, prior: float, weight: float) -> None:
        self.buckets = [EWAcceptance(n, prior if edge == 0 else [max(prior, p) for p in succession_prior(edge, n)],
                                     weight)
                        for edge in MATCH_BUCKETS]

    @staticmethod
    def bucket_index(match_length: int) -> int:
        return max(i for i, edge in enumerate(MATCH_BUCKETS) if max(int(match_length), 0) >= edge)

    def bucket(self, match_length: int) -> EWAcceptance:
        """The estimates used for a proposal with this match length."""
        return self.buckets[self.bucket_index(match_length)]

    def values(self, match_length: int) -> list[float]:
        return self.bucket(match_length).values

    def update(self, match_length: int, drafted: int, accepted: int) -> None:
        self.bucket(match_length).update(drafted, accepted)


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


def _flash_attn_mode(model) -> str:
    """The flash-attention setting asked for: ``auto`` (choose by measurement), ``on``, ``off``, or
    ``default`` (llama.cpp's own choice, a model built without one)."""
    mode = getattr(model, "flash_attn_mode", None)
    if mode:
        return str(mode)
    fa = getattr(model, "flash_attn", None)
    return "default" if fa is None else ("on" if fa else "off")


def model_cost_key(model) -> dict:
    """What a measurement depends on: model file, context settings, llama.cpp build, machine."""
    path = Path(model.path)
    try:
        st = path.stat()
        size, mtime = st.st_size, int(st.st_mtime)
    except OSError:
        size, mtime = -1, 0
    try:
        from .backend import llama_cpp_version

        backend_version = llama_cpp_version()
    except Exception:  # pragma: no cover - llama_cpp missing (fake models in tests)
        backend_version = "?"
    from .machine import cpu_model

    return {
        "format": COST_FORMAT,
        "path": str(path.resolve()),
        "size": size,
        "mtime": mtime,
        "n_ctx": int(getattr(model, "n_ctx", 0) or 0),
        "n_threads": int(getattr(model, "n_threads", 0) or 0),
        "n_batch": int(getattr(model, "n_batch", 0) or 0),
        "n_ubatch": int(getattr(model, "n_ubatch", 0) or getattr(model, "n_batch", 0) or 0),
        "n_gpu_layers": int(getattr(model, "n_gpu_layers", 0) or 0),
        "flash_attn": _flash_attn_mode(model),
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count() or 0,
        "platform": platform.platform(),
        "llama_cpp_python": backend_version,
    }


def cost_cache_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "costs" / f"{Path(key['path']).stem}-{digest}.json"


def _interp_curves(contexts: Sequence[int], curves: Sequence[Sequence[float]], position: int) -> list[float]:
    """The curve at ``position``: linear in the context length between the measured ones and beyond
    the longest (attention reads every cached position, so its cost grows linearly); the shortest
    context's curve below it. Kept non-decreasing in b."""
    if len(curves) == 1 or position <= contexts[0]:
        return list(curves[0])
    i = next((k for k in range(1, len(contexts)) if position <= contexts[k]), len(contexts) - 1)
    c0, c1 = contexts[i - 1], contexts[i]
    f = (position - c0) / (c1 - c0) if c1 > c0 else 0.0
    out = [max(a + f * (b - a), min(a, b)) for a, b in zip(curves[i - 1], curves[i])]
    return np.maximum.accumulate(out).tolist()


@dataclass
class ModelCosts:
    """Measured decode cost of one model.

    Attributes:
        seconds: ``seconds[b-1]`` = median wall time of one decode of b tokens at the
            shortest measured context, seconds (= ``curves[0]``).
        key: what the measurement depends on (:func:`model_cost_key`).
        measured: False when the curve is a default scaled by one measured token.
        contexts: cache lengths (tokens) at which the curves were measured, ascending.
        curves: ``curves[i][b-1]`` = seconds of a decode of b tokens with ``contexts[i]``
            tokens cached; :meth:`curve_at` interpolates by position.
        prefill_token_seconds: seconds per token of a batched prefill between the two
            contexts (what a catch-up costs, e.g. the draft model's), None if not measured.
        flash_attn: the flash-attention setting measured (chosen when asked ``auto``;
            None = llama.cpp's default).
        flash_attn_scores: with ``auto``, per setting (``"on"``/``"off"``) its mean time relative
            to the faster setting (:func:`flash_attn_scores`; 1.0 = fastest everywhere).
        calibration_seconds: wall time the measurement took, seconds.
    """

    seconds: list[float]
    key: dict = field(default_factory=dict)
    repeats: int = 0
    measured: bool = True
    created: float = 0.0
    load: float = -1.0  #: 1-minute load average when measured (-1 unknown)
    contexts: list[int] = field(default_factory=list)
    curves: list[list[float]] = field(default_factory=list)
    prefill_token_seconds: float | None = None
    flash_attn: bool | None = None
    flash_attn_scores: dict = field(default_factory=dict)
    calibration_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not self.curves:
            self.curves = [list(self.seconds)]
        if len(self.contexts) != len(self.curves):
            self.contexts = [SHORT_CONTEXT + i for i in range(len(self.curves))]

    def curve_at(self, position: int | None) -> list[float]:
        """``curve[b-1]`` = predicted seconds of a decode of b tokens with ``position`` tokens cached."""
        return _interp_curves(self.contexts, self.curves, self.contexts[0] if position is None else position)

    def t(self, b: int, position: int | None = None) -> float:
        return verify_cost(self.curve_at(position), b)

    @property
    def ratios(self) -> list[float]:
        return [s / self.seconds[0] for s in self.seconds]

    def to_json(self) -> dict:
        return {"key": self.key, "seconds": self.seconds, "repeats": self.repeats,
                "measured": self.measured, "created": self.created, "load": self.load,
                "contexts": self.contexts, "curves": self.curves,
                "prefill_token_seconds": self.prefill_token_seconds, "flash_attn": self.flash_attn,
                "flash_attn_scores": self.flash_attn_scores, "calibration_seconds": self.calibration_seconds}

    @classmethod
    def from_json(cls, d: dict) -> "ModelCosts":
        pts = d.get("prefill_token_seconds")
        return cls(seconds=[float(x) for x in d["seconds"]], key=d.get("key", {}), repeats=int(d.get("repeats", 0)),
                   measured=bool(d.get("measured", True)), created=float(d.get("created", 0.0)),
                   load=float(d.get("load", -1.0)), contexts=[int(c) for c in d.get("contexts", [])],
                   curves=[[float(x) for x in c] for c in d.get("curves", [])],
                   prefill_token_seconds=None if pts is None else float(pts), flash_attn=d.get("flash_attn"),
                   flash_attn_scores=dict(d.get("flash_attn_scores", {})),
                   calibration_seconds=float(d.get("calibration_seconds", 0.0)))


def _filler_tokens(model, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    hi = max(2, min(model.n_vocab, 30000))
    toks = [int(t) for t in rng.integers(1, hi, size=n)]
    return [t if not model.is_eog(t) else 1 for t in toks]


def _time_curve(model, toks: Sequence[int], base: int, repeats: int) -> list[float]:
    """Median seconds of a decode of b = 1..len(toks) tokens (logits for all) with ``base`` cached."""
    samples: list[list[float]] = [[] for _ in toks]
    model.decode(toks[:1], logits_for="all")  # warm up
    model.truncate(base)
    for r in range(max(1, repeats)):
        order = range(1, len(toks) + 1) if r % 2 == 0 else range(len(toks), 0, -1)
        for b in order:
            t0 = time.perf_counter()
            model.decode(toks[:b], logits_for="all")
            samples[b - 1].append(time.perf_counter() - t0)
            model.truncate(base)
    # a decode of more tokens never costs less: keep the curve non-decreasing (noise on a shared machine)
    return np.maximum.accumulate([float(np.median(s)) for s in samples]).tolist()


def calibration_contexts(model, max_batch: int, long_context: int = LONG_CONTEXT) -> list[int]:
    """The cache lengths calibration measures at: :data:`SHORT_CONTEXT` and ``long_context``,
    the latter capped so ``long_context + max_batch`` fits the model's context window."""
    n_ctx = int(getattr(model, "n_ctx", 0) or (long_context + max_batch))
    long_ = min(long_context, n_ctx - max_batch)
    return [SHORT_CONTEXT] + ([long_] if long_ > 2 * SHORT_CONTEXT else [])


def measure_decode_costs(model, max_batch: int, repeats: int = 3, contexts: Sequence[int] | None = None) -> ModelCosts:
    """Time one decode of b tokens for b = 1..max_batch at each context length.

    For each context length c (ascending; default :func:`calibration_contexts`: 64 and
    1,024 tokens) decodes filler tokens until c are cached, then for each repetition and
    each b (order alternating forwards and backwards) decodes b tokens with logits for all
    of them, as the engine's verification pass does, and truncates back. The fill from
    the first context to the second is timed: a batched prefill, what a catch-up costs per
    token. A cache that held more than the first context is cut to it first (the engine
    decodes what is missing on its next call, :meth:`LlamaModel.sync`); otherwise the
    model's KV cache is left as it was found.

    Returns:
        :class:`ModelCosts` with the median seconds per b and context.

    Raises:
        ContextOverflowError: the model's context cannot hold ``contexts[-1] + max_batch`` tokens.
    """
    t_start = time.perf_counter()
    load = _load1()
    wanted = sorted(set(contexts if contexts is not None else calibration_contexts(model, max_batch)))
    n0 = min(model.n_cached, wanted[0])
    model.truncate(n0)
    toks = _filler_tokens(model, max_batch, seed=2)
    measured_at: list[int] = []
    curves: list[list[float]] = []
    prefill = None
    try:
        for c in wanted:
            base = model.n_cached
            if base < c:
                t0 = time.perf_counter()
                model.decode(_filler_tokens(model, c - base, seed=1 + len(curves)), logits_for=())
                if curves and c - base >= 32:
                    prefill = (time.perf_counter() - t0) / (c - base)
                base = c
            if measured_at and base <= measured_at[-1]:
                continue
            curves.append(_time_curve(model, toks, base, repeats))
            measured_at.append(base)
    finally:
        model.truncate(n0)
    return ModelCosts(seconds=list(curves[0]), key=model_cost_key(model), repeats=max(1, repeats), measured=True,
                      created=time.time(), load=load, contexts=measured_at, curves=curves,
                      prefill_token_seconds=prefill, flash_attn=getattr(model, "flash_attn", None),
                      calibration_seconds=time.perf_counter() - t_start)


def flash_attn_scores(results: dict[str, ModelCosts]) -> dict[str, float]:
    """Per setting, the mean over the measured contexts of T(1) and T(max_batch), each relative to the
    faster setting there: 1.0 = fastest at both; a one-token decode (target-only decoding) and a full
    verification pass weigh the same."""
    keys = list(results)
    pts = [(i, j) for i in range(min(len(r.curves) for r in results.values())) for j in (0, -1)]
    best = {pt: min(results[k].curves[pt[0]][pt[1]] for k in keys) for pt in pts}
    return {k: sum(results[k].curves[i][j] / best[(i, j)] for i, j in pts) / len(pts) for k in keys}


def calibrate_model(model, max_batch: int, repeats: int = 3, contexts: Sequence[int] | None = None) -> ModelCosts:
    """:func:`measure_decode_costs`; with flash attention ``auto``, for it off and on, keeping the faster.

    Asked ``auto`` (``model.flash_attn_mode``, see :mod:`localspec.loader`), it measures with
    flash attention off (llama-cpp-python's ``Llama`` default) and on, scores each by
    :func:`flash_attn_scores` (a one-token decode and a verification pass of ``max_batch``
    tokens at each context, relative to the faster setting), and leaves the model on the
    faster setting (off on a tie). Switching recreates the
    llama.cpp context, so the model's KV cache is then empty. A setting whose context
    cannot be created is skipped.
    """
    if _flash_attn_mode(model) != "auto" or not hasattr(model, "set_flash_attn"):
        return measure_decode_costs(model, max_batch, repeats, contexts)
    t0 = time.perf_counter()
    results: dict[str, ModelCosts] = {}
    for name, fa in (("off", False), ("on", True)):
        try:
            model.set_flash_attn(fa)
        except LocalspecError:
            continue
        results[name] = measure_decode_costs(model, max_batch, repeats, contexts)
    scores = flash_attn_scores(results)
    best = min(results, key=lambda k: (scores[k], k != "off"))
    model.set_flash_attn(best == "on")
    costs = results[best]
    costs.flash_attn = best == "on"
    costs.flash_attn_scores = scores
    costs.key = model_cost_key(model)
    costs.calibration_seconds = time.perf_counter() - t0
    return costs


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


def apply_cached_flash_attn(model) -> bool | None:
    """Set the model's flash attention to the faster setting a cached calibration found.

    For a model asked ``auto``; returns the setting applied, or None when this machine has
    not measured it yet (the model keeps its setting: off, as llama-cpp-python's ``Llama``).
    """
    if _flash_attn_mode(model) != "auto":
        return None
    cached = load_costs(model, 1)
    if cached is None or cached.flash_attn is None:
        return None
    model.set_flash_attn(bool(cached.flash_attn))
    return bool(cached.flash_attn)


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


def get_costs(model, max_batch: int, remeasure: bool = False, repeats: int = 3,
              contexts: Sequence[int] | None = None) -> ModelCosts:
    """Cached costs (the model switched to their flash-attention setting), or a fresh calibration
    (:func:`calibrate_model`, saved to the cache)."""
    if not remeasure:
        cached = load_costs(model, max_batch)
        if cached is not None:
            if _flash_attn_mode(model) == "auto" and cached.flash_attn is not None and hasattr(model, "set_flash_attn"):
                model.set_flash_attn(bool(cached.flash_attn))
            return cached
    costs = calibrate_model(model, max_batch, repeats=repeats, contexts=contexts)
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

    ``verify[b-1]`` is the predicted seconds of a verification pass over b tokens at the
    current position (:meth:`set_position`, the number of tokens in the target's cache):
    the calibrated curves interpolated by position (:meth:`ModelCosts.curve_at`) times a
    correction learned from observed verification times. A batch size observed at least
    ``min_obs`` times uses its own exponentially weighted ratio observed / calibrated;
    the others use the exponentially weighted ratio over all batch sizes (``scale``), so a
    machine that got busier or quieter since calibration moves the whole curve.
    ``draft_token`` (seconds per draft-model token at the current position) likewise
    follows the drafting rounds. ``draft_prefill_token_seconds`` is the draft model's
    calibrated catch-up (batched prefill) cost per token, None without a draft model.
    """

    verify: list[float]
    draft_token: float | None
    target: ModelCosts
    draft: ModelCosts | None
    weight: float = 0.1
    overhead: float = 0.0
    min_obs: int = 3
    scale: float = 1.0
    #: seconds per token of a draft-model catch-up (a prefill batch without logits): the
    #: calibrated figure; without one, the draft's one-token time scaled by the target
    #: curve's cost per token at its largest batch (an overestimate for long catch-ups);
    #: corrected by every observed catch-up (:meth:`observe_catchup`)
    draft_prefill_token_seconds: float | None = None
    position: int | None = None

    def __post_init__(self) -> None:
        self._len = len(self.verify)
        self._flat = list(self.verify)  # the curve given, used where the target has no curve for this length
        self._ratio = [1.0] * self._len
        self._n = [0] * self._len
        self._n_all = 0
        self._n_draft = 0
        self._draft_scale = 1.0
        self._draft_flat = self.draft_token
        if self.draft_prefill_token_seconds is None and self.draft is not None:
            self.draft_prefill_token_seconds = self.draft.prefill_token_seconds
        if self.draft_prefill_token_seconds is None and self.draft_token is not None and self.verify:
            b = len(self.verify)
            self.draft_prefill_token_seconds = self.draft_token * self.verify[-1] / (b * self.verify[0])
        self._n_catchup = 0
        self._refresh()

    def _w(self, n: int) -> float:
        # the first observations are averaged (weight 1/n), later ones weighted exponentially:
        # a calibration taken on a busy machine is corrected within a few rounds
        return max(self.weight, 1.0 / n)

    def _base(self, position: int | None) -> list[float]:
        curve = self.target.curve_at(position)
        if len(curve) < self._len or len(self.target.curves) == 1:
            return list(self._flat)
        return curve[: self._len]

    def _draft_base(self, position: int | None) -> float | None:
        if self._draft_flat is None:
            return None
        if self.draft is None or len(self.draft.curves) == 1:
            return self._draft_flat
        return self.draft.curve_at(position)[0]

    def _refresh(self) -> None:
        base = self._base(self.position)
        v = [base[j] * (self._ratio[j] if self._n[j] >= self.min_obs else self.scale) for j in range(self._len)]
        # a pass over more tokens never costs less
        self.verify[:] = np.maximum.accumulate(v).tolist()
        d = self._draft_base(self.position)
        self.draft_token = None if d is None else d * self._draft_scale

    def set_position(self, position: int | None) -> None:
        """Predict for a round whose verification pass starts with ``position`` tokens cached."""
        if position != self.position:
            self.position = position
            self._refresh()

    def observe_verify(self, b: int, seconds: float) -> None:
        """Learn from a verification pass of b tokens at the current position that took ``seconds``."""
        if not (1 <= b <= self._len) or seconds <= 0:
            return
        i = b - 1
        x = seconds / self._base(self.position)[i]
        self._n_all += 1
        self.scale += self._w(self._n_all + 1) * (x - self.scale)
        self._n[i] += 1
        self._ratio[i] += self._w(self._n[i]) * (x - self._ratio[i])
        self._refresh()

    def observe_draft(self, drafted: int, seconds: float) -> None:
        base = self._draft_base(self.position)
        if drafted > 0 and seconds > 0 and base:
            self._n_draft += 1
            self._draft_scale += self._w(self._n_draft) * (seconds / drafted / base - self._draft_scale)
            self._refresh()

    def observe_catchup(self, tokens: int, seconds: float) -> None:
        """Learn the draft model's per-token catch-up cost from one catch-up of ``tokens``."""
        if tokens > 0 and seconds > 0:
            self._n_catchup += 1
            prev = self.draft_prefill_token_seconds if self.draft_prefill_token_seconds is not None else seconds / tokens
            self.draft_prefill_token_seconds = prev + self._w(self._n_catchup) * (seconds / tokens - prev)

    def observe_overhead(self, seconds: float) -> None:
        if seconds >= 0:
            self.overhead += self.weight * (seconds - self.overhead)


def engine_costs(engine, draft_max: int, remeasure: bool = False, repeats: int = 3) -> EngineCosts:
    """Calibrate (or load) the target's curves b = 1..draft_max+1 at a short and a long context,
    and the draft model's per-token and catch-up costs (:func:`get_costs`).

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

    Prompt lookup costs no model pass, so the policy also scores the lookup proposal of
    every round against the tokens the target then committed (:meth:`see_lookup`, called
    by the engine), whether lookup was used or not: its estimates follow the text even
    while it is off. They are kept per match length (:class:`MatchAcceptance`): a
    proposal whose source agrees with the text over many tokens starts from a high prior
    (rule of succession), so a copy is drafted from its first rounds, while a short
    common n-gram has to earn it. A predicted output (a request's ``prediction``) is scored
    the same way (:meth:`see_prediction`) and tried before prompt lookup: it wins a tie.
    Any free drafter that reports a match length can be scored so (:meth:`see_free`). The costs are those at the current position
    (:meth:`EngineCosts.set_position`). The draft model has no such free signal; while unused its estimates
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
        prior_draft: starting acceptance estimate of the draft model.
        prior_lookup: starting estimate of a free proposal without a match length (bucket 0).
        prior_prediction: starting estimate of a predicted output without a match length
            (given by the user as what the answer repeats: high).
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
        #: per free drafter: acceptance by match length; its pending proposal; its current match length
        self.free_est: dict[str, MatchAcceptance] = {
            "lookup": MatchAcceptance(draft_max, prior_lookup, weight),
            "prediction": MatchAcceptance(draft_max, prior_prediction, weight),
        }
        self._pending: dict[str, tuple[int, tuple[int, ...], int]] = {}
        self.match_length: dict[str, int] = {}
        self.relax = relax
        self.margin = margin
        self.last: Choice | None = None
        self.catchup_horizon = catchup_horizon
        self.draft_pending = 0  #: committed tokens the draft cache lacks (see_draft_cache)
        self.generated = 0

    @property
    def lookup_est(self) -> MatchAcceptance:
        return self.free_est["lookup"]

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

    def choose(self, limit: int, lookup_match: int | None = None, position: int | None = None,
               prediction_match: int | None = None) -> Choice:
        """The drafter and draft length for the next round.

        Args:
            limit: most tokens that may be drafted (context, max_tokens).
            lookup_match: tokens prompt lookup proposes this round (None/0 = no proposal);
                its match length comes from :meth:`see_lookup`.
            position: tokens committed so far (prompt included): the costs are predicted there.
            prediction_match: tokens the predicted output proposes this round (only with a
                prediction); its match length comes from :meth:`see_prediction`.
        """
        c = self.costs
        if position is not None:
            c.set_position(position)
        g_cap = max(0, min(limit, self.draft_max, len(c.verify) - 1))
        options = []  # (rate, drafter, g, expected tokens); on a tie the first wins
        rate0 = None
        notes = []
        # free drafters (no model pass), a predicted output before prompt lookup
        for name, match in (("prediction", prediction_match), ("lookup", lookup_match)):
            if g_cap > 0 and match:
                acc = self.free_est[name].values(self.match_length.get(name, 0))
                g, r, r0 = best_draft_length(acc, c.verify, 0.0, min(g_cap, match), c.overhead)
                rate0 = r0
                options.append((r, name, g, expected_tokens(acc[:g])))
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
            m = f", match {self.match_length.get('lookup', 0)}" if drafter == "lookup" else ""
            choice = Choice(drafter, g, f"g={g} {drafter}: est {e:.2f} tok/pass, {r / rate0:.2f}x{m}")
        else:
            why = ", ".join(notes) if notes else ("no lookup match" if g_cap > 0 else "at limit")
            choice = Choice("none", 0, f"no speculation: best g=0 ({why})")
        self.last = choice
        return choice

    def catchup_seconds(self) -> tuple[int, float]:
        """(tokens, expected seconds) of the catch-up the draft model needs before drafting now."""
        n = self.draft_pending - 1 if self.draft_pending > STEADY_GAP else 0
        return n, n * (self.costs.draft_prefill_token_seconds or 0.0)

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

    def see_lookup(self, committed: Sequence[int], proposal: Sequence[int], match_length: int = 0) -> None:
        """Score prompt-lookup proposals against the committed tokens (:meth:`see_free` for ``"lookup"``)."""
        self.see_free("lookup", committed, proposal, match_length)

    def see_free(self, name: str, committed: Sequence[int], proposal: Sequence[int], match_length: int = 0) -> None:
        """Score a free drafter's proposals against the tokens the target committed; no model pass.

        Called by the engine every round with the committed tokens and this round's
        proposal of drafter ``name`` (possibly empty) and its match length (how many
        tokens its source agrees with the end of ``committed``; 0 = not reported). A
        proposal is kept until the committed tokens that follow it decide its fate (first
        mismatch, or every proposed token matched), then scored, in the bucket of its match
        length, as if it had been drafted: positions before the first mismatch accepted,
        the mismatch rejected. Proposals made while one is pending fall inside it and are
        skipped, so each committed token is scored once, as in rounds that draft back to
        back. Comparing with the committed tokens is the acceptance rule of a point-mass
        draft (exact in greedy and sampled modes).
        """
        est = self.free_est.setdefault(name, MatchAcceptance(self.draft_max, self.lookup_est.buckets[0].prior[0],
                                                             self.lookup_est.buckets[0].weight))
        pend = self._pending.get(name)
        if pend is not None:
            start, prop, m = pend
            new = committed[start : start + len(prop)]
            k = 0
            while k < len(new) and prop[k] == new[k]:
                k += 1
            if k < len(new):  # first mismatch at k
                est.update(m, k + 1, k)
                pend = None
            elif len(new) == len(prop):  # every proposed token matched
                est.update(m, len(prop), len(prop))
                pend = None
        if pend is None and proposal:
            pend = (len(committed), tuple(proposal), int(match_length))
        if pend is None:
            self._pending.pop(name, None)
        else:
            self._pending[name] = pend
        self.match_length[name] = int(match_length) if proposal else 0

    def see_prediction(self, committed: Sequence[int], proposal: Sequence[int], match_length: int = 0) -> None:
        """Score the predicted output's proposals like :meth:`see_lookup` (every round, used or not)."""
        self.see_free("prediction", committed, proposal, match_length)

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
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default=None,
                   help="llama.cpp flash attention: auto (default) = measure both, keep the faster")
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
        if getattr(args, "flash_attn", None) is not None:
            upd["flash_attn"] = args.flash_attn
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
    """The curve per measured context: ms, ratio to one token at that context, ms per token."""
    head = f"{'b':>3}" + "".join(f"  {'ms @' + str(c):>9}  {'ratio':>6}  {'ms/tok':>6}" for c in costs.contexts)
    lines = [title, head]
    for i in range(len(costs.seconds)):
        row = f"{i + 1:>3}"
        for curve in costs.curves:
            s = curve[i]
            row += f"  {s * 1e3:9.2f}  {s / curve[0]:6.2f}  {s * 1e3 / (i + 1):6.2f}"
        lines.append(row)
    return "\n".join(lines)


def describe_costs(costs: ModelCosts) -> str:
    """Flash attention chosen (and the scores), catch-up cost, calibration time, as one line."""
    parts = []
    if costs.flash_attn_scores:
        sc = ", ".join(f"{k} {v:.3f}" for k, v in sorted(costs.flash_attn_scores.items()))
        parts.append(f"flash attention {'on' if costs.flash_attn else 'off'} (measured faster: time of T(1) and "
                     f"T(max) at each context relative to the faster setting, mean: {sc})")
    elif costs.flash_attn is not None:
        parts.append(f"flash attention {'on' if costs.flash_attn else 'off'} (as asked)")
    if costs.prefill_token_seconds:
        parts.append(f"prefill (catch-up) {costs.prefill_token_seconds * 1e3:.2f} ms/token")
    if costs.calibration_seconds:
        parts.append(f"calibration took {costs.calibration_seconds:.1f} s")
    return "; ".join(parts)


def cli_calibrate(argv: list[str]) -> int:
    """``localspec calibrate``: measure (or show the cached) cost curve of the loaded models."""
    p = argparse.ArgumentParser(prog="localspec calibrate",
                                description="Measure the target's verify cost for b = 1..draft_max+1 tokens at a "
                                            "short and a long context, with flash attention off and on (keeping the "
                                            "faster), and the draft model's cost per token and per catch-up token on "
                                            "this machine; cached per model, settings, llama.cpp build and machine.")
    add_model_arguments(p)
    p.add_argument("--remeasure", action="store_true", help="measure again even if a cached measurement exists")
    p.add_argument("--repeats", type=int, default=5, help="repetitions per batch size (median)")
    p.add_argument("--long-context", type=int, default=LONG_CONTEXT,
                   help=f"the long context measured, tokens (default {LONG_CONTEXT}; capped by --n-ctx)")
    p.add_argument("--no-draft", action="store_true", help="measure the target only")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.long_context < 1:
        raise ConfigError("--repeats and --long-context must be >= 1")
    settings = settings_from_args(args)
    from .loader import load_model

    draft_max = settings.drafting.draft_max
    out: dict = {}
    target = load_model(settings.target)
    try:
        tc = get_costs(target, draft_max + 1, remeasure=args.remeasure, repeats=args.repeats,
                       contexts=calibration_contexts(target, draft_max + 1, args.long_context))
        out["target"] = tc
    finally:
        target.close()
    if not args.no_draft:
        draft = load_model(settings.draft)
        try:
            out["draft"] = get_costs(draft, 2, remeasure=args.remeasure, repeats=max(args.repeats, 5),
                                     contexts=calibration_contexts(draft, 2, args.long_context))
        finally:
            draft.close()
    if args.json:
        print(json.dumps({k: v.to_json() for k, v in out.items()}, indent=1))
        return 0
    from .machine import describe

    tc = out["target"]
    if tc.load > 0.5 * (os.cpu_count() or 1) and time.time() - tc.created < 120:
        print(f"warning: load average {tc.load:.2f} on {os.cpu_count()} CPUs while measuring; other processes "
              "distort these numbers (rerun with --remeasure on an idle machine)", file=sys.stderr)
    src = "measured now" if time.time() - tc.created < 120 else "cached " + time.strftime(
        "%Y-%m-%d %H:%M", time.localtime(tc.created))
    print(describe())
    print(format_curve(tc, f"target {settings.target.model} ({src}, {tc.key.get('n_threads')} threads, "
                           f"median of {tc.repeats}); cache: {cost_cache_path(tc.key)}"))
    print(describe_costs(tc))
    if "draft" in out:
        dc = out["draft"]
        c = dc.seconds[0] / tc.seconds[0]
        print(f"\ndraft {settings.draft.model}: {dc.seconds[0] * 1e3:.2f} ms/token = {c:.2f} of a target pass; "
              + describe_costs(dc))
        best = []
        for g in range(1, draft_max + 1):
            best.append((expected_tokens([1.0] * g) / (tc.t(g + 1) + g * dc.seconds[0]) * tc.seconds[0], g))
        bound, g = max(best)
        verdict = "can pay" if bound > 1.0 else "cannot pay on this machine: auto will not use it"
        print(f"upper bound with a perfect draft (every token accepted): {bound:.2f}x at g={g} -> draft model {verdict}")
    for ctx in tc.contexts:
        x, g = ceiling(tc.curve_at(ctx), draft_max)
        print(f"calibrated ceiling at {ctx} tokens of context (free drafts, every token accepted): {x:.2f}x at g={g}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_calibrate(sys.argv[1:]))
