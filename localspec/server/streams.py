"""Streamed answers: a job's messages as server-sent events, in each endpoint's dialect.

Why these hold together: once a stream's ``200`` and headers are sent, everything the client gets is an
event of this module: the chunks of the answer, a keepalive chunk whenever nothing else was sent for
``--stream-keepalive`` seconds, and any error found from then on as the stream's last event.

When the headers go out (:func:`localspec.server.app.generate`): as soon as the prompt is checked, as
before, or at once when the request waits in the queue behind another (then within ``stream_keepalive``
seconds at the latest), so a client with a first-byte timeout (Qwen Code's 120 s) sees the answer alive
while it waits. A keepalive is one implementation for every wait (queued, its prompt read, a tool call
held): :data:`KEEPALIVE`, written in the endpoint's dialect by the caller: chat an empty ``delta`` (as
OpenAI's last chunk has), completions ``text: ""``, ``/v1/responses`` another ``response.in_progress``
event, ``/infill`` ``content: ""``. These are events the ``openai`` client parses (agents' idle timers
count those, not SSE comment lines).

An error after the headers (a prompt found too long once its turn came, a shutdown, a generation that
failed, a bug in shaping the answer) is the stream's last event, made by the one translator
(:func:`localspec.server.errors.translate`): chat and completions ``data: {"error": {message, type, param,
code}}`` (OpenAI's error object, which the ``openai`` client raises as ``APIError``), ``/v1/responses`` its
``error`` event. The connection is never cut and no ``500`` follows the ``200``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, AsyncIterator

from localspec.server import tools
from localspec.server.bodies import GenerationRequest
from localspec.server.errors import ApiError, is_bug, translate
from localspec.server.responses import ResponsesShape
from localspec.server.shapes import FINISH_REASONS, ResponseShape, speculation, usage
from localspec.server.worker import Failed, Finished, Job, Tokens

log = logging.getLogger("localspec.server")

#: what :func:`chunks` yields when nothing came for ``stream_keepalive`` seconds
KEEPALIVE = object()


def extra(s: Any, job: Job, gen) -> dict:
    """The answer's fields beside OpenAI's (``speculation``, ``queue``); ``s``: the app's ``Served``."""
    drafting = job.drafting or s.settings.drafting
    memory = s.worker.memory is not None and job.request.memory and job.request.cache_prompt
    return {"speculation": speculation(drafting.mode, gen.stats, gen.rounds, drafting.cap, memory),
            "queue": {"arrival": job.arrival, "served": job.served, "wait_seconds": job.wait_seconds}}


async def sse(s: Any, job: Job, req: GenerationRequest, shape: ResponseShape,
              responses: ResponsesShape | None = None) -> AsyncIterator[Any]:
    """The stream's server-sent events (sse-starlette's items: a data string, or an event dict); sse-starlette
    cancels this when the client disconnects, which cancels the job (out of the queue, or its generation
    stopped within one llama.cpp pass: :meth:`~localspec.server.worker.Job.cancel`). ``responses``: the chat
    chunks become Responses API events."""
    try:
        if responses is not None:
            try:
                async for event in responses.events(_guarded(chunks(s, job, req, shape))):
                    yield event
            except Exception as e:  # in making the events themselves
                yield responses.error_event(_as_error(e))
            return
        async for chunk in _guarded(chunks(s, job, req, shape)):
            if chunk is KEEPALIVE:  # chat: an empty delta, as OpenAI's last chunk has; completions: text ""
                chunk = shape.chunk(None, include_usage=req.include_usage)
                if chunk is None:  # a shape that sends nothing then (/infill with n_predict 0)
                    continue
            yield (json.dumps(chunk.body()) if isinstance(chunk, ApiError) else
                   json.dumps(chunk) if isinstance(chunk, dict) else chunk)
    finally:
        job.cancel()  # no effect once finished; otherwise the generation ends after this round


async def _guarded(items: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """``items``, then, if making them raised, the error as an :class:`ApiError` (the stream's last event;
    a bug is logged here with its traceback and sent as :data:`~localspec.server.errors.INTERNAL`)."""
    try:
        async for item in items:
            yield item
    except Exception as e:  # the client's disconnect is CancelledError, a BaseException: not caught
        yield _as_error(e)


def _as_error(e: Exception) -> ApiError:
    """``e`` as the stream's error event (:func:`~localspec.server.errors.translate`); a bug is logged here."""
    if is_bug(e):
        log.error("a streamed answer failed after its headers were sent", exc_info=e)
    return translate(e)


async def messages(job: Job, keepalive: float) -> AsyncIterator[Any]:
    """The job's messages as they come, and :data:`KEEPALIVE` after each ``keepalive`` seconds
    without one (0: never)."""
    getter: asyncio.Future | None = None
    try:
        while True:
            getter = getter or asyncio.ensure_future(job.out.get())
            done, _ = await asyncio.wait({getter}, timeout=keepalive or None)
            if not done:  # nothing for a while (the request waits in the queue, a long prompt is being read)
                yield KEEPALIVE
                continue
            msg, getter = getter.result(), None
            yield msg
    finally:
        if getter is not None:
            getter.cancel()


async def chunks(s: Any, job: Job, req: GenerationRequest, shape: ResponseShape) -> AsyncIterator[Any]:
    """The answer's chunks (dicts), then ``"[DONE]"`` (where the shape sends it), or an ApiError;
    :data:`KEEPALIVE` whenever nothing was sent for ``stream_keepalive`` seconds (the request waits in the
    queue, its prompt is being read, a round is slow, or the rounds release nothing: a tool call is held
    until complete): an agent's idle timer (Qwen Code's 240 s) counts the chunks its client parses, not SSE
    comments, so the stream shows it is alive with a chunk that carries nothing. The worker's
    :class:`~localspec.server.worker.Started` (when the stream began before it) adds nothing."""
    keepalive = s.server.stream_keepalive
    calls = tools.ToolStream(shape, req.tools, req.include_usage) if req.tools and req.tools.parses else None
    opening = shape.chunk("", first=True, include_usage=req.include_usage)
    if opening is not None:
        yield opening
    sent = time.monotonic()
    async for msg in messages(job, keepalive):
        out: list = [msg] if msg is KEEPALIVE else []
        if isinstance(msg, Tokens):
            text = "".join(t.text for t in msg.tokens)
            if calls is not None:
                out = list(calls.feed(text, msg.tokens, msg.logprobs))
            elif msg.tokens and (chunk := shape.chunk(text, tokens=msg.tokens, include_usage=req.include_usage,
                                                      logprobs=msg.logprobs)) is not None:
                out = [chunk]
            if not out and keepalive and time.monotonic() - sent >= keepalive:
                out = [KEEPALIVE]
        elif isinstance(msg, Finished):
            for chunk in last_chunks(s, job, req, shape, msg.generation, calls):
                yield chunk
            return
        elif isinstance(msg, Failed):
            yield msg.error
            return
        for chunk in out:
            yield chunk
        sent = time.monotonic() if out else sent


def last_chunks(s: Any, job: Job, req: GenerationRequest, shape: ResponseShape, gen, calls) -> list:
    """A finished stream's last events: pending calls, the finish chunk, the usage chunk, ``[DONE]``."""
    out: list = []
    getattr(shape, "finished", lambda g: None)(gen)
    reason = FINISH_REASONS[gen.stats.end_reason]
    if calls is not None:
        out += calls.finish()
        reason = calls.finish_reason(reason)
    more = extra(s, job, gen)
    out.append(shape.chunk(None, reason, include_usage=req.include_usage, extra=more))
    if req.include_usage:
        out.append(shape.usage_chunk(usage(gen.stats, gen.rounds), more))
    return [*out, "[DONE]"] if getattr(shape, "done_event", True) else out
