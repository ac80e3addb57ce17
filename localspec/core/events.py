"""What generation yields: token events, per-round statistics, and per-generation statistics.

Terms follow the speculative-decoding literature (Leviathan et al. 2022; Chen et al. 2023):
a *round* drafts up to ``draft_max`` tokens, runs one *verification pass* of the target
model over them, keeps the longest accepted prefix and then exactly one target token:
*resampled* at the first rejection, or a *bonus* token when every draft token was accepted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable


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
    """

    round: int
    drafter: DrafterId
    draft_tokens: tuple[int, ...]
    target_tokens: tuple[int, ...]
    drafted: int
    accepted: int
    committed: int
    draft_seconds: float
    verify_seconds: float
    draft_len_chosen: int = 0
    reason: str = ""
    catchup_tokens: int = 0
    catchup_seconds: float = 0.0
    round_seconds: float = 0.0
    from_memory: bool = False


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


class SpeculationRates:
    """The ratios every statistics record derives from its counters.

    Needs ``accepted``, ``drafted``, ``drafting_rounds``, ``tokens`` and ``target_passes``.
    Each ratio is ``None`` when its denominator is 0 (shown as "n/a", never as 100%).
    """

    __slots__ = ()

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, in [0, 1]."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Mean number of accepted draft tokens per round that drafted."""
        return self.accepted / self.drafting_rounds if self.drafting_rounds else None

    @property
    def tokens_per_target_pass(self) -> float | None:
        return self.tokens / self.target_passes if self.target_passes else None


@dataclass(slots=True)
class GenerationStats(SpeculationRates):
    """Statistics of one generation: the one accumulator behind every figure shown.

    The engine fills it round by round (:meth:`add_round`, :meth:`add_token`); the CLI's
    summary, ``--json``, ``localspec bench`` and the TUI all read it. Times in seconds.

    ``acceptance_rate`` is accepted / drafted and lies in [0, 1]; it is ``None``
    when nothing was drafted (shown as "n/a", never as 100%). ``tokens_per_second`` is
    the decode rate: prefill (the target's prompt) and draft-model catch-up excluded.
    """

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  #: prompt tokens reused from the KV cache (not prefilled)
    tokens: int = 0
    rounds: int = 0
    target_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    drafting_rounds: int = 0
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    time_to_first_token: float | None = None
    end_reason: EndReason | None = None
    kinds: dict[str, int] = field(default_factory=dict)
    catchup_tokens: int = 0
    catchup_seconds: float = 0.0

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

    def add(self, other: "GenerationStats") -> None:
        """Add another generation's counters and times: totals over several generations (a
        benchmark's repetitions). ``prompt_tokens`` and ``time_to_first_token`` are left as they are."""
        for name in ("tokens", "rounds", "target_passes", "drafted", "accepted", "drafting_rounds",
                     "prefill_seconds", "draft_seconds", "verify_seconds", "elapsed_seconds", "catchup_tokens",
                     "catchup_seconds", "cached_prompt_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for k, v in other.kinds.items():
            self.kinds[k] = self.kinds.get(k, 0) + v

    def add_token(self, kind: TokenKind | str) -> None:
        """Count one token given to the consumer."""
        k = kind.value if isinstance(kind, TokenKind) else str(kind)
        self.tokens += 1
        self.kinds[k] = self.kinds.get(k, 0) + 1

    @property
    def decode_seconds(self) -> float:
        """Wall time of decoding: elapsed minus prefill and draft-model catch-up, seconds."""
        return self.elapsed_seconds - self.prefill_seconds - self.catchup_seconds

    @property
    def tokens_per_second(self) -> float:
        """Decode rate: generated tokens / :attr:`decode_seconds` (0.0 before any decoding)."""
        decode = self.decode_seconds
        return self.tokens / decode if decode > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "tokens": self.tokens,
            "rounds": self.rounds,
            "target_passes": self.target_passes,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "drafting_rounds": self.drafting_rounds,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "tokens_per_target_pass": self.tokens_per_target_pass,
            "tokens_per_second": self.tokens_per_second,
            "time_to_first_token": self.time_to_first_token,
            "prefill_seconds": self.prefill_seconds,
            "draft_seconds": self.draft_seconds,
            "verify_seconds": self.verify_seconds,
            "catchup_tokens": self.catchup_tokens,
            "catchup_seconds": self.catchup_seconds,
            "decode_seconds": self.decode_seconds,
            "elapsed_seconds": self.elapsed_seconds,
            "end_reason": self.end_reason.value if self.end_reason else None,
            "kinds": dict(self.kinds),
        }
