"""Running statistics of one generation, built from the engine's events (pure; no widgets)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from localspec.core.events import GenerationStats, RoundStats


_GEN_FIELDS = tuple(f.name for f in dataclasses.fields(GenerationStats))


@dataclass
class LiveStats(GenerationStats):
    """What the statistics panel shows: the engine's :class:`GenerationStats` (copied from
    it after every round, never counted again here) and a few figures of the latest round.

    Every rate has the engine's definition: ``tokens_per_second`` is the decode rate
    (prefill and draft-model catch-up excluded); ``acceptance_rate`` is accepted / drafted
    in [0, 1], ``None`` when nothing was drafted (shown as n/a, never as 100%).
    """

    draft_len: int | None = None  #: draft length chosen in the latest round
    draft_reason: str = ""
    drafter: str = ""
    accepted_lengths: list[int] = field(default_factory=list)  #: per round (0 when nothing was drafted)
    final: bool = False
    warmup_seconds: float = 0.0  #: race: untimed prefill of both caches before the timed rounds

    def sync(self, gs: GenerationStats) -> "LiveStats":
        """Take every figure of the engine's statistics (the one accumulator)."""
        for name in _GEN_FIELDS:
            setattr(self, name, getattr(gs, name))
        self.kinds = dict(gs.kinds)
        return self

    def note_round(self, rs: RoundStats) -> None:
        """The latest round's choice, and its accepted length for the sparkline."""
        self.accepted_lengths.append(rs.accepted if rs.drafted else 0)
        self.draft_len = rs.draft_len_chosen
        self.draft_reason = rs.reason
        self.drafter = rs.drafter

    @property
    def rate(self) -> float | None:
        """The decode rate in tokens/s, ``None`` before any token."""
        return self.tokens_per_second if self.tokens and self.decode_seconds > 0 else None

    @property
    def end_text(self) -> str | None:
        e = self.end_reason
        return None if e is None else getattr(e, "value", str(e))

    def finish(self, gs: GenerationStats) -> "LiveStats":
        """Take the engine's final statistics."""
        self.sync(gs)
        self.final = True
        return self

    def copy(self) -> "LiveStats":
        c = dataclasses.replace(self)
        c.accepted_lengths = list(self.accepted_lengths)
        c.kinds = dict(self.kinds)
        return c

    def as_dict(self) -> dict:
        return {**GenerationStats.as_dict(self), "accepted_lengths": list(self.accepted_lengths)}

    @classmethod
    def from_dict(cls, d: dict) -> "LiveStats":
        """From :meth:`as_dict` (also reads conversations saved before catch-up was measured)."""
        legacy = {"seconds": "elapsed_seconds"}
        s = cls(final=True).sync(GenerationStats.from_dict({legacy.get(k, k): v for k, v in d.items()}))
        s.accepted_lengths = list(d.get("accepted_lengths") or [])
        return s


def plural(n: int, word: str) -> str:
    """``1 token``, ``2 tokens``, ``0 tokens``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_rate(x: float | None, unit: str = "", digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}{unit}"


def race_speedup(target: LiveStats, spec: LiveStats) -> float | None:
    """Speculative decode rate over target-only decode rate (``localspec bench``'s speedup:
    generated tokens / decode seconds on each side, prefill and catch-up excluded)."""
    t, s = target.rate, spec.rate
    return None if not t or not s else s / t


def median_spread(xs: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of ``xs`` (non-empty)."""
    ys = sorted(xs)
    n = len(ys)
    med = ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2
    return med, ys[0], ys[-1]


@dataclass(frozen=True, slots=True)
class RoundView(RoundStats):
    """A :class:`localspec.core.events.RoundStats` with the text of each token, for the inspector.

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
