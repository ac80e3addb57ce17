"""Issue 45 item 2 on the real tiny model: nothing read is thrown away, and a queued stream is alive at once.

- A client that disconnects (a stream cut) or times out (a non-streamed request's socket closed) while its
  long prompt is read, or the UI's Esc (:meth:`Generation.cancel`, as ``localspec ui`` calls it), stops the
  read within one batch, and the batches already read stay in the target's KV cache: the same prompt sent
  again reuses exactly them (``usage.prompt_tokens_details.cached_tokens``), in its own scope only
  (``cache_salt``), from the live cache or, once another scope's request displaced it, from its kept
  snapshot (memory and disk).
- A streamed request queued behind a running one gets its headers and first chunk at once and keepalive
  chunks while it waits, on /v1/chat/completions, /v1/completions and /v1/responses (the real ``openai``
  client parses them; a raw httpx stream times its first byte), and a prompt found too long when its turn
  comes ends its stream with the error event, not a cut connection.

SmolLM2-135M reads the ~300-token prompts in 32-token batches on one thread. The server runs in this process
(uvicorn in a thread), so the test sees the target's passes: each ``llama_decode`` call is recorded
(:class:`DecodeLog`, a proxy of the target's llama_cpp module), and paced (:data:`PACE`) so that the client
goes away in the middle of the read on any machine.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import openai
import pytest

from localspec.config import DraftParams, GenerationParams, ModelSettings, SamplingParams, ServerSettings, Settings
from localspec.core.events import EndReason
from localspec.server.scopes import scope_id

pytestmark = pytest.mark.tiny

N_CTX = 1024
N_BATCH = 32
#: tokens of a long prompt here: about nine batches
PROMPT_TOKENS = 300
#: seconds between keepalive chunks: far below a prompt's reading time here
KEEPALIVE = 0.05
#: seconds added after each pass (:class:`DecodeLog`): a read of nine batches takes at least 0.3 s
PACE = 0.03
#: batches read before the client goes away
CUT_AFTER = 4


class DecodeLog:
    """The target's llama_cpp module, with each ``llama_decode`` call recorded as (``time.monotonic()`` at its
    end, tokens, status: 0 read, 2 aborted) and followed by :data:`PACE` seconds of sleep (no GIL held)."""

    def __init__(self, lc) -> None:
        self.lc = lc
        self.calls: list[tuple[float, int, int]] = []

    def __getattr__(self, name):
        return getattr(self.lc, name)

    def llama_decode(self, ctx, batch):
        rc = self.lc.llama_decode(ctx, batch)
        self.calls.append((time.monotonic(), int(batch.n_tokens), int(rc)))
        time.sleep(PACE)
        return rc

    def read_since(self, start: int) -> list[tuple[float, int, int]]:
        """The passes that completed (status 0) among the calls from number ``start`` on."""
        return [c for c in self.calls[start:] if c[2] == 0]


@dataclass
class Live:
    url: str
    port: int
    engine: object
    decodes: DecodeLog

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=120)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def wait_idle(self) -> None:
        until(lambda: (h := self.health())["busy"] is False and h["waiting"] == 0, "the server to be idle")

    def fresh(self) -> None:
        """Empty the target's live cache (the server is idle: its engine thread waits for a job)."""
        self.wait_idle()
        self.engine.target.reset()


def until(check, what: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"waited {seconds:g} s for {what}"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def live(engines, tiny_path, tmp_path_factory):
    """``localspec serve``'s app on SmolLM2 (32-token batches, one thread, mode lookup, prompt snapshots in
    memory and on disk under a temporary $LOCALSPEC_CACHE) served by uvicorn in a thread of this process."""
    import uvicorn

    from localspec.server import create_app

    engine = engines.get(tiny_path, n_ctx=N_CTX, n_batch=N_BATCH, n_threads=1)
    decodes = DecodeLog(engine.target._lc)
    engine.target._lc = decodes
    before = os.environ.get("LOCALSPEC_CACHE")
    os.environ["LOCALSPEC_CACHE"] = str(tmp_path_factory.mktemp("cancelled-reads"))
    settings = Settings(target=ModelSettings(model=str(tiny_path)), drafting=DraftParams(mode="lookup"))
    app = create_app(engine, settings, ServerSettings(stream_keepalive=KEEPALIVE, draft_memory_tokens=0,
                                                      prompt_cache_mb=256, prompt_cache_disk_mb=256))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        until(lambda: server.started, "uvicorn to start", 60)
        yield Live(f"http://127.0.0.1:{port}", port, engine, decodes)
    finally:
        server.should_exit = True
        thread.join(30)
        engine.target._lc = decodes.lc
        engine.prefix_cache = None
        os.environ.pop("LOCALSPEC_CACHE") if before is None else os.environ.__setitem__("LOCALSPEC_CACHE", before)


def long_prompt(engine, tag: str, n: int = PROMPT_TOKENS) -> tuple[str, list[int]]:
    """A raw prompt starting with ``tag`` of about ``n`` tokens (at most), and its tokens."""
    def text_of(words: int) -> str:
        return f"{tag}. Count the words: " + " ".join(f"w{i}" for i in range(words))

    lo, hi = 0, n  # the most words that fit in n tokens (each word is a token or more)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(engine.tokenize(text_of(mid))) <= n else (lo, mid - 1)
    text = text_of(lo)
    tokens = engine.tokenize(text)
    assert n - 8 < len(tokens) <= n
    return text, tokens


def completion(live: Live, text: str, **body) -> dict:
    r = httpx.post(live.url + "/v1/completions", timeout=300,
                   json={"prompt": text, "max_tokens": 2, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def cut_stream(live: Live, text: str, **body) -> float:
    """Stream ``text``'s completion and close the connection once :data:`CUT_AFTER` batches of it were read;
    returns when it was closed (``time.monotonic()``)."""
    start = len(live.decodes.calls)
    with httpx.stream("POST", live.url + "/v1/completions", timeout=120,
                      json={"prompt": text, "max_tokens": 4, "stream": True, **body}) as r:
        assert r.status_code == 200
        for _ in r.iter_lines():  # a keepalive chunk every 0.1 s while the prompt is read
            if len(live.decodes.read_since(start)) >= CUT_AFTER:
                break
    return time.monotonic()


def assert_stopped_and_kept(live: Live, start: int, cut: float, prompt: list[int]) -> int:
    """The read stopped within one batch of ``cut`` and the target holds every batch it read; returns how many
    tokens it holds."""
    live.wait_idle()
    read = live.decodes.read_since(start)
    after = [c for c in read if c[0] > cut]
    assert len(after) <= 1, f"{len(after)} batches were read after the client went away"
    kept = live.engine.target.n_cached
    assert live.engine.target.cached_tokens == prompt[:kept]
    assert kept == N_BATCH * len(read) and CUT_AFTER * N_BATCH <= kept < len(prompt) - 1, (kept, len(read))
    return kept


# -- nothing read is thrown away ------------------------------------------------------------------------
def test_a_stream_cut_during_the_read_leaves_its_batches_for_the_retry(live):
    text, prompt = long_prompt(live.engine, "Stream cut")
    live.fresh()
    start = len(live.decodes.calls)
    cut = cut_stream(live, text)
    kept = assert_stopped_and_kept(live, start, cut, prompt)
    retry = completion(live, text)
    assert retry["usage"]["prompt_tokens_details"]["cached_tokens"] == kept  # read on from where it stopped


def test_a_client_that_times_out_during_the_read_leaves_its_batches_for_the_retry(live):
    """A non-streamed request whose client gives up (its socket closes, as on a client's timeout)."""
    text, prompt = long_prompt(live.engine, "Timed out")
    live.fresh()
    start = len(live.decodes.calls)
    body = json.dumps({"prompt": text, "max_tokens": 4}).encode()
    with socket.create_connection(("127.0.0.1", live.port)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        until(lambda: len(live.decodes.read_since(start)) >= CUT_AFTER, "the read to begin")
    cut = time.monotonic()
    kept = assert_stopped_and_kept(live, start, cut, prompt)
    retry = completion(live, text)
    assert retry["usage"]["prompt_tokens_details"]["cached_tokens"] == kept


def test_the_batches_read_stay_in_their_scope_and_come_back_from_their_snapshot(live):
    """The read cut for scope ``a`` (its ``cache_salt``) is nothing to scope ``b``; when ``b``'s request empties
    the live cache, ``a``'s read is kept as a snapshot (memory and disk) and restored for ``a``'s retry."""
    text, prompt = long_prompt(live.engine, "Scoped")
    live.fresh()
    start = len(live.decodes.calls)
    kept = assert_stopped_and_kept(live, start, cut_stream(live, text, cache_salt="a"), prompt)
    other = completion(live, text, cache_salt="b")
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    scope_a = scope_id("", "a")
    cache = live.engine.prefix_cache
    assert [s.tokens for s in cache.snapshots("target", scope_a)] == [tuple(prompt[:kept])]
    cache.store.flush()
    assert cache.store.best("target", prompt, scope=scope_a)[1] == kept
    assert cache.store.best("target", prompt, scope=scope_id("", "c")) is None
    restored = cache.stats.restored_tokens
    retry = completion(live, text, cache_salt="a")
    assert retry["usage"]["prompt_tokens_details"]["cached_tokens"] == kept
    assert cache.stats.restored_tokens - restored == kept


def test_esc_during_the_read_keeps_its_batches_and_the_next_answer_is_exact(live):
    """The UI's Esc is :meth:`Generation.cancel` from another thread (``localspec ui``'s ``action_stop``)."""
    text, prompt = long_prompt(live.engine, "Escape")
    engine = live.engine
    live.fresh()
    args = SamplingParams(temperature=0), DraftParams(mode="lookup"), GenerationParams(max_tokens=8)
    gen = engine.generate(prompt, *args)
    start, pressed = len(live.decodes.calls), []

    def esc() -> None:
        pressed.append(time.monotonic())
        gen.cancel()

    def on_prefill(done: int, total: int) -> None:
        if done >= CUT_AFTER * N_BATCH and not pressed:
            threading.Thread(target=esc).start()

    gen.on_prefill = on_prefill
    gen.run()
    assert gen.stats.end_reason is EndReason.CANCELLED and gen.token_ids == []
    read = live.decodes.read_since(start)
    assert len([c for c in read if c[0] > pressed[0]]) <= 1
    kept = engine.target.n_cached
    assert kept == N_BATCH * len(read) and engine.target.cached_tokens == prompt[:kept] and kept < len(prompt) - 1
    again = engine.generate(prompt, *args).run()
    assert again.stats.cached_prompt_tokens == kept
    engine.target.reset()
    fresh = engine.generate(prompt, *args).run()
    assert fresh.stats.cached_prompt_tokens == 0 and again.token_ids == fresh.token_ids and fresh.token_ids


# -- a queued stream is alive at once ------------------------------------------------------------------
def _openai_stream(live: Live, kind: str, long: str | None = None) -> dict:
    """Stream one answer of ``kind`` (chat, completions, responses) with the ``openai`` client; ``long``: a prompt
    that does not fit. Returns when its headers came (``headers``), its events, and the error it raised."""
    client, t0 = live.client(), time.monotonic()
    prompt = long or "Say hello."
    if kind == "chat":
        stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompt}],
                                                max_tokens=4, temperature=0, stream=True)
    elif kind == "completions":
        stream = client.completions.create(model="tiny", prompt=prompt, max_tokens=4, temperature=0, stream=True)
    else:
        stream = client.responses.create(model="tiny", input=prompt, max_output_tokens=4, temperature=0, stream=True)
    out = {"headers": time.monotonic(), "t0": t0, "events": [], "error": None}
    try:
        for event in stream:
            out["events"].append(event)
    except openai.APIError as e:
        out["error"] = e
    return out


def _first_byte(live: Live) -> dict:
    """A raw httpx stream of a chat answer: when its first byte came, and the lines."""
    t0 = time.monotonic()
    with httpx.stream("POST", live.url + "/v1/chat/completions", timeout=120,
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": True}) as r:
        lines = r.iter_lines()
        first = next(lines)
        at = time.monotonic()
        rest = list(lines)
    return {"t0": t0, "first_byte": at, "lines": [first, *rest], "status": r.status_code}


def test_queued_streams_get_their_headers_at_once_and_keepalives_while_they_wait(live):
    text, prompt = long_prompt(live.engine, "Running")
    too_long, _ = long_prompt(live.engine, "Too long", N_CTX + 200)
    live.fresh()
    start, done = len(live.decodes.calls), {}

    def running() -> None:
        done["answer"] = completion(live, text, cache_prompt=False)
        done["at"] = time.monotonic()

    with ThreadPoolExecutor(7) as pool:
        runner = pool.submit(running)
        until(lambda: len(live.decodes.read_since(start)) >= 2, "the running request's read")
        queued = {kind: pool.submit(_openai_stream, live, kind) for kind in ("chat", "completions", "responses")}
        overflow = pool.submit(_openai_stream, live, "chat", too_long)
        overflow_r = pool.submit(_openai_stream, live, "responses", too_long)
        raw = pool.submit(_first_byte, live)
        runner.result(300)
        got = {kind: f.result(300) for kind, f in queued.items()}
        late, late_r, raw = overflow.result(300), overflow_r.result(300), raw.result(300)
    ran_until = done["at"]
    for kind, out in [*got.items(), ("overflow", late), ("overflow responses", late_r)]:
        assert out["headers"] < ran_until, f"{kind}: the headers came only after the running request ended"
        print(f"{kind}: headers after {out['headers'] - out['t0']:.3f} s, queued {ran_until - out['t0']:.1f} s")
    assert raw["status"] == 200 and raw["first_byte"] < ran_until
    print(f"raw stream: first byte after {raw['first_byte'] - raw['t0']:.3f} s (the running answer ended "
          f"{ran_until - raw['t0']:.1f} s after it was sent)")
    # keepalives while queued: events the client parses, carrying nothing
    chat = got["chat"]["events"]
    assert chat[0].choices[0].delta.role == "assistant" and got["chat"]["error"] is None
    first_text = next(i for i, c in enumerate(chat) if c.choices and c.choices[0].delta.content)
    assert sum(1 for c in chat[1:first_text] if c.choices[0].delta.content is None) >= 2
    completions = got["completions"]["events"]
    assert got["completions"]["error"] is None and completions[-1].choices[0].finish_reason in ("length", "stop")
    assert sum(1 for c in completions if c.choices and c.choices[0].text == "") >= 3
    kinds = [e.type for e in got["responses"]["events"]]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds.count("response.in_progress") >= 3
    assert kinds[-1] in ("response.completed", "response.incomplete")
    # the prompt found too long once its turn came: the stream's last event, the client raises it
    assert isinstance(late["error"], openai.APIError) and late["error"].code == "context_length_exceeded"
    assert all(e.choices[0].finish_reason is None for e in late["events"])
    errors = [e for e in late_r["events"] if e.type == "error"]
    assert late_r["error"] is not None or errors, late_r
    code = errors[-1].code if errors else late_r["error"].code
    assert code == "context_length_exceeded"
