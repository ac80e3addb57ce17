"""The FastAPI app: routes (module-level routers reading ``app.state.served``), authentication,
body limit, errors as OpenAI's error object.

Why these hold together: every route, the middleware around them and the server's start and stop read
the one ``app.state.served``; the bodies, the worker and the answers they call live in their own modules.

Routes: ``GET /health``, ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /v1/chat/completions`` (with tool
calling, :mod:`.tools`), ``POST /v1/completions`` (with ``suffix``: fill in the middle), ``POST /v1/responses``
(OpenAI's Responses API, run as a chat request: :mod:`.responses`), ``POST /infill`` (llama.cpp's, :mod:`.infill`),
``GET /metrics``, and ``GET /openapi.json`` (the request bodies' schemas). Cross-origin requests (CORS, for
browser-based clients) get no CORS headers unless origins are allowed (``cors_origins`` of
:class:`~localspec.config.ServerSettings`); then preflight ``OPTIONS`` requests are answered. With API keys, every
route but ``/health`` and ``/openapi.json`` needs ``Authorization: Bearer KEY`` with one of them (the scheme
case-insensitive, RFC 9110 §11.1; every key compared, each in constant time); each key, narrowed by a request's
``cache_salt``, is a scope (:mod:`.scopes`) whose requests reuse and draft from only what the same scope sent. A
request body over ``max_body_mb`` MiB is refused with 413 without being kept in memory; one that is not JSON, nests
deeper than :data:`~localspec.server.openai_api.MAX_JSON_DEPTH` or holds a lone UTF-16 surrogate gets a 400. No error
sends a traceback to the client; a bug is logged and answered with a 500. Every answer of the generation endpoints,
401s included, is counted in ``localspec_requests_total``. On SIGTERM or Ctrl-C (:func:`serve`) the server stops
accepting, answers waiting requests 503, lets the running answer finish within the grace period (else ends it with an
error event saying why) and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from localspec.backend.context import with_prompt_cache_default
from localspec.config import ServerSettings, Settings
from localspec.core.drafters import DraftMemories
from localspec.core.prefix_cache import PrefixCache
from localspec.errors import LocalspecError
from localspec.backend.calibration import cache_root
from localspec.backend.prompt_store import FOLDER_NAME, default_disk_bytes, engine_store
from localspec.server import tools
from localspec.server.infill import InfillBody, InfillShape, check_fim_model
from localspec.server.metrics import CONTENT_TYPE_LATEST, ServerMetrics
from localspec.server.errors import ERROR_RESPONSES, ApiError, is_bug, translate
from localspec.server.bodies import ChatCompletionBody, CompletionBody, GenerationRequest
from localspec.server.openai_api import MAX_JSON_DEPTH, check_json
from localspec.server.shapes import FINISH_REASONS, ResponseShape, usage
from localspec.server.responses import ResponsesBody, ResponsesShape
from localspec.server.scopes import key_scope, matching_key, scope_id
from localspec.server.streams import extra, sse
from localspec.server.worker import EngineWorker, Failed, Finished, Job, Started, Tokens, drafting_for, sampling_for

log = logging.getLogger("localspec.server")

LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: a Content-Length this many times over the limit is refused without reading the body
_HOPELESS = 64


def model_id(name: str) -> str:
    """The name a model is served as: a preset's name, or a file's name."""
    return Path(name).name if name.endswith(".gguf") else name


def _error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header value, or None.

    The scheme is case-insensitive (RFC 9110 §11.1: ``bearer``, ``BEARER``) and may be followed
    by several spaces.
    """
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


#: path -> the ``endpoint`` label of ``localspec_requests_total``
GENERATION_ENDPOINTS = {"/v1/chat/completions": "chat_completions", "/v1/completions": "completions",
                        "/v1/responses": "responses", "/infill": "infill"}


class _CountRequests:
    """ASGI middleware: count every answer of the generation endpoints by status, whatever sent it
    (the route, an auth dependency's 401, the body limit's 413; an exception that escapes is a 500)."""

    def __init__(self, app, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        endpoint = GENERATION_ENDPOINTS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        status = 500

        async def counting_send(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.requests.labels(endpoint, str(status)).inc()


@dataclass
class Served:
    """What the routes read (``app.state.served``): the engine, its settings, the server's, the
    worker and the metrics, and the names the models are served as."""

    engine: Any
    settings: Settings
    server: ServerSettings
    worker: EngineWorker
    metrics: ServerMetrics
    target_id: str
    draft_id: str | None
    loaded_at: int
    template: str | None
    tool_fmt: Any


def served(request: Request) -> Served:
    """What the app serves (set by :func:`create_app`)."""
    return request.app.state.served


async def authorize(request: Request) -> None:
    """Raises ApiError 401 unless the request carries one of the server's API keys (when it has some); sets
    ``request.state.key_scope``, the key's scope (:func:`~localspec.server.scopes.key_scope`; ``""``: no keys)."""
    keys = served(request).server.api_key
    request.state.key_scope = ""
    if not keys:
        return
    key = matching_key(bearer_token(request.headers.get("authorization", "")), keys)
    request.state.key_scope = key_scope(key)
    if key is None:
        raise ApiError(401, "missing or wrong API key: send Authorization: Bearer <key>", None, "invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})


async def read_json(request: Request, max_body: int) -> tuple[bytes, Any]:
    """The request body (bytes, at most ``max_body``) and its JSON, checked by :func:`check_json`.

    Raises:
        ApiError: 413 over the limit (read to the end, not kept); 400 ``invalid_json`` or
            ``invalid_unicode``.
    """
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
        raise ApiError(413, f"the request body is {size} bytes; the limit is {max_body}", None, "request_too_large")
    raw = b"".join(chunks)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}", None, "invalid_json") from None
    except RecursionError:  # nested deeper than Python's parser recurses (about 1000 levels)
        raise ApiError(400, f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
                       None, "invalid_json") from None
    check_json(body)
    return raw, body


class CheckedJsonRoute(APIRoute):
    """A generation route: the API key is checked first, then the body is read under the limit and
    checked as JSON (:func:`read_json`), then FastAPI validates it against the route's body model
    (whatever the request's Content-Type said, the body is read as JSON, as before)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        validate_and_run = super().get_route_handler()

        async def handler(request: Request) -> Response:
            await authorize(request)
            raw, _ = await read_json(request, served(request).server.max_body)
            headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
            checked = Request({**request.scope, "headers": [*headers, (b"content-type", b"application/json")]},
                              request.receive)
            checked._body = raw  # what FastAPI reads (Starlette's cache of the body)
            return await validate_and_run(checked)

        return handler


generation = APIRouter(route_class=CheckedJsonRoute, responses=ERROR_RESPONSES)
api = APIRouter(dependencies=[Depends(authorize)], responses=ERROR_RESPONSES)


@generation.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionBody, request: Request) -> Response:
    return await generate(request, body.request())


@generation.post("/v1/completions")
async def completions(body: CompletionBody, request: Request) -> Response:
    req = body.request()
    if req.fim is not None:
        check_fim_model(served(request).engine, served(request).target_id, "suffix")
    return await generate(request, req)


@generation.post("/v1/responses")
async def responses(body: ResponsesBody, request: Request) -> Response:
    """OpenAI's Responses API (:mod:`.responses`): converted to a chat request, its answer reshaped; its
    errors name the Responses fields (:meth:`ResponsesShape.renamed`)."""
    shape = ResponsesShape(served(request).target_id, body)
    try:
        return await generate(request, shape.request(), responses=shape)
    except ApiError as e:
        raise shape.renamed(e) from None


@generation.post("/infill")
async def infill(body: InfillBody, request: Request) -> Response:
    """llama.cpp's fill-in-the-middle endpoint (:mod:`.infill`): its request and answer shapes."""
    s = served(request)
    check_fim_model(s.engine, s.target_id, "input_suffix")
    return await generate(request, body.request(), lambda started: InfillShape(
        s.target_id, started.prompt_tokens, discard=body.n_predict == 0, response_fields=body.response_fields,
        context_limit=started.context_limit))


@api.get("/v1/models")
async def models(request: Request) -> dict:
    return {"object": "list", "data": [model_object(served(request))]}


@api.get("/v1/models/{name:path}")
async def model(name: str, request: Request) -> dict:
    """Any name answers with the loaded model, as chat requests do (the name is not checked)."""
    return model_object(served(request))


@api.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    return Response(served(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


health = APIRouter()


@health.get("/health")
async def health_status(request: Request) -> dict:
    worker = served(request).worker
    degraded = worker.degraded
    status = "shutting_down" if worker.draining else "degraded" if degraded else "ok"
    return {"status": status, "busy": worker.busy, "waiting": worker.waiting,
            **({"reason": degraded} if degraded else {})}


def model_object(s: Served) -> dict:
    return {"id": s.target_id, "object": "model", "created": s.loaded_at, "owned_by": "localspec",
            "draft": s.draft_id, "mode": s.settings.drafting.mode, "n_ctx": s.engine.n_ctx}


async def generate(request: Request, req: GenerationRequest, shape_for: Callable[[Started], Any] | None = None,
                   responses: ResponsesShape | None = None) -> Response:
    """Queue a checked request and answer it: a stream of server-sent events or one JSON object.
    ``shape_for(started)``: the answer's shape (default OpenAI's :class:`ResponseShape`);
    ``responses``: reshape the chat answer as a Responses API answer.

    A stream's ``200`` goes out when its prompt is checked (an error found before keeps its status: a ``400``
    for a prompt that does not fit), except that a stream without ``shape_for`` (chat, completions,
    responses) starts at once when it waits behind another request, and after ``stream_keepalive`` seconds
    at the latest: its keepalive chunks then show it alive while it waits, and an error found later is the
    stream's last event (:mod:`localspec.server.streams`)."""
    s = served(request)
    if req.tools is not None and (req.tools.tools or req.tools.history):
        if s.tool_fmt is None:
            raise tools.unsupported_error(s.target_id, s.template, "tools" if req.tools.tools else "messages")
        req.tools.format = s.tool_fmt
    req.scope = scope_id(getattr(request.state, "key_scope", ""), req.cache_salt)
    job = Job(req, sampling_for(s.settings, req), asyncio.get_running_loop(),
              drafting=drafting_for(s.settings, req, s.engine.has_draft_model))
    ahead = s.worker.submit(job)
    watch = asyncio.ensure_future(_cancel_when_gone(request, job))  # until the stream's own watch takes over
    try:
        # a stream's headers go out when its prompt is checked (an error before that keeps its status), or, when
        # it waits behind another request, at once (its errors are then the stream's last event)
        early = req.stream and shape_for is None
        first = await next_message(job, (0 if ahead else s.server.stream_keepalive or None) if early else None)
        if first is None:  # gone while waiting (its place in the queue is freed)
            return Response(status_code=499)
        if isinstance(first, Failed):
            raise first.error
        shape = shape_for(first) if shape_for is not None else ResponseShape(req.kind, s.target_id)
        if req.stream:
            watch.cancel()  # sse-starlette watches the connection from here on
            # sse-starlette ends streams when uvicorn begins to shut down; give the running answer
            # the grace period (the worker ends it then, with an error event saying why)
            return EventSourceResponse(sse(s, job, req, shape, responses), sep="\n",
                                       shutdown_grace_period=s.server.shutdown_grace + 2)
        answer = await _collect(s, job, shape, req)
    finally:
        watch.cancel()
    if responses is None or not isinstance(answer, dict):
        return answer if isinstance(answer, Response) else JSONResponse(answer)
    return JSONResponse(responses.whole(answer))


#: what :func:`next_message` returns when its ``patience`` ran out
WAITING = object()
#: what :func:`_cancel_when_gone` puts in a job's messages when its client went away
GONE = None


async def _cancel_when_gone(request: Request, job: Job) -> None:
    """Cancel ``job`` as soon as its client goes away (a disconnect, a client's timeout): the ASGI server's
    ``receive()`` answers ``http.disconnect`` then (the body was read already), and the job's reader gets
    :data:`GONE`. A cancelled job leaves the queue at once, or its generation stops within one llama.cpp
    pass, keeping what its prompt's read put in the KV cache (:meth:`~localspec.server.worker.Job.cancel`)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    job.cancel()
    job.out.put_nowait(GONE)


async def next_message(job: Job, patience: float | None = None):
    """The job's next message; None (:data:`GONE`) once the client went away; :data:`WAITING` when none came
    within ``patience`` seconds (None: no limit; 0: only one already there)."""
    if patience is not None and patience <= 0:
        return WAITING if job.out.empty() else job.out.get_nowait()
    try:
        return await asyncio.wait_for(job.out.get(), timeout=patience)
    except asyncio.TimeoutError:
        return WAITING


async def _collect(s: Served, job: Job, shape: ResponseShape, req: GenerationRequest) -> dict | Response:
    logprobs: list | None = [] if req.logprobs is not None else None  # every output token's entry
    while True:
        msg = await next_message(job)
        if msg is None:
            return Response(status_code=499)
        if isinstance(msg, Failed):
            raise msg.error
        if isinstance(msg, Tokens) and logprobs is not None:
            logprobs += msg.logprobs or ()
        if isinstance(msg, Finished):
            gen = msg.generation
            getattr(shape, "finished", lambda g: None)(gen)
            fields = {"usage": usage(gen.stats, gen.rounds), **extra(s, job, gen)}
            if req.tools is not None and req.tools.parses:
                return tools.complete(shape, req.tools, gen.text, FINISH_REASONS[gen.stats.end_reason], fields,
                                      logprobs)
            return shape.complete(gen.text, FINISH_REASONS[gen.stats.end_reason], fields, logprobs)


# -- errors as OpenAI's error object (localspec.server.errors) -------------------------------
async def _api_error(request: Request, e: Exception) -> JSONResponse:
    """Every exception a route lets out (:func:`~localspec.server.errors.translate`): a bug is logged
    here with its traceback, never sent to the client."""
    err = translate(e)
    if isinstance(e, StarletteHTTPException):  # no such route or method: say which
        hint = ("; cross-origin requests are off: start localspec serve with --cors-origin ORIGIN"
                if request.method == "OPTIONS" and e.status_code == 405 and not served(request).server.cors_origins
                else "")
        err = err.renamed(None, f"{request.method} {request.url.path}: {err.message}{hint}")
    elif is_bug(e):
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=e)
    return _error_response(err)


#: every exception type of the table, so that Starlette hands each to :func:`_api_error` (``Exception``: its
#: last resort, which also re-raises the exception after the answer, for the server's log)
ERROR_HANDLERS = dict.fromkeys((ApiError, RequestValidationError, StarletteHTTPException, LocalspecError, Exception),
                               _api_error)


def _openapi(app: FastAPI) -> Callable[[], dict]:
    """FastAPI's document (the request bodies come from the routes' models), with the bearer
    scheme when the server has an API key."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = get_openapi(title="localspec", version="1", routes=app.routes,
                              description="OpenAI-compatible API of localspec serve")
            if app.state.served.server.api_key:
                doc.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                doc["security"] = [{"bearer": []}]
            app.openapi_schema = doc
        return app.openapi_schema

    return openapi


def create_app(engine, settings: Settings, server: ServerSettings | None = None) -> FastAPI:
    """Build the app around a loaded engine (the app starts and stops its worker thread).

    Args:
        engine: a loaded engine (:class:`~localspec.core.engine.SpeculativeEngine`, its public surface only).
        settings: the models' names, drafting settings and sampling defaults.
        server: the server's settings (:class:`~localspec.config.ServerSettings`: API key, queue size,
            body limit, shutdown grace, CORS origins, default max_tokens, the draft memory's budget, the
            prompt prefixes' budget); None: the defaults. The app keeps the draft memories of the engine, one
            per scope (:mod:`localspec.server.scopes`) in one budget (``draft_memory_tokens``), and gives it a :class:`~localspec.core.prefix_cache.PrefixCache`
            (``prompt_cache_mb``; 0: none), on disk too unless ``prompt_cache_disk_mb`` is 0
            (:class:`~localspec.backend.prompt_store.PromptStore`, ``$LOCALSPEC_CACHE/prompts``; None: the
            default budget, :func:`~localspec.backend.prompt_store.default_disk_bytes`).
    """
    server = with_prompt_cache_default(server or ServerSettings())  # the models are loaded: memory is known
    metrics: ServerMetrics | None = None
    memory = DraftMemories(server.draft_memory_tokens) if server.draft_memory_tokens else None
    if server.prompt_cache_mb > 0:  # several prompt prefixes kept as KV-cache snapshots (the engine restores them)
        folder = cache_root() / FOLDER_NAME
        disk = (default_disk_bytes(folder) if server.prompt_cache_disk_mb is None
                else int(server.prompt_cache_disk_mb * (1 << 20)))
        store = engine_store(engine, folder, disk) if disk > 0 else None  # None (warned): the folder is unusable
        engine.prefix_cache = PrefixCache(int(server.prompt_cache_mb * (1 << 20)), store=store)
    worker = EngineWorker(engine, settings, max_queue=server.queue_size, default_max_tokens=server.default_max_tokens,
                          on_finished=lambda req, gen: metrics.observe(gen), memory=memory)
    metrics = ServerMetrics(lambda: worker.waiting, lambda: int(worker.busy), getattr(engine, "prefix_cache", None),
                            memory)
    template = engine.chat_template()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = FastAPI(title="localspec", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url="/openapi.json",
                  exception_handlers=ERROR_HANDLERS)
    app.state.served = Served(engine, settings, server, worker, metrics, model_id(settings.target.model),
                              model_id(settings.draft.model) if engine.has_draft_model else None, int(time.time()),
                              template, tools.tool_format(template))
    app.state.worker, app.state.metrics = worker, metrics
    for router in (health, api, generation):
        app.include_router(router)
    app.openapi = _openapi(app)
    app.add_middleware(_CountRequests, metrics=metrics)
    if server.cors_origins:  # outermost, so that every answer (errors too) carries the CORS headers
        app.add_middleware(CORSMiddleware, allow_origins=list(server.cors_origins),
                           allow_methods=["GET", "POST", "OPTIONS"], allow_headers=["*"], max_age=600)
    return app


def log_to_stderr(level: str = "info") -> None:
    """Send the server's own log records (logger ``localspec``: a request that failed, a calibration
    measured while serving) to stderr at ``level``, formatted like uvicorn's lines (``INFO:     ...``).

    uvicorn configures only its own loggers; without this the ``localspec`` records under WARNING
    went nowhere. Idempotent: a second call only sets the level.
    """
    from uvicorn.logging import DefaultFormatter

    logger = logging.getLogger("localspec")
    if not any(getattr(h, "_localspec", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s", use_colors=False))  # uvicorn's own
        handler._localspec = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level.upper())


def serve(engine, settings: Settings, server: ServerSettings) -> None:
    """Serve until SIGTERM or Ctrl-C (uvicorn) on ``server.host``:``server.port``. Warns when binding
    beyond loopback without an API key, and when any origin (``*``) may call from a browser.

    Shutdown: stop accepting connections, answer waiting requests 503, let the running answer
    finish within ``server.shutdown_grace`` seconds (else end it with an error event, code
    ``server_shutdown``), then return (the CLI exits 0).
    """
    import uvicorn

    log_to_stderr(server.log_level)
    if server.host not in LOOPBACK and not server.api_key:
        print(f"warning: serving on {server.host} without --api-key: anyone who can reach this port can use the "
              "model", file=sys.stderr)
    if "*" in server.cors_origins:
        print("warning: --cors-origin '*': any web page open in this machine's browser can use the model"
              + ("" if server.api_key else " (and no --api-key is set)"), file=sys.stderr)
    app = create_app(engine, settings, server)
    print(f"localspec serve: http://{server.host}:{server.port}/v1 (model {model_id(settings.target.model)}, "
          f"mode {settings.drafting.mode}, context {engine.n_ctx:,} tokens"
          + (f", prompt cache {server.prompt_cache_mb:g} MiB" if server.prompt_cache_mb > 0 else "")
          + (f", {len(server.api_key)} API keys, a scope each" if len(server.api_key) > 1 else "") + ")",
          file=sys.stderr, flush=True)
    grace = server.shutdown_grace
    config = uvicorn.Config(app, host=server.host, port=server.port, log_level=server.log_level,
                            timeout_graceful_shutdown=grace + 3)  # a backstop after the worker's own

    class DrainingServer(uvicorn.Server):
        """uvicorn's server; its first exit signal also starts the worker's drain."""

        def handle_exit(self, sig, frame) -> None:
            if not self.should_exit:
                drain = lambda: app.state.worker.drain(grace)  # noqa: E731
                try:  # a signal handler must not take locks: drain in the event loop
                    asyncio.get_running_loop().call_soon_threadsafe(drain)
                except RuntimeError:  # no event loop running yet
                    drain()
            super().handle_exit(sig, frame)

    uv = DrainingServer(config)
    # uvicorn raises the signal it caught again after serving, to the handler it found: with the
    # default one a SIGTERM would kill the process (exit -15) after a clean shutdown
    previous = signal.signal(signal.SIGTERM, lambda sig, frame: None)
    try:
        uv.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
