"""What generation yields: token events, per-round statistics, and per-generation statistics.

Each statistic is declared once, in :class:`GenerationStats` or :class:`RoundStats`
(:mod:`localspec.core.figures`): its name, its place in each output, how it adds up.

Terms follow the speculative-decoding literature (Leviathan et al. 2022; Chen et al. 2023):
a *round* drafts up to ``draft_max`` tokens, runs one *verification pass* of the target
model over them, keeps the longest accepted prefix and then exactly one target token:
*resampled* at the first rejection, or a *bonus* token when every draft token was accepted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from localspec.core.figures import Metric, derived, figures, plain, stat, view


class TokenKind(str, enum.Enum):
    """How a committed token came to be (how each kind is drawn: :mod:`localspec.tui.kinds`)."""

    ACCEPTED = "accepted"  #: a draft token the target accepted
    RESAMPLED = "resampled"  #: the target's token at the first rejected draft position
    BONUS = "bonus"  #: the target's extra token after a fully accepted draft
    TARGET = "target"  #: a token of target-only decoding (nothing was drafted this round)


class DrafterId(str, enum.Enum):
    """Which drafter proposed a round's tokens: a :class:`RoundStats`' ``drafter``, a policy's
    choice, a draft's source (llama.cpp's ``common_speculative_type``).

    String-valued like :class:`TokenKind`: a member equals, hashes, prints and serialises
    (JSON, the CLI, the server) as its value, so ``DrafterId.LOOKUP == "lookup"`` and a
    dict keyed by members is read with the plain names. ``DrafterId(name)`` is the one
    name -> id map (ValueError for an unknown name).
    """

    DRAFT = "draft"  #: the draft model (:class:`~localspec.core.drafters.DraftModelDrafter`)
    LOOKUP = "lookup"  #: prompt lookup (:class:`~localspec.core.drafters.PromptLookupDrafter`)
    PREDICTION = "prediction"  #: a predicted output (:class:`~localspec.core.drafters.PredictionDrafter`)
    NONE = "none"  #: nothing drafted: target-only decoding this round

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__


class EndReason(str, enum.Enum):
    """Why a generation ended."""

    EOG = "eog"  #: the target produced an end-of-generation token
    STOP = "stop"  #: a stop string completed
    MAX_TOKENS = "max_tokens"  #: max_tokens tokens were produced
    CONTEXT = "context"  #: the context window is full
    INDENT = "indent"  #: a line indented less than ``min_indent`` began (llama.cpp's ``n_indent``); it is cut
    TIME_LIMIT = "time_limit"  #: a newline came after ``newline_time_limit`` (llama.cpp's ``t_max_predict_ms``)
    CANCELLED = "cancelled"  #: the consumer stopped the generation



@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One committed output token.

    Attributes:
        token_id: target vocabulary id.
        text: the text this token releases to the stream; empty while a UTF-8
            character is incomplete. The ``text`` of all events joined equals
            the generation's final text.
        kind: how the token came to be.
        round: 0-based index of the round that produced it.
        position: 0-based index among the generated tokens.
        logprob: the token's log-probability (natural log) under the target's raw logits at its
            position (before temperature and truncation); None unless the generation was asked
            for logprobs (``SpeculativeEngine.generate(..., logprobs=n)``).
        top_logprobs: the ``n`` most probable tokens there, ``((token id, logprob), ...)`` by
            descending logprob; None unless asked for.
    """

    token_id: int
    text: str
    kind: TokenKind
    round: int
    position: int
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] | None = None


@dataclass(frozen=True, slots=True)
class RoundStats:
    """Statistics of one speculative round, yielded after its tokens.

    Attributes:
        round: 0-based round index.
        drafter: which drafter proposed the round's tokens (``DrafterId.NONE`` when none).
        draft_tokens: the proposed token ids, length = ``drafted``.
        target_tokens: the target's token at each verified position (the token
            committed there: the draft token where accepted, else the resampled
            or bonus token), length = ``accepted + 1`` unless generation ended early.
        drafted: number of tokens proposed.
        accepted: number of draft tokens accepted (0 <= accepted <= drafted).
        committed: number of tokens this round added to the output.
        draft_seconds: wall time spent drafting, seconds.
        verify_seconds: wall time of the verification pass, seconds.
        draft_len_chosen: the draft length the policy asked for this round.
        reason: why that draft length was chosen (adaptive policy), or ``""``.
        catchup_tokens: committed tokens the draft model evaluated to bring its KV cache
            up to date before drafting (its prefill: first use, or after rounds it did not
            draft); 0 in the steady state, where it lacks only the newest one or two.
        catchup_seconds: wall time of that catch-up, seconds; not part of ``draft_seconds``.
        round_seconds: time of the whole round, seconds: from the end of the previous round (so
            releasing its text counts) to the end of this one, less the time the consumer held the
            generation between two of its events (a slow client is not the engine's cost); 0.0 when
            not measured. What is left after the passes (``verify_seconds``,
            a draft model's ``draft_seconds`` and ``catchup_seconds``) is the round's fixed cost
            (:meth:`localspec.core.policy.AdaptivePolicy.observe`).
        from_memory: the draft (prompt lookup's) was copied from the draft memory of earlier
            generations (:class:`~localspec.core.drafters.DraftMemory`), not from the context.
        pass_seconds: the part of ``round_seconds`` inside llama.cpp's passes (``llama_decode``: the
            verification pass, the draft model's drafting and catch-up), seconds
            (:meth:`~localspec.core.engine.SpeculativeEngine.pass_seconds`); the rest is the round's overhead
            (:attr:`GenerationStats.overhead_seconds`).
    """

    # line: the position in ``generate --json``'s round line (:func:`view`)
    round: int = stat(line=0)
    drafter: DrafterId = stat(line=1)
    draft_tokens: tuple[int, ...] = stat(line=5)
    target_tokens: tuple[int, ...] = stat(line=6)
    drafted: int = stat(line=2)
    accepted: int = stat(line=3)
    committed: int = stat(line=4)
    draft_seconds: float = stat(line=7)
    verify_seconds: float = stat(line=8)
    draft_len_chosen: int = stat(0, line=9)
    reason: str = stat("", line=10)
    catchup_tokens: int = 0
    catchup_seconds: float = 0.0
    round_seconds: float = stat(0.0, line=11)
    from_memory: bool = False
    pass_seconds: float = stat(0.0, line=12)


def drafter_tallies(rounds: Iterable[RoundStats]) -> dict[str, dict[str, int]]:
    """Per drafter, in order of first use: rounds, tokens drafted, draft tokens accepted.

    The one per-drafter count of the server (its ``speculation.drafters`` and the usage's
    prediction tokens) and the bench (rounds by drafter). Keys are the plain names
    (``"lookup"``); ``"none"`` counts the rounds that drafted nothing.
    """
    out: dict[str, dict[str, int]] = {}
    for r in rounds:
        d = out.setdefault(str(r.drafter), {"rounds": 0, "drafted": 0, "accepted": 0})
        d["rounds"] += 1
        d["drafted"] += r.drafted
        d["accepted"] += r.accepted
    return out


@dataclass(slots=True)
class GenerationStats:
    """Statistics of one generation: the one accumulator behind every figure shown, and the one
    declaration of each figure.

    The engine fills it round by round (:meth:`add_round`, :meth:`add_token`); the CLI's
    summary, ``--json``, the server's ``speculation`` object and ``/metrics``, ``localspec bench``
    and the TUI all read it. Each figure is declared here once, stored (:func:`stat`) or derived
    from the stored ones (:func:`derived`), with the views it is in: its name is its key in
    :meth:`as_dict` (in the order declared here), in the server's ``speculation``
    (:meth:`view`, ``speculation=`` its position there) and in the bench's runs and rows
    (``bench_run=``, ``bench_row=``); its ``metric`` is its ``/metrics`` series; ``summed``
    figures are added up by :meth:`add`.
    Adding a figure is declaring it here and filling it in the engine. Times in seconds.

    ``acceptance_rate`` is accepted / drafted and lies in [0, 1]; it is ``None``
    when nothing was drafted (shown as "n/a", never as 100%); so is every ratio whose
    denominator is 0. ``tokens_per_second`` is the decode rate: prefill (the target's prompt)
    and draft-model catch-up excluded.
    """

    prompt_tokens: int = stat(0, metric=Metric("localspec_prompt_tokens", "prompt tokens of finished generations"))
    #: prompt tokens reused from the KV cache (not prefilled)
    cached_prompt_tokens: int = stat(0, summed=True, metric=Metric(
        "localspec_prompt_tokens_cached", "prompt tokens reused from the KV cache (not prefilled), restored "
        "snapshots included"))

    @derived(json=False, metric=Metric("localspec_prompt_tokens_read", "prompt tokens the target read (prompt "
                                       "tokens less the cached ones)"))
    def prompt_tokens_read(self) -> int:
        """Prompt tokens the target prefilled: prompt tokens less the cached ones (>= 0)."""
        return max(0, self.prompt_tokens - self.cached_prompt_tokens)

    tokens: int = stat(0, summed=True, metric=Metric("localspec_tokens_predicted", "generated tokens"))
    rounds: int = stat(0, summed=True, speculation=2, bench_run=0, metric=Metric(
        "localspec_rounds", "speculative rounds (one target verification pass each)"))
    target_passes: int = stat(0, summed=True, speculation=3)
    drafted: int = stat(0, summed=True, speculation=0, bench_run=1, bench_row=1)
    accepted: int = stat(0, summed=True, speculation=1, bench_run=2)
    drafting_rounds: int = stat(0, summed=True)

    @derived(speculation=4, bench_row=0)
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, in [0, 1]."""
        return self.accepted / self.drafted if self.drafted else None

    @derived(speculation=5, bench_row=2)
    def mean_accepted_length(self) -> float | None:
        """Mean number of accepted draft tokens per round that drafted."""
        return self.accepted / self.drafting_rounds if self.drafting_rounds else None

    @derived(speculation=6)
    def tokens_per_target_pass(self) -> float | None:
        """Generated tokens per target pass (a verification pass, or a target-only step)."""
        return self.tokens / self.target_passes if self.target_passes else None

    @derived(speculation=7)
    def tokens_per_second(self) -> float:
        """Decode rate: generated tokens / :attr:`decode_seconds` (0.0 before any decoding)."""
        decode = self.decode_seconds
        return self.tokens / decode if decode > 0 else 0.0

    time_to_first_token: float | None = stat(None, speculation=8)
    prefill_seconds: float = stat(0.0, summed=True, speculation=9, metric=Metric(
        "localspec_prefill_seconds", "seconds prefilling prompts"))
    draft_seconds: float = stat(0.0, summed=True, metric=Metric("localspec_draft_seconds", "seconds drafting"))
    verify_seconds: float = stat(0.0, summed=True, metric=Metric(
        "localspec_verify_seconds", "seconds in target verification passes"))
    catchup_tokens: int = stat(0, summed=True)
    catchup_seconds: float = stat(0.0, summed=True)
    #: wall time of the rounds (:attr:`RoundStats.round_seconds` summed: the decode less the time the consumer
    #: held the generation between events and the release of the last round's text)
    round_seconds: float = stat(0.0, summed=True)
    #: the part of :attr:`round_seconds` inside llama.cpp's passes (:attr:`RoundStats.pass_seconds` summed)
    pass_seconds: float = stat(0.0, summed=True, metric=Metric(
        "localspec_pass_seconds", "seconds of the rounds inside llama.cpp's passes (verification, the draft "
        "model's drafting and catch-up)"))

    @derived(metric=Metric("localspec_round_overhead_seconds", "seconds of the rounds outside llama.cpp's passes "
                           "(logits copy, acceptance, drafters, policy, bookkeeping, streaming)"))
    def overhead_seconds(self) -> float:
        """The rounds' time outside llama.cpp's passes: :attr:`round_seconds` - :attr:`pass_seconds` (>= 0),
        seconds. What the engine's own Python costs (the logits' copy or argmax, the acceptance rule, the
        drafters and the policy, committing and releasing text, the statistics), where llama-server's round
        is C++."""
        return max(0.0, self.round_seconds - self.pass_seconds)

    @derived(speculation=12, bench_run=3, bench_row=3)
    def overhead_seconds_per_round(self) -> float | None:
        """:attr:`overhead_seconds` per round, seconds (None before a round)."""
        return self.overhead_seconds / self.rounds if self.rounds else None

    @derived(speculation=13, bench_run=4, bench_row=4)
    def overhead_seconds_per_drafted_token(self) -> float | None:
        """:attr:`overhead_seconds` per drafted token, seconds (None when nothing was drafted)."""
        return self.overhead_seconds / self.drafted if self.drafted else None

    @derived()
    def decode_seconds(self) -> float:
        """Wall time of decoding: elapsed minus prefill and draft-model catch-up, seconds."""
        return self.elapsed_seconds - self.prefill_seconds - self.catchup_seconds

    elapsed_seconds: float = stat(0.0, summed=True, speculation=10, metric=Metric(
        "localspec_request_seconds", "seconds per generation (queue excluded)",
        buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)))
    end_reason: EndReason | None = stat(None, speculation=11, parse=EndReason)
    kinds: dict[str, int] = stat(factory=dict, summed=True)  #: tokens given to the consumer, by TokenKind value

    def add_round(self, rs: RoundStats) -> None:
        """Count one finished round (its tokens are counted by :meth:`add_token`)."""
        self.rounds += 1
        self.target_passes += 1
        self.drafted += rs.drafted
        self.accepted += rs.accepted
        if rs.drafted:
            self.drafting_rounds += 1
        self.draft_seconds += rs.draft_seconds
        self.verify_seconds += rs.verify_seconds
        self.catchup_tokens += rs.catchup_tokens
        self.catchup_seconds += rs.catchup_seconds
        self.round_seconds += rs.round_seconds
        self.pass_seconds += rs.pass_seconds

    def add(self, other: "GenerationStats") -> None:
        """Add another generation's ``summed`` figures: totals over several generations (a
        benchmark's repetitions); the others are left as they are."""
        for f in figures(type(self)):
            if not f.summed:
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, dict):
                for k, v in theirs.items():
                    mine[k] = mine.get(k, 0) + v
            else:
                setattr(self, f.name, mine + theirs)

    def add_token(self, kind: TokenKind | str) -> None:
        """Count one token given to the consumer."""
        k = kind.value if isinstance(kind, TokenKind) else str(kind)
        self.tokens += 1
        self.kinds[k] = self.kinds.get(k, 0) + 1

    def as_dict(self) -> dict:
        """Every figure declared with ``json`` (all but ``prompt_tokens_read``), in declaration order, as
        :func:`plain` values: ``generate --json``'s stats line and what the bench and the TUI save."""
        return {f.name: plain(getattr(self, f.name)) for f in figures(type(self)) if f.json}

    def view(self, name: str) -> dict:
        """The figures of the named view ``name`` (``speculation``, ``bench_run``, ``bench_row``), in its order
        (:func:`view`)."""
        return view(self, name)

    @classmethod
    def from_dict(cls, d: dict) -> "GenerationStats":
        """The stored figures back from :meth:`as_dict` (missing ones keep their defaults; a value
        ``parse`` refuses, such as an unknown end reason, is None)."""
        s = cls()
        for f in figures(cls):
            if f.derived or f.name not in d:
                continue
            v = d[f.name]
            if f.parse is not None and v is not None:
                try:
                    v = f.parse(v)
                except ValueError:
                    v = None
            setattr(s, f.name, dict(v or {}) if isinstance(getattr(s, f.name), dict) else v)
        return s
