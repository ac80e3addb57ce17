"""Draft-model drafter: a second, smaller GGUF with the target's tokenizer proposes tokens.

Leviathan et al. 2022, section 2.3: the draft model samples from its own distribution,
shaped by the same settings as the target (:func:`localspec.core.sampling.logits_to_probs`),
and returns those distributions for the ratio test.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from localspec.config import DraftParams, SamplingParams
from localspec.core.events import DrafterId
from localspec.core.sampling import logits_to_probs, sample, softmax
from localspec.core.drafters.base import Draft

#: committed tokens a drafting round evaluates as part of drafting: the newest one and, after
#: a fully accepted draft, the last drafted token (sampled but never evaluated). A longer gap
#: is catch-up, evaluated and timed apart (:meth:`DraftModelDrafter.catch_up`).
STEADY_GAP = 2


class DraftModelDrafter:
    """Drafts with a :class:`localspec.backend.llama.LlamaModel`.

    Its KV cache holds a prefix of the committed tokens; each call reuses the common
    prefix and evaluates only what is missing, so accepted draft tokens are never
    evaluated twice.

    Args:
        model: the draft model (same tokenizer as the target; see localspec.core.tokenizer).
        n_propose: ids at or above this are never proposed (target vocabulary size).
        clock: times the catch-up (seconds; the engine passes its own, :class:`~localspec.core.engine.SpeculativeEngine`).
    """

    name = DrafterId.DRAFT

    def __init__(self, model, n_propose: int | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.model = model
        self.clock = clock
        self.n_propose = min(n_propose or model.n_vocab, model.n_vocab)
        #: (tokens, seconds) of the catch-up done by the latest :meth:`draft` call
        self.last_catchup: tuple[int, float] = (0, 0.0)
        #: how drafts are sampled, and from which generator (:meth:`begin`)
        self.sampling = SamplingParams()
        self.rng = np.random.default_rng()

    def begin(self, sampling: SamplingParams, rng: np.random.Generator) -> None:
        """Sample the next drafts with ``sampling`` (greedy when its temperature is 0) from ``rng``.

        The engine passes the running generation's settings and generator (the one the
        acceptance rule draws from too), so a seeded generation stays reproducible.
        """
        self.sampling = sampling
        self.rng = rng

    def pending(self, context: Sequence[int]) -> int:
        """Tokens of ``context`` the draft model's KV cache lacks (context length minus the
        cached common prefix, capped one short of the context as :meth:`sync` keeps it)."""
        cached = self.model.cached_tokens
        m = max(0, min(len(cached), len(context) - 1))
        if list(cached[:m]) == list(context[:m]):  # the usual case, compared at C speed
            return len(context) - m
        common = 0
        while common < m and cached[common] == context[common]:
            common += 1
        return len(context) - common

    def unknown_id(self, context: Sequence[int]) -> bool:
        """Whether ``context`` holds an id past the draft model's vocabulary: a padding id of a target whose
        vocabulary is padded past the draft's (Qwen2.5 7B-32B over their 0.5B-3B siblings), which the target
        may sample (a zero padding row has logit 0: about 5e-5 a token at temperature 1 on a SmolLM2 copy).
        The draft model cannot evaluate it, so it drafts nothing after it. Only the ids its cache lacks are
        looked at (those it holds were evaluated)."""
        n = self.pending(context)
        return n > 0 and max(context[len(context) - n:]) >= self.model.n_vocab

    def catchup_tokens(self, context: Sequence[int]) -> int:
        """Tokens :meth:`draft` would evaluate as catch-up before drafting after ``context``
        (:meth:`catch_up`: the missing ones but the newest, when more than the steady gap; 0 where it
        drafts nothing, :meth:`unknown_id`)."""
        n = self.pending(context)
        return n - 1 if n > STEADY_GAP and not self.unknown_id(context) else 0

    def catch_up(self, context: Sequence[int]) -> tuple[int, float]:
        """Bring the draft cache up to ``context[:-1]`` when it lacks more than the steady gap.

        Evaluates the missing tokens but the newest in one batch without logits (a prefill).

        Returns:
            (tokens evaluated, wall seconds); (0, 0.0) when the gap is at most ``STEADY_GAP``.
        """
        model = self.model
        n = model.sync(context)
        if len(context) - n <= STEADY_GAP or len(context) > model.n_ctx:
            return 0, 0.0
        t0 = self.clock()
        model.decode(context[n:-1], logits_for=())
        return len(context) - 1 - n, self.clock() - t0

    def draft(self, context: Sequence[int], draft_len: int, drafting: DraftParams) -> Draft:
        """Propose up to ``draft_len`` ids continuing ``context``, sampled as set by :meth:`begin`.

        Catches up first (:meth:`catch_up`, recorded in :attr:`last_catchup`). Stops
        early when the draft's top-1 probability (temperature-1 softmax of its
        logits) falls below ``drafting.draft_p_min``, at an end-of-generation token, or
        at the draft model's context limit. Proposes nothing after an id the draft model
        lacks (:meth:`unknown_id`): the target decodes alone from there.

        Returns:
            Draft with ``probs`` of shape (g, n_vocab) float64 when sampling, else None.
        """
        model = self.model
        self.last_catchup = (0, 0.0)
        room = model.n_ctx - len(context)  # positions left after context
        draft_len = min(draft_len, room)
        if draft_len <= 0 or not context or self.unknown_id(context):
            return Draft((), None, self.name)
        self.last_catchup = self.catch_up(context)
        n = model.sync(context)
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        sampling, rng, width = self.sampling, self.rng, self.n_propose
        # greedy without a p-min reads only the argmax, taken where llama.cpp wrote the logits (no copy)
        argmax_only = sampling.greedy and drafting.draft_p_min <= 0.0
        todo = context[n:]  # what the next pass evaluates: the tokens the cache lacks, then each drafted one
        for i in range(draft_len):
            if argmax_only:
                tok = int(model.decode_argmax(todo, "last", width)[0])
            else:
                row = model.decode(todo, "last")[0][:width]
                if drafting.draft_p_min > 0.0 and softmax(row).max() < drafting.draft_p_min:
                    break
                if sampling.greedy:
                    tok = int(np.argmax(row))
                else:
                    q = logits_to_probs(row, sampling)
                    tok = sample(q, rng)
                    probs.append(q)
            tokens.append(tok)
            if i + 1 == draft_len or model.is_eog(tok):
                break
            todo = [tok]
        return Draft(tuple(tokens), np.stack(probs) if probs else None, self.name)

    def rollback(self, committed: Sequence[int]) -> None:
        """Keep only the longest cached prefix of ``committed[:-1]`` in the draft cache."""
        self.model.sync(committed)

    def reset(self) -> None:
        self.model.reset()
