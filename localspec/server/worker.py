"""One engine, one request at a time, in arrival order.

The engine is not thread-safe, so one worker thread owns it and takes jobs from a
bounded FIFO queue (:class:`queue.Queue`: arrival order). A job posts its messages back
to the request's event loop (``call_soon_threadsafe``): :class:`Started` once the prompt
is checked, :class:`Tokens` after every round, then :class:`Finished` or :class:`Failed`.
A cancelled job (the client went away) is skipped while it waits and, while it runs,
ends after the current round (``Generation.cancel``); the engine keeps both KV caches
consistent with what was committed, so the next request runs as from a fresh start,
reusing the common prefix of the KV cache (an agent resending a growing conversation
prefills only the new part).
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field

from pydantic import ValidationError

from ..config import DraftParams, GenerationParams, SamplingParams, Settings, format_validation_error
from ..engine import Generation
from ..errors import BackendError, LocalspecError
from ..events import RoundStats, TokenEvent
from .openai_api import ApiError, GenerationRequest

log = logging.getLogger("localspec.server")


@dataclass
class Started:
    prompt_tokens: int


@dataclass
class Tokens:
    """The tokens released since the previous message and the round that ended (None at the end)."""

    tokens: list[TokenEvent]
    round: RoundStats | None


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
    drafting: DraftParams | None = None

    def cancel(self) -> None:
        """Stop this job: skipped if it waits, ended after the current round if it runs."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def post(self, msg) -> None:
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, msg)
        except RuntimeError:  # the event loop is gone (server shutting down)
            self.cancel()


def sampling_for(settings: Settings, req: GenerationRequest) -> SamplingParams:
    """The server's sampling settings with the request's overrides. Raises ApiError (400)."""
    try:
        return SamplingParams(**(settings.sampling.model_dump() | req.sampling))
    except ValidationError as e:
        err = e.errors()[0]
        param = str(err["loc"][0]) if err.get("loc") else None
        raise ApiError(400, format_validation_error(e), param) from None


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
    except ValidationError as e:
        msg = format_validation_error(e).replace("Value error, ", "")
        param = "speculation.draft_max" if "draft_max" in over else "speculation.mode"
        raise ApiError(400, f"speculation: {msg}", param) from None


class EngineWorker:
    """The thread that owns the engine.

    Args:
        engine: a loaded :class:`~localspec.engine.SpeculativeEngine` (only its public
            surface is used).
        settings: drafting settings and defaults.
        max_queue: most requests waiting (the running one not counted); beyond: 429.
        default_max_tokens: max_tokens for a chat request that leaves it out; None =
            the room left in the context window.
        on_finished: called in the worker thread with (request, generation) after each
            generation (metrics).
    """

    def __init__(self, engine, settings: Settings, max_queue: int = 8, default_max_tokens: int | None = None,
                 on_finished=None) -> None:
        self.engine = engine
        self.settings = settings
        self.max_queue = max_queue
        self.default_max_tokens = default_max_tokens
        self.on_finished = on_finished
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._lock = threading.Lock()
        self._arrivals = 0
        self._served = 0
        self._thread: threading.Thread | None = None
        self.current: Job | None = None
        self.mean_seconds = 1.0  #: exponentially weighted seconds per served request

    @property
    def waiting(self) -> int:
        """Requests in the queue (not counting the one running)."""
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        return self.current is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="localspec-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Refuse what waits (503), end the running job after its round, stop the thread."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.post(Failed(ApiError(503, "the server is shutting down")))
        if self.current is not None:
            self.current.cancel()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        """Queue ``job`` in arrival order.

        Raises:
            ApiError: 429 with ``Retry-After`` (seconds) when ``max_queue`` requests wait.
        """
        with self._lock:
            job.enqueued_at = time.perf_counter()
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                retry = max(1, min(600, math.ceil(self.mean_seconds * (self.waiting + 1))))
                raise ApiError(429, f"{self.waiting} requests are waiting, the most this server queues; "
                                    f"retry in {retry} s", None, "queue_full",
                               headers={"Retry-After": str(retry)}) from None
            job.arrival = self._arrivals
            self._arrivals += 1

    # -- the thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            job.wait_seconds = time.perf_counter() - job.enqueued_at
            job.served = self._served
            self._served += 1
            if job.cancelled:
                continue
            self.current = job
            t0 = time.perf_counter()
            try:
                self._run(job)
            except ApiError as e:
                job.post(Failed(e))
            except LocalspecError as e:
                status = 500 if isinstance(e, BackendError) else 400
                job.post(Failed(ApiError(status, e.message + (f" ({e.hint})" if e.hint else ""),
                                         job.request.prompt_param if status == 400 else None)))
            except Exception:  # a bug: logged here with its traceback, never sent to the client
                log.exception("request %d failed", job.arrival)
                job.post(Failed(ApiError(500, "internal server error (see the server log)")))
            finally:
                self.current = None
                self.mean_seconds += 0.2 * (time.perf_counter() - t0 - self.mean_seconds)

    def _prompt(self, req: GenerationRequest) -> tuple[list[int], int]:
        """Prompt token ids and max_tokens; ApiError 400 (with the numbers) when they do not fit."""
        eng = self.engine
        prompt = eng.chat_tokens(req.messages) if req.kind == "chat" else eng.tokenize(req.prompt)
        n_ctx = eng.n_ctx
        if len(prompt) >= n_ctx:
            raise ApiError(400, f"the prompt is {len(prompt)} tokens; the context window holds {n_ctx} "
                                "(and at least one token must be generated)", req.prompt_param,
                           "context_length_exceeded")
        room = n_ctx - len(prompt)
        if req.max_tokens is not None and req.max_tokens > room:
            raise ApiError(400, f"the prompt is {len(prompt)} tokens plus max_tokens {req.max_tokens} = "
                                f"{len(prompt) + req.max_tokens}, more than the context window of {n_ctx}; "
                                f"max_tokens can be at most {room}", "max_tokens", "context_length_exceeded")
        max_tokens = req.max_tokens or min(self.default_max_tokens or room, room)
        return prompt, max_tokens

    def _run(self, job: Job) -> None:
        req = job.request
        eng = self.engine
        prompt, max_tokens = self._prompt(req)
        prediction = eng.tokenize(req.prediction, special=False) if req.prediction else None
        gen = eng.generate(prompt, job.sampling, job.drafting or self.settings.drafting,
                           GenerationParams(max_tokens=max_tokens, stop=req.stop or self.settings.generation.stop),
                           prediction=prediction)
        job.post(Started(len(prompt)))
        pending: list[TokenEvent] = []
        try:
            for ev in gen:
                if job.cancelled:
                    gen.cancel()  # ends after this round; the caches stay consistent
                if isinstance(ev, TokenEvent):
                    pending.append(ev)
                else:
                    job.post(Tokens(pending, ev))
                    pending = []
        except Exception as e:  # the stream has begun: report the error as its last message
            if not isinstance(e, LocalspecError):
                log.exception("request %d failed while generating", job.arrival)
            gen.close()
            job.post(Failed(ApiError(500, e.message if isinstance(e, LocalspecError) else
                                     "internal server error (see the server log)")))
            return
        if pending:
            job.post(Tokens(pending, None))
        job.post(Finished(gen))
        if self.on_finished is not None:
            self.on_finished(req, gen)
