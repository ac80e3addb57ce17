#!/usr/bin/env python3
"""Record an agent's session with a server: a reverse proxy that forwards every request unchanged and
writes each request's body to a JSONL file, for replaying the session later (the replay benchmark of issue 45).

    localspec serve --port 8080 &
    python scripts/record_agent_session.py --upstream http://127.0.0.1:8080 --port 8090 \\
        --out /tmp/session.jsonl --log /tmp/session.log.jsonl &
    OPENAI_BASE_URL=http://127.0.0.1:8090/v1 qwen -p "..."    # the agent talks to the proxy

The recording (``--out``, appended to): one line per request, in the order the requests arrived::

    {"turn": 0, "method": "POST", "path": "/v1/chat/completions", "content_type": "application/json", "body": {...}}

``turn`` counts requests from 0 (every request, ``GET /v1/models`` too); ``path`` includes the query string;
``body`` is the parsed JSON body (a string when the body is not JSON, null when empty). No header is kept
but ``content_type``; the Authorization header and every other one are forwarded, never written. Values
that differ between two runs of the same session are written as stable placeholders (:class:`Normalizer`):
ids the server made up and the client sent back (``call_``/``chatcmpl-``/``resp_``/``msg_``/``fc_`` + 24 hex
digits), UUIDs (session ids, ``prompt_cache_key``), and today's date in the usual spellings (as
:data:`FIXED_DATE`); each placeholder is the same everywhere in one recording, so a replay sends the server
the same prefixes the agent sent.

Forwarding: the request as it came (method, path, query, body bytes, headers less the hop-by-hop ones), the
answer as it comes, chunk by chunk (``aiter_raw``: no buffering, no decoding), with the upstream's status
and headers. No timeout: the client decides. A client that disconnects closes the upstream request too
(as it would have without the proxy), also while the upstream has not yet answered with headers.

The log (``--log``, optional, appended to; not part of the recording): one line per request when its
answer ended: ``turn``, ``method``, ``path``, ``status``, ``started`` (UTC, ISO), ``headers_s``,
``first_token_s`` (the first event carrying text or a tool call; keepalive chunks do not count), ``end_s``
(seconds after the request arrived), ``disconnected``, and :func:`answer_summary`'s fields (the answer's
text, tool calls, finish reason, usage), for the transcripts of docs/agents/.
Runs until stopped; prints one line when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

#: headers that describe one connection, not the message: never forwarded either way
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
                        b"trailer", b"transfer-encoding", b"upgrade", b"host", b"content-length"})
#: the date every recording shows in place of the day it was recorded
FIXED_DATE = dt.date(2026, 1, 1)
#: how a date is spelled in agents' prompts (strftime; ``%-d`` has no leading zero)
DATE_FORMATS = ("%A, %B %-d, %Y", "%a %b %d %Y", "%B %-d, %Y", "%b %-d, %Y", "%Y-%m-%d", "%Y/%m/%d", "%-m/%-d/%Y",
                "%d.%m.%Y")
#: ids that localspec (and OpenAI) make up for an answer, which the client sends back in later turns
SERVER_ID = re.compile(r"\b(call_|chatcmpl-|cmpl-|resp_|msg_|fc_)([0-9a-f]{24})\b")
UUID = re.compile(r"(?<![0-9a-f])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-f])", re.I)
#: a Unix time in seconds (10 digits) or milliseconds (13 digits) inside a string
EPOCH = re.compile(r"(?<!\d)1\d{9}(?:\d{3})?(?!\d)")
#: a number within this many seconds of the recording's start is taken for a timestamp
EPOCH_WINDOW = 3 * 86400


class Normalizer:
    """Stable placeholders for the values of a request body that differ between runs of one session.

    Each distinct server id (``call_`` + 24 hex digits and the like) becomes the same prefix + its number
    in order of first appearance, zero-padded to 24 digits (``call_000000000000000000000001``); each
    distinct UUID (also inside an id such as Codex's ``msg_<uuid>``) becomes ``00000000-0000-4000-8000-`` +
    its 12-digit number; ``today`` in each spelling of :data:`DATE_FORMATS` becomes :data:`FIXED_DATE` in
    the same spelling; a Unix time within :data:`EPOCH_WINDOW` of ``now`` (seconds), in seconds or
    milliseconds, as a number or in a string (Codex's ``turn_started_at_unix_ms``), becomes FIXED_DATE's
    midnight UTC in the same unit. Applied to every string of a JSON value, keys included; other numbers,
    booleans and null are kept. Applying it to its own output changes nothing."""

    def __init__(self, today: dt.date | None = None, now: float | None = None):
        self.ids: dict[str, str] = {}
        self.uuids: dict[str, str] = {}
        self.now = time.time() if now is None else now
        self.fixed_epoch = int(dt.datetime(FIXED_DATE.year, FIXED_DATE.month, FIXED_DATE.day,
                                           tzinfo=dt.timezone.utc).timestamp())
        today = today or dt.date.today()
        self.dates = [(today.strftime(f), FIXED_DATE.strftime(f)) for f in DATE_FORMATS]
        self.dates = [(a, b) for a, b in self.dates if a != b]

    def _id(self, m: re.Match) -> str:
        return self.ids.setdefault(m.group(0), m.group(1) + f"{len(self.ids) + 1:024d}")

    def _uuid(self, m: re.Match) -> str:
        return self.uuids.setdefault(m.group(0).lower(), f"00000000-0000-4000-8000-{len(self.uuids) + 1:012d}")

    def _epoch(self, n: int) -> int | None:
        """FIXED_DATE's midnight in ``n``'s unit when ``n`` is a Unix time near ``now``, else None."""
        for scale in (1, 1000):
            if abs(n / scale - self.now) <= EPOCH_WINDOW:
                return self.fixed_epoch * scale
        return None

    def text(self, s: str) -> str:
        s = UUID.sub(self._uuid, SERVER_ID.sub(self._id, s))
        s = EPOCH.sub(lambda m: str(self._epoch(int(m.group(0))) or m.group(0)), s)
        for today, fixed in self.dates:
            s = s.replace(today, fixed)
        return s

    def value(self, v: Any) -> Any:
        """``v`` (a parsed JSON value) with every string passed through :meth:`text`; a new value."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.text(k): self.value(x) for k, x in v.items()}
        if isinstance(v, int) and not isinstance(v, bool):
            return self._epoch(v) or v
        return v


class Recorder:
    """Appends one line per request to the recording ``path`` (and, when given, one per answer to the
    log ``log_path``); thread-safe. ``turn`` numbers continue an existing recording's count."""

    def __init__(self, path: Path, log_path: Path | None = None, normalizer: Normalizer | None = None):
        self.path, self.log_path = Path(path), Path(log_path) if log_path else None
        self.normalizer = normalizer or Normalizer()
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.turns = sum(1 for line in self.path.open() if line.strip()) if self.path.exists() else 0

    def request(self, method: str, path: str, content_type: str | None, body: bytes) -> int:
        """Write one request's line; returns its turn number (0-based)."""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode("utf-8", "replace")
        with self._lock:
            turn = self.turns
            self.turns += 1
            line = {"turn": turn, "method": method, "path": path, "content_type": content_type,
                    "body": self.normalizer.value(parsed)}
            with self.path.open("a") as f:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        return turn

    def answer(self, entry: dict) -> None:
        """Append ``entry`` (one answer's timings and summary) to the log, if there is one."""
        if self.log_path is None:
            return
        with self._lock, self.log_path.open("a") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")


def sse_events(raw: bytes) -> list[dict]:
    """The JSON objects of a server-sent event stream's ``data:`` lines (``[DONE]`` and other lines skipped)."""
    events = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            try:
                event = json.loads(line[5:].strip())
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return events


def carries_output(event: dict) -> bool:
    """Whether one answer object (a chat chunk, a completions chunk, a Responses event) carries text or a
    tool call, i.e. is more than a keepalive or a role announcement."""
    kind = event.get("type", "")
    if kind:
        return kind in ("response.output_text.delta", "response.function_call_arguments.delta") or (
            kind == "response.output_item.added" and (event.get("item") or {}).get("type") == "function_call")
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or choice.get("message") or {}
        if delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content") or choice.get("text"):
            return True
    return False


def answer_summary(events: list[dict]) -> dict:
    """What an answer said, from its JSON objects (the events of a stream, or the one body of an answer that
    was not streamed): ``text`` (joined), ``tool_calls`` ([name, arguments] each), ``finish_reason`` (or the
    Responses status), ``usage`` (as the server gave it, or None), ``error`` (an error object, or None).
    Reads chat completions, completions and the Responses API."""
    text, calls, finish, usage, error = [], {}, None, None, None
    for e in events:
        error = e.get("error") or error
        usage = e.get("usage") or usage
        kind = e.get("type", "")
        if kind == "response.output_text.delta":
            text.append(e.get("delta") or "")
        elif kind in ("response.completed", "response.incomplete", "response.failed") or e.get("object") == "response":
            r = e.get("response", e)
            finish, usage, error = r.get("status"), r.get("usage") or usage, r.get("error") or error
            for item in r.get("output") or []:
                if item.get("type") == "function_call":
                    calls[item.get("call_id")] = [item.get("name"), item.get("arguments")]
                elif item.get("type") == "message" and not text:
                    text += [c.get("text") or "" for c in item.get("content") or []]
        for choice in e.get("choices") or []:
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or choice.get("message") or {}
            text.append(delta.get("content") or choice.get("text") or "")
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc.get("index", tc.get("id")), [None, ""])
                fn = tc.get("function") or {}
                call[0] = call[0] or fn.get("name")
                call[1] += fn.get("arguments") or ""
    return {"text": "".join(text), "tool_calls": list(calls.values()), "finish_reason": finish, "usage": usage,
            "error": error}


class Proxy:
    """The ASGI app: forwards to ``upstream`` (``http://host:port``, no path) and records with ``recorder``."""

    def __init__(self, upstream: str, recorder: Recorder, transport: httpx.AsyncBaseTransport | None = None):
        self.upstream, self.recorder, self.transport = upstream.rstrip("/"), recorder, transport
        self.client: httpx.AsyncClient | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    if self.client is not None:
                        await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=None, transport=self.transport)
        await self.forward(scope, receive, send)

    async def forward(self, scope, receive, send) -> None:
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
        content_type = next((v.decode("latin-1") for k, v in headers if k.lower() == b"content-type"), None)
        query = scope.get("query_string", b"").decode("latin-1")
        path = scope["path"] + (f"?{query}" if query else "")
        turn = self.recorder.request(scope["method"], path, content_type, bytes(body))
        entry = {"turn": turn, "method": scope["method"], "path": path, "status": None,
                 "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
                 "headers_s": None, "first_token_s": None, "end_s": None, "disconnected": False}
        t0 = time.monotonic()
        request = self.client.build_request(scope["method"], self.upstream + path, headers=headers,
                                            content=bytes(body))
        # the client's disconnect, once its body is read, is the next message (ASGI)
        disconnect = asyncio.ensure_future(receive())
        chunks: list[tuple[float, bytes]] = []
        try:
            pump = asyncio.ensure_future(self._pump(request, send, entry, t0, chunks))
            done, _ = await asyncio.wait({pump, disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if pump not in done:
                entry["disconnected"] = True
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
            else:
                pump.result()
        finally:
            disconnect.cancel()
            entry["end_s"] = round(time.monotonic() - t0, 3)
            entry.update(self._summary(chunks, t0, entry))
            self.recorder.answer(entry)

    async def _pump(self, request: httpx.Request, send, entry: dict, t0: float,
                    chunks: list[tuple[float, bytes]]) -> None:
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as e:
            entry["status"] = 502
            msg = json.dumps({"error": {"message": f"the proxy could not reach the upstream: {e!r}",
                                        "type": "proxy_error"}}).encode()
            await send({"type": "http.response.start", "status": 502,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": msg})
            return
        try:
            entry["status"], entry["headers_s"] = response.status_code, round(time.monotonic() - t0, 3)
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP
                                    or k.lower() == b"content-length"]})
            async for chunk in response.aiter_raw():
                chunks.append((time.monotonic(), chunk))
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    @staticmethod
    def _summary(chunks: list[tuple[float, bytes]], t0: float, entry: dict) -> dict:
        """:func:`answer_summary` of the answer's bytes, and the time its first output arrived."""
        raw = b"".join(c for _, c in chunks)
        if raw.lstrip().startswith(b"{"):
            try:
                events = [json.loads(raw)]
            except ValueError:
                events = []
            first = chunks[0][0] if chunks and events and carries_output(events[0]) else None
        else:
            first, pending = None, b""
            for t, chunk in chunks:  # the arrival of the chunk that completed the first event with output
                lines, _, pending = (pending + chunk).rpartition(b"\n")
                if any(carries_output(e) for e in sse_events(lines)):
                    first = t
                    break
            events = sse_events(raw)
        out = answer_summary(events) if events else {"text": raw.decode("utf-8", "replace")[:2000]}
        out["first_token_s"] = round(first - t0, 3) if first is not None else None
        return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", default="http://127.0.0.1:8080", help="the server's root URL (no /v1)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090, help="where the proxy listens")
    p.add_argument("--out", type=Path, help="the recording (JSONL, appended to)")
    p.add_argument("--log", type=Path, help="one line per answer: status, timings, text and tool calls (JSONL)")
    p.add_argument("--normalize", type=Path, nargs="+", metavar="RECORDING", help="instead of serving: rewrite "
                   "these recordings with today's Normalizer (for recordings made by an older version of it)")
    ns = p.parse_args()
    if ns.normalize:
        for path in ns.normalize:
            norm = Normalizer()
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            path.write_text("".join(json.dumps({**x, "body": norm.value(x["body"])}, ensure_ascii=False) + "\n"
                                    for x in lines))
        return 0
    if ns.out is None:
        p.error("--out is required (or --normalize)")
    import uvicorn

    app = Proxy(ns.upstream, Recorder(ns.out, ns.log))
    print(f"record_agent_session: http://{ns.host}:{ns.port} -> {ns.upstream}, recording {ns.out}", flush=True)
    uvicorn.run(app, host=ns.host, port=ns.port, log_level="warning", timeout_keep_alive=600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
