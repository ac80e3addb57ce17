"""Predicted Outputs: draft from a text the answer will mostly repeat (e.g. the file being edited).

OpenAI's chat API calls it ``prediction: {"type": "content", "content": ...}``. The
prediction's tokens are a point-mass draft like prompt lookup (Saxena 2023), so the
acceptance rule keeps the output exact: greedy output with a prediction equals greedy
output without one, and sampled output has the target's distribution.

The drafter keeps its place in the prediction while the answer copies it. After a
mismatch (the edited part) it re-synchronises where the answer rejoins the prediction:
the last n committed output tokens (n from ``max_ngram`` down to ``min_ngram``, longest
first) are matched against the prediction, and of the places that match, the nearest
one at or after the place where the answer left the prediction wins (the answer moves
forward through the file it rewrites); only when there is none, the nearest one before
it. So a whole unchanged region after an edit is drafted in long runs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.config import DraftParams
from localspec.core.events import DrafterId
from localspec.core.drafters.base import Draft
from localspec.core.drafters.lookup import ngram_starts


class PredictionDrafter:
    """Drafts the continuation of the answer's place in a predicted output.

    One instance follows one generation: it reads the committed tokens on every call
    (they only grow during a generation) and moves its place accordingly.

    Args:
        prediction: the predicted output's token ids, shape (M,) (tokenized without BOS).
        n_prompt: the prompt's length; committed tokens after it are the answer.
    """

    name = DrafterId.PREDICTION
    last_catchup = (0, 0.0)  #: no cache, nothing to catch up

    def __init__(self, prediction: Sequence[int], n_prompt: int) -> None:
        self.prediction = np.asarray(list(prediction), dtype=np.int64)
        self.n_prompt = n_prompt
        self.reset()

    def reset(self) -> None:
        """Back to the start: the answer is expected to begin with the prediction."""
        self._seen = self.n_prompt  #: committed length already followed
        self._pos: int | None = 0  #: next prediction index the answer copies; None = lost
        self._left = 0  #: where the answer last left (or was last in) the prediction
        self._run = 0  #: committed tokens in a row that agree with the prediction before _pos

    @property
    def position(self) -> int | None:
        """Index in the prediction of the next token to propose, or None while the place is lost."""
        return self._pos

    def follow(self, context: Sequence[int], drafting: DraftParams) -> None:
        """Move the place along the committed tokens ``context`` (prompt + answer so far)."""
        pred = self.prediction
        n = len(context)
        if n < self._seen:  # committed tokens were taken back: find the place again
            self._seen = max(n, self.n_prompt)
            self._pos = None
        for t in context[self._seen : n]:
            if self._pos is not None and self._pos < len(pred) and pred[self._pos] == t:
                self._pos += 1
                self._run += 1
                self._left = self._pos
            else:
                self._pos = None
                self._run = 0
        self._seen = max(n, self._seen)
        if self._pos is None:
            self._resync(context[self.n_prompt :], drafting.max_ngram, drafting.min_ngram)

    def _resync(self, answer: Sequence[int], max_ngram: int, min_ngram: int) -> None:
        pred = self.prediction
        m = len(pred)
        tail = np.asarray(answer[-max_ngram:], dtype=np.int64)
        for n in range(min(max_ngram, len(tail)), min_ngram - 1, -1):
            # a match ending at p (pred[p-n:p] == last n answer tokens) continues at p < m
            if m <= n:
                continue
            ends = ngram_starts(pred, tail[len(tail) - n :], m - n) + n
            if ends.size == 0:
                continue
            forward = ends[ends >= self._left]
            self._pos = int(forward[0]) if forward.size else int(ends[-1])
            self._run = n
            return

    def draft(self, context: Sequence[int], draft_len: int, drafting: DraftParams) -> Draft:
        """Propose up to ``draft_len`` prediction tokens from the answer's place.

        Returns:
            Draft with ``probs`` None (point mass), source ``"prediction"`` and
            ``match_length`` = committed tokens in a row that agree with the prediction
            right before the proposal; empty while the place is lost or the prediction
            is used up.
        """
        self.follow(context, drafting)
        if self._pos is None or draft_len <= 0:
            return Draft((), None, self.name)
        tokens = self.prediction[self._pos : self._pos + draft_len].tolist()
        return Draft(tuple(tokens), None, self.name, self._run)

    def catchup_tokens(self, context: Sequence[int]) -> int:
        return 0

    def rollback(self, committed: Sequence[int]) -> None:
        """Nothing to roll back: the place follows the committed tokens on the next call."""
