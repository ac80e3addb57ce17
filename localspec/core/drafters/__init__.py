"""Drafters behind one protocol: a draft model, prompt lookup, a predicted output, or none.

A drafter proposes up to ``draft_len`` token ids continuing ``context`` (the committed
tokens: prompt and output so far) and, when it has them, the probabilities it sampled
them from. Each is named by a :class:`~localspec.core.events.DrafterId`. The verifier picks the acceptance rule from that (see :mod:`localspec.core.acceptance`).
"""

from __future__ import annotations

from localspec.core.drafters.base import Draft, Drafter
from localspec.core.drafters.lookup import PromptLookupDrafter, find_candidate, find_match, locate_match
from localspec.core.drafters.memory import DraftMemories, DraftMemory
from localspec.core.drafters.model import DraftModelDrafter
from localspec.core.drafters.prediction import PredictionDrafter

__all__ = ["Draft", "Drafter", "DraftMemory", "DraftMemories", "PromptLookupDrafter", "DraftModelDrafter", "PredictionDrafter",
           "find_candidate", "find_match", "locate_match"]
