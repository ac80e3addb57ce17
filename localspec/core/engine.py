"""The engine: a target model, optionally a draft model, their KV caches and the drafters built on them.

Why these hold together: :class:`SpeculativeEngine` owns the models and everything that outlives a
request (the caches and the prompt prefixes kept, the drafters, the measured costs, the cache scope),
and :class:`Engine` is the surface of it a front-end may use. One request's round loop is
:class:`~localspec.core.generation.Generation` (:mod:`localspec.core.generation`), which
:meth:`SpeculativeEngine.generate` makes; :data:`Event` and ``Generation`` are imported here too, as
the front-ends read them beside the engine. The round's invariant, which :meth:`SpeculativeEngine.check_caches`
checks with ``LOCALSPEC_DEBUG`` set, is stated in :mod:`localspec.core.generation`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol, Sequence

import numpy as np

from localspec.config import DraftParams, GenerationParams, SamplingParams, fits_context
from localspec.core.acceptance import Constraint
from localspec.core.costmodel import CostSource, EngineCosts
from localspec.core.drafters import DraftMemory, DraftModelDrafter, PromptLookupDrafter
from localspec.core.events import DrafterId
from localspec.core.policy import AdaptivePolicy, DraftPolicy, FixedPolicy
from localspec.core.prefix_cache import PrefixCache, common_prefix
from localspec.core.tokenizer import check_compatible
from localspec.errors import ConfigError, ContextOverflowError
from localspec.core.generation import Event, Generation
from localspec.core.messages import continues_final_message, opens_the_answer

__all__ = ["Engine", "Event", "Generation", "LoadedModel", "Prefill", "SpeculativeEngine"]


@dataclass(frozen=True)
class LoadedModel:
    """How one of an engine's models was loaded (:meth:`SpeculativeEngine.loaded_models`).

    Attributes:
        path: the GGUF file.
        repack: whether the weights are in llama.cpp's repacked (extra) buffer types.
        repack_verdict: the probe's :class:`localspec.backend.repack.RepackVerdict` followed, or None
            when none ran (``--repack on/off``, or a model not made by the loader).
        huge_page_bytes: bytes of the weights in huge pages (0: none).
        prefill_copy: whether a second copy in the standard layout reads its prompts
            (:meth:`localspec.backend.llama.LlamaModel.attach_prefill_copy`).
    """

    path: str
    repack: bool
    repack_verdict: object | None
    huge_page_bytes: int
    prefill_copy: bool = False


class Prefill(NamedTuple):
    """What :meth:`SpeculativeEngine.prefill` did (seconds are wall time)."""

    target_seconds: float
    draft_seconds: float
    cached_tokens: int  #: prompt tokens the target's KV cache already held (reused prefix)


class Engine(Protocol):
    """The engine's public surface: all that a front-end (the CLI, the TUI, the server, the
    benchmarks) may use. :class:`SpeculativeEngine` implements it (the TUI tests drive it over
    scripted fake models, ``tests/tui/tui_fakes.py``); nothing outside the engine reaches for its models.
    """

    @property
    def n_ctx(self) -> int:
        """The context window, tokens (prompt and output together)."""
        ...

    @property
    def has_draft_model(self) -> bool:
        """Whether a draft model is loaded (mode ``draft`` needs one)."""
        ...

    @property
    def cost_model(self) -> EngineCosts | None:
        """The measured costs mode ``auto`` uses, None until loaded or measured."""
        ...

    def tokenize(self, text: str, *, special: bool = True, bos: bool = True) -> list[int]: ...

    def chat_tokens(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]: ...

    def chat_template(self) -> str | None: ...

    def fim_tokens(self) -> dict[str, int]: ...

    def bos_token(self) -> int | None: ...

    def token_text(self, token_id: int) -> str: ...

    def token_bytes(self, token_id: int) -> bytes: ...

    #: sentences a front-end shows the user once after loading
    notices: list[str]

    def calibrated_costs(self, draft_max: int, remeasure: bool = False, progress=None) -> EngineCosts: ...

    def has_costs(self, draft_max: int) -> bool: ...

    def loaded_models(self) -> dict[str, "LoadedModel"]: ...

    def model_seconds(self) -> float: ...

    def next_token_logits(self, tokens: Sequence[int]) -> np.ndarray: ...

    def prefill(self, prompt: Sequence[int], draft: bool = True,
                progress: Callable[[int, int], None] | None = None, reuse: bool = True) -> Prefill: ...

    def generate(self, prompt: Sequence[int], sampling: SamplingParams | None = None,
                 drafting: DraftParams | None = None, generation: GenerationParams | None = None,
                 policy: DraftPolicy | None = None, prediction: Sequence[int] | None = None,
                 constraint: Constraint | None = None, logprobs: int | None = None,
                 memory: DraftMemory | None = None, cache_prompt: bool = True) -> Generation: ...

    def clear_cache(self, keep: bool = False) -> None: ...

    def enter_scope(self, scope: str) -> None: ...

    def set_aside(self) -> list[tuple[Any, Any]]: ...

    def put_back(self, kept: list[tuple[Any, Any]]) -> None: ...

    def grammar(self, gbnf: str, root: str = "root", triggers: Sequence[int] = ()) -> Constraint: ...

    def lazy_grammar(self, forms: Sequence[tuple[bytes, str, bool]], root: str, ends: bytes,
                     outside_code: bool = False) -> Constraint: ...

    def close(self) -> None: ...


class SpeculativeEngine:
    """A target model, optionally a draft model, and the drafters built on them.

    Args:
        target: the target :class:`localspec.backend.llama.LlamaModel`.
        draft_model: a draft model with the target's tokenizer, or None (prompt lookup
            and target-only decoding still work).
        costs: this machine's measured costs for mode ``auto``, or None.
        clock: the timing source of every duration the engine reports (prefill, drafting,
            verification, catch-up, time to first token, elapsed; seconds, monotonic). The
            default is :func:`time.perf_counter`; tests pass a fake clock that their fake
            models advance, so the reported timings are exact.
        cost_source: where further costs come from (:class:`~localspec.core.costmodel.CostSource`):
            the loader's :class:`localspec.app.loader.MachineCosts`, which reads this machine's cost
            cache when mode ``auto`` is first asked for without held costs covering its cap, and
            measures on an explicit :meth:`calibrated_costs` (:func:`localspec.app.loader.load_engine`
            does it, visibly). The engine never reads the cache or measures itself; :meth:`generate`
            never measures. None: only ``costs``.

    Raises:
        TokenizerMismatchError: the draft's tokenizer differs from the target's.
    """

    def __init__(self, target, draft_model=None, costs: EngineCosts | None = None,
                 clock: Callable[[], float] = time.perf_counter, cost_source: CostSource | None = None) -> None:
        self.target = target
        self.clock = clock
        self.draft_model = draft_model
        self.lookup = PromptLookupDrafter()
        self.drafter: DraftModelDrafter | None = None
        if draft_model is not None:
            n_shared = check_compatible(target.vocab_info(), draft_model.vocab_info())
            self.drafter = DraftModelDrafter(draft_model, n_propose=min(n_shared, target.n_vocab), clock=clock)
        self._costs = costs
        self.cost_source = cost_source
        #: sentences the front-end shows the user once after loading (e.g. weight repacking turned
        #: off by the probe, :func:`localspec.app.loader.load_model`)
        self.notices: list[str] = []
        #: check the caches after every round (:meth:`check_caches`): set ``LOCALSPEC_DEBUG=1``
        self.debug = bool(os.environ.get("LOCALSPEC_DEBUG"))
        #: kept prompt prefixes (KV-cache snapshots of both models) that :meth:`prefill` restores; None: only
        #: the live caches are reused (the server sets one: ``--prompt-cache-mb``)
        self.prefix_cache: PrefixCache | None = None
        #: whose tokens the live KV caches hold (:meth:`enter_scope`): an opaque string, ``""`` with one user
        self.cache_scope = ""

    @property
    def cost_model(self) -> EngineCosts | None:
        """The measured costs mode ``auto`` uses (None until loaded or measured)."""
        return self._costs

    def calibrated_costs(self, draft_max: int, remeasure: bool = False, progress=None) -> EngineCosts:
        """The costs for draft lengths up to ``draft_max``: kept while they cover it (unless
        ``remeasure``), else the cost source's, from this machine's cache or measured now
        (:meth:`CostSource.measure <localspec.core.costmodel.CostSource.measure>`;
        ``progress(what, done, total)`` follows a measurement).

        Raises:
            ConfigError: no cost source (an engine made without the loader) and no held costs covering ``draft_max``.
        """
        if self.cost_source is None:
            if remeasure or self._costs is None or not self._costs.covers(draft_max, self.draft_model is not None):
                raise ConfigError(f"this engine cannot measure decode costs for drafts up to {draft_max} tokens",
                                  "make it with localspec.app.loader (load_engine or make_engine)")
            return self._costs
        self._costs = self.cost_source.measure(draft_max, existing=self._costs, remeasure=remeasure, progress=progress)
        return self._costs

    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    @property
    def has_draft_model(self) -> bool:
        """Whether a draft model is loaded (mode ``draft`` needs one; ``auto`` may use it)."""
        return self.drafter is not None

    # -- prompts --------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = True, bos: bool = True) -> list[int]:
        """Raw text -> target token ids.

        ``special=True`` (a prompt): special tokens written as text become their ids and
        BOS is added as the GGUF asks (``bos=False``: never, for a part of a prompt).
        ``special=False`` (a predicted output): plain text, no BOS.
        """
        if special:
            return self.target.tokenize(text) if bos else self.target.tokenize(text, add_special=False)
        return self.target.tokenize(text, add_special=False, parse_special=False)

    def chat_tokens(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """Chat messages rendered with the target's chat template, then tokenized.

        Only the template's markup becomes special tokens; message content is tokenized
        as text, so a message cannot forge a turn with ``<|im_start|>`` written in it
        (:meth:`localspec.backend.llama.LlamaModel.tokenize_chat`). ``tools``: OpenAI's function
        tools, rendered by the template (its ``tools`` variable; see
        :meth:`localspec.backend.llama.LlamaModel.render_chat`). The draft model receives these
        identical ids.

        Messages that end with an assistant message holding text
        (:func:`~localspec.core.messages.continues_final_message`) end the prompt inside it, after its text,
        and the answer continues it; the answer holds only the new text. Any other chat ends with the
        template's assistant header, and the answer is a new turn (a final assistant message without text or
        calls is left out: :func:`~localspec.core.messages.opens_the_answer`).

        Raises:
            ModelError: the target has no chat template.
            ConfigError: the template refuses the messages, or a content cannot be kept as
                text, or the final message to continue cannot be located (see ``tokenize_chat``).
        """
        kwargs: dict = {"tools": tools} if tools else {}
        if messages and opens_the_answer(messages[-1]):
            messages = messages[:-1]
        if continues_final_message(messages):
            kwargs["continue_final_message"] = True
        return self.target.tokenize_chat(messages, **kwargs)

    def fim_tokens(self) -> dict[str, int]:
        """The target's fill-in-the-middle token ids by role (``pre``, ``suf``, ``mid``, ``pad``, ``rep``,
        ``sep``; -1 where absent): :meth:`localspec.backend.llama.LlamaModel.fim_tokens`. A model without
        the method (a fake) has none."""
        fim = getattr(self.target, "fim_tokens", None)
        return fim() if fim is not None else {}

    def bos_token(self) -> int | None:
        """The BOS token id a raw prompt starts with (the GGUF asks for one), or None."""
        return self.target.bos if getattr(self.target, "add_bos", False) and self.target.bos >= 0 else None

    def chat_template(self) -> str | None:
        """The target GGUF's chat template (Jinja source), or None."""
        return self.target.chat_template()

    def model_seconds(self) -> float:
        """Seconds spent in model decode calls (target and draft model) since the engine was made.

        Wall time inside :meth:`localspec.backend.llama.LlamaModel.decode`; a benchmark takes the
        difference over a generation to tell llama.cpp's work from the engine's own.
        """
        models = [self.target] + ([self.draft_model] if self.draft_model not in (None, self.target) else [])
        return float(sum(getattr(m, "decode_seconds", 0.0) for m in models))

    def pass_seconds(self) -> float:
        """Seconds inside llama.cpp's passes (``llama_decode``; target and draft model) since the engine was made.

        :attr:`localspec.backend.llama.LlamaModel.llama_decode_seconds` summed: :meth:`model_seconds`
        less the Python around each pass (the batch, the logits' copy). A generation takes its difference over
        each round (:attr:`localspec.core.events.RoundStats.pass_seconds`); a model without the counter (a
        fake) counts 0.
        """
        models = [self.target] + ([self.draft_model] if self.draft_model not in (None, self.target) else [])
        return float(sum(getattr(m, "llama_decode_seconds", 0.0) for m in models))

    def loaded_models(self) -> dict[str, LoadedModel]:
        """``{"target": ..., "draft": ...}`` (no ``"draft"`` without a draft model): how each was loaded."""
        out = {}
        for role, m in (("target", self.target), ("draft", self.draft_model)):
            if m is not None:
                out[role] = LoadedModel(str(getattr(m, "path", "")), bool(getattr(m, "repack", False)),
                                        getattr(m, "repack_verdict", None), int(getattr(m, "huge_page_bytes", 0)),
                                        getattr(m, "prefill_copy", None) is not None)
        return out

    def next_token_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """The target's next-token logits after ``tokens`` (reusing the cached prefix), for diagnostics.

        Returns:
            float32 array of shape (n_vocab,). The target's cache then holds ``tokens``.
        """
        seq = list(tokens)
        n = self.target.sync(seq)  # caches a prefix of seq, at most len(seq) - 1 tokens
        return self.target.decode(seq[n:], "last")[0]

    def token_text(self, token_id: int) -> str:
        """One token's text (a special token such as ``<|im_end|>`` as its text); invalid UTF-8 replaced.

        For showing single tokens (the round inspector); generated text comes in the events.
        """
        return self.target.token_bytes(int(token_id), special=True).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """One token's bytes (a special token such as ``<|im_end|>`` as its text), possibly part of a
        UTF-8 character: the ``bytes`` of a logprobs entry."""
        return self.target.token_bytes(int(token_id), special=True)

    def check_prompt(self, prompt: Sequence[int]) -> None:
        """Raise ConfigError for an empty prompt, ContextOverflowError when it does not fit."""
        if len(prompt) == 0:
            raise ConfigError("the prompt is empty", "type a prompt, or pass a file with text in it")
        if not fits_context(self.n_ctx, len(prompt)):
            raise ContextOverflowError(
                f"the prompt is {len(prompt)} tokens; the context window holds {self.n_ctx} "
                f"(and at least one token must be generated)",
                "shorten the prompt or raise --n-ctx",
            )
        bad = [t for t in prompt if not 0 <= t < self.target.n_vocab]
        if bad:
            raise ConfigError(f"token id {bad[0]} is outside the target vocabulary (0..{self.target.n_vocab - 1})")

    # -- drafting -------------------------------------------------------------------
    def make_policy(self, drafting: DraftParams) -> DraftPolicy:
        mode = drafting.mode
        if mode == "draft" and self.drafter is None:
            raise ConfigError("mode 'draft' needs a draft model", "load a draft model, or use --mode lookup")
        if mode == "auto":
            return AdaptivePolicy(self._costs_for(drafting.cap), drafting.cap, has_draft=self.drafter is not None,
                                  first_token_undrafted=True)
        return FixedPolicy(DrafterId(mode), drafting.cap)

    def has_costs(self, draft_max: int) -> bool:
        """Whether mode ``auto`` can run with drafts up to ``draft_max`` without measuring: the engine
        holds costs that cover it, or its cost source's cache does."""
        try:
            self._costs_for(draft_max)
        except ConfigError:
            return False
        return True

    def _costs_for(self, draft_max: int) -> EngineCosts:
        """Held costs covering ``draft_max``, else the cost source's cached ones; never measures (see
        :meth:`calibrated_costs`)."""
        c = self._costs
        if c is None or not c.covers(draft_max, self.draft_model is not None):
            c = self.cost_source.cached(draft_max) if self.cost_source is not None else None
            if c is None:
                raise ConfigError(f"mode 'auto' with drafts up to {draft_max} tokens needs this machine's "
                                  "decode costs, which are not measured yet",
                                  "measure them first (localspec calibrate, or engine.calibrated_costs), "
                                  "or use --mode lookup / draft")
            self._costs = c
        return c

    def draft_catchup_tokens(self, committed: Sequence[int]) -> int:
        """Tokens the draft model would catch up on before drafting after ``committed`` (0 without one)."""
        return self.drafter.catchup_tokens(committed) if self.drafter is not None else 0

    def prefill(self, prompt: Sequence[int], draft: bool = True,
                progress: Callable[[int, int], None] | None = None, reuse: bool = True) -> "Prefill":
        """Put ``prompt[:-1]`` in the target's KV cache and, with ``draft``, in the draft model's.

        Reuses the cached common prefix, and with ``reuse`` and a :attr:`prefix_cache`, the kept prompt
        prefixes (:meth:`_swap_in`, for the draft model too, whose catch-up then decodes only what its
        restored cache lacks). A generation of ``prompt`` started afterwards finds both caches warm
        (race mode warms both sides this way before timing). ``progress(done, total)`` follows the
        target's prefill of the uncached tokens.

        Returns:
            :class:`Prefill`: target and draft-model seconds (wall time) and how many
            prompt tokens the target's cache already held (restored ones included).
        """
        def warm(model, progress=None) -> tuple[float, int]:
            t0 = self.clock()
            n = model.sync(prompt)
            if n < len(prompt) - 1:
                model.decode(prompt[n : len(prompt) - 1], logits_for=(), **({"progress": progress} if progress else {}))
            return self.clock() - t0, n

        if reuse:
            self._swap_in("target", self.target, prompt)
            if self.drafter is not None and self.draft_model is not self.target:
                self._swap_in("draft", self.draft_model, prompt)
        t_target, n_cached = warm(self.target, progress)
        model = self.draft_model
        t_draft = warm(model)[0] if draft and model is not None and len(prompt) > 1 else 0.0
        return Prefill(t_target, t_draft, n_cached)

    def _swap_in(self, role: str, model, prompt: Sequence[int]) -> None:
        """Before ``model`` syncs to ``prompt``: keep its cache as a snapshot in :attr:`prefix_cache` when
        the prompt would drop at least ``min_tokens`` of it, then restore the kept snapshot of ``role``
        sharing the longest prefix with the prompt when that is at least ``min_tokens`` longer than what
        the cache shares. A snapshot the model refuses, or a stored one that cannot be read (``OSError``), is
        forgotten, and the prompt is read as without it."""
        cache = self.prefix_cache
        if cache is None or not hasattr(model, "save_state"):
            return
        limit = len(prompt) - 1
        live = common_prefix(model.cached_tokens, prompt, limit)
        if model.n_cached - live >= cache.min_tokens:
            cache.put(role, model.save_state(), scope=self.cache_scope)
        found = cache.best(role, prompt, limit, scope=self.cache_scope)
        if found is not None and found[1] - live >= cache.min_tokens:  # a restore copies the whole snapshot
            snapshot, n = found
            try:
                loaded = model.load_state(snapshot)
            except OSError:  # a stored snapshot's file went away or is short
                loaded = False
            if loaded:
                cache.stats.restored += 1
                cache.stats.restored_tokens += n if role == "target" else 0
            else:
                cache.discard(snapshot)

    def clear_cache(self, keep: bool = False) -> None:
        """Empty both KV caches: the next generation prefills its whole prompt and reuses nothing
        (a request with llama-server's ``cache_prompt: false``). Not during a generation.

        ``keep``: first keep the caches' contents in :attr:`prefix_cache` (when there is one), so a later
        prompt sharing their prefix restores it.
        """
        cache = self.prefix_cache
        if keep and cache is not None:
            for role, model in (("target", self.target), ("draft", self.draft_model if self.drafter else None)):
                if model is not None and hasattr(model, "save_state") and model.n_cached >= cache.min_tokens:
                    cache.put(role, model.save_state(), scope=self.cache_scope)
        self.target.reset()
        if self.drafter is not None:
            self.drafter.reset()

    def enter_scope(self, scope: str) -> None:
        """Before a generation for ``scope`` (an opaque string: the server's API key and ``cache_salt``,
        :func:`localspec.server.scopes.scope_id`): when the live KV caches hold another scope's tokens, they
        are kept among that scope's prompt prefixes (:meth:`clear_cache` with ``keep``) and emptied, so that
        what the generation reuses (``cached_prompt_tokens``) and the draft model's catch-up depend only on
        what ``scope`` sent. Not during a generation."""
        if scope != self.cache_scope:
            self.clear_cache(keep=True)
            self.cache_scope = scope

    def set_aside(self) -> list[tuple[Any, Any]]:
        """Take what both KV caches hold aside and empty them (a ``cache_prompt: false`` generation then starts
        from empty caches, and leaves no trace in them): the (model, its :meth:`save_state`) pairs that
        :meth:`put_back` restores. A model without ``save_state`` (a fake) is only emptied. Costs a copy of
        the caches' cells. Not during a generation."""
        kept = [(m, m.save_state()) for m in (self.target, self.draft_model if self.drafter else None)
                if m is not None and hasattr(m, "save_state") and m.n_cached]
        self.target.reset()
        if self.drafter is not None:
            self.drafter.reset()
        return kept

    def put_back(self, kept: list[tuple[Any, Any]]) -> None:
        """Empty both KV caches, then restore what :meth:`set_aside` took (a state a model refuses leaves its
        cache empty)."""
        self.target.reset()
        if self.drafter is not None:
            self.drafter.reset()
        for model, state in kept:
            if state is not None and not model.load_state(state):
                model.reset()

    def abort(self) -> None:
        """Stop the decode running now in either model (:meth:`LlamaModel.abort`); thread-safe."""
        for m in (self.target, self.draft_model):
            if m is not None and hasattr(m, "abort"):
                m.abort()

    def clear_abort(self) -> None:
        for m in (self.target, self.draft_model):
            if m is not None and hasattr(m, "clear_abort"):
                m.clear_abort()

    def rollback(self, committed: Sequence[int]) -> None:
        """End of a round: the target's KV cache to ``committed[:-1]``, the draft model's to a prefix of it."""
        self.target.truncate(max(len(committed) - 1, 0))
        if self.drafter is not None:
            self.drafter.rollback(committed)

    def check_caches(self, committed: Sequence[int]) -> None:
        """Assert the end-of-round invariant: the target caches ``committed[:-1]``, the draft model a prefix
        of ``committed``. Run after every round when ``LOCALSPEC_DEBUG`` is set (:attr:`debug`).

        Raises:
            AssertionError: naming the cache that is off.
        """
        cached = list(self.target.cached_tokens)
        assert cached == list(committed[:-1]), f"target cache holds {len(cached)} tokens, not committed[:-1]"
        d = self.draft_model
        if d is not None and d is not self.target:
            dc = list(d.cached_tokens)
            assert len(dc) <= len(committed) and dc == list(committed[: len(dc)]), "draft cache is not a prefix"

    # -- generation -----------------------------------------------------------------
    def generate(self, prompt: Sequence[int], sampling: SamplingParams | None = None,
                 drafting: DraftParams | None = None, generation: GenerationParams | None = None,
                 policy: DraftPolicy | None = None, prediction: Sequence[int] | None = None,
                 constraint: Constraint | None = None, logprobs: int | None = None,
                 memory: DraftMemory | None = None, cache_prompt: bool = True) -> Generation:
        """Start generating from ``prompt`` (token ids). Iterate the result for events.

        ``cache_prompt``: False (llama-server's ``cache_prompt: false``) keeps the prompt out of the kept
        prompt prefixes (:attr:`prefix_cache`): none is restored for it and its own is not kept (the caller
        empties the live caches around it, :meth:`clear_cache`).

        ``logprobs``: None (the default) computes none; n >= 0 gives every :class:`TokenEvent` its
        ``logprob`` and its ``n`` most probable alternatives ``top_logprobs``: the log-softmax of the
        target's raw logits at the token's position (before temperature and truncation), taken
        from the verification pass that committed it, in every mode.

        ``constraint``: a grammar the output must follow (:meth:`grammar`); the output then
        follows the target's distribution restricted to it, exactly (:mod:`localspec.core.acceptance`).
        The generation owns it and frees it when it ends.

        ``memory``: a :class:`~localspec.core.drafters.DraftMemory` of earlier texts: prompt lookup
        copies from it too (when its place agrees longer with the end of the context than the context's
        own), and this generation's prompt and output are added to it at its end. Its drafts are
        verified like any lookup draft: the output is unchanged by it.

        ``prediction``: token ids of a predicted output (``tokenize(text, special=False)``),
        drafted by :class:`~localspec.core.drafters.PredictionDrafter`; the output is unchanged
        by it (greedy: token-identical, near-ties aside; sampled: same distribution).

        Raises:
            ConfigError: mode 'draft' without a draft model; mode 'auto' without measured
                costs covering ``drafting.cap`` (:meth:`has_costs`; measure with
                :meth:`calibrated_costs`, never done here).

        Raises (on first iteration):
            ConfigError: empty prompt.
            ContextOverflowError: the prompt does not fit in the context window.
        """
        drafting = drafting or DraftParams()
        if policy is None:
            policy = self.make_policy(drafting)
        return Generation(self, prompt, sampling or SamplingParams(), drafting,
                          generation or GenerationParams(), policy, prediction, constraint, logprobs, memory,
                          cache_prompt)

    def grammar(self, gbnf: str, root: str = "root", triggers: Sequence[int] = ()) -> Constraint:
        """A fresh grammar state over the target's vocabulary, for :meth:`generate`'s ``constraint``.

        Args:
            gbnf: the grammar in llama.cpp's GBNF.
            root: the name of its start rule.
            triggers: token ids that make it lazy: no constraint until the output holds one of
                them, the grammar (which starts with that token's text) from there on.

        Raises:
            ConfigError: llama.cpp cannot parse the grammar.
        """
        return self.target.grammar(gbnf, root, triggers)

    def lazy_grammar(self, forms: Sequence[tuple[bytes, str, bool]], root: str, ends: bytes,
                     outside_code: bool = False) -> Constraint:
        """A fresh lazy grammar over the target's vocabulary (:class:`localspec.backend.grammar.LazyGrammar`):
        free output until a form's pattern matches it, that form's grammar from the match on.

        Args:
            forms: (pattern, gbnf, at_start) each: a regular expression over the output's bytes (the
                grammar starts at its first group, else at the match; ``at_start``: it only matches
                at the start of the output) and the grammar the output follows from there.
            root: the grammars' start rule.
            ends: every byte a pattern's match can end with.
            outside_code: a match that starts inside Markdown code (a fenced block or an inline code
                span of the output) does not start the grammar.

        Raises:
            ConfigError: llama.cpp cannot parse a grammar.
        """
        return self.target.lazy_grammar(forms, root, ends, outside_code)

    def close(self) -> None:
        self.target.close()
        if self.draft_model is not None and self.draft_model is not self.target:
            self.draft_model.close()
