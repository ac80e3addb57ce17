"""Draft policies: in each round, choose the drafter and the draft length, then learn from the round.

Why these hold together: :class:`DraftPolicy`'s two methods and its implementations, with the evidence
the adaptive one keeps per drafter between ``choose`` and ``observe``; the engine knows only the protocol.

:class:`FixedPolicy` drafts ``draft_max`` tokens with one drafter every round (modes
``draft``, ``lookup``, ``none``); :class:`AdaptivePolicy` (mode ``auto``) chooses by the
measured costs (:class:`localspec.core.costmodel.EngineCosts`) and the expected rates of
:mod:`localspec.core.costmodel`. Both implement :class:`DraftPolicy`, all the engine knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from localspec.core.costmodel import (LOOKUP_CHANCE_TOKENS, EngineCosts, EWAcceptance, MatchAcceptance,
                                      best_draft_length, expected_tokens, succession_prior)
from localspec.core.events import DrafterId, RoundStats


#: a free proposal whose match is at least this long is trusted by its own evidence as well as by its
#: bucket (:meth:`AdaptivePolicy.free_values`): from 16 tokens on, the first proposed token was right
#: for 97-99 % of prompt-lookup matches (measured, :data:`~localspec.core.costmodel.LOOKUP_CHANCE_TOKENS`),
#: above the rule of succession's 15/16, so the rule is a safe floor there. At 8 (95 % measured) a chat
#: answer drafted 30-token rounds of which ~30 % were accepted (Zen 4, default pair: 171 drafted, 32
#: accepted in two answers; 119 / 29 at 16); for 2-3 tokens the rule is far off (43 % measured, 2/3)
COPY_EVIDENCE_TOKENS = 16
#: a bucket position seen this often follows what was seen, not the floor of :data:`COPY_EVIDENCE_TOKENS`
LEARNED_OBSERVATIONS = 3
#: a prompt-lookup proposal copied from this generation's own output (the model repeating a phrase of its
#: answer) is no copy of a source: such repetitions end soon, whatever their match length. Measured on the
#: default target's greedy answers (1.5B, 2026-12-03: the recorded chat traces and 17 answers to other prose
#: and code-writing prompts; 25 more answers of the benchmark's chat task alike): after a match of 8-15 tokens
#: into the answer itself the answer agreed with the copy for 4.4 tokens on average in prose (183 proposals:
#: the first token 88 %, 8 tokens 19 %, 16 never) and 1.8 in code it wrote (75), after 16-23 tokens for 2.3
#: (31; none longer), while after a match of 8-23 tokens into the prompt (the edit traces, 146 proposals) it
#: agreed for 53 (of at most 64). The rule of succession on the match length
#: (:func:`~localspec.core.costmodel.succession_prior`) promised 15-25 and drafted rounds of 19-47 tokens that
#: kept 1-6 (mode auto, chat, Zen 4). Such a proposal is drafted at most :data:`SELF_COPY_DRAFT_MAX` tokens,
#: and judged as a match just short of the copy floor, until it agrees over more than
#: ``COPY_EVIDENCE_TOKENS + SELF_REPEAT_TOKENS`` tokens (:func:`copy_evidence`): a long self-copy, such as a
#: function written out again, is then trusted as a copy, by its agreement beyond these tokens. Replayed on
#: those 17 answers, target-only time / auto's: Zen 4 0.972 -> 0.998, Zen 5 0.987 -> 0.998, Sapphire Rapids
#: 1.009 -> 1.036.
SELF_REPEAT_TOKENS = 24
#: most tokens drafted from a repetition of the generation's own output that is not yet trusted as a copy
#: (:data:`SELF_REPEAT_TOKENS`): up to 4 the rule of succession's estimate agreed with those runs (53 % of the
#: prose ones reached 4 tokens); beyond, it promised what they did not keep. Caps 4, 8, 12, 16 replayed on the
#: chat and prose answers above: 4 and 8 within 0.4 % of each other on every curve, 16 up to 1.3 % slower
SELF_COPY_DRAFT_MAX = 4
#: the reason of a generation's first round in mode auto, which drafts nothing
#: (:class:`AdaptivePolicy`'s ``first_token_undrafted``)
FIRST_TOKEN_REASON = "no speculation: the first token is not held for a draft"
#: the reason of a round in mode auto that drafts nothing because the consumer still holds the whole answer so far
#: (:attr:`RoundState.output_held`: a possible tool-call marker)
HELD_OUTPUT_REASON = "no speculation: the answer so far is held back (a possible tool-call marker)"
#: a free drafter whose last this many scored proposals each agreed with the committed tokens over every token it
#: proposed (:meth:`AdaptivePolicy._see_free`; each at least :data:`COPY_EVIDENCE_TOKENS` long) drafts a *sure copy*:
#: its proposal is valued at 1 less its copies' break rate in this generation at every position (1 until one broke;
#: :meth:`AdaptivePolicy.free_values`), so the round's length is where the measured cost per token, the round's fixed
#: cost included (:attr:`AdaptivePolicy.overhead`), stops falling at the current position
#: (:func:`~localspec.core.costmodel.best_draft_length` on the curve there). One wrong token ends the run. Why: the
#: rule of succession on the match length discounts the far positions of a long draft ((m + 1) / (m + g + 1) to
#: reach the end: 0.82 for 64 tokens after 300), which kept an unchanged file's copy at 26-38 tokens a round on the
#: 2-vCPU AMX Xeon (issue 44) where llama-server's ngram-mod drafted 64 and won (0.93x). The break rate: valued at 1
#: after a break, fnmatch-rename's copy was drafted 64 tokens into a renamed site on the Zen 5 curve (4,096), where
#: 15 and 64 tokens cost within 4 % per token, and replayed 3 % slower. Replayed on every recorded curve:
#: docs/speedup.md, "Sure copies".
SURE_COPY_PROPOSALS = 2
#: ...and at least this many tokens agreed in the run. Replayed on every recorded curve and trace
#: (scripts/replay_policy.py, fixed costs 0, 0.1 and 1.5 T(1)): with no such floor, a copy of 2 x 16 tokens
#: was trusted with a 64-token pass that broke (code-edit on Zen 5, 13 % slower); 48 keeps every CPU's summed
#: time within 0.9986-1.0006 of the rule before, 96 gains nothing more.
SURE_COPY_TOKENS = 48


def copy_evidence(match_length: int, source_position: int, output_start: int) -> tuple[int, int | None]:
    """(match length to judge a free proposal by, most tokens to draft from it or None for no cap).

    The match length selects the proposal's :class:`MatchAcceptance` bucket and the copy-evidence floor of
    :meth:`AdaptivePolicy.free_values`. A proposal copied from the prompt, a prediction or the draft memory
    (``source_position`` < ``output_start``; -1 when not from the context) is judged by its match length,
    uncapped. One copied from the generation's own output (:data:`SELF_REPEAT_TOKENS`) is capped at
    :data:`SELF_COPY_DRAFT_MAX` tokens and judged by at most ``COPY_EVIDENCE_TOKENS - 1`` (no floor: its
    bucket has to learn it in this generation) until its match exceeds ``COPY_EVIDENCE_TOKENS +
    SELF_REPEAT_TOKENS - 1``; from there it is judged by its agreement beyond ``SELF_REPEAT_TOKENS``, uncapped.

    Args:
        match_length: tokens over which the copied place agrees with the end of the committed tokens.
        source_position: index in the committed tokens of the first copied token, -1 when not from them.
        output_start: index of the generation's first output token (the prompt's length).
    """
    if source_position < output_start:
        return match_length, None
    if match_length < COPY_EVIDENCE_TOKENS + SELF_REPEAT_TOKENS:
        return min(match_length, COPY_EVIDENCE_TOKENS - 1), SELF_COPY_DRAFT_MAX
    return match_length - SELF_REPEAT_TOKENS, None


@dataclass(frozen=True, slots=True)
class Choice:
    """A policy's decision for one round.

    Attributes:
        drafter: the drafter to draft with (``DrafterId.NONE``: no speculation this round).
        draft_len: most tokens to draft (0 = no speculation this round).
        reason: short human-readable reason, shown in the statistics.
    """

    drafter: DrafterId
    draft_len: int
    reason: str = ""


class Proposal(Protocol):
    """A free drafter's proposal (a :class:`localspec.core.drafters.Draft` is one)."""

    #: proposed token ids (may be empty)
    tokens: Sequence[int]
    #: over how many tokens the place it copies from agrees with the end of the committed tokens (0: not reported)
    match_length: int
    #: index in the committed tokens of the first copied token; -1 when not copied from them (a prediction,
    #: the draft memory) or not reported (:func:`copy_evidence`)
    source_position: int


@dataclass(frozen=True, slots=True)
class RoundState:
    """What a round knows when it asks its policy to choose (step 1 of the round).

    Attributes:
        committed: the committed token ids (prompt and output so far).
        limit: most tokens that may be drafted (context window, max_tokens), >= 0.
        proposals: per free drafter named in :attr:`DraftPolicy.free_drafters` that has one, its
            proposal this round, in the policy's order (empty when ``limit`` is 0).
        generated: output tokens committed so far.
        catchup_tokens: tokens the draft model would first catch up on (its KV cache lagging the
            committed tokens; :meth:`~localspec.core.drafters.DraftModelDrafter.catchup_tokens`).
        output_held: the consumer has been given no text yet and holds all of the output so far (the server's
            tool-call parser holds an answer that may begin a call marker, e.g. a lone ``<``, until the next
            token shows what it is; :attr:`~localspec.core.generation.Generation.holds_output`).
    """

    committed: Sequence[int]
    limit: int
    proposals: Mapping[DrafterId, Proposal] = field(default_factory=dict)
    generated: int = 0
    catchup_tokens: int = 0
    output_held: bool = False

    @property
    def position(self) -> int:
        """Tokens committed (prompt included): the verification pass starts there."""
        return len(self.committed)


class DraftPolicy(Protocol):
    """What the round asks of a policy: :meth:`choose` before drafting, :meth:`observe` at its end."""

    #: the free drafters (no model pass: a predicted output, prompt lookup) whose proposal the
    #: policy wants every round, in order of preference
    free_drafters: tuple[DrafterId, ...]

    def choose(self, state: RoundState) -> Choice:
        """The drafter and the draft length for this round (at most ``state.limit`` tokens are drafted)."""
        ...

    def observe(self, rs: RoundStats) -> None:
        """Learn from the finished round: drafter, drafted, accepted, drafting, verification and catch-up seconds."""
        ...


class FixedPolicy:
    """Always the same drafter and ``draft_max`` tokens (fewer near the limits).

    A predicted output, while it has a proposal, is tried before that drafter (not in
    mode ``none``).
    """

    free_drafters = (DrafterId.PREDICTION,)

    def __init__(self, drafter: DrafterId | str, draft_max: int) -> None:
        self.drafter = DrafterId(drafter)
        self.draft_max = draft_max if self.drafter is not DrafterId.NONE else 0

    def choose(self, state: RoundState) -> Choice:
        prediction = state.proposals.get(DrafterId.PREDICTION)
        if prediction is not None and prediction.tokens and self.draft_max:
            return Choice(DrafterId.PREDICTION, max(0, min(self.draft_max, state.limit, len(prediction.tokens))),
                          "fixed, prediction first")
        return Choice(self.drafter, max(0, min(self.draft_max, state.limit)), "fixed")

    def observe(self, rs: RoundStats) -> None:
        """Nothing to learn: the choice is fixed."""


class AdaptivePolicy:
    """Mode ``auto``: each round, the drafter and draft length with the most expected tokens/s.

    For each candidate drafter (prompt lookup when it has a proposal, the draft model when
    loaded) it takes :func:`best_draft_length` over g = 0..limit with that drafter's
    per-position exponentially weighted acceptance estimates (:class:`EWAcceptance`),
    the verify cost curve and the drafter's cost per token, and compares with target-only
    decoding (g = 0). It speculates only when the expected gain exceeds ``margin``.

    Prompt lookup costs no model pass, so the policy also scores the lookup proposal of
    every round against the tokens the target then committed (:meth:`_see_free`, from
    :meth:`choose`), whether lookup was used or not: its estimates follow the text even
    while it is off. They are kept per match length (:class:`MatchAcceptance`): a
    proposal whose source agrees with the text over many tokens starts from a high prior
    (rule of succession, the first :data:`~localspec.core.costmodel.LOOKUP_CHANCE_TOKENS`
    of a lookup match not counted), so a copy is drafted from its first rounds, while a
    short common n-gram has to earn it. A predicted output (a request's ``prediction``) is scored
    the same way and tried before prompt lookup: it wins a tie.
    Any free drafter that reports a match length can be scored so. The costs are those at the
    current position (:meth:`EngineCosts.set_position`). The draft model has no such free signal;
    while unused its estimates relax towards the prior, and it is never tried when even a perfect draft (acceptance
    1 at every position) could not beat target-only decoding with the measured costs, as
    with the 0.5B/1.5B pair on a 2-core CPU.

    A draft model whose KV cache lags the committed tokens must first catch up (its
    prefill: :attr:`RoundState.catchup_tokens`, told every round). That one-off cost,
    pending tokens x the measured per-token catch-up cost, counts as drafting cost spread
    over the tokens still expected: the draft model is chosen only if its rate over that
    horizon, catch-up included, beats target-only decoding. The horizon is the number of
    tokens generated so far (an answer is expected to run about as long again), at least
    ``catchup_horizon`` and at most the tokens left; so a 1,000-token catch-up is not paid
    for a short answer.

    Args:
        costs: the engine's :class:`EngineCosts` (shared, refined as rounds run).
        draft_max: most tokens drafted per round.
        has_draft: a draft model is loaded.
        weight: weight of a new acceptance observation.
        prior_draft: starting acceptance estimate of the draft model.
        prior_lookup: starting estimate of a free proposal without a match length (bucket 0).
        prior_prediction: starting estimate of a predicted output without a match length
            (given by the user as what the answer repeats: high).
        relax: per unobserved round, fraction of the way back to the prior (draft model).
        margin: speculate only if the expected speedup is at least ``1 + margin``. 0.10: a round whose
            estimate promises a few per cent is a coin toss (a multi-token pass's time varies by more
            than that from round to round, and a short match's acceptance estimate rests on a few
            observations), and on a steep CPU curve the tosses lost: chat on the default pair, AMD EPYC
            Zen 4, 8 paired repetitions against llama-server plain, margin 0.03: 269 tokens drafted,
            42 % accepted, 0.96x; 0.10: 91 drafted, 0.99x. Copies (long matches) promise far more and
            are drafted as before (the replay on every recorded curve: ``scripts/replay_policy.py``).
        catchup_horizon: fewest tokens a draft-model catch-up is spread over.
        first_token_undrafted: the generation's first round drafts nothing (the engine's generations set it:
            :meth:`~localspec.core.engine.SpeculativeEngine.make_policy`) (:data:`FIRST_TOKEN_REASON`),
            so the first answer token is streamed after the prompt's pass and one one-token pass, as
            llama-server streams it, never held for a draft's verification: at a long agent prompt a
            15-token lookup draft made that pass 0.54 s instead of 0.12 s (Intel Xeon with AMX, 7,400
            tokens cached), and it was rejected in two of three turns. The cost is at most one
            one-token pass a generation. The policy still scores that round's proposals. With it, a
            round whose :attr:`RoundState.output_held` is set drafts nothing too
            (:data:`HELD_OUTPUT_REASON`): the client has still seen nothing, and the next token decides
            whether what it waits for is text or a call (an opencode answer beginning ``<system-reminder>``
            was streamed after a 14-token round of 0.55 s instead of a one-token pass of 0.12 s).
    """

    free_drafters = (DrafterId.PREDICTION, DrafterId.LOOKUP)

    def __init__(self, costs: EngineCosts, draft_max: int, has_draft: bool, *, weight: float = 0.3,
                 prior_draft: float = 0.6, prior_lookup: float = 0.5, prior_prediction: float = 0.8,
                 relax: float = 0.01, margin: float = 0.10, catchup_horizon: int = 64,
                 first_token_undrafted: bool = False) -> None:
        self.costs = costs
        self.first_token_undrafted = first_token_undrafted
        self.draft_max = draft_max
        self.has_draft = has_draft and costs.draft_token is not None
        self.draft_est = EWAcceptance(draft_max, prior_draft, weight)
        #: per free drafter: acceptance by match length; its pending proposal; its current match length
        self.free_est: dict[DrafterId, MatchAcceptance] = {
            DrafterId.LOOKUP: self.new_lookup_acceptance(draft_max, prior_lookup, weight),
            DrafterId.PREDICTION: MatchAcceptance(draft_max, prior_prediction, weight, floor=prior_prediction),
        }
        self._pending: dict[DrafterId, tuple[int, tuple[int, ...], int]] = {}
        self.match_length: dict[DrafterId, int] = {}
        #: per free drafter: its last scored proposals in a row that agreed over every proposed token (a sure copy
        #: from :data:`SURE_COPY_PROPOSALS` on; 0 after a mismatch)
        self.agreed_run: dict[DrafterId, int] = {}
        #: per free drafter: the tokens those proposals agreed over (0 after a mismatch; :data:`SURE_COPY_TOKENS`)
        self.agreed_tokens: dict[DrafterId, int] = {}
        #: per free drafter: (tokens agreed, breaks) of its scored copies this generation (:meth:`copy_break_rate`)
        self._copy_record: dict[DrafterId, tuple[int, int]] = {}
        self.relax = relax
        self.margin = margin
        self.last: Choice | None = None
        self.catchup_horizon = catchup_horizon
        self.draft_catchup = 0  #: tokens the draft model must catch up before drafting (this round's)
        self.generated = 0  #: output tokens committed before this round
        #: this generation's fixed cost of a round beside its model passes, seconds (:meth:`observe_overhead`):
        #: learned from its own rounds, starting from the engine's calibrated value; never shared with
        #: another generation (a client asking for 20 top logprobs pays its own bookkeeping)
        self.overhead = costs.overhead
        self._n_overhead = 0

    @staticmethod
    def new_lookup_acceptance(draft_max: int, prior: float = 0.5, weight: float = 0.3) -> MatchAcceptance:
        """Prompt lookup's starting estimates by match length (the rule of succession, its
        :data:`~localspec.core.costmodel.LOOKUP_CHANCE_TOKENS` chance tokens not counted)."""
        return MatchAcceptance(draft_max, prior, weight, chance=LOOKUP_CHANCE_TOKENS)

    @property
    def lookup_est(self) -> MatchAcceptance:
        return self.free_est[DrafterId.LOOKUP]

    # -- the choice -------------------------------------------------------------------
    def draft_can_pay(self, g_max: int) -> bool:
        """Whether a perfect draft (acceptance 1) beats target-only decoding at some g <= g_max."""
        if not self.has_draft:
            return False
        c = self.costs
        g, best, rate0 = best_draft_length([1.0] * g_max, c.verify, c.draft_token or 0.0, g_max, self.overhead)
        return g > 0 and best > rate0 * (1.0 + self.margin)

    def choose(self, state: RoundState) -> Choice:
        """The drafter and draft length for this round.

        First learns what the round tells (the draft model's pending catch-up, the tokens
        generated, each free proposal scored by :meth:`_see_free` under its :func:`copy_evidence`),
        then predicts the costs at
        ``state.position`` and compares every candidate drafter with target-only decoding.
        """
        self.draft_catchup = max(0, int(state.catchup_tokens))
        self.generated = max(0, int(state.generated))
        output_start = len(state.committed) - self.generated
        caps = {}  # per free drafter: most tokens its proposal may draft this round (a repetition of the output)
        for name, proposal in state.proposals.items():
            evidence, caps[name] = copy_evidence(proposal.match_length, proposal.source_position,
                                                 output_start)
            self._see_free(name, state.committed, proposal.tokens, evidence)
        if self.first_token_undrafted and (self.generated == 0 or state.output_held):
            self.last = Choice(DrafterId.NONE, 0, FIRST_TOKEN_REASON if self.generated == 0 else HELD_OUTPUT_REASON)
            return self.last
        c, limit = self.costs, state.limit
        c.set_position(state.position)
        g_cap = max(0, min(limit, self.draft_max, len(c.verify) - 1))
        options = []  # (rate, drafter, g, expected tokens); on a tie the first wins
        rate0 = None
        notes = []
        # free drafters (no model pass), a predicted output before prompt lookup
        for name in self.free_drafters:
            match = len(state.proposals[name].tokens) if name in state.proposals else 0
            match = min(match, caps.get(name) or match)
            if g_cap > 0 and match:
                acc = self.free_values(name)
                g, r, r0 = best_draft_length(acc, c.verify, 0.0, min(g_cap, match), self.overhead)
                rate0 = r0
                options.append((r, name, g, expected_tokens(acc[:g])))
                notes.append(f"{name} {r / r0:.2f}x")
        if g_cap > 0 and self.draft_can_pay(g_cap):
            g, r, r0 = best_draft_length(self.draft_est.values, c.verify, c.draft_token or 0.0, g_cap, self.overhead)
            rate0 = r0
            n_catch, r = self._with_catchup(r, limit)
            options.append((r, DrafterId.DRAFT, g, expected_tokens(self.draft_est.values[:g])))
            notes.append(f"draft {r / r0:.2f}x" + (f" incl. catch-up of {n_catch} tok" if n_catch else ""))
        elif self.has_draft and g_cap > 0:
            notes.append("draft cannot pay")
        best = max(options, default=None, key=lambda o: o[0])
        if best is not None and best[2] > 0 and best[0] >= rate0 * (1.0 + self.margin):
            r, drafter, g, e = best
            m = f", match {self.match_length.get(DrafterId.LOOKUP, 0)}" if drafter == DrafterId.LOOKUP else ""
            choice = Choice(drafter, g, f"g={g} {drafter}: est {e:.2f} tok/pass, {r / rate0:.2f}x{m}")
        else:
            why = ", ".join(notes) if notes else ("no lookup match" if g_cap > 0 else "at limit")
            choice = Choice(DrafterId.NONE, 0, f"no speculation: best g=0 ({why})")
        self.last = choice
        return choice

    def free_values(self, name: DrafterId) -> list[float]:
        """Acceptance estimates of free drafter ``name``'s proposal this round, per draft position.

        The larger, position by position, of its match-length bucket's estimates
        (:class:`MatchAcceptance`: what proposals of that length did before) and the rule of
        succession on the evidence of the current copy itself (:func:`succession_prior` on its match
        length: for a prediction, the committed tokens in a row that agree with it; for prompt
        lookup, how far the copied place agrees with the end of the text, its first
        :data:`~localspec.core.costmodel.LOOKUP_CHANCE_TOKENS` not counted, up to
        :data:`~localspec.core.drafters.lookup.MAX_CONTEXT`). A bucket learns only the draft
        positions that were drafted, so on its own it keeps long drafts short; the copy's own
        evidence grows with every accepted round (after r tokens a draft of g reaches its end with
        probability (r + 1) / (r + g + 1)), and one wrong token ends the copy: the next proposal
        is a new, short match and is drafted as short as its bucket says. The floor applies only to
        the positions its bucket has not yet learned (seen fewer than :data:`LEARNED_OBSERVATIONS`
        times): where long matches of this length kept breaking early in this generation, what
        was seen wins. Shorter matches than :data:`COPY_EVIDENCE_TOKENS` (16) follow their bucket alone.

        A sure copy (:meth:`is_sure_copy`: the drafter's last :data:`SURE_COPY_PROPOSALS` proposals agreed
        over every token, and this one's match is at least :data:`COPY_EVIDENCE_TOKENS`) is valued at no less
        than 1 - :meth:`copy_break_rate` at every position: 1 while none of this generation's copies from the
        drafter broke, so its length is where the cost per token, fixed cost included, is least.
        """
        match = self.match_length.get(name, 0)
        bucket = self.free_est[name].bucket(match)
        acc = bucket.values
        chance = LOOKUP_CHANCE_TOKENS if name == DrafterId.LOOKUP else 0
        if match < COPY_EVIDENCE_TOKENS:
            return acc
        values = [a if n >= LEARNED_OBSERVATIONS else max(a, s)
                  for a, n, s in zip(acc, bucket.counts, succession_prior(match, len(acc), chance))]
        if self.is_sure_copy(name):
            sure = 1.0 - self.copy_break_rate(name)
            return [max(v, sure) for v in values]
        return values

    def is_sure_copy(self, name: DrafterId) -> bool:
        """Whether free drafter ``name``'s proposal this round continues a sure copy: its last
        :data:`SURE_COPY_PROPOSALS` scored proposals (each :data:`COPY_EVIDENCE_TOKENS` tokens or more) agreed
        with the committed tokens over every token, and this proposal's match is :data:`COPY_EVIDENCE_TOKENS`
        or longer (a repetition of the generation's own output counts only once trusted, :func:`copy_evidence`), and
        together they agreed over :data:`SURE_COPY_TOKENS` or more. A proposal counts once its first
        :data:`COPY_EVIDENCE_TOKENS` tokens or more were committed without a mismatch, whether wholly committed
        or closed early because the match grew into another bucket (:meth:`_record_copy`)."""
        return (self.agreed_run.get(name, 0) >= SURE_COPY_PROPOSALS
                and self.agreed_tokens.get(name, 0) >= SURE_COPY_TOKENS
                and self.match_length.get(name, 0) >= COPY_EVIDENCE_TOKENS)

    def copy_break_rate(self, name: DrafterId) -> float:
        """Breaks per scored token of free drafter ``name``'s copies in this generation (proposals judged by
        a match of :data:`COPY_EVIDENCE_TOKENS` or more; the maximum-likelihood rate of a constant hazard): 0
        until one broke. A file returned with renames breaks at each renamed site, an unchanged one never."""
        agreed, breaks = self._copy_record.get(name, (0, 0))
        return breaks / (agreed + breaks) if breaks else 0.0

    def catchup_seconds(self) -> tuple[int, float]:
        """(tokens, expected seconds) of the catch-up the draft model needs before drafting now."""
        n = self.draft_catchup
        return n, n * (self.costs.draft_prefill_token_seconds or 0.0)

    def _with_catchup(self, rate: float, limit: int) -> tuple[int, float]:
        """A draft-model rate with the pending catch-up spread over the expected remaining tokens."""
        n, seconds = self.catchup_seconds()
        if n == 0 or rate <= 0:
            return 0, rate
        horizon = max(1, min(max(self.generated, self.catchup_horizon), limit))
        return n, horizon / (horizon / rate + seconds)

    # -- learning ---------------------------------------------------------------------
    def _see_free(self, name: DrafterId, committed: Sequence[int], proposal: Sequence[int], match_length: int = 0) -> None:
        """Score a free drafter's proposals against the tokens the target committed; no model pass.

        Called by :meth:`choose` every round with the committed tokens and this round's
        proposal of drafter ``name`` (possibly empty) and its match length (how many
        tokens its source agrees with the end of ``committed``; 0 = not reported). A
        proposal is kept until the committed tokens that follow it decide its fate (first
        mismatch, or every proposed token matched), then scored, in the bucket of its match
        length, as if it had been drafted: positions before the first mismatch accepted,
        the mismatch rejected. When a later proposal's match length falls in another bucket, the
        pending one is closed early as a draft of the tokens matched so far, all accepted, and
        the later one is followed instead (else the buckets of the longer matches that rounds
        actually draft from would never learn). Other proposals made while one is pending fall inside it and are
        skipped, so each committed token is scored once, as in rounds that draft back to
        back. Comparing with the committed tokens is the acceptance rule of a point-mass
        draft (exact in greedy and sampled modes). A proposal of :data:`COPY_EVIDENCE_TOKENS` or more
        that agreed over every token lengthens the drafter's :attr:`agreed_run`; a mismatch ends it.
        """
        est = self.free_est.get(name)
        if est is None:  # a free drafter of its own (not prediction or lookup): lookup's prior
            est = self.free_est[name] = MatchAcceptance(self.draft_max, self.lookup_est.buckets[0].prior[0],
                                                        self.lookup_est.buckets[0].weight)
        pend = self._pending.get(name)
        if pend is not None:
            start, prop, m = pend
            new = committed[start : start + len(prop)]
            k = 0
            while k < len(new) and prop[k] == new[k]:
                k += 1
            if k < len(new):  # first mismatch at k
                est.update(m, k + 1, k)
                self._record_copy(name, m, k, broke=True)
                pend = None
            elif len(new) == len(prop):  # every proposed token matched
                est.update(m, len(prop), len(prop))
                self._record_copy(name, m, len(prop), broke=False)
                pend = None
            elif proposal and est.bucket_index(match_length) != est.bucket_index(m):
                # the match grew into another bucket (this round's proposal is judged there): the pending one
                # ends here, its k tokens all matched (a draft of k, all accepted), so that every bucket
                # a drafted proposal belongs to learns, not only the one where its copy began
                est.update(m, k, k)
                self._record_copy(name, m, k, broke=None)
                pend = None
        if pend is None and proposal:
            pend = (len(committed), tuple(proposal), int(match_length))
        if pend is None:
            self._pending.pop(name, None)
        else:
            self._pending[name] = pend
        self.match_length[name] = int(match_length) if proposal else 0

    def _record_copy(self, name: DrafterId, match_length: int, agreed: int, broke: bool | None) -> None:
        """A scored proposal's end: ``agreed`` tokens matched, then a mismatch (``broke``), the whole proposal
        matched (False) or closed early in another bucket (None). Copies (a match of :data:`COPY_EVIDENCE_TOKENS`
        or more) count in :meth:`copy_break_rate`; a mismatch ends :attr:`agreed_run`; :data:`COPY_EVIDENCE_TOKENS`
        or more agreeing tokens with no mismatch lengthen it, whether the whole proposal was committed or it was
        closed early because the copy's match grew into another bucket (as it does every round of a copy's
        first rounds: counting only whole proposals kept a copy from ever becoming sure while its drafts
        were still growing, where the rule pays most)."""
        if broke:
            self.agreed_run[name] = 0
            self.agreed_tokens[name] = 0
        elif agreed >= COPY_EVIDENCE_TOKENS:
            self.agreed_run[name] = self.agreed_run.get(name, 0) + 1
            self.agreed_tokens[name] = self.agreed_tokens.get(name, 0) + agreed
        if match_length >= COPY_EVIDENCE_TOKENS:
            a, b = self._copy_record.get(name, (0, 0))
            self._copy_record[name] = (a + agreed, b + (1 if broke else 0))

    def observe_overhead(self, seconds: float) -> None:
        """Learn this generation's fixed cost of a round from one round: its time minus its model passes,
        seconds (:attr:`~localspec.core.events.RoundStats.round_seconds`); negative values are ignored.
        The calibrated value serves until the first round; the first rounds are averaged (weight 1/n),
        later ones weighted exponentially (:attr:`EngineCosts.weight <localspec.core.costmodel.EngineCosts.weight>`)."""
        if seconds >= 0:
            self._n_overhead += 1
            self.overhead += max(self.costs.weight, 1.0 / self._n_overhead) * (seconds - self.overhead)

    def observe(self, rs: RoundStats) -> None:
        """Learn from the finished round: the draft model's acceptance (:class:`EWAcceptance`), and the
        verification, drafting and catch-up times (the cost model's corrections, :class:`EngineCosts`).

        Free drafters' estimates learn in :meth:`choose` (every round, from the committed tokens), not
        here, so that each round counts once.
        """
        c = self.costs
        c.observe_verify(rs.drafted + 1, rs.verify_seconds)
        model_seconds = rs.verify_seconds + rs.catchup_seconds
        if rs.drafter == DrafterId.DRAFT:
            self.draft_est.update(rs.drafted, rs.accepted)
            c.observe_draft(rs.drafted, rs.draft_seconds)
            model_seconds += rs.draft_seconds
        else:
            self.draft_est.relax(self.relax)
        # the round's fixed cost: all of its time but the model passes (a free drafter's proposal,
        # choosing, the acceptance bookkeeping, releasing text; not the time the consumer held the events)
        self.observe_overhead(rs.round_seconds - model_seconds if rs.round_seconds > 0 else
                              (rs.draft_seconds if rs.drafter != DrafterId.DRAFT else -1.0))
        if rs.catchup_tokens:
            c.observe_catchup(rs.catchup_tokens, rs.catchup_seconds)
