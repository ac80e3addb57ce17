"""The FastAPI app: routes, authentication, body limit, errors as OpenAI's error object.

Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions``, ``GET /metrics``. With an API key, every route but
``/health`` needs ``Authorization: Bearer KEY`` (compared in constant time). A request
body over ``max_body`` bytes is refused with 413 without being kept in memory. No
error sends a traceback to the client; a bug is logged and answered with a 500.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..config import Settings
from .metrics import CONTENT_TYPE_LATEST, ServerMetrics
from .openai_api import FINISH_REASONS, ApiError, ResponseShape, parse_request, speculation, usage
from .worker import EngineWorker, Failed, Finished, Job, Started, Tokens, drafting_for, sampling_for

log = logging.getLogger("localspec.server")

LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: a Content-Length this many times over the limit is refused without reading the body
_HOPELESS = 64


def model_id(name: str) -> str:
    """The name a model is served as: a preset's name, or a file's name."""
    return Path(name).name if name.endswith(".gguf") else name


def _error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def create_app(engine, settings: Settings, *, api_key: str | None = None, max_queue: int = 8,
               max_body: int = 8 << 20, default_max_tokens: int | None = None) -> FastAPI:
    """Build the app around a loaded engine (the app starts and stops its worker thread).

    Args:
        engine: a loaded engine (:class:`~localspec.engine.Engine`, its public surface only).
        settings: the models' names, drafting settings and sampling defaults.
        api_key: require ``Authorization: Bearer api_key`` (None: no authentication).
        max_queue: most requests waiting for the engine; beyond, 429 with Retry-After.
        max_body: largest request body, bytes; beyond, 413.
        default_max_tokens: max_tokens of a chat request that leaves it out (None: the
            room left in the context window).
    """
    metrics: ServerMetrics | None = None
    worker = EngineWorker(engine, settings, max_queue=max_queue, default_max_tokens=default_max_tokens,
                          on_finished=lambda req, gen: metrics.observe(gen))
    metrics = ServerMetrics(lambda: worker.waiting, lambda: int(worker.busy))
    target_id = model_id(settings.target.model)
    draft_id = model_id(settings.draft.model) if engine.has_draft_model else None
    mode = settings.drafting.mode
    loaded_at = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = FastAPI(title="localspec", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.worker = worker
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return _error_response(e)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        code = "not_found" if e.status_code == 404 else None
        return _error_response(ApiError(e.status_code, f"{request.method} {request.url.path}: {e.detail}", None, code))

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception):
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=e)
        return _error_response(ApiError(500, "internal server error (see the server log)"))

    async def authorize(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {api_key}".encode()):
            raise ApiError(401, "missing or wrong API key: send Authorization: Bearer <key>", None, "invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})

    async def read_json(request: Request):
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > _HOPELESS * max_body:
            raise ApiError(413, f"the request body is {declared} bytes; the limit is {max_body}", None,
                           "request_too_large", headers={"Connection": "close"})
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size <= max_body:
                chunks.append(chunk)
        if size > max_body:  # read to the end (not kept) so the client gets the answer
            raise ApiError(413, f"the request body is {size} bytes; the limit is {max_body}", None,
                           "request_too_large")
        try:
            return json.loads(b"".join(chunks))
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not valid JSON: {e}", None, "invalid_json") from None

    async def next_message(job: Job, request: Request):
        """The job's next message; cancels the job if the client goes away while waiting."""
        while True:
            try:
                return await asyncio.wait_for(job.out.get(), timeout=0.25)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    return None

    async def generate(request: Request, kind: str, endpoint: str) -> Response:
        status = 500
        try:
            req = parse_request(await read_json(request), kind)
            job = Job(req, sampling_for(settings, req), asyncio.get_running_loop(),
                      drafting=drafting_for(settings, req, engine.has_draft_model))
            worker.submit(job)
            first = await next_message(job, request)
            if first is None:  # gone while waiting
                status = 499
                return Response(status_code=499)
            if isinstance(first, Failed):
                raise first.error
            assert isinstance(first, Started)
            shape = ResponseShape(kind, target_id)
            status = 200
            if req.stream:
                return EventSourceResponse(_stream(job, req, shape), sep="\n")
            return await _collect(job, request, shape)
        except ApiError as e:
            status = e.status
            raise
        finally:
            metrics.requests.labels(endpoint, str(status)).inc()

    def _extra(job: Job, gen) -> dict:
        drafting = job.drafting or settings.drafting
        return {"speculation": speculation(drafting.mode, gen.stats, gen.rounds, drafting.cap),
                "queue": {"arrival": job.arrival, "served": job.served, "wait_seconds": job.wait_seconds}}

    async def _collect(job: Job, request: Request, shape: ResponseShape) -> Response:
        while True:
            msg = await next_message(job, request)
            if msg is None:
                return Response(status_code=499)
            if isinstance(msg, Failed):
                raise msg.error
            if isinstance(msg, Finished):
                gen = msg.generation
                body = shape.complete(gen.text, FINISH_REASONS[gen.stats.end_reason],
                                      {"usage": usage(gen.stats, gen.rounds), **_extra(job, gen)})
                return JSONResponse(body)

    async def _stream(job: Job, req, shape: ResponseShape):
        """Server-sent events; sse-starlette cancels this when the client disconnects."""
        try:
            yield json.dumps(shape.chunk("", first=True, include_usage=req.include_usage))
            while True:
                msg = await job.out.get()
                if isinstance(msg, Tokens):
                    text = "".join(t.text for t in msg.tokens)
                    if msg.tokens:
                        yield json.dumps(shape.chunk(text, tokens=msg.tokens, include_usage=req.include_usage))
                elif isinstance(msg, Finished):
                    gen = msg.generation
                    extra = _extra(job, gen)
                    yield json.dumps(shape.chunk(None, FINISH_REASONS[gen.stats.end_reason],
                                                 include_usage=req.include_usage, extra=extra))
                    if req.include_usage:
                        yield json.dumps(shape.usage_chunk(usage(gen.stats, gen.rounds), extra))
                    yield "[DONE]"
                    return
                elif isinstance(msg, Failed):
                    yield json.dumps(msg.error.body())
                    return
        finally:
            job.cancel()  # no effect once finished; otherwise the generation ends after this round

    @app.get("/health")
    async def health():
        return {"status": "ok", "busy": worker.busy, "waiting": worker.waiting}

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models():
        return {"object": "list", "data": [{
            "id": target_id, "object": "model", "created": loaded_at, "owned_by": "localspec",
            "draft": draft_id, "mode": mode, "n_ctx": engine.n_ctx,
        }]}

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat_completions(request: Request):
        return await generate(request, "chat", "chat_completions")

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    async def completions(request: Request):
        return await generate(request, "completion", "completions")

    @app.get("/metrics", dependencies=[Depends(authorize)])
    async def prometheus_metrics():
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return app


def serve(engine, settings: Settings, *, host: str = "127.0.0.1", port: int = 8080, api_key: str | None = None,
          max_queue: int = 8, max_body: int = 8 << 20, default_max_tokens: int | None = None,
          log_level: str = "info") -> None:
    """Serve until interrupted (uvicorn). Warns when binding beyond loopback without an API key."""
    import uvicorn

    if host not in LOOPBACK and not api_key:
        print(f"warning: serving on {host} without --api-key: anyone who can reach this port can use the model",
              file=sys.stderr)
    app = create_app(engine, settings, api_key=api_key, max_queue=max_queue, max_body=max_body,
                     default_max_tokens=default_max_tokens)
    print(f"localspec serve: http://{host}:{port}/v1 (model {model_id(settings.target.model)}, "
          f"mode {settings.drafting.mode})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
