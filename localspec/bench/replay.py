"""Replaying a draft policy on a recorded acceptance trace and a recorded cost curve (no model runs).

Which drafted tokens the target accepts is a property of the models and the text, not of the
CPU: given a greedy generation's prompt, its predicted output (if any) and its answer, every
free drafter (prompt lookup, a prediction) proposes at each position exactly what it would
propose in a real run, and the answer says how many of those tokens the target accepts. The
CPU only sets what each round costs: ``T(b)`` of the verification pass at that position (the
cost curve of :class:`localspec.backend.calibration.ModelCosts`, measured by ``localspec
calibrate`` on that CPU) plus the round's fixed cost (sampling, bookkeeping, the server). So a
policy can be checked against CPUs we do not have (issue 31, item 4): :func:`replay` runs the
real policy object through the real drafters round by round and adds up the curve's time.

Besides mode auto (:class:`~localspec.core.policy.AdaptivePolicy`) the comparisons are
:func:`best_fixed` (the best fixed draft length for that trace and curve, chosen in hindsight),
:func:`oracle_seconds` (each round's length chosen in hindsight, a lower bound for any policy
that drafts from these drafters), :class:`NgramModRule` (llama.cpp's ``ngram-mod`` defaults:
draft 64 tokens once a 24-token match is found) and :class:`SuffixRule` (SuffixDecoding,
Oliaro et al. 2024: the speculation length from the match length).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from localspec.config import AUTO_DRAFT_MAX, DraftParams
from localspec.core.costmodel import EngineCosts, MeasuredCosts, verify_cost
from localspec.core.drafters import Draft
from localspec.core.drafters.lookup import PromptLookupDrafter
from localspec.core.drafters.prediction import PredictionDrafter
from localspec.core.events import DrafterId, RoundStats
from localspec.core.policy import AdaptivePolicy, Choice, DraftPolicy, FixedPolicy, RoundState


@dataclass(frozen=True)
class Trace:
    """A greedy generation to replay.

    Attributes:
        name: what it is (a task name).
        prompt: the prompt's token ids.
        answer: the answer's token ids, as generated (the end-of-generation token excluded).
        prediction: the request's predicted output (token ids), or None.
        eog: the end-of-generation token that ended it (committed by the last round), or None.
    """

    name: str
    prompt: tuple[int, ...]
    answer: tuple[int, ...]
    prediction: tuple[int, ...] | None = None
    eog: int | None = None

    @property
    def output(self) -> tuple[int, ...]:
        """Every token the rounds commit: the answer, then its end-of-generation token if any."""
        return self.answer + ((self.eog,) if self.eog is not None else ())

    def asked_again(self) -> "Trace":
        """The warm regime of issue 44: the same request sent again with the first answer remembered
        (localspec's draft memory, llama-server's ngram pool), modelled as a prediction equal to the
        answer: a copy both a policy and :class:`NgramModRule` can follow from the first token.

        Returns:
            A :class:`Trace` with the same prompt, answer and end token, and ``prediction = answer``.
        """
        return Trace(self.name, self.prompt, self.answer, tuple(self.answer), self.eog)


@dataclass
class ReplayResult:
    """What a replay cost.

    Attributes:
        seconds: decode time on the curve (verification passes plus each round's fixed cost), seconds.
        rounds: rounds (target passes).
        tokens: tokens committed.
        drafted: draft tokens verified; accepted: of those, accepted.
        lengths: each round's draft length.
    """

    seconds: float = 0.0
    rounds: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    lengths: list[int] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class _Drafters:
    """The free drafters of one replayed generation, as :class:`~localspec.core.engine.Generation` has them."""

    def __init__(self, trace: Trace, use_prediction: bool) -> None:
        self.lookup = PromptLookupDrafter()
        self.prediction = (PredictionDrafter(trace.prediction, len(trace.prompt))
                           if use_prediction and trace.prediction else None)

    def proposals(self, policy: DraftPolicy, committed: Sequence[int], limit: int,
                  drafting: DraftParams) -> dict[DrafterId, Draft]:
        if limit <= 0:
            return {}
        by_name = {d.name: d for d in (self.prediction, self.lookup) if d is not None}
        return {name: by_name[name].draft(committed, min(drafting.cap, limit), drafting)
                for name in policy.free_drafters if name in by_name}


    def draft(self, choice: Choice, proposals: dict[DrafterId, Draft], committed: Sequence[int], limit: int,
              drafting: DraftParams) -> tuple[int, ...]:
        """The chosen drafter's draft: its proposal cut to the chosen length, or drafted now (a fixed policy)."""
        g = max(0, min(choice.draft_len, limit))
        if g == 0 or choice.drafter == DrafterId.NONE:
            return ()
        draft = proposals.get(choice.drafter)
        if draft is None:
            drafter = {DrafterId.LOOKUP: self.lookup, DrafterId.PREDICTION: self.prediction}.get(choice.drafter)
            if drafter is None:
                raise ValueError(f"cannot replay drafter {choice.drafter}: only free drafters are replayed")
            draft = drafter.draft(committed, g, drafting)
        return tuple(draft.tokens[:g])


def round_seconds(curve: MeasuredCosts, position: int, b: int, overhead_seconds: float) -> float:
    """Seconds of a round whose verification pass covers ``b`` tokens after ``position`` cached ones."""
    return verify_cost(curve.curve_at(position), b) + overhead_seconds


def replay(trace: Trace, policy: DraftPolicy, curve: MeasuredCosts, overhead_seconds: float = 0.0,
           drafting: DraftParams | None = None, use_prediction: bool = True) -> ReplayResult:
    """Run ``policy`` round by round over ``trace``, its costs taken from ``curve``.

    Each round asks the policy to choose (with the free drafters' proposals, as a real round
    does), drafts that many tokens of the chosen proposal (a draft model is not replayed: its
    proposals depend on its own model), accepts the longest prefix that agrees with the answer,
    commits it and one token of the target, and tells the policy the round's statistics
    (verification seconds from the curve at that position; ``overhead_seconds`` as the round's
    fixed cost).

    Args:
        trace: the generation to replay.
        policy: a fresh policy (it learns as it goes).
        curve: the CPU's measured costs; ``curve.curve_at(position)[b-1]`` = seconds of a b-token pass.
        overhead_seconds: fixed cost of every round (seconds), beside its verification pass.
        drafting: n-gram sizes and the cap (default: mode auto's).
        use_prediction: follow ``trace.prediction`` (a request with ``prediction``).

    Returns:
        the :class:`ReplayResult`.
    """
    drafting = drafting or DraftParams(mode="auto", draft_max=AUTO_DRAFT_MAX)
    out, n_prompt = trace.output, len(trace.prompt)
    committed = list(trace.prompt)
    drafters, res = _Drafters(trace, use_prediction), ReplayResult()
    while len(committed) - n_prompt < len(out):
        pos = len(committed) - n_prompt
        limit = len(out) - pos - 1
        proposals = drafters.proposals(policy, committed, limit, drafting)
        choice = policy.choose(RoundState(committed, limit, proposals, pos, 0))
        tokens = drafters.draft(choice, proposals, committed, limit, drafting)
        k = _agreement(tokens, out[pos:])
        seconds = round_seconds(curve, len(committed), len(tokens) + 1, 0.0)
        committed.extend(out[pos : pos + k + 1])
        res.seconds += seconds + overhead_seconds
        res.rounds, res.tokens = res.rounds + 1, res.tokens + k + 1
        res.drafted, res.accepted = res.drafted + len(tokens), res.accepted + k
        res.lengths.append(len(tokens))
        policy.observe(RoundStats(
            round=res.rounds - 1, drafter=choice.drafter if tokens else DrafterId.NONE, draft_tokens=tokens,
            target_tokens=tuple(out[pos : pos + k + 1]), drafted=len(tokens), accepted=k, committed=k + 1,
            draft_seconds=0.0, verify_seconds=seconds, draft_len_chosen=choice.draft_len, reason=choice.reason,
            round_seconds=seconds + overhead_seconds))
    return res


def target_only_seconds(trace: Trace, curve: MeasuredCosts, overhead_seconds: float = 0.0) -> float:
    """Seconds of target-only decoding (mode none) of ``trace`` priced on ``curve``: a one-token pass at
    every position of its output, each with ``overhead_seconds`` of fixed cost."""
    n = len(trace.prompt)
    return sum(round_seconds(curve, n + i, 1, overhead_seconds) for i in range(len(trace.output)))


def _agreement(draft: Sequence[int], truth: Sequence[int]) -> int:
    """Length of the common prefix of ``draft`` and ``truth``."""
    k = 0
    while k < len(draft) and k < len(truth) and draft[k] == truth[k]:
        k += 1
    return k


def auto_policy(curve: MeasuredCosts, draft_max: int = AUTO_DRAFT_MAX) -> AdaptivePolicy:
    """Mode auto's policy (no draft model) with costs calibrated from ``curve``, as the engine makes it."""
    costs = EngineCosts(verify=list(curve.curve_at(None)[: draft_max + 1]), draft_token=None, target=curve, draft=None)
    return AdaptivePolicy(costs, draft_max, has_draft=False, first_token_undrafted=True)  # as the engine's


def fixed_policy(g: int) -> FixedPolicy:
    """Mode lookup with ``draft_max`` g (a prediction first while it has a proposal)."""
    return FixedPolicy(DrafterId.LOOKUP, g)


def best_fixed(trace: Trace, curve: MeasuredCosts, overhead_seconds: float = 0.0, use_prediction: bool = True,
               lengths: Sequence[int] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)) -> tuple[int, ReplayResult]:
    """The fixed draft length with the least replayed time (chosen in hindsight) and its result."""
    runs = [(g, replay(trace, fixed_policy(g), curve, overhead_seconds, _fixed_drafting(g), use_prediction))
            for g in lengths]
    return min(runs, key=lambda r: r[1].seconds)


def _fixed_drafting(g: int) -> DraftParams:
    return DraftParams(mode="lookup", draft_max=g)


class _RulePolicy:
    """A rule over the free drafters' proposals (no learning): ``length(proposal)`` tokens, 0 = none."""

    free_drafters = (DrafterId.PREDICTION, DrafterId.LOOKUP)

    def __init__(self, length: Callable[[Draft], int], name: str) -> None:
        self.length, self.name = length, name

    def choose(self, state: RoundState) -> Choice:
        for drafter in self.free_drafters:
            p = state.proposals.get(drafter)
            g = min(self.length(p), state.limit, len(p.tokens)) if p is not None and p.tokens else 0
            if g > 0:
                return Choice(drafter, g, self.name)
        return Choice(DrafterId.NONE, 0, self.name)

    def observe(self, rs: RoundStats) -> None:
        """Nothing to learn."""


class NgramModRule(_RulePolicy):
    """llama.cpp's ``--spec-type ngram-mod`` with its defaults, as a rule: once the last 24 tokens
    match earlier text (a match length of at least 24), draft 64 tokens of what followed (48 at
    least, else nothing); a prediction is treated like any other matched text."""

    def __init__(self, match: int = 24, draft: int = 64, draft_min: int = 48) -> None:
        super().__init__(lambda p: draft if p.match_length >= match and len(p.tokens) >= draft_min else 0,
                         f"ngram-mod (match {match}, draft {draft_min}-{draft})")


class SuffixRule(_RulePolicy):
    """SuffixDecoding's rule (Oliaro et al. 2024, section 4): speculate ``alpha`` x the match length
    tokens (at most ``cap``, mode auto's cap), nothing without a match."""

    def __init__(self, alpha: float = 1.0, cap: int = AUTO_DRAFT_MAX) -> None:
        super().__init__(lambda p: min(cap, int(alpha * p.match_length)), f"suffix (alpha {alpha})")


def oracle_seconds(trace: Trace, curve: MeasuredCosts, overhead_seconds: float = 0.0, use_prediction: bool = True,
                   draft_max: int = AUTO_DRAFT_MAX) -> float:
    """Least replayed time over every per-round choice of drafter and length (dynamic programming over
    positions; hindsight, for information: no policy can know the answer)."""
    out, n_prompt = trace.output, len(trace.prompt)
    drafters = _Drafters(trace, use_prediction)
    drafting = DraftParams(mode="auto", draft_max=draft_max)
    full = list(trace.prompt) + list(out)
    n = len(out)
    # gains[p]: per position, how far each drafter's proposal there agrees with the answer (in order of p:
    # a prediction follows the committed tokens)
    gains: list[list[int]] = []
    for p in range(n):
        committed = full[: n_prompt + p]
        props = _all_proposals(drafters, committed, n - p - 1, drafting)
        gains.append([_agreement(d.tokens, out[p:]) for d in props.values()])
    best = [0.0] * (n + 1)
    for p in range(n - 1, -1, -1):
        pos = n_prompt + p
        cand = [round_seconds(curve, pos, 1, overhead_seconds) + best[p + 1]]
        for k in gains[p]:
            for g in range(1, min(k, n - p - 1) + 1):
                cand.append(round_seconds(curve, pos, g + 1, overhead_seconds) + best[p + g + 1])
        best[p] = min(cand)
    return best[0]


class _EveryFreeDrafter:
    free_drafters = (DrafterId.PREDICTION, DrafterId.LOOKUP)


def _all_proposals(drafters: _Drafters, committed: Sequence[int], limit: int,
                   drafting: DraftParams) -> dict[DrafterId, Draft]:
    return drafters.proposals(_EveryFreeDrafter(), committed, limit, drafting)  # type: ignore[arg-type]
