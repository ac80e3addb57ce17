#!/usr/bin/env python3
"""Replay recorded agent sessions against servers: prompt tokens reused and time to first token per turn.

Issue 45, item 1. A session file (``tests/data/agent-sessions/<client>-<task>.jsonl``) holds one request a
line, as the server received it: ``{"turn": n, "method": "POST", "path": "/v1/chat/completions" or
"/v1/responses", "body": {...}}``. Each body is sent as recorded, with two changes said in the output:
``stream`` on (to time the first token; chat also gets ``stream_options.include_usage``) and the answer
capped at ``--max-tokens`` (default 16: the bench measures prompt handling; recorded answers vary anyway).

Per server, per turn, it prints:

* **prompt**: the prompt tokens the server reports (localspec: ``usage.prompt_tokens``; llama-server:
  ``timings.cache_n + timings.prompt_n``);
* **reusable**: tokens that could have been reused, defined once here (:func:`reusable_tokens`): the
  longest common prefix, in tokens, of this turn's prompt with any earlier prompt of the session, at most
  prompt - 1 (the last prompt token is always decoded, for the first answer token's logits). The prompts are
  token ids rendered as the server renders them: for localspec, by localspec's own code
  (:func:`localspec.server.worker.request_prompt`, the function the server calls) on a tokenizer-only load
  of the same GGUF (``--gguf``; its count is checked against the server's ``prompt_tokens``); for
  llama-server, by its own ``/apply-template`` and ``/tokenize`` endpoints;
* **reused**: tokens the server did not read again (localspec: ``usage.prompt_tokens_details.cached_tokens``;
  llama-server: ``timings.cache_n``);
* **TTFT**: seconds from sending the request to the first streamed chunk carrying answer text, reasoning, a
  tool call or a finish reason (localspec's keep-alive chunks carry none of these);
* the goal bound on TTFT: 1 s + (prompt - reusable) / the prefill rate, measured on this machine at the start
  of the session, on each server (after a one-token warm-up request, the first turn is a cold read: rate = its
  prompt tokens / its TTFT; ``--prefill-rate`` gives one instead), plus, after a restart, the time to read and
  checksum the snapshots the disk tier holds for the prompt (their bytes, from the store's metadata files /
  the rate at which the store reads and checks a 256 MiB file (its map and checksum), measured at the start; the page
  cache usually holds recently written snapshots, so this is a memory-speed figure);
* **@depth**: the same bound at the prefill rate measured at the turn's depth (:func:`depth_rates`: before any
  server starts, the target alone, loaded as ``localspec serve`` loads it, holding the turn's reusable prefix,
  reads its new tokens; ``--no-depth-rate`` skips it). A token read after 7,000 cached ones costs more than the
  cold read's average (its attention spans them all), so the first bound asks a server to read new tokens
  faster than this machine can at that depth; the second leaves it 1 s for everything else.

Phases: ``warm`` (one server process for the whole session, started on an empty prompt cache) and, for the
servers the script started (``--localspec CMD`` / ``--llama-server CMD``, ``{port}`` in CMD), ``restart``:
on another empty prompt cache, the server is restarted before every turn (llama-server keeps no prompt
cache across restarts; ``--no-restart LABEL`` skips it). localspec servers started here get their own
``$LOCALSPEC_CACHE`` (links to the real one's entries, such as the measured costs, except ``prompts/``), so
every phase starts with no snapshot of an earlier run. A URL instead of CMD replays against a running server
(warm only, and its cache is whatever it holds).

Goals, printed PASS/FAIL (on the default pair with the server's defaults; the disk tier is on by default):
reused >= 95 % of reusable on every turn after the first, in both phases; TTFT <= the bound (each bound its
goal line); localspec reused
>= each llama-server's on every turn. And what llama-server's ``--cache-reuse`` adds: the reused tokens of
each llama-server variant less the first one's, per turn.

Usage::

    .venv/bin/python scripts/bench_agents.py tests/data/agent-sessions/synthetic-fix-test.jsonl \\
        --llama-server-bin /path/to/llama-server [--max-tokens 16] [--json out.json]

With no ``--localspec``: ``localspec serve`` on the default pair with its defaults; ``--llama-server-bin``
adds llama-server on the same pair (``-md DRAFT --spec-type draft-simple``, ``-c 32768 -t 2 -np 1``) as
``llama-server`` (its defaults: ``cache_prompt`` on, the slot prompt cache in RAM ``--cache-ram``) and
``llama-server-reuse`` (``--cache-reuse 256``, the value llama.cpp's docs and users set); ``--no-repack`` on a
CPU with AMX, where llama-server crashes otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

#: the endpoints a session may hold
PATHS = ("/v1/chat/completions", "/v1/responses")
#: the share of the reusable tokens that must be reused on every turn after the first
REUSE_GOAL = 0.95
#: the fixed allowance of the TTFT goal, seconds
TTFT_SLACK = 1.0
#: what ``--cache-reuse`` is set to in the default llama-server variant that uses it (llama.cpp's docs' example)
CACHE_REUSE = 256


class SessionError(ValueError):
    """A session file that is not one JSON request a line: the message names the file and line."""


@dataclass(frozen=True)
class Turn:
    """One recorded request: its number, HTTP method and path, and the JSON body the server received."""

    turn: int
    method: str
    path: str
    body: dict


def parse_session(text: str, name: str = "session") -> list[Turn]:
    """The requests of a session file's ``text`` (blank lines skipped), in file order.

    Raises:
        SessionError: "``name``:line: why" for a line that is not a JSON object with an int ``turn`` (increasing),
            ``method`` POST, a ``path`` of :data:`PATHS` and an object ``body`` with ``messages`` (chat) or
            ``input`` (Responses); for a file with no request.
    """
    turns: list[Turn] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{name}:{i}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise SessionError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise SessionError(f"{where}: a line is one JSON object {{turn, method, path, body}}")
        turn, method, path, body = d.get("turn"), d.get("method"), d.get("path"), d.get("body")
        if not isinstance(turn, int) or isinstance(turn, bool) or (turns and turn <= turns[-1].turn):
            raise SessionError(f"{where}: turn must be an integer larger than the line before's")
        if method != "POST":
            raise SessionError(f"{where}: method {method!r}: only POST requests are replayed")
        if path not in PATHS:
            raise SessionError(f"{where}: path {path!r}: one of {', '.join(PATHS)}")
        key = "messages" if path == "/v1/chat/completions" else "input"
        if not isinstance(body, dict) or key not in body:
            raise SessionError(f"{where}: body must be the JSON object the server received, with {key!r}")
        turns.append(Turn(turn, method, path, body))
    if not turns:
        raise SessionError(f"{name}: no request in it")
    return turns


def read_session(path: str | os.PathLike) -> list[Turn]:
    """:func:`parse_session` of a file. Raises: SessionError (OSError as one too)."""
    try:
        return parse_session(Path(path).read_text(encoding="utf-8"), str(path))
    except OSError as e:
        raise SessionError(f"{path}: {e.strerror or e}") from None


def replay_body(turn: Turn, max_tokens: int) -> dict:
    """The body sent for ``turn``: the recorded one, streamed (chat: with the usage in the last chunk) and its
    answer capped at ``max_tokens`` (chat's ``max_tokens`` and ``max_completion_tokens``, Responses'
    ``max_output_tokens``: the smaller of the recorded value and the cap)."""
    body = json.loads(json.dumps(turn.body))
    body["stream"] = True
    if turn.path == "/v1/chat/completions":
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        keys = [k for k in ("max_tokens", "max_completion_tokens") if body.get(k) is not None] or ["max_tokens"]
    else:
        keys = ["max_output_tokens"]
    for k in keys:
        body[k] = min(body[k], max_tokens) if isinstance(body.get(k), int) else max_tokens
    return body


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (localspec's own, the prefix cache's)."""
    from localspec.core.prefix_cache import common_prefix as lcp

    return lcp(a, b)


def reusable_tokens(prompts: list[list[int]]) -> list[int]:
    """Per prompt of a session, the tokens that could have been reused: the longest common prefix with any
    earlier prompt, at most len(prompt) - 1 (the last token is always decoded); 0 for the first."""
    out = []
    for i, p in enumerate(prompts):
        best = max((common_prefix(p, q) for q in prompts[:i]), default=0)
        out.append(max(0, min(best, len(p) - 1)))
    return out


# -- one streamed answer --------------------------------------------------------------------------------
@dataclass
class Streamed:
    """What one streamed answer says: seconds to the first answer chunk, and the last usage / timings seen."""

    ttft: float | None = None
    usage: dict | None = None
    timings: dict | None = None
    speculation: dict | None = None  # localspec's statistics of the answer
    error: str | None = None


def _answers(d: dict) -> bool:
    """Whether a streamed chunk (chat) or event (Responses) carries the start of the answer."""
    t = d.get("type", "")
    if t:
        return t.endswith(".delta") or (t == "response.output_item.added" and d.get("item", {}).get("type")
                                        == "function_call")
    for c in d.get("choices") or ():
        delta = c.get("delta") or {}
        if c.get("finish_reason") or delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


def read_stream(lines: Iterable[tuple[float, str]]) -> Streamed:
    """Server-sent events -> :class:`Streamed`. ``lines``: (seconds since the request was sent, line)."""
    out = Streamed()
    for t, line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            d = json.loads(data)
        except json.JSONDecodeError:
            continue
        if not isinstance(d, dict):
            continue
        if d.get("error") or d.get("type") in ("error", "response.failed"):
            out.error = json.dumps(d.get("error") or d.get("response", {}).get("error") or d)[:300]
            break
        if out.ttft is None and _answers(d):
            out.ttft = t
        if d.get("usage"):
            out.usage = d["usage"]
        if d.get("type") in ("response.completed", "response.incomplete") and d.get("response", {}).get("usage"):
            out.usage = d["response"]["usage"]
        if d.get("type") in ("response.completed", "response.incomplete") and d.get("response", {}).get("speculation"):
            out.speculation = d["response"]["speculation"]
        if d.get("timings"):
            out.timings = d["timings"]
        if d.get("speculation"):
            out.speculation = d["speculation"]
    return out


def prefill_seconds(s: Streamed) -> float | None:
    """Seconds the server says it spent reading the prompt (localspec's ``speculation.prefill_seconds``,
    llama-server's ``timings.prompt_ms``), or None: TTFT less this is queueing, rendering, restoring a snapshot
    and the first decode."""
    if s.timings and "prompt_ms" in s.timings:
        return s.timings["prompt_ms"] / 1000
    return (s.speculation or {}).get("prefill_seconds")


def reuse_of(s: Streamed) -> tuple[int | None, int | None]:
    """(prompt tokens, reused tokens) the server reported: llama-server's ``timings`` (``cache_n`` reused,
    ``prompt_n`` read) when present, else the usage's (chat's or Responses' names)."""
    if s.timings and "cache_n" in s.timings:
        return s.timings["cache_n"] + s.timings.get("prompt_n", 0), s.timings["cache_n"]
    u = s.usage or {}
    prompt = u.get("prompt_tokens", u.get("input_tokens"))
    details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
    return prompt, details.get("cached_tokens")


# -- goals ----------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One turn replayed on one server in one phase (``warm`` or ``restart``); tokens, seconds."""

    session: str
    server: str
    phase: str
    turn: int
    prompt: int | None
    ids: int  # prompt tokens counted by the bench's rendering (should equal ``prompt``)
    reusable: int
    reused: int | None
    ttft: float | None
    read_seconds: float = 0.0  # snapshot read estimate (restart phase, localspec)
    bound: float | None = None
    error: str | None = None
    prefill: float | None = None  # the server's own prompt-reading seconds (:func:`prefill_seconds`)
    depth_bound: float | None = None  # the bound at the rate measured at this turn's depth (:func:`depth_rates`)


def ttft_bound(new_tokens: int, prefill_rate: float, read_seconds: float = 0.0) -> float:
    """The TTFT goal, seconds: 1 s + ``new_tokens`` / ``prefill_rate`` (tokens/s) + ``read_seconds``."""
    return TTFT_SLACK + new_tokens / prefill_rate + read_seconds


def reuse_ok(reused: int | None, reusable: int) -> bool:
    """The reuse goal of one turn: reused >= 95 % of reusable (nothing reusable: met)."""
    return reusable == 0 or (reused is not None and reused >= REUSE_GOAL * reusable)


@dataclass
class Goal:
    """One goal's verdict and the turns that missed it."""

    name: str
    ok: bool
    missed: list[str] = field(default_factory=list)


def check_goals(rows: list[Row], localspec: list[str], llama: list[str]) -> list[Goal]:
    """The issue's goals over ``rows``, for the servers named in ``localspec`` (each checked) against those in
    ``llama`` (llama-server variants): reuse (turns after the first, every phase), TTFT (rows with a bound),
    and reused >= each llama-server variant's on the same session, phase and turn."""
    goals = []
    for name in localspec:
        mine = [r for r in rows if r.server == name]
        first = {(r.session, r.phase): r.turn for r in reversed(mine)}
        miss = [f"{r.session} {r.phase} turn {r.turn}: {r.reused}/{r.reusable}" for r in mine
                if r.error or (r.turn != first[(r.session, r.phase)] and not reuse_ok(r.reused, r.reusable))]
        goals.append(Goal(f"{name}: reused >= {REUSE_GOAL:.0%} of reusable on every turn after the first", not miss,
                          miss))
        slow = [f"{r.session} {r.phase} turn {r.turn}: {r.ttft:.2f} s > {r.bound:.2f} s" for r in mine
                if r.bound is not None and (r.ttft is None or r.ttft > r.bound)]
        goals.append(Goal(f"{name}: TTFT <= 1 s + new tokens / prefill rate (+ snapshot read after a restart)",
                          not slow, slow))
        if any(r.depth_bound is not None for r in mine):
            slow = [f"{r.session} {r.phase} turn {r.turn}: {r.ttft:.2f} s > {r.depth_bound:.2f} s" for r in mine
                    if r.depth_bound is not None and (r.ttft is None or r.ttft > r.depth_bound)]
            goals.append(Goal(f"{name}: TTFT <= 1 s + new tokens / prefill rate at the turn's depth (+ snapshot "
                              "read after a restart)", not slow, slow))
        for peer in llama:
            theirs = {(r.session, r.phase, r.turn): r.reused for r in rows if r.server == peer}
            fewer = [f"{r.session} {r.phase} turn {r.turn}: {r.reused} < {theirs[k]}" for r in mine
                     if (k := (r.session, r.phase, r.turn)) in theirs and theirs[k] is not None
                     and (r.reused or 0) < theirs[k]]
            compared = sum((r.session, r.phase, r.turn) in theirs for r in mine)
            if compared:
                goals.append(Goal(f"{name}: reused >= {peer}'s on every turn ({compared} compared)", not fewer, fewer))
    return goals


def cache_reuse_gain(rows: list[Row], base: str, other: str) -> list[tuple[str, str, int, int]]:
    """Per (session, phase, turn) both servers ran: ``other``'s reused tokens less ``base``'s."""
    mine = {(r.session, r.phase, r.turn): r.reused or 0 for r in rows if r.server == base}
    return [(r.session, r.phase, r.turn, (r.reused or 0) - mine[(r.session, r.phase, r.turn)])
            for r in rows if r.server == other and (r.session, r.phase, r.turn) in mine]


# -- rendering the prompts as each server does ----------------------------------------------------------
class LocalspecPrompts:
    """Prompt token ids as ``localspec serve`` builds them, on a tokenizer-only load of ``gguf``."""

    def __init__(self, gguf: str | os.PathLike) -> None:
        from localspec.backend.llama import LlamaModel
        from localspec.core.engine import SpeculativeEngine

        self.engine = SpeculativeEngine(LlamaModel(gguf, vocab_only=True))

    def __call__(self, turn: Turn, http=None) -> list[int]:
        from localspec.server.bodies import parse_request
        from localspec.server.responses import ResponsesShape
        from localspec.server.responses_body import ResponsesBody
        from localspec.server.tool_parser import tool_format
        from localspec.server.worker import request_prompt

        if turn.path == "/v1/responses":
            req = ResponsesShape("bench", ResponsesBody.model_validate(turn.body)).request()
        else:
            req = parse_request(turn.body, "chat")
        if req.tools is not None and (req.tools.tools or req.tools.history):  # as the route does (app.generate)
            req.tools.format = tool_format(self.engine.chat_template())
        return request_prompt(self.engine, req)


def depth_rates(sessions: dict[str, list[Turn]], prompts: "LocalspecPrompts",
                gguf: str | os.PathLike) -> dict[tuple[str, int], float]:
    """The prefill rate at each turn's depth, tokens/s, measured on this machine before any server starts:
    per (session, turn) after the first, the target ``gguf`` alone (loaded as ``localspec serve`` loads it: its
    default settings, window, repack probe verdict and flash-attention choice) holding the turn's reusable prefix
    reads the turn's new tokens in one call; rate = new tokens / its wall time.

    Reading a token costs more the deeper it sits (its attention spans every cached token): on the 2-core
    AMX Xeon 153 tokens after 7,258 read at ~52 tokens/s against ~75 for the cold read's average. The bound
    at this rate leaves a server its 1 s for everything but reading the new tokens.
    """
    from localspec.app.loader import load_model
    from localspec.config import Settings

    model = load_model(Settings().target.model_copy(update={"model": str(gguf)}))
    rates: dict[tuple[str, int], float] = {}
    try:
        for name, turns in sessions.items():
            ids = [prompts(t) for t in turns]
            reusable = reusable_tokens(ids)
            for i, (turn, p) in enumerate(zip(turns, ids)):
                if i == 0 or reusable[i] <= 0:
                    continue
                if len(p) > model.n_ctx:
                    print(f"depth rate: {name} turn {turn.turn} skipped ({len(p)} tokens > window {model.n_ctx})")
                    continue
                n = model.sync(p[: reusable[i] + 1])  # keep the common prefix; read what lacks of it untimed
                if n < reusable[i]:
                    model.decode(p[n: reusable[i]], logits_for=())
                t0 = time.perf_counter()
                model.decode(p[reusable[i]:], logits_for="last")
                seconds = time.perf_counter() - t0
                rates[(name, turn.turn)] = (len(p) - reusable[i]) / seconds
                print(f"depth rate: {name} turn {turn.turn}: {len(p) - reusable[i]} tokens after {reusable[i]} "
                      f"read in {seconds:.2f} s ({rates[(name, turn.turn)]:.1f} tokens/s)", flush=True)
    finally:
        model.close()
    return rates


def llama_server_prompt(turn: Turn, http) -> list[int]:
    """Prompt token ids as llama-server builds them: its ``/apply-template``, then ``/tokenize`` (a Responses body
    is first converted to chat messages by localspec's conversion)."""
    body = turn.body
    if turn.path == "/v1/responses":
        from localspec.server.responses import chat_body
        from localspec.server.responses_body import ResponsesBody

        body = chat_body(ResponsesBody.model_validate(body))
    keep = {k: body[k] for k in ("messages", "tools", "tool_choice", "chat_template_kwargs") if k in body}
    r = http.post("/apply-template", json=keep)
    r.raise_for_status()
    r = http.post("/tokenize", json={"content": r.json()["prompt"], "add_special": True, "parse_special": True})
    r.raise_for_status()
    return [t if isinstance(t, int) else t["id"] for t in r.json()["tokens"]]


# -- servers --------------------------------------------------------------------------------------------
@dataclass
class ServerSpec:
    """A server to replay against: its kind (``localspec`` / ``llama-server``), label, and the command
    (``{port}`` replaced) that starts it or the URL of a running one."""

    kind: str
    label: str
    argv: list[str] | None = None
    url: str | None = None


def parse_server(kind: str, text: str, index: int = 0) -> ServerSpec:
    """``[LABEL=]CMD`` or ``[LABEL=]URL`` -> :class:`ServerSpec` (label default: ``kind``, ``kind-2``, ...).

    Raises:
        SessionError: an empty command, or a command without ``{port}``.
    """
    label, _, rest = text.partition("=")
    if not rest or " " in label or label.startswith(("http", "/", ".")):
        label, rest = (kind if index == 0 else f"{kind}-{index + 1}"), text
    rest = rest.strip()
    if rest.startswith(("http://", "https://")):
        return ServerSpec(kind, label, url=rest.rstrip("/"))
    argv = shlex.split(rest)
    if not argv or not any("{port}" in a for a in argv):
        raise SessionError(f"--{kind} {text!r}: a command with {{port}} where the port goes, or a URL")
    return ServerSpec(kind, label, argv=argv)


def isolated_cache(real: Path, into: Path) -> Path:
    """A ``$LOCALSPEC_CACHE`` at ``into`` linking every entry of ``real`` but ``prompts/`` (no snapshots);
    ``costs/`` and ``repack/`` are made in ``real`` first, so a calibration measured by one start serves the next."""
    into.mkdir(parents=True, exist_ok=True)
    for shared in ("costs", "repack"):
        (real / shared).mkdir(parents=True, exist_ok=True)
    if real.is_dir():
        for entry in real.iterdir():
            if entry.name != "prompts" and not (into / entry.name).exists():
                (into / entry.name).symlink_to(entry.resolve())
    return into


def cpu_description() -> str:
    """The CPU's model name, the machine's core count and the AVX-512 / AMX flags."""
    from localspec.backend.machine import cpu_model, vector_extensions

    wide = [f for f in vector_extensions() if f.startswith(("avx512", "amx"))]
    return f"{cpu_model()}, {os.cpu_count()} logical CPUs, {' '.join(wide) or 'no AVX-512, no AMX'}"


def read_rate(folder: Path, nbytes: int = 256 << 20) -> float:
    """Bytes/s at which the disk tier reads and checks a snapshot just written in ``folder``: the store's own read
    (:attr:`localspec.backend.prompt_store.StoredKvState.data`: a map of the file, its checksum verified)."""
    from localspec.backend.prompt_store import StoredKvState, checksum

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bench-read-{uuid.uuid4().hex}.tmp"
    block = os.urandom(8 << 20)
    try:
        with open(path, "wb") as f:
            for _ in range(nbytes // len(block)):
                f.write(block)
        entry = StoredKvState(path, (), nbytes, None, checksum(path.read_bytes()))
        t0 = time.perf_counter()
        data = entry.data
        seconds = time.perf_counter() - t0
        del data
        return nbytes / seconds
    finally:
        path.unlink(missing_ok=True)


def stored_bytes(folder: Path, ids: list[int]) -> int:
    """Bytes the disk tier in ``folder`` would read for a prompt of ``ids``: per role, the stored snapshot (its
    metadata's ``tokens``, ``nbytes``) sharing the longest prefix with ``ids[:-1]``."""
    best: dict[str, tuple[int, int]] = {}
    for meta in folder.glob("*.json") if folder.is_dir() else ():
        try:
            d = json.loads(meta.read_text(encoding="utf-8"))
            n = common_prefix(d["tokens"], ids[:-1])
            if n > best.get(d["role"], (0, 0))[0]:
                best[d["role"]] = (n, int(d["nbytes"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sum(b for _, b in best.values())


class Server:
    """A server to replay against (started here, or a running one): :meth:`start`, :meth:`stop`, an httpx client."""

    def __init__(self, spec: ServerSpec, workdir: Path, timeout: float) -> None:
        self.spec, self.workdir, self.timeout = spec, workdir, timeout
        self.proc = None
        self.http = None
        self.cache: Path | None = None  # the $LOCALSPEC_CACHE of a localspec started here

    def fresh_cache(self, phase: str) -> None:
        """Give the next start an empty prompt cache of its own (localspec started here)."""
        if self.spec.kind == "localspec" and self.spec.argv:
            from localspec.config import cache_root

            self.cache = isolated_cache(cache_root(), Path(tempfile.mkdtemp(prefix=f"{self.spec.label}-{phase}-",
                                                                           dir=self.workdir)))

    def start(self) -> None:
        import httpx

        from localspec.server.process import ServerProcess

        base = self.spec.url
        if base is None:
            env = {"LOCALSPEC_CACHE": str(self.cache)} if self.cache else {}
            log = self.workdir / f"{self.spec.label}.log"
            self.proc = ServerProcess(self.spec.argv, log, env=env, timeout=self.timeout).__enter__()
            base = self.proc.base_url
        self.http = httpx.Client(base_url=base.removesuffix("/v1"), timeout=httpx.Timeout(self.timeout, connect=30),
                                 headers={"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'none')}"})

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        if self.proc is not None:
            self.proc.stop()
        self.proc = self.http = None

    @property
    def prompts_folder(self) -> Path | None:
        return self.cache / "prompts" if self.cache else None

    def send(self, path: str, body: dict) -> Streamed:
        """One streamed request; its :class:`Streamed` (an HTTP error in ``error``)."""
        t0 = time.perf_counter()
        with self.http.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                r.read()
                return Streamed(error=f"HTTP {r.status_code}: {r.text[:300]}")
            return read_stream((time.perf_counter() - t0, line) for line in r.iter_lines())

    def warm_up(self) -> None:
        """One short request (the first one of a process pays one-time costs)."""
        self.send("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                                           "stream": True})


def replay(server: Server, session: str, turns: list[Turn], prompts: Callable, max_tokens: int, phase: str,
           rate: float | None, bps: float | None,
           depth: dict[tuple[str, int], float] | None = None) -> tuple[list[Row], float | None]:
    """Send every turn to ``server`` (``phase`` ``restart``: restarting it before each) -> one :class:`Row` each,
    and the prefill rate: ``rate``, or when None, the first turn's (its prompt tokens / its TTFT: a cold read;
    that row gets no bound). ``depth``: the rates at each turn's depth (:func:`depth_rates`), for the rows'
    second bound."""
    rows: list[Row] = []
    ids: list[list[int]] = []
    for turn in turns:
        if phase == "restart":
            server.stop()
            server.start()
        ids.append(prompts(turn, server.http))
        reusable = reusable_tokens(ids)[-1]
        folder = server.prompts_folder
        read_s = stored_bytes(folder, ids[-1]) / bps if phase == "restart" and folder and bps else 0.0
        s = server.send(turn.path, replay_body(turn, max_tokens))
        prompt, reused = reuse_of(s)
        new = (prompt if prompt is not None else len(ids[-1])) - reusable
        bound = ttft_bound(new, rate, read_s) if rate else None
        at_depth = (depth or {}).get((session, turn.turn))
        if rate is None and prompt and s.ttft:
            rate = prompt / s.ttft
            print(f"prefill rate: {rate:.1f} tokens/s (turn {turn.turn}: {prompt} tokens read cold in {s.ttft:.1f} s)")
        row = Row(session, server.spec.label, phase, turn.turn, prompt, len(ids[-1]), reusable, reused, s.ttft,
                  read_s, bound, s.error, prefill_seconds(s), ttft_bound(new, at_depth, read_s) if at_depth else None)
        rows.append(row)
        print_row(row, flush=True)
    return rows, rate


HEADER = (f"{'server':<20} {'phase':<8} {'turn':>4} {'prompt':>7} {'reusable':>8} {'reused':>7} {'reuse':>6} "
          f"{'TTFT s':>7} {'bound s':>7} {'@depth':>7}  note")


def print_row(r: Row, flush: bool = False) -> None:
    share = f"{r.reused / r.reusable:.0%}" if r.reusable and r.reused is not None else "-"
    note = r.error or ("" if r.prompt in (None, r.ids) else f"bench counted {r.ids} prompt tokens")
    if r.read_seconds:
        note = f"snapshot read ~{r.read_seconds:.2f} s {note}"
    if r.prefill is not None:
        note = f"server prefill {r.prefill:.2f} s {note}"
    ttft = f"{r.ttft:.2f}" if r.ttft is not None else "-"
    print(f"{r.server:<20} {r.phase:<8} {r.turn:>4} {r.prompt if r.prompt is not None else '-':>7} {r.reusable:>8} "
          f"{r.reused if r.reused is not None else '-':>7} {share:>6} {ttft:>7} {r.bound or 0:>7.2f} "
          f"{f'{r.depth_bound:.2f}' if r.depth_bound is not None else '-':>7}  {note}",
          flush=flush)


def default_servers(args) -> tuple[list[ServerSpec], list[ServerSpec]]:
    """The servers of the command line, or the defaults: localspec serve (default pair, its defaults), and with
    ``--llama-server-bin`` llama-server on the same pair without and with ``--cache-reuse``."""
    ours = [parse_server("localspec", t, i) for i, t in enumerate(args.localspec or []) if t != "none"]
    if not args.localspec:
        ours = [ServerSpec("localspec", "localspec", [sys.executable, "-m", "localspec.cli", "serve", "--port", "{port}"])]
    peers = [parse_server("llama-server", t, i) for i, t in enumerate(args.llama_server or [])]
    if args.llama_server_bin and not peers:
        from localspec.app.catalog import load_catalog, resolve_model

        pair = load_catalog().default
        base = [args.llama_server_bin, "-m", str(resolve_model(pair.target)), "-md", str(resolve_model(pair.draft)),
                "--spec-type", "draft-simple", "--host", "127.0.0.1", "--port", "{port}", "-c", str(args.n_ctx),
                "-t", str(os.cpu_count() or 2), "-np", "1", "--no-webui"]
        from localspec.backend.machine import vector_extensions

        if "amx_int8" in vector_extensions():  # llama-server crashes on its first batched decode otherwise (peers.md)
            base.append("--no-repack")
        peers = [ServerSpec("llama-server", "llama-server", base),
                 ServerSpec("llama-server", "llama-server-reuse", [*base, "--cache-reuse", str(CACHE_REUSE)])]
    return ours, peers


def report(rows: list[Row], kinds: dict[str, str]) -> list[Goal]:
    """Print the goals over ``rows`` (``kinds``: server label -> ``localspec`` / ``llama-server``) and what each
    llama-server variant after the first adds in reused tokens; return the goals."""
    ours = [k for k, v in kinds.items() if v == "localspec"]
    peers = [k for k, v in kinds.items() if v == "llama-server"]
    goals = check_goals(rows, ours, peers)
    print("\nGoals:")
    for g in goals:
        print(f"  {'PASS' if g.ok else 'FAIL'}  {g.name}" + "".join(f"\n          {m}" for m in g.missed))
    for other in peers[1:]:
        gain = cache_reuse_gain(rows, peers[0], other)
        print(f"\n{other} reused tokens less {peers[0]}'s, per turn: "
              + ", ".join(f"{s} {ph} {t}: {d:+d}" for s, ph, t, d in gain))
    return goals


def merged(paths: list[str]) -> tuple[list[Row], dict[str, str]]:
    """The rows and server kinds of earlier runs' ``--json`` files (runs of different servers, side by side)."""
    rows, kinds = [], {}
    for path in paths:
        d = json.loads(Path(path).read_text())
        rows += [Row(**r) for r in d["rows"]]
        kinds.update(d.get("servers") or {r["server"]: "llama-server" if r["server"].startswith("llama") else
                                         "localspec" for r in d["rows"]})  # files written before "servers"
    return rows, kinds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sessions", nargs="*", help="session files (.jsonl, one request a line)")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="no replay: the goals over earlier runs' --json files")
    p.add_argument("--localspec", action="append", metavar="[LABEL=]CMD|URL",
                   help="a localspec server: a command with {port}, or a running server's URL; repeatable; "
                   "'none': no localspec server (default: localspec serve with its defaults)")
    p.add_argument("--llama-server", action="append", metavar="[LABEL=]CMD|URL", help="a llama-server; repeatable")
    p.add_argument("--llama-server-bin", help="llama-server's binary: adds it on the default pair, without and "
                   f"with --cache-reuse {CACHE_REUSE} (when no --llama-server is given)")
    p.add_argument("--n-ctx", type=int, default=32768, help="llama-server's -c in the default variants")
    p.add_argument("--gguf", help="the localspec target's GGUF, for the bench's token counts (default: the default "
                   "pair's target)")
    p.add_argument("--max-tokens", type=int, default=16, help="answer cap per request (prompt handling is measured)")
    p.add_argument("--no-restart", action="append", default=[], metavar="LABEL", help="skip LABEL's restart phase")
    p.add_argument("--timeout", type=float, default=3600, help="seconds a request or a server start may take")
    p.add_argument("--prefill-rate", type=float, help="tokens/s for the TTFT bound (default: measured, the first "
                   "turn's prompt tokens / its TTFT, a cold read)")
    p.add_argument("--no-depth-rate", action="store_true", help="skip measuring the prefill rate at each turn's "
                   "depth (the second TTFT bound; a few minutes: each session's first prompt is read once)")
    p.add_argument("--read-test-mib", type=int, default=256, help="size of the file whose read rate is measured")
    p.add_argument("--json", help="write every row and goal here")
    a = p.parse_args(argv)
    if a.merge:
        return 0 if all(g.ok for g in report(*merged(a.merge))) else 1
    if not a.sessions:
        p.error("give session files to replay, or --merge")
    try:
        sessions = {Path(s).stem: read_session(s) for s in a.sessions}
        ours, peers = default_servers(a)
    except SessionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.gguf is None:
        from localspec.app.catalog import load_catalog, resolve_model

        a.gguf = str(resolve_model(load_catalog().default.target))
    workdir = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    bps = read_rate(workdir, a.read_test_mib << 20)
    print(f"CPU: {cpu_description()}; load average {os.getloadavg()[0]:.2f}\n"
          f"answers capped at {a.max_tokens} tokens (the bench measures prompt handling, not answers); bodies "
          f"otherwise as recorded, streamed\n"
          f"the store's read + checksum rate of a just-written file: {bps / 2**20:,.0f} MiB/s; "
          f"server logs in {workdir}")
    localspec_ids = LocalspecPrompts(a.gguf)
    depth = {} if a.no_depth_rate else depth_rates(sessions, localspec_ids, a.gguf)
    rows: list[Row] = []
    rates = {}
    for spec in [*ours, *peers]:
        prompts = localspec_ids if spec.kind == "localspec" else llama_server_prompt
        server = Server(spec, workdir, a.timeout)
        for name, turns in sessions.items():
            print(f"\n== session {name} ({len(turns)} requests) on {spec.label}: "
                  f"{' '.join(spec.argv) if spec.argv else spec.url}", flush=True)
            server.fresh_cache("warm")
            server.start()
            print(HEADER, flush=True)
            try:
                server.warm_up()
                got, rate = replay(server, name, turns, prompts, a.max_tokens, "warm", a.prefill_rate, bps, depth)
                rows += got
                rates[(name, spec.label)] = rate
            finally:
                server.stop()
            if spec.argv and spec.label not in a.no_restart:
                server.fresh_cache("restart")
                try:
                    rows += replay(server, name, turns, prompts, a.max_tokens, "restart", rate, bps, depth)[0]
                finally:
                    server.stop()
    kinds = {s.label: s.kind for s in [*ours, *peers]}
    goals = report(rows, kinds)
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], "goals": [asdict(g) for g in goals],
                                            "prefill_rates": {f"{s} {l}": r for (s, l), r in rates.items()},
                                            "read_bytes_per_second": bps, "cpu": cpu_description(),
                                            "depth_rates": {f"{s} {t}": r for (s, t), r in depth.items()},
                                            "max_tokens": a.max_tokens, "servers": kinds}, indent=1))
    return 0 if all(g.ok for g in goals) else 1


if __name__ == "__main__":
    sys.exit(main())
