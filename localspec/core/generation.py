"""One generation: the speculative round loop (draft, verify, accept, commit, roll back), yielding events; never prints.

Why these hold together: a :class:`Generation` is one request's state from its prefill to its end
(committed tokens, text held back at a stop string, statistics, cancellation), and every method of
it moves that state; the helpers here are its own. The engine that owns the models and their caches
is :class:`~localspec.core.engine.SpeculativeEngine`, which makes a Generation per request.

One round (Leviathan et al. 2022, Algorithm 1; Chen et al. 2023, Algorithm 2), as
:meth:`Generation._round` numbers its steps:

1. Draft: the free drafters propose, the policy chooses a drafter and a draft length
   (:meth:`~localspec.core.policy.DraftPolicy.choose`), and the drafter proposes g <= draft_max
   tokens d_1..d_g continuing the committed tokens (g = 0 is target-only decoding).
2. Verify: one target pass over [x_n, d_1..d_g] (x_n, the newest committed token, is not yet
   in the target's KV cache) gives g + 1 rows of target logits.
3. Accept: the acceptance rule (:mod:`localspec.core.acceptance`) keeps the longest accepted
   prefix d_1..d_k and exactly one target token t: resampled at the first rejection,
   bonus when k = g.
4. Commit: d_1..d_k, t are committed (cut short at an end-of-generation token, a stop string
   or max_tokens).
5. Roll back: the target's KV cache is truncated so it holds every committed token but the
   newest, and the draft cache to a prefix of them.
6. Observe: the round's :class:`RoundStats` go to the policy
   (:meth:`~localspec.core.policy.DraftPolicy.observe`).

Invariant at the end of every round (asserted there): the target's cache holds
``len(committed) - 1`` tokens; with ``LOCALSPEC_DEBUG`` set, :meth:`SpeculativeEngine.check_caches`
also checks that they are ``committed[:-1]`` and that the draft cache is a prefix of ``committed``.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.acceptance import Constraint, Verdict, accept_greedy, verify
from localspec.core.drafters import Draft, DraftMemory, Drafter, PredictionDrafter, PromptLookupDrafter
from localspec.core.events import DrafterId, EndReason, GenerationStats, RoundStats, TokenEvent, TokenKind
from localspec.core.policy import Choice, DraftPolicy, RoundState
from localspec.core.sampling import token_logprobs
from localspec.core.streaming import IndentLimit, TextAssembler
from localspec.errors import DecodeAborted

Event = TokenEvent | RoundStats
_EMPTY_DRAFT = Draft((), None, DrafterId.NONE)


@dataclass(slots=True)
class _Pending:
    token: int
    kind: TokenKind
    round: int
    position: int
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] | None = None


def _cut(draft: Draft, n: int) -> Draft:
    """The first ``n`` tokens of ``draft`` (and of its draft_probs)."""
    return dataclasses.replace(draft, tokens=draft.tokens[:n], probs=None if draft.probs is None else draft.probs[:n])


def _through_first_eog(tokens: tuple[int, ...], is_eog) -> tuple[int, ...]:
    """``tokens`` up to and including the first end-of-generation token (nothing after it is committed)."""
    for i, t in enumerate(tokens):
        if is_eog(t):
            return tokens[: i + 1]
    return tokens


class Generation:
    """One running generation: iterate it for events; read the results afterwards.

    Iterating yields :class:`TokenEvent` (in order, text released on complete UTF-8
    characters and never past a stop string) and :class:`RoundStats` after each round.
    Stopping early (``cancel()`` or ``close()``) leaves both KV caches consistent with
    :attr:`token_ids`.

    With a predicted output (``prediction``, token ids), a :class:`PredictionDrafter`
    follows this generation and is tried before prompt lookup (see :mod:`localspec.core.policy`).

    With a draft memory (``memory``, a :class:`~localspec.core.drafters.DraftMemory`), prompt lookup
    also copies from the earlier texts it holds, and the generation's prompt and output are added
    to it when it ends (however it ends); the output is the same with or without it.

    Attributes:
        token_ids: generated token ids (prompt excluded; end-of-generation token excluded).
        text: the generated text (equals the events' texts joined).
        stop_word: the stop string the output ended before (end reason ``stop``; the first of the
            generation's stop strings found there), else None.
        stats: :class:`GenerationStats`, complete once iteration ends.
        rounds: the :class:`RoundStats` of every round.

    Made by :meth:`SpeculativeEngine.generate <localspec.core.engine.SpeculativeEngine.generate>`,
    whose engine it takes (``engine``: its models, caches, drafters and clock; not typed here, as the
    engine's module imports this one).
    """

    def __init__(self, engine: Any, prompt: Sequence[int], sampling: SamplingParams,
                 drafting: DraftParams, generation: GenerationParams, policy: DraftPolicy | None,
                 prediction: Sequence[int] | None = None, constraint: Constraint | None = None,
                 logprobs: int | None = None, memory: DraftMemory | None = None, cache_prompt: bool = True) -> None:
        self.engine = engine
        self.prompt = list(prompt)
        self.sampling = sampling
        self.drafting = drafting
        self.generation = generation
        self.policy = policy or engine.make_policy(drafting)
        self.prediction = PredictionDrafter(prediction, len(self.prompt)) if prediction else None
        #: earlier texts prompt lookup copies from, fed this generation's at its end (None: none)
        self.memory = memory
        self.lookup = PromptLookupDrafter(memory) if memory is not None else engine.lookup
        #: restricts the output (a grammar, :meth:`SpeculativeEngine.grammar`); its state moves with
        #: every committed token and is freed when the generation ends
        self.constraint = constraint
        #: None: no logprobs (nothing computed); n >= 0: each TokenEvent carries its logprob and n alternatives
        self.logprobs = logprobs
        #: False: the prompt neither comes from the kept prompt prefixes nor joins them (``cache_prompt: false``)
        self.cache_prompt = cache_prompt
        #: set by a consumer that holds back the start of an answer (the server's tool-call parser,
        #: :func:`localspec.server.tool_parser.holds_all`): ``holds_output(text)`` says whether it would still
        #: hold all of an output that begins ``text``; while it does, mode auto's rounds draft nothing
        #: (:attr:`~localspec.core.policy.RoundState.output_held`). None: nothing is held. Asked from the second
        #: round until it first says no (a text it does not hold is no marker's prefix, nor any longer text).
        self.holds_output: Callable[[str], bool] | None = None
        self.token_ids: list[int] = []
        self.stop_word: str | None = None
        #: prompt + generated tokens committed so far (live during iteration; some may
        #: not be yielded yet while text is held back at a possible stop string)
        self.committed: list[int] = list(prompt)
        self.text = ""
        self.stats = GenerationStats(prompt_tokens=len(self.prompt))
        self.rounds: list[RoundStats] = []
        self._cancel = False
        self._running = False
        self._abort_lock = threading.Lock()
        #: ``on_prefill(done, total)``: set by a front-end to follow a long prompt's prefill
        #: (called after each ``n_batch`` chunk of the prompt tokens not cached yet)
        self.on_prefill: Callable[[int, int], None] | None = None
        # the output as it is committed and released
        self._assembler = TextAssembler(generation.stop)
        self._indent = IndentLimit(generation.min_indent) if generation.min_indent > 0 else None
        self._pending: list[_Pending] = []  # every committed output token, in order
        self._n_released = 0  # tokens of ``_pending`` already yielded
        self._released = 0  # chars of assembler.text already yielded
        # times on the engine's clock (seconds), set when the iteration starts (:meth:`_run`)
        self._t_start = 0.0  # the start: the prefill's
        self._t_first_token = 0.0  # the first output token's commit (the start until then)
        self._t_mark = 0.0  # where the current round's time starts
        self._waited = 0.0  # seconds the consumer held the generation since the mark (not the round's cost)
        self._it = self._run()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return next(self._it)

    def cancel(self) -> None:
        """End the generation soon (end reason ``cancelled``); callable from another thread.

        The llama.cpp decode running now (a prefill, a verification pass, a draft) stops within
        about one graph node (:meth:`SpeculativeEngine.abort`); the caches are left consistent
        with the tokens already committed. A prompt's read stopped this way keeps the ``n_batch``
        chunks it read in the KV cache (only the chunk being read is lost), so the same prompt sent
        again reads on from there (``cached_prompt_tokens``), as after any read.
        """
        self._cancel = True
        with self._abort_lock:  # not between _finish's end of running and its clearing of the flag
            if self._running:  # a stale flag would stop the engine's next, unrelated decode
                self.engine.abort()

    def close(self) -> None:
        """End now; caches are left consistent with :attr:`token_ids`."""
        self._it.close()

    def run(self) -> "Generation":
        """Consume every event; return self."""
        for _ in self:
            pass
        return self

    # -- the round ----------------------------------------------------------------------
    def _round(self, round_idx: int, rng: np.random.Generator) -> tuple[RoundStats, EndReason | None]:
        """One round (Leviathan et al. 2022, Algorithm 1; Chen et al. 2023, Algorithm 2), its steps
        numbered as in the module docstring; returns its statistics and the end it reached (None: go on).

        Releasing text, the generation's statistics and cancellation wrap it in :meth:`_run`.

        Raises:
            AssertionError: at its end the target's KV cache does not hold ``len(committed) - 1`` tokens.
        """
        eng, target, policy, committed = self.engine, self.engine.target, self.policy, self.committed
        generated = len(committed) - len(self.prompt)
        limit = max(min(self.generation.max_tokens - generated - 1, eng.n_ctx - len(committed) - 1), 0)
        # 1. draft: the free drafters propose; the policy chooses a drafter and a draft length g; it drafts
        #    d_1..d_g (a draft model first catches up on the tokens its cache lacks: timed apart)
        to_catch_up = eng.draft_catchup_tokens(committed)
        in_passes = eng.pass_seconds()
        t0 = eng.clock()
        proposals = self._free_proposals(limit)
        held = generated > 0 and self.holds_output is not None and self.holds_output(self._assembler.text)
        if generated > 0 and not held:
            self.holds_output = None  # released once: an answer that grows is never held again (no more calls)
        choice = policy.choose(RoundState(committed, limit, proposals, generated, to_catch_up, held))
        draft, (catchup_tokens, catchup_seconds) = self._draft(choice, proposals, limit, rng)
        draft_seconds = eng.clock() - t0 - catchup_seconds
        # 2. verify: one target pass over [x_n, d_1..d_g] gives g + 1 rows of target logits
        # 3. accept: the longest accepted prefix d_1..d_k and one target token t (resampled, or the bonus if k = g)
        t0 = eng.clock()
        verdict, logits = self._verify(draft, rng)
        k = verdict.accepted
        target.truncate(len(committed) + k)  # the rejected draft tokens leave the cache
        verify_seconds = eng.clock() - t0
        # 4. commit d_1..d_k, t (cut short at an end-of-generation token, a stop string, max_tokens)
        n_before, tokens = len(committed), [*draft.tokens[:k], verdict.token]
        scores = None if self.logprobs is None else token_logprobs(logits, tokens, self.logprobs)
        end = self._commit(tokens, [TokenKind.ACCEPTED] * k + [verdict.kind], round_idx, scores)
        # 5. roll back: the target's KV cache to every committed token but the newest, the draft model's to a prefix
        eng.rollback(committed)
        # 6. observe: the policy learns from the round (acceptance; verification, drafting and catch-up times)
        rs = RoundStats(
            round=round_idx, drafter=draft.source if draft.tokens else DrafterId.NONE,
            draft_tokens=tuple(draft.tokens), target_tokens=_through_first_eog(verdict.target_tokens, target.is_eog),
            drafted=len(draft.tokens), accepted=k, committed=max(len(committed) - n_before, 0),
            draft_seconds=draft_seconds, verify_seconds=verify_seconds, draft_len_chosen=choice.draft_len,
            reason=choice.reason, catchup_tokens=catchup_tokens, catchup_seconds=catchup_seconds,
            round_seconds=(t_end := eng.clock()) - self._t_mark - self._waited,
            from_memory=draft.from_memory and bool(draft.tokens), pass_seconds=eng.pass_seconds() - in_passes)
        policy.observe(rs)
        # the round's invariant: the target's KV cache holds the committed tokens but the newest
        assert target.n_cached == len(committed) - 1, \
            f"target cache holds {target.n_cached} tokens, not the {len(committed) - 1} committed before the newest"
        if eng.debug:
            eng.check_caches(committed)
        # the next round's time starts here (observing this round and releasing its text count, the consumer's
        # time does not): the rounds' times add up to the whole decode but the consumer's and the final release
        self._t_mark, self._waited = t_end, 0.0
        return rs, end

    def _verify(self, draft: Draft, rng: np.random.Generator) -> tuple[Verdict, np.ndarray | None]:
        """Steps 2 and 3: one target pass over [x_n, d_1..d_g], and the acceptance rule on its g + 1 rows.

        Greedy decoding without a constraint or logprobs reads only each row's argmax, taken where llama.cpp
        wrote the logits (:meth:`~localspec.backend.llama.LlamaModel.decode_argmax`): no row is copied (the
        same verdict as :func:`~localspec.core.acceptance.verify` on the copied rows).

        Returns:
            (the verdict, the rows: float32 (g + 1, n_vocab), or None when only their argmax was read).
        """
        target, tokens = self.engine.target, [self.committed[-1], *draft.tokens]
        if self.sampling.greedy and self.constraint is None and self.logprobs is None:
            return accept_greedy(draft.tokens, target.decode_argmax(tokens)), None
        logits = target.decode(tokens, logits_for="all")
        return verify(draft.tokens, draft.probs, logits, self.sampling, rng, self.constraint), logits

    def _drafters(self) -> dict[DrafterId, Drafter]:
        """This generation's drafters by name: its predicted output, its prompt lookup (the engine's, or one
        reading the draft memory) and the engine's draft model."""
        return {d.name: d for d in (self.prediction, self.lookup, self.engine.drafter) if d is not None}

    def _free_proposals(self, limit: int) -> dict[DrafterId, Draft]:
        """Step 1, first: the proposals (up to ``limit`` tokens) of the free drafters the policy names, in its order."""
        if limit <= 0:
            return {}
        drafters, drafting = self._drafters(), self.drafting
        return {name: drafters[name].draft(self.committed, min(drafting.cap, limit), drafting)
                for name in self.policy.free_drafters if name in drafters}

    def _draft(self, choice: Choice, proposals: dict[DrafterId, Draft], limit: int,
               rng: np.random.Generator) -> tuple[Draft, tuple[int, float]]:
        """Step 1, last: the draft of the chosen drafter, g = min(draft length chosen, ``limit``) tokens.

        A free drafter's draft is its proposal, cut to g; another drafter drafts now. A draft never
        goes past an end-of-generation token (nothing after one can be committed) and is empty when
        shorter than ``draft_min``.

        Returns:
            (the draft, (tokens, seconds) of the draft model's catch-up before it drafted).
        """
        eng, g = self.engine, min(choice.draft_len, limit)
        if eng.drafter is not None:
            eng.drafter.begin(self.sampling, rng)
        draft, catchup = _EMPTY_DRAFT, (0, 0.0)
        drafter = self._drafters().get(choice.drafter)
        if g > 0 and choice.drafter in proposals:
            draft = _cut(proposals[choice.drafter], g)
        elif g > 0 and drafter is not None:
            draft = drafter.draft(self.committed, g, self.drafting)
            catchup = drafter.last_catchup
        eog_at = next((i for i, t in enumerate(draft.tokens) if eng.target.is_eog(t)), None)
        if eog_at is not None and eog_at + 1 < len(draft.tokens):
            draft = _cut(draft, eog_at + 1)
        if len(draft.tokens) < self.drafting.draft_min:
            draft = _EMPTY_DRAFT
        return draft, catchup

    def _commit(self, tokens: Sequence[int], kinds: Sequence[TokenKind], round_idx: int,
                scores: Sequence[tuple[float, tuple]] | None = None) -> EndReason | None:
        """Step 4: append ``tokens`` (of ``kinds``; with ``scores``, their (logprob, top logprobs) from
        :func:`~localspec.core.sampling.token_logprobs`) to :attr:`committed`, up to the end they reach."""
        target, committed, assembler, pending = self.engine.target, self.committed, self._assembler, self._pending
        n_prompt = len(self.prompt)
        end = None
        for i, (tok, kind) in enumerate(zip(tokens, kinds)):
            if target.is_eog(tok):
                end = EndReason.EOG
                break
            position = len(committed) - n_prompt
            committed.append(tok)
            pending.append(_Pending(tok, kind, round_idx, position, *(scores[i] if scores is not None else ())))
            before = len(assembler.text)  # this token's text starts here
            assembler.push(target.token_bytes(tok))
            if assembler.stop_at is not None:
                end = EndReason.STOP
                break
            if position == 0:
                self._t_first_token = self.engine.clock()
            if self._indent is not None and (cut := self._indent.cut(assembler.text)) is not None:
                assembler.stop_at = cut  # cut like a stop string: the tokens starting before it stay
                end = EndReason.INDENT
                break
            if (self.generation.newline_time_limit is not None and "\n" in assembler.text[before:]
                    and self.engine.clock() - self._t_first_token >= self.generation.newline_time_limit):
                end = EndReason.TIME_LIMIT
                break
            if position + 1 >= self.generation.max_tokens:
                end = EndReason.MAX_TOKENS
                break
        if end in (EndReason.STOP, EndReason.INDENT):  # the stop string (the cut line) and what follows are not output
            keep = assembler.tokens_before_stop()
            assembler.truncate_tokens(keep)
            del committed[n_prompt + keep:]
            del pending[keep:]
        return end

    def _release(self, upto: int, final: bool) -> Iterator[TokenEvent]:
        """Events for pending tokens whose text ends by ``upto`` (all of them if final).

        Counts a token as released only as it is yielded, so a consumer that stops in
        the middle of a round keeps exactly the tokens it was given.
        """
        assembler, pending, stats = self._assembler, self._pending, self.stats
        ends = assembler.token_ends
        while self._n_released < len(pending):
            p = pending[self._n_released]
            tok_end = ends[p.position] if p.position < len(ends) else len(assembler.text)
            if not final and tok_end > upto:
                break
            piece_end = min(tok_end, upto)
            piece = assembler.text[self._released:piece_end] if piece_end > self._released else ""
            self._released = max(self._released, piece_end)
            self._n_released += 1
            if stats.time_to_first_token is None:
                stats.time_to_first_token = self.engine.clock() - self._t_start
            stats.add_token(p.kind)
            t = self.engine.clock()
            yield TokenEvent(p.token, piece, p.kind, p.round, p.position, p.logprob, p.top_logprobs)
            self._waited += self.engine.clock() - t  # the consumer held it: not this round's cost

    def _run(self) -> Iterator[Event]:
        """Prefill, then rounds until an end; wraps each round in releasing text and counting statistics."""
        eng, stats, prompt = self.engine, self.stats, self.prompt
        eng.check_prompt(prompt)
        rng = np.random.default_rng(self.sampling.seed)
        self._t_start = self._t_mark = self._t_first_token = eng.clock()
        self._waited = 0.0
        committed, assembler = self.committed, self._assembler
        end: EndReason | None = None
        completed = False  # set when the loop ran to its end (not stopped by the consumer or an error)
        round_idx = 0

        eng.clear_abort()
        self._running = True
        try:
            # prefill: the target caches every prompt token but the last
            if not self._cancel:
                stats.prefill_seconds, _, stats.cached_prompt_tokens = eng.prefill(prompt, draft=False,
                                                                                   progress=self.on_prefill,
                                                                                   reuse=self.cache_prompt)
            self._t_mark, self._waited = eng.clock(), 0.0  # where the first round's time starts
            while end is None and not self._cancel:
                if len(committed) >= eng.n_ctx:  # no position left for a new token
                    end = EndReason.CONTEXT
                    break
                rs, end = self._round(round_idx, rng)
                stats.add_round(rs)
                self.rounds.append(rs)
                round_idx += 1
                if end is not None and end not in (EndReason.STOP, EndReason.INDENT):
                    assembler.finish()
                yield from self._release(assembler.safe_end(), end is not None)
                stats.elapsed_seconds = eng.clock() - self._t_start
                t = eng.clock()
                yield rs
                self._waited += eng.clock() - t
            if end is EndReason.CONTEXT:
                assembler.finish()
                yield from self._release(assembler.safe_end(), True)
            completed = True
        except DecodeAborted:
            pass  # cancel() stopped a decode: ends as cancelled, below
        finally:
            self._finish(end, completed)

    def _finish(self, end: EndReason | None, completed: bool) -> None:
        """The generation's results, however it ended; both KV caches left consistent with :attr:`token_ids`."""
        eng, stats, committed, assembler, pending = self.engine, self.stats, self.committed, self._assembler, self._pending
        n_prompt = len(self.prompt)
        with self._abort_lock:
            self._running = False
            eng.clear_abort()
        if self.constraint is not None and hasattr(self.constraint, "close"):
            self.constraint.close()
        if end is None or (not completed and self._n_released < len(pending)):
            # the consumer stopped early (or an error): keep only the tokens it was given
            end = EndReason.CANCELLED
            del committed[n_prompt + self._n_released:]
            assembler.truncate_tokens(self._n_released)
            self.text = assembler.text[:self._released]
        else:
            self.text = assembler.text[: assembler.safe_end()]
        self.token_ids = committed[n_prompt:]
        # whatever happened, leave the caches consistent with what was committed
        eng.rollback(committed)
        if self.memory is not None:
            self.memory.add(committed)
        stats.tokens = len(self.token_ids)
        stats.kinds = {}
        for p in pending[: stats.tokens]:
            stats.kinds[p.kind.value] = stats.kinds.get(p.kind.value, 0) + 1
        stats.end_reason = end
        self.stop_word = assembler.stop_word if end is EndReason.STOP else None
        stats.elapsed_seconds = eng.clock() - self._t_start
