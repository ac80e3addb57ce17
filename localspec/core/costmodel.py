"""The cost model of speculative decoding: pure functions of acceptance and costs.

Why these hold together: the expected-rate formulas, the acceptance estimators they read and the costs
they weigh (measured curves corrected by observed times) are one model of a round's tokens per second;
the policy that chooses by it is :mod:`localspec.core.policy`.

The textbook speedup of speculative decoding (Leviathan et al. 2022, section 3.4, eq. 1
and Theorem 3.8) assumes a verification pass of g + 1 tokens costs one target pass and
a draft token costs a fixed fraction c of one. On a small CPU neither holds: a verify
pass of 5 tokens costs ~3.2 single-token passes and the 0.5B draft costs ~0.7 of the
1.5B target (``shared/models.md``). So these functions take the measured costs
(:mod:`localspec.backend.calibration`): they compute the expected tokens per round from
per-position acceptance estimates (the generalisation of (1 - a^(g+1)) / (1 - a)) and
the expected tokens per second of each draft length g given the measured verify cost
T_verify(g + 1) and draft cost g * T_draft, and take the argmax over g, 0 included.
The acceptance estimators (:class:`EWAcceptance`, :class:`MatchAcceptance`) and the
costs the policy reads every round (:class:`EngineCosts`: the measured curves at the current
position, corrected by observed times) live here too; the adaptive policy that uses all of it
is :class:`localspec.core.policy.AdaptivePolicy`.

Nothing here loads a model, reads a file or imports another localspec module: the measurements
are made, cached and loaded by :mod:`localspec.backend.calibration`, and reach an engine through
the loader (:class:`CostSource`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


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
    total = 1.0
    for total in expected_tokens_by_length(accept):
        pass
    return total


def expected_tokens_by_length(accept: Sequence[float]):
    """:func:`expected_tokens` of ``accept[:g]`` for g = 1, 2, ..., len(accept), in one pass (a generator)."""
    total, run = 1.0, 1.0
    for a in accept:
        run *= min(max(float(a), 0.0), 1.0)
        total += run
        yield total


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


#: batch sizes calibration measures densely (every b up to here): small passes are cheap to time, and
#: a kernel threshold (a jump between 7 and 8 tokens on some CPUs) is seen where it is
DENSE_POINTS = 8


def calibration_points(max_batch: int, dense: int = DENSE_POINTS) -> list[int]:
    """The batch sizes calibration times to cover a verification pass of 1..``max_batch`` tokens.

    Every b in 1..``dense``, then 1.5 and 2 times it (12, 16), then doubling (32, 64, 128, ...)
    below ``max_batch``, and ``max_batch`` itself. The powers of two are kept even next to
    ``max_batch``: llama.cpp's CPU kernels work in tiles, and a pass over 64 tokens can cost less than
    the line from 32 to 65 says, more so at a long context (the 2-vCPU AMX Xeon, family 6 model 167,
    2026-12-06, the 1.5B: T(64) 629 ms and T(65) 698 ms at 16 tokens cached; 938 and 1,164 ms at 2,048;
    1,030 and 1,296 ms at 3,072), which decides whether a sure copy drafts 63 tokens or 31. The curve
    between the points is :func:`interpolate_curve`, and the engine refines each length it uses from
    real rounds (:class:`EngineCosts`). ``max_batch`` = 65: 13 points whose token counts sum to 225,
    against 2,145 for every length.

    Returns:
        ascending, distinct, within 1..max_batch; ``[]`` for ``max_batch`` < 1.
    """
    if max_batch < 1:
        return []
    pts = set(range(1, min(dense, max_batch) + 1))
    sparse = [dense + dense // 2, 2 * dense]
    while sparse[-1] < max_batch:
        sparse.append(2 * sparse[-1])
    pts.update(b for b in sparse if b < max_batch)
    pts.add(max_batch)
    return sorted(pts)


def context_points(max_batch: int, dense: int = DENSE_POINTS) -> list[int]:
    """The batch sizes calibration times at its longer contexts: 1, ``dense`` and its doublings below
    ``max_batch``, and ``max_batch`` (``max_batch`` = 65: 1, 8, 16, 32, 64, 65).

    What a longer context adds to a pass over b tokens is attention over the cached positions; its
    cost is not linear in b on every CPU (the tiles of :func:`calibration_points`: at 3,072 cached the
    AMX Xeon's T(64) was below its T(48)), so the long passes, the ones a sure copy drafts, are timed
    there rather than inferred from the short context; the longer context's curve is the short one plus
    the measured difference, interpolated linearly between these points (:func:`shifted_curve`).

    Returns:
        ascending, distinct, a subset of :func:`calibration_points`; ``[]`` for ``max_batch`` < 1.
    """
    pts = calibration_points(max_batch, dense)
    keep, b = {1, max_batch}, dense
    while b < max_batch:
        keep.add(b)
        b *= 2
    return [b for b in pts if b in keep]


def monotone_fit(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence nearest ``values`` in least squares (isotonic regression,
    pool-adjacent-violators; Barlow et al. 1972, *Statistical Inference under Order Restrictions*).

    A pass over more tokens never costs less, so a measured median below an earlier one is noise
    on one side or the other: both are pulled to their mean, instead of lifting every later point
    to one high outlier.

    Returns:
        a list as long as ``values``, non-decreasing.
    """
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks[-1]
            blocks[-1] = [(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2]
    out: list[float] = []
    for mean, n in blocks:
        out.extend([mean] * int(n))
    return out


def _line_through(xs: Sequence[int], ys: Sequence[float], n: int) -> list[float]:
    """``out[b-1]`` for b = 1..n: ys joined linearly between xs; below xs[0] the first value;
    beyond xs[-1] the slope of the last two points (never down)."""
    out = []
    for b in range(1, n + 1):
        if b <= xs[0]:
            out.append(ys[0])
        elif b >= xs[-1]:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) >= 2 else 0.0
            out.append(ys[-1] + max(slope, 0.0) * (b - xs[-1]))
        else:
            j = next(k for k in range(1, len(xs)) if b <= xs[k])
            f = (b - xs[j - 1]) / (xs[j] - xs[j - 1])
            out.append(ys[j - 1] + f * (ys[j] - ys[j - 1]))
    return out


def _check_points(points: Sequence[int], seconds: Sequence[float]) -> list[int]:
    if not points or len(points) != len(seconds):
        raise ValueError(f"{len(points)} points and {len(seconds)} times: need the same number, at least one")
    xs = [int(p) for p in points]
    if any(b <= a for a, b in zip(xs, xs[1:])) or xs[0] < 1:
        raise ValueError(f"points must be ascending and >= 1: {xs}")
    return xs


def interpolate_curve(points: Sequence[int], seconds: Sequence[float], max_batch: int) -> list[float]:
    """A dense verify-cost curve ``out[b-1]``, b = 1..max_batch, from times measured at some b.

    The measured medians are first fitted non-decreasing in b (:func:`monotone_fit`: a pass
    over more tokens never costs less), then joined linearly between measured points (a CPU's
    matrix kernels cost about linearly in the batch between its thresholds, and a threshold
    inside the dense part is kept as measured). Beyond the last point the line continues
    with the slope of the last two points (never down); below the first, the first value.

    Args:
        points: measured batch sizes, ascending, >= 1.
        seconds: median seconds of a pass over ``points[i]`` tokens, same length.
        max_batch: length of the curve returned.

    Raises:
        ValueError: no points, lengths differ, or points not ascending.
    """
    xs = _check_points(points, seconds)
    return _line_through(xs, monotone_fit(seconds), max_batch)


def shifted_curve(base: Sequence[float], points: Sequence[int], seconds: Sequence[float]) -> list[float]:
    """The curve at a longer context from the curve ``base`` at a shorter one and a few passes
    timed at the longer one (:func:`context_points`).

    ``out[b-1] = base[b-1] + d(b)``, where d is the measured difference ``seconds[i] -
    base[points[i]-1]`` (never below 0: more cached tokens never make a pass cheaper; fitted
    non-decreasing in b, :func:`monotone_fit`: each token of the pass attends to every cached
    one), joined linearly between the points. The result is made non-decreasing in b.

    Args:
        base: ``base[b-1]`` = seconds of a pass over b tokens at the shorter context.
        points: batch sizes timed at the longer context, ascending, within 1..len(base).
        seconds: their median seconds, same length.

    Raises:
        ValueError: no points, lengths differ, points not ascending or beyond ``base``.
    """
    xs = _check_points(points, seconds)
    if xs[-1] > len(base):
        raise ValueError(f"point {xs[-1]} beyond the curve of {len(base)}")
    diff = monotone_fit([max(0.0, float(s) - float(base[b - 1])) for b, s in zip(xs, seconds)])
    d = _line_through(xs, diff, len(base))
    out: list[float] = []
    for b0, db in zip(base, d):
        out.append(max(float(b0) + db, out[-1] if out else 0.0))
    return out


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
    # round_rate(g, ...) for every g in one pass
    for g, total in enumerate(expected_tokens_by_length(list(accept)[:g_max]), start=1):
        r = total / (verify_cost(verify_seconds, g + 1) + g * draft_token_seconds + overhead_seconds)
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
MATCH_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)


#: tokens of agreement that a prompt-lookup match reaches by chance in ordinary text: a
#: one- or two-token n-gram ("the", ", and") recurs everywhere. Measured on the target's
#: greedy answers to the five bench tasks (Qwen2.5-Coder 1.5B, 192 tokens each, 633
#: proposals: :func:`~localspec.core.drafters.lookup.find_match` replayed at every position of each answer):
#: the first proposed token was right for 13 % of matches of length 1, 43 % of length 2-3,
#: 81 % of 4-7, 95 % of 8-15 and 97-99 % of longer ones; Laplace's rule on the raw length
#: (67 % and 75 % for lengths 1 and 2) trusted short matches far too much.
LOOKUP_CHANCE_TOKENS = 2


def succession_prior(match_length: int, n: int, chance: int = 0) -> list[float]:
    """Prior conditional acceptance of draft positions 0..n-1 after a match of ``match_length`` tokens.

    Laplace's rule of succession on the run of agreement: the source of a free draft
    (an earlier place in the prompt, a prediction) agreed with the text over the last m
    tokens, so the next token agrees with probability (m + 1) / (m + 2); each accepted
    token lengthens the run, so position i gets (m + i + 1) / (m + i + 2). A long match is
    strong evidence from the first round, as in SuffixDecoding (Oliaro et al. 2024,
    section 4), which sets its speculation length from the match length.

    ``chance`` tokens of the run are not counted as evidence (m - chance is used, and a
    position whose run is not positive gets 0): the agreement any match reaches by chance
    (:data:`LOOKUP_CHANCE_TOKENS` for prompt lookup; 0 for a predicted output, which the
    user gave as what the answer repeats).
    """
    m = max(int(match_length), 0) - max(int(chance), 0)
    return [max(m + i + 1, 0) / max(m + i + 2, 1) for i in range(n)]


class MatchAcceptance:
    """Acceptance estimates of a free drafter (prompt lookup, a prediction), by match length.

    A free drafter copies what followed a place whose earlier context agrees with the
    end of the text over ``match_length`` tokens. Proposals are grouped by that length
    into buckets (:data:`MATCH_BUCKETS`: 0, 1, 2-3, 4-7, ..., 128-255, 256+; the long ones let a
    copy that agrees over hundreds of tokens start with a long draft); each bucket has its own
    per-position :class:`EWAcceptance` starting from :func:`succession_prior` of its
    lower edge, so the start of a copy (a long match) is trusted at once and a short,
    common n-gram is not, and each bucket then follows what the text does. Bucket 0
    (a drafter that reports no match length) starts from ``prior`` at every position, and
    no bucket starts below ``floor`` (a predicted output, given by the user as what the
    answer repeats, keeps its high prior after a short re-synchronised match).

    Args:
        n: positions tracked (draft_max).
        prior: starting estimate of bucket 0.
        weight: weight of a new observation (0 < weight <= 1).
        chance: tokens of agreement reached by chance, not counted (:func:`succession_prior`).
        floor: no bucket starts below this (a predicted output passes its ``prior``).
    """

    def __init__(self, n: int, prior: float, weight: float, chance: int = 0, floor: float = 0.0) -> None:
        self.buckets = [EWAcceptance(n, prior if edge == 0 else [max(floor, p) for p in succession_prior(edge, n, chance)],
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


# the costs an engine's adaptive policy uses
# ---------------------------------------------------------------------------------------
class MeasuredCosts(Protocol):
    """One model's measured decode costs, as :class:`EngineCosts` reads them
    (:class:`localspec.backend.calibration.ModelCosts` measures, caches and loads them)."""

    #: ``curves[i][b-1]``: seconds of a decode of b tokens at the i-th measured context length
    curves: list[list[float]]
    #: seconds per token of a batched prefill (a catch-up), None if not measured
    prefill_token_seconds: float | None

    @property
    def disturbed(self) -> bool:
        """Measured while other processes were busy on the CPUs."""
        ...

    def curve_at(self, position: int | None) -> list[float]:
        """``curve[b-1]`` = predicted seconds of a decode of b tokens with ``position`` tokens cached."""
        ...


@dataclass
class EngineCosts:
    """The costs an engine's adaptive policy uses, shared by its generations.

    ``verify[b-1]`` is the predicted seconds of a verification pass over b tokens at the
    current position (:meth:`set_position`, the number of tokens in the target's cache):
    the calibrated curves interpolated by position (:meth:`MeasuredCosts.curve_at`) times a
    correction learned from observed verification times. A batch size observed at least
    ``min_obs`` times uses its own exponentially weighted ratio observed / calibrated;
    the others use the exponentially weighted ratio over all batch sizes (``scale``), so a
    machine that got busier or quieter since calibration moves the whole curve.
    ``draft_token`` (seconds per draft-model token at the current position) likewise
    follows the drafting rounds. ``draft_prefill_token_seconds`` is the draft model's
    calibrated catch-up (batched prefill) cost per token, None without a draft model.

    ``overhead`` is the calibrated fixed cost of a round beside its model passes (choosing and
    proposing, the acceptance bookkeeping, releasing text), seconds: where each generation's policy
    starts; it learns its own from its rounds (:meth:`localspec.core.policy.AdaptivePolicy.observe_overhead`),
    so one client's costly requests do not change another's drafting. The rates of :func:`round_rate`
    add it to every round, so where it is a large share of a one-token pass long free drafts pay sooner
    (issue 31: on a 135M model a round's Python costs about as much as the pass).

    ``target`` and ``draft`` are the measurements (:class:`MeasuredCosts`; made by
    :mod:`localspec.backend.calibration`, which also loads and saves them).
    """

    verify: list[float]
    draft_token: float | None
    target: MeasuredCosts
    draft: MeasuredCosts | None
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
        self._memo: dict = {}  # per role: (position, measurement, its curve there) (:meth:`_base`)
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

    @property
    def disturbed(self) -> bool:
        """Whether the target's or the draft model's calibration was :attr:`MeasuredCosts.disturbed`."""
        return any(c is not None and c.disturbed for c in (self.target, self.draft))

    def covers(self, draft_max: int, with_draft: bool) -> bool:
        """Whether these costs serve drafts up to ``draft_max`` tokens (and a draft model, ``with_draft``)."""
        return len(self.verify) >= draft_max + 1 and (self.draft is not None or not with_draft)

    def _w(self, n: int) -> float:
        # the first observations are averaged (weight 1/n), later ones weighted exponentially:
        # a calibration taken on a busy machine is corrected within a few rounds
        return max(self.weight, 1.0 / n)

    def _base(self, position: int | None) -> list[float]:
        """The calibrated curve at ``position``, read only: kept for the round's next calls at the same position."""
        memo = self._memo.get("target")
        if memo is None or memo[0] != position or memo[1] is not self.target:
            curve = self.target.curve_at(position)
            short = len(curve) < self._len or len(self.target.curves) == 1
            memo = self._memo["target"] = (position, self.target, list(self._flat) if short else curve[: self._len])
        return memo[2]

    def _draft_base(self, position: int | None) -> float | None:
        if self._draft_flat is None or self.draft is None or len(self.draft.curves) == 1:
            return self._draft_flat  # None without a draft model
        memo = self._memo.get("draft")
        if memo is None or memo[0] != position or memo[1] is not self.draft:
            memo = self._memo["draft"] = (position, self.draft, self.draft.curve_at(position)[0])
        return memo[2]

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


class CostSource(Protocol):
    """Where an engine's costs come from: this machine's cost cache and its calibration
    (:class:`localspec.app.loader.MachineCosts`, over :mod:`localspec.backend.calibration`). The engine
    asks it; it never reads the cache or measures itself."""

    def cached(self, draft_max: int) -> EngineCosts | None:
        """Costs covering drafts up to ``draft_max`` tokens from the cache alone (no measurement);
        None when this machine has not measured them yet."""
        ...

    def measure(self, draft_max: int, existing: EngineCosts | None = None, remeasure: bool = False,
                progress=None) -> EngineCosts:
        """``existing`` while it covers ``draft_max`` (unless ``remeasure``), else the cached costs, else
        measured now (``progress(what, done, total)`` follows it; seconds of a few passes to a minute)."""
        ...
