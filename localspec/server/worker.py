"""One engine, one request at a time, in arrival order.

Why these hold together: the queue, the one thread that owns the engine and the messages it posts
back are one protocol between the event loop and that thread (its lock, its order, its shutdown).

The engine is not thread-safe, so one worker thread owns it and takes jobs from a
bounded FIFO queue (a deque under a lock: arrival order). A job posts its messages back
to the request's event loop (``call_soon_threadsafe``): :class:`Started` once the prompt
is checked, :class:`Tokens` after every round, then :class:`Finished` or :class:`Failed`.
A cancelled job (the client went away) leaves the queue at once, freeing its place, and,
while it runs, stops within one llama.cpp pass (``Generation.cancel``); the engine keeps both KV caches
consistent with what was committed, and a prompt's read stopped this way keeps the batches it read (a
client that gave up and sends the same prompt again reads on from there), so the next request runs as from a fresh start,
reusing the common prefix of the KV cache (an agent resending a growing conversation
prefills only the new part) or of the prompt prefixes the engine keeps as snapshots
(``--prompt-cache-mb``: an agent alternating between long prompts reads neither again), unless
it asks for ``cache_prompt: false`` (it then starts from empty caches, neither restores nor keeps a
snapshot of its prompt, neither drafts from the draft memory nor feeds it, and the caches get back what
they held before it). Every other request drafts from the draft memory of its scope (earlier requests'
prompts and answers) and is added to it, unless it asks for ``speculation.memory: false``. Scopes
(:mod:`localspec.server.scopes`: an API key, narrowed by ``cache_salt``): a request whose scope is not the
one the live caches hold puts them aside among that scope's prompt prefixes and starts from its own, so
nothing a request gets back depends on another scope's text. On shutdown (:meth:`EngineWorker.drain`) the waiting jobs are answered 503 and the
running one gets a bounded grace period to finish. While no request comes for a while, a calibration that other processes disturbed is measured again once the
machine is quiet (:meth:`EngineWorker._remeasure_if_disturbed`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from pydantic import ValidationError

from localspec.config import QUEUE_SIZE, DraftParams, GenerationParams, SamplingParams, Settings, context_room, fits_context
from localspec.core.drafters import DraftMemories
from localspec.core.engine import Generation
from localspec.errors import LocalspecError, WorkerError
from localspec.core.events import RoundStats, TokenEvent
from localspec.backend.load import machine_is_quiet
from localspec.app.loader import reload_lost_target
from localspec.server.errors import ApiError, is_bug, translate
from localspec.server.bodies import GenerationRequest
from localspec.server.shapes import TokenLogprob, token_logprobs
from localspec.server.infill import fim_prompt_tokens
from localspec.server.tool_parser import holds_all
from localspec.server.tools import prompt_tokens, tool_constraint

log = logging.getLogger("localspec.server")


@dataclass
class Started:
    """The prompt is checked: its length, and whether the output may run to the end of the context
    window (``context_limit``: the request asked for more tokens than the window has room for, or for
    no limit; its answer is cut there, as llama-server's is, and /infill says ``truncated``)."""

    prompt_tokens: int
    context_limit: bool = False


@dataclass
class Tokens:
    """The tokens released since the previous message, the round that ended (None at the end) and,
    when the request asked for logprobs, the tokens' entries (None otherwise)."""

    tokens: list[TokenEvent]
    round: RoundStats | None
    logprobs: list[TokenLogprob] | None = None


@dataclass
class Finished:
    generation: Generation


@dataclass
class Failed:
    error: ApiError


@dataclass
class Job:
    """One request in the queue.

    Attributes:
        request: the checked request.
        sampling: its sampling settings (the server's, with the request's overrides).
        drafting: its drafting settings (the server's, with the request's ``speculation``
            overrides: :func:`drafting_for`); None = the server's.
        loop, out: where messages go (an asyncio queue of the request's event loop).
        arrival: arrival number (0, 1, ...); served: the number it was served as.
        wait_seconds: seconds spent in the queue.
    """

    request: GenerationRequest
    sampling: SamplingParams
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrival: int = -1
    served: int = -1
    enqueued_at: float = 0.0
    wait_seconds: float = 0.0
    _cancelled: threading.Event = field(default_factory=threading.Event)
    #: set by the worker that queued it: takes the job out of the queue (its place is freed)
    _withdraw: Callable[["Job"], None] | None = None
    #: why the job was ended early by the server, not the client (shutdown), or None
    ended_by_server: str | None = None
    drafting: DraftParams | None = None
    #: the job's generation while the worker runs it (:meth:`running`), else None
    _generation: Generation | None = None

    def cancel(self) -> None:
        """Stop this job: out of the queue at once if it waits; if it runs, its generation is cancelled
        (:meth:`Generation.cancel`: the llama.cpp pass running now, a long prompt's read too, stops
        within about one graph node; the KV caches stay consistent)."""
        self._cancelled.set()
        if self._withdraw is not None:
            self._withdraw(self)
        gen = self._generation
        if gen is not None:
            gen.cancel()

    def running(self, gen: Generation | None) -> None:
        """The worker runs ``gen`` for this job now (None: no longer); a job cancelled already cancels it."""
        self._generation = gen
        if gen is not None and self.cancelled:
            gen.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def post(self, msg) -> None:
        """Send ``msg`` to the request's event loop, in order, through :data:`RELAY` (not from this thread:
        see :class:`LoopRelay`)."""
        RELAY.put(self, msg)

    def deliver(self, msg) -> None:
        """Hand ``msg`` to the event loop now (the relay's thread calls this)."""
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, msg)
        except RuntimeError:  # the event loop is gone (server shutting down)
            self.cancel()


class LoopRelay:
    """One thread that hands the engine thread's messages to the event loops, in the order posted.

    Waking an event loop from the engine thread (``call_soon_threadsafe`` writes to the loop's
    wake-up socket) lets the loop's thread take the GIL in the middle of the write, and the
    engine thread then waits while the loop formats and sends the chunk: about 1-2 ms a round
    measured in ``localspec serve`` (2 cores), against a 35-45 ms pass of the default target, before
    the next pass could start. Posted here instead, a message waits in a queue (no wake-up, no
    GIL hand-over) until the engine thread is inside its next llama.cpp pass (which releases the
    GIL); the relay and the loop then run during the pass.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def put(self, job: "Job | None", msg) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="localspec-relay", daemon=True)
                    self._thread.start()
        self._queue.put((job, msg))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every message put so far has been handed to its event loop (``call_soon_threadsafe``
        done; the loop runs it on its next turn). Returns False if that took longer than ``timeout`` seconds."""
        done = threading.Event()
        self.put(None, done)
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            job, msg = self._queue.get()
            if job is None:  # flush()'s marker
                msg.set()
            else:
                job.deliver(msg)


#: the process's relay from engine threads to event loops
RELAY = LoopRelay()


def request_prompt(engine, req: GenerationRequest, default_max_tokens: int | None = None) -> list[int]:
    """The prompt token ids the worker reads for ``req``: FIM's, a raw prompt tokenized, or the chat rendered
    with the target's template (with the tools when the request has any). ``engine``: what it reads of one
    (``tokenize``, ``chat_tokens``; a :class:`~localspec.core.engine.SpeculativeEngine` over a tokenizer-only
    model will do: ``scripts/bench_agents.py`` counts an agent's reusable prompt tokens with it).

    Raises:
        ApiError: 400 for special-token text in the tools or history calls; ConfigError: the template refuses
            the messages.
    """
    if req.fim is not None:
        return fim_prompt_tokens(engine, req, default_max_tokens)
    if req.kind != "chat":
        return engine.tokenize(req.prompt)
    if req.tools is not None and req.tools.format is not None:
        return prompt_tokens(engine, req.messages, req.tools)
    return engine.chat_tokens(req.messages)


def sampling_for(settings: Settings, req: GenerationRequest) -> SamplingParams:
    """The server's sampling settings with the request's overrides. Raises ApiError (400)."""
    try:
        return SamplingParams(**(settings.sampling.model_dump() | req.sampling))
    except ValidationError as e:
        raise translate(e) from None


def output_hold(req: GenerationRequest) -> Callable[[str], bool] | None:
    """What a streamed answer's client would not see yet, for
    :attr:`~localspec.core.generation.Generation.holds_output`: the tool-call parser's hold of a possible call
    marker at the answer's start (:func:`~localspec.server.tool_parser.holds_all`) when ``req`` streams and
    parses calls; None otherwise. A non-streamed answer is seen whole at its end, so its rounds draft as mode
    auto chooses: holding one back would only make the answer later.
    """
    if req.stream and req.tools is not None and req.tools.parses and req.tools.format is not None:
        return functools.partial(holds_all, req.tools.format)
    return None


def drafting_for(settings: Settings, req: GenerationRequest, has_draft_model: bool = True) -> DraftParams:
    """The server's drafting settings with the request's ``speculation`` overrides (``mode``,
    ``draft_max``); a request that names a mode without naming ``draft_max`` gets that mode's
    default cap unless the server was given one.

    Raises:
        ApiError: 400 naming ``speculation.<key>``: an invalid combination (``draft_min`` of the
            server above the request's ``draft_max``), or mode ``draft`` without a draft model.
    """
    over = req.speculation
    if not over:
        return settings.drafting
    if over.get("mode") == "draft" and not has_draft_model:
        raise ApiError(400, "speculation.mode: mode 'draft' needs a draft model, and this server has none "
                            "(use auto, lookup or none)", "speculation.mode")
    try:
        return DraftParams(**(settings.drafting.model_dump() | over))
    except ValidationError as e:  # a check across the fields: named by the field the request sent
        raise translate(e, "speculation.draft_max" if "draft_max" in over else "speculation.mode") from None


class EngineWorker:
    """The thread that owns the engine.

    Args:
        engine: a loaded :class:`~localspec.core.engine.SpeculativeEngine` (only its public
            surface is used).
        settings: drafting settings and defaults.
        max_queue: most requests waiting (the running one not counted); beyond: 429.
        default_max_tokens: max_tokens for a chat request that leaves it out; None =
            the room left in the context window.
        on_finished: called in the worker thread with (request, generation) after each
            generation (metrics).
        memory: the draft memories (:class:`~localspec.core.drafters.DraftMemories`, one per scope) every
            request drafts from and is added to (prompt + answer, by the engine), its scope's, unless it opts
            out (``speculation.memory: false``, ``cache_prompt: false``); None: none.
    """

    def __init__(self, engine, settings: Settings, max_queue: int = QUEUE_SIZE, default_max_tokens: int | None = None,
                 on_finished=None, memory: DraftMemories | None = None) -> None:
        self.engine = engine
        self.memory = memory
        self.settings = settings
        self.max_queue = max_queue
        self.default_max_tokens = default_max_tokens
        self.on_finished = on_finished
        self._queue: deque[Job] = deque()  # live waiting jobs, in arrival order
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # a job arrived, or the worker should stop
        self._stopping = False
        #: set by :meth:`drain`: new requests get 503 (the server is shutting down)
        self.draining = False
        self._arrivals = 0
        self._served = 0
        self._thread: threading.Thread | None = None
        self.current: Job | None = None
        self.mean_seconds = 1.0  #: exponentially weighted seconds per served request
        #: seconds without a request after which a disturbed calibration may be measured again
        self.idle_seconds = 30.0
        self.max_remeasures = 3
        self._remeasures = 0

    @property
    def waiting(self) -> int:
        """Live requests in the queue (not counting the one running; a cancelled one leaves at once)."""
        return len(self._queue)

    @property
    def busy(self) -> bool:
        return self.current is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="localspec-engine", daemon=True)
        self._thread.start()

    def _refuse_waiting(self, message: str) -> None:
        with self._lock:
            jobs = list(self._queue)
            self._queue.clear()
        for job in jobs:
            job._cancelled.set()
            job.post(Failed(ApiError(503, message, None, "server_shutdown")))

    def drain(self, grace: float) -> None:
        """Begin a graceful shutdown: take no more jobs, answer the waiting ones 503 now, and end
        the running one if it has not finished within ``grace`` seconds.

        A job ended this way reports ``ended_by_server`` (its stream ends with an error event saying
        why). Safe to call from the event loop; returns at once (a timer thread ends the job).
        """
        self.draining = True
        self._refuse_waiting("the server is shutting down; retry on another server or later")
        running = self.current

        def end_running() -> None:
            job = self.current
            if job is not None and job is running:
                job.ended_by_server = f"the server is shutting down; the answer was ended after the {grace:g} s grace period"
                job.cancel()

        if running is not None:
            timer = threading.Timer(grace, end_running)
            timer.daemon = True
            timer.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Refuse what waits (503), end the running job after its round, stop the thread."""
        self.draining = True
        self._refuse_waiting("the server is shutting down")
        if self.current is not None:
            self.current.ended_by_server = self.current.ended_by_server or "the server is shutting down"
            self.current.cancel()
        with self._lock:
            self._stopping = True
            self._ready.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self._store_live_caches()

    def _store_live_caches(self) -> None:
        """At shutdown, with prompt snapshots kept on disk: store what both KV caches hold (an agent's prompt is
        usually in the live cache, not among the snapshots) and wait for the writes. Not while the engine's
        thread still runs."""
        cache = getattr(self.engine, "prefix_cache", None)
        if cache is None or cache.store is None or (self._thread is not None and self._thread.is_alive()):
            return
        self.engine.clear_cache(keep=True)
        cache.store.flush()

    def submit(self, job: Job) -> int:
        """Queue ``job`` in arrival order; returns how many requests are ahead of it (the running one and
        those waiting before it; 0: the engine takes it next).

        Raises:
            ApiError: 429 with ``Retry-After`` (seconds) when ``max_queue`` live requests wait (an idle
                engine with an empty queue always takes the job: ``max_queue`` 0 = no waiting, not no serving);
                503 once the server is shutting down.
        """
        with self._lock:
            if self.draining:
                raise ApiError(503, "the server is shutting down; retry on another server or later", None,
                               "server_shutdown")
            if len(self._queue) >= self.max_queue and (self.busy or self._queue):  # an idle engine takes one
                retry = max(1, min(600, math.ceil(self.mean_seconds * (len(self._queue) + 1))))
                raise ApiError(429, f"{len(self._queue)} requests are waiting, the most this server queues; "
                                    f"retry in {retry} s", None, "queue_full",
                               headers={"Retry-After": str(retry)})
            job.enqueued_at = time.perf_counter()
            job.arrival = self._arrivals
            self._arrivals += 1
            job._withdraw = self._withdraw
            ahead = len(self._queue) + self.busy
            self._queue.append(job)
            self._ready.notify()
            return ahead

    def _withdraw(self, job: Job) -> None:
        """Take a cancelled job out of the queue (no effect once it runs or has left)."""
        with self._lock:
            try:
                self._queue.remove(job)
            except ValueError:
                pass

    def _next(self, block: bool = True, timeout: float | None = None) -> Job | None:
        """The next live job, now :attr:`current` (None: stop, none waits and ``block`` is False, or
        none came within ``timeout`` seconds). A job cancelled while it was being taken is skipped
        (cancel sets its flag before it asks for the job's withdrawal)."""
        with self._lock:
            while True:
                while block and not self._queue and not self._stopping:
                    if not self._ready.wait(timeout) and not self._queue:
                        return None
                if self._stopping or not self._queue:
                    return None
                job = self._queue.popleft()
                job._withdraw = None
                if not job.cancelled:
                    self.current = job
                    return job

    def _wait_for_job(self) -> Job | None:
        """:meth:`_next`, blocking; while no request comes for :attr:`idle_seconds`, the idle
        server may measure a disturbed calibration again (:meth:`_remeasure_if_disturbed`).
        None: stop."""
        while True:
            job = self._next(timeout=self.idle_seconds)
            if job is not None or self._stopping:
                return job
            self._remeasure_if_disturbed()

    def _remeasure_if_disturbed(self) -> None:
        """Measure mode auto's costs again when the ones in use were measured while other processes
        were busy (:attr:`~localspec.core.costmodel.EngineCosts.disturbed`: a curve that can make
        long drafts look free) and the machine is quiet now; at most :attr:`max_remeasures` times
        in a server's life. A request that arrives meanwhile waits in the queue."""
        costs = self.engine.cost_model
        if costs is None or not costs.disturbed or self._remeasures >= self.max_remeasures or not machine_is_quiet():
            return
        self._remeasures += 1
        log.info("the decode costs in use were measured while other processes were busy; the server is idle and "
                 "the machine quiet: measuring them again")
        try:
            new = self.engine.calibrated_costs(len(costs.verify) - 1, remeasure=True)
        except LocalspecError as e:
            log.warning("measuring again failed: %s", e.message)
            return
        log.info("measured%s", " (disturbed again)" if new.disturbed else "")

    # -- the thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        job = self._wait_for_job()
        while job is not None:
            job.wait_seconds = time.perf_counter() - job.enqueued_at
            job.served = self._served
            self._served += 1
            t0 = time.perf_counter()
            try:
                last, gen = self._serve(job)
            except Exception as e:  # a bug past _serve's own handling: this request fails, the thread lives on
                log.exception("request %d failed", job.arrival)
                last, gen = Failed(translate(e, job.request.prompt_param)), None
            self.mean_seconds += 0.2 * (time.perf_counter() - t0 - self.mean_seconds)
            # take the next job before this one's last message goes out: its client may send its
            # next request at once, and must find this request's place in the queue free
            self.current = None
            following = self._next(block=False)
            if gen is not None and self.on_finished is not None:  # before the answer: /metrics read after it counts it
                self.on_finished(job.request, gen)
            job.post(last)
            job = following if following is not None else self._wait_for_job()

    def _serve(self, job: Job) -> tuple[Finished | Failed, Generation | None]:
        """Run ``job``; its last message (not posted yet) and the finished generation (None on failure).

        A request with ``cache_prompt: false`` starts from empty KV caches; what they held is set aside
        and put back after it (:meth:`~localspec.core.engine.SpeculativeEngine.set_aside`), and its own
        prompt is neither restored from the prompt prefixes nor kept. Any other request first brings the
        live caches to its scope (:meth:`~localspec.core.engine.SpeculativeEngine.enter_scope`).
        """
        kept = None
        try:
            self._reload_if_lost()
            if job.request.cache_prompt:
                self.engine.enter_scope(job.request.scope)
            else:
                kept = self.engine.set_aside()
            return self._run(job)
        except Exception as e:  # before the answer starts: its status (localspec.server.errors)
            if is_bug(e):  # logged here with its traceback, never sent to the client
                log.exception("request %d failed", job.arrival)
            return Failed(translate(e, job.request.prompt_param)), None
        finally:
            if kept is not None:
                self._put_back(kept)

    def _put_back(self, kept) -> None:
        """Restore the caches :meth:`_serve` set aside; a target that lost its RPC worker meanwhile lost them
        with it (its reload starts from empty caches), which is logged, never raised: raised here, it
        would end the engine thread and leave every later client waiting."""
        try:
            self.engine.put_back(kept)
        except WorkerError as e:
            log.warning("the KV caches set aside for a request with cache_prompt false are lost with the "
                        "model: %s", e.message)

    def _reload_if_lost(self) -> None:
        """A target whose RPC worker was lost (:attr:`IsolatedModel.lost`) is loaded again before the
        next request, once its workers answer; raises WorkerError (named) while one is still down."""
        if reload_lost_target(self.engine, stage=log.info):
            log.info("loaded again")

    @property
    def degraded(self) -> str | None:
        """Why the server cannot answer now (its target lost an RPC worker), or None."""
        target = self.engine.target
        return f"{target.path.name} lost an RPC worker" if getattr(target, "lost", False) else None

    def _prompt(self, req: GenerationRequest) -> tuple[list[int], int]:
        """Prompt token ids and the tokens that may be generated: ``max_tokens`` (the request's, else
        the server's default) capped at the room left in the context window, as llama.cpp's server
        does (an answer that reaches the end of the window ends with finish_reason ``length``).

        Raises:
            ApiError: 400 ``context_length_exceeded`` (OpenAI's wording, with the numbers) when the
                prompt alone leaves no room for one generated token.
        """
        eng = self.engine
        prompt = request_prompt(eng, req, self.default_max_tokens)
        n_ctx = eng.n_ctx
        # worded as OpenAI's, which LiteLLM, aider and langchain recognise as a context-window error
        what = "messages" if req.kind == "chat" else "prompt"
        if not fits_context(n_ctx, len(prompt)):
            raise ApiError(400, f"This model's maximum context length is {n_ctx} tokens. However, your {what} "
                                f"resulted in {len(prompt)} tokens (and at least one token must be generated). "
                                f"Please reduce the length of the {what}.", req.prompt_param,
                           "context_length_exceeded")
        room = context_room(n_ctx, len(prompt))
        return prompt, min(req.max_tokens or self.default_max_tokens or room, room)

    def _tokens(self, req: GenerationRequest, tokens: list[TokenEvent], rs: RoundStats | None) -> Tokens:
        """The :class:`Tokens` message of ``tokens``, with their logprob entries when ``req`` asks
        (made here, in the thread that owns the engine)."""
        lp = token_logprobs(tokens, self.engine.token_bytes) if req.logprobs is not None else None
        return Tokens(tokens, rs, lp)

    def _run(self, job: Job) -> tuple[Finished | Failed, Generation | None]:
        """Generate, posting Started and Tokens; returns the last message (not posted) and the generation."""
        req = job.request
        eng = self.engine
        prompt, max_tokens = self._prompt(req)
        prediction = eng.tokenize(req.prediction, special=False) if req.prediction else None
        drafting = job.drafting or self.settings.drafting
        if drafting.mode == "auto" and not eng.has_costs(drafting.cap):
            # a request asked for mode auto on a server started in another mode: measure once, in
            # the log (the engine never measures inside generate)
            log.info("measuring this machine's decode costs for mode auto, up to %d-token drafts (once; cached)",
                     drafting.cap)
            eng.calibrated_costs(drafting.cap)
            log.info("measured")
        constraint = (eng.grammar(req.grammar) if req.grammar is not None  # response_format
                      else tool_constraint(eng, req.tools) if req.kind == "chat" and req.tools is not None
                      else None)
        gen = eng.generate(prompt, job.sampling, drafting,
                           GenerationParams(**{"stop": self.settings.generation.stop, **req.generation,
                                               "max_tokens": max_tokens}),
                           prediction=prediction, constraint=constraint, logprobs=req.logprobs,
                           memory=self.memory.scope(req.scope) if self.memory is not None and req.memory
                           and req.cache_prompt else None, cache_prompt=req.cache_prompt)
        gen.holds_output = output_hold(req)
        job.post(Started(len(prompt), max_tokens >= context_room(eng.n_ctx, len(prompt))))
        pending: list[TokenEvent] = []
        job.running(gen)
        try:
            for ev in gen:  # a cancelled job cancels its generation itself (Job.cancel, Job.running)
                if isinstance(ev, TokenEvent):
                    pending.append(ev)
                else:
                    job.post(self._tokens(req, pending, ev))
                    pending = []
        except Exception as e:  # the answer has begun: the error is its last message (a stream's last event)
            if is_bug(e):
                log.exception("request %d failed while generating", job.arrival)
            try:
                gen.close()
            except WorkerError:  # the model is gone: nothing to roll back
                pass
            if isinstance(e, WorkerError):
                log.error("request %d: %s", job.arrival, e.message)
            return Failed(translate(e, req.prompt_param)), None
        finally:
            job.running(None)
        if pending:
            job.post(self._tokens(req, pending, None))
        if job.ended_by_server is not None:  # cut by a shutdown, not finished: say so
            return Failed(ApiError(503, f"{job.ended_by_server} ({gen.stats.tokens} tokens sent)", None,
                                   "server_shutdown")), gen
        return Finished(gen), gen
