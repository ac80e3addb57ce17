"""The drafter protocol: what a drafter proposes (:class:`Draft`) and what the engine asks of one
(:class:`Drafter`). Every drafter module imports these from here; the package re-exports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from localspec.config import DraftParams
from localspec.core.events import DrafterId


@dataclass(frozen=True, slots=True)
class Draft:
    """A proposal.

    Attributes:
        tokens: proposed ids, length g (may be 0).
        probs: shape (g, n_vocab) float64, the distributions the tokens were sampled
            from; ``None`` for a point-mass drafter (prompt lookup) or in greedy mode.
        source: the drafter that proposed it (``DrafterId.NONE`` for the empty draft of a round without one).
        match_length: a free drafter (prompt lookup, a prediction): over how many tokens
            the place it copies from agrees with the end of the context (0 otherwise).
        from_memory: prompt lookup copied it from the draft memory (earlier requests,
            :class:`~localspec.core.drafters.memory.DraftMemory`), not from the context.
        source_position: prompt lookup from the context: the index in the context (prompt and
            output) of the first copied token; -1 otherwise (a prediction, the draft memory).
    """

    tokens: tuple[int, ...]
    probs: np.ndarray | None
    source: DrafterId
    match_length: int = 0
    from_memory: bool = False
    source_position: int = -1


class Drafter(Protocol):
    """What the engine asks of a drafter.

    A *free* drafter (prompt lookup, a predicted output) costs no model pass: the engine
    asks it every round for the policy to score; a draft model is asked only when chosen.
    A drafter takes only what it uses: a drafter that samples (the draft model) is given
    the generation's sampling settings and random generator apart
    (:meth:`~localspec.core.drafters.DraftModelDrafter.begin`).
    """

    name: DrafterId
    #: (tokens, seconds) of the catch-up (its KV cache brought up to the context) done by the
    #: latest :meth:`draft` before drafting; always (0, 0.0) for a drafter without a cache
    last_catchup: tuple[int, float]

    def draft(self, context: Sequence[int], draft_len: int, drafting: DraftParams) -> Draft:
        """Propose up to ``draft_len`` ids continuing ``context`` (``drafting``: n-gram sizes, ``draft_p_min``)."""
        ...

    def catchup_tokens(self, context: Sequence[int]) -> int:
        """Tokens :meth:`draft` would evaluate as catch-up before drafting after ``context`` (0 without a cache)."""
        ...

    def rollback(self, committed: Sequence[int]) -> None:
        """Keep only state consistent with ``committed[:-1]`` (a model's cache: its common prefix)."""
        ...

    def reset(self) -> None:
        """Forget any state (a cache) tied to earlier contexts."""
        ...
