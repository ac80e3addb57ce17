"""Running statistics of one generation, built from the engine's events (pure; no widgets)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from localspec.events import RoundStats, SpeculationRates


@dataclass
class LiveStats(SpeculationRates):
    """What the statistics panel shows. Times in seconds.

    ``acceptance_rate`` is accepted / drafted in [0, 1], ``None`` when nothing was
    drafted (shown as n/a, never as 100%).
    """

    tokens: int = 0
    rounds: int = 0
    target_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    drafting_rounds: int = 0
    seconds: float = 0.0  #: wall time so far (prefill included)
    prefill_seconds: float = 0.0
    time_to_first_token: float | None = None
    draft_len: int | None = None  #: draft length chosen in the latest round
    draft_reason: str = ""
    drafter: str = ""
    accepted_lengths: list[int] = field(default_factory=list)  #: per drafting round
    end_reason: str | None = None
    kinds: dict[str, int] = field(default_factory=dict)
    final: bool = False
    _tps: float | None = None

    def add_round(self, rs) -> None:
        self.rounds += 1
        self.target_passes += 1
        self.drafted += rs.drafted
        self.accepted += rs.accepted
        if rs.drafted:
            self.drafting_rounds += 1
            self.accepted_lengths.append(rs.accepted)
        else:
            self.accepted_lengths.append(0)
        self.draft_len = rs.draft_len_chosen
        self.draft_reason = rs.reason
        self.drafter = rs.drafter

    def add_token(self, kind: str) -> None:
        self.tokens += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    @property
    def tokens_per_second(self) -> float | None:
        if self._tps is not None:
            return self._tps
        decode = self.seconds - self.prefill_seconds
        return self.tokens / decode if decode > 0 and self.tokens else None

    def finish(self, gs, rounds=None) -> "LiveStats":
        """Take the engine's final :class:`GenerationStats` as the truth."""
        self.tokens = gs.tokens
        self.rounds = gs.rounds
        self.target_passes = gs.target_passes
        self.drafted = gs.drafted
        self.accepted = gs.accepted
        self.drafting_rounds = gs.drafting_rounds
        self.seconds = gs.elapsed_seconds
        self.prefill_seconds = gs.prefill_seconds
        self.time_to_first_token = gs.time_to_first_token
        self.end_reason = gs.end_reason.value if gs.end_reason is not None else None
        self.kinds = dict(gs.kinds)
        self._tps = gs.tokens_per_second
        self.final = True
        return self

    def copy(self) -> "LiveStats":
        c = LiveStats(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        c.accepted_lengths = list(self.accepted_lengths)
        c.kinds = dict(self.kinds)
        return c

    def as_dict(self) -> dict:
        return {
            "tokens": self.tokens, "rounds": self.rounds, "target_passes": self.target_passes,
            "drafted": self.drafted, "accepted": self.accepted, "drafting_rounds": self.drafting_rounds,
            "seconds": self.seconds, "prefill_seconds": self.prefill_seconds,
            "time_to_first_token": self.time_to_first_token, "tokens_per_second": self.tokens_per_second,
            "acceptance_rate": self.acceptance_rate, "mean_accepted_length": self.mean_accepted_length,
            "tokens_per_target_pass": self.tokens_per_target_pass, "end_reason": self.end_reason,
            "kinds": dict(self.kinds), "accepted_lengths": list(self.accepted_lengths),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "LiveStats":
        s = cls(final=True)
        for k in ("tokens", "rounds", "target_passes", "drafted", "accepted", "drafting_rounds", "seconds",
                  "prefill_seconds", "time_to_first_token", "end_reason"):
            if k in d:
                setattr(s, k, d[k])
        s.kinds = dict(d.get("kinds") or {})
        s.accepted_lengths = list(d.get("accepted_lengths") or [])
        s._tps = d.get("tokens_per_second")
        return s


def fmt_rate(x: float | None, unit: str = "", digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}{unit}"


def race_speedup(target: LiveStats, spec: LiveStats) -> float | None:
    """Speculative tokens/s over target-only tokens/s (each over its own measured time)."""
    if not target.seconds or not spec.seconds or not target.tokens or not spec.tokens:
        return None
    return (spec.tokens / spec.seconds) / (target.tokens / target.seconds)


@dataclass(frozen=True, slots=True)
class RoundView(RoundStats):
    """A :class:`localspec.events.RoundStats` with the text of each token, for the inspector.

    Texts are looked up in the worker thread (the engine is not thread-safe), and are
    saved with conversations so a reopened round needs no model.
    """

    draft_texts: tuple[str, ...] = ()
    target_texts: tuple[str, ...] = ()

    @classmethod
    def from_stats(cls, rs: RoundStats, token_text) -> "RoundView":
        return cls(**{f.name: getattr(rs, f.name) for f in dataclasses.fields(RoundStats)},
                   draft_texts=tuple(token_text(t) for t in rs.draft_tokens),
                   target_texts=tuple(token_text(t) for t in rs.target_tokens))

    def as_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "RoundView":
        fields = cls.__dataclass_fields__
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in fields})
