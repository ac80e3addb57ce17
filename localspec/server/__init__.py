"""``localspec serve``: an OpenAI-compatible HTTP server on the speculative engine.

FastAPI + uvicorn (SSE through sse-starlette, metrics through prometheus-client). One
engine serves one request at a time, in arrival order, from a bounded queue
(:mod:`localspec.server.worker`); requests are parsed and checked at the edge
(:mod:`localspec.server.bodies`; the fields it refuses, on every endpoint, are one table in
:mod:`localspec.server.refused`); the routes live in :mod:`localspec.server.app`.
The server uses only the engine's public surface, the :class:`localspec.core.engine.Engine`
protocol (tokens and templates, ``generate``, grammars, the caches' scopes, the cost model).
"""

from localspec.server.app import create_app, serve

__all__ = ["create_app", "serve"]
