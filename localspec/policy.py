"""Draft policies: before each round, choose the drafter and the draft length.

:class:`FixedPolicy` drafts ``draft_max`` tokens with one drafter every round. The
adaptive policy of mode ``auto`` lives in :mod:`localspec.costmodel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Choice:
    """A policy's decision for one round.

    Attributes:
        drafter: ``"draft"``, ``"lookup"``, ``"prediction"`` or ``"none"``.
        draft_len: most tokens to draft (0 = no speculation this round).
        reason: short human-readable reason, shown in the statistics.
    """

    drafter: str
    draft_len: int
    reason: str = ""


class DraftPolicy(Protocol):
    #: whether :meth:`choose` wants the length of the prompt-lookup proposal
    uses_lookup: bool

    def choose(self, limit: int, lookup_match: int | None = None, position: int | None = None,
               prediction_match: int | None = None) -> Choice:
        """Choose for the next round; ``limit`` caps the draft length (context, max_tokens);
        ``position`` is the number of tokens committed (prompt included).

        When the generation has a predicted output, the engine also passes
        ``prediction_match=`` (the length of the prediction drafter's proposal, 0 while
        it has none) and the policy may answer ``Choice("prediction", g)``.
        """
        ...

    def observe(self, drafter: str, drafted: int, accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        """Learn from the finished round."""
        ...


class FixedPolicy:
    """Always the same drafter and ``draft_max`` tokens (fewer near the limits).

    A predicted output, while it has a proposal, is tried before that drafter (not in
    mode ``none``).
    """

    def __init__(self, drafter: str, draft_max: int) -> None:
        self.drafter = drafter
        self.draft_max = draft_max if drafter != "none" else 0
        self.uses_lookup = False

    def choose(self, limit: int, lookup_match: int | None = None, position: int | None = None,
               prediction_match: int | None = None) -> Choice:
        if prediction_match and self.draft_max:
            return Choice("prediction", max(0, min(self.draft_max, limit, prediction_match)), "fixed, prediction first")
        return Choice(self.drafter, max(0, min(self.draft_max, limit)), "fixed")

    def observe(self, drafter: str, drafted: int, accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        pass
