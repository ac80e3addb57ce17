"""The mixed load of issue 42, item 7: many clients under a few API keys sending every kind of request a
shared server gets, all greedy, each answer kept with its status and timings.

Used by tests/integration/test_server_load.py (the tiny model, checked) and scripts/bench_load.py (the
same mix against localspec and llama-server, timed). Client side only: nothing here imports localspec.

The mix (:func:`plan`): request ``i`` of ``n`` goes to client ``i % clients``; a client keeps one API key
(client ``c`` has key ``c % keys``); its kind is ``KINDS[i % len(KINDS)]`` and its question
``QUESTIONS[(i // clients) % len(QUESTIONS)]``. Every prompt opens with one shared preamble (about 70
tokens: long enough for a prompt snapshot, and the same for every key, so a cache shared across keys
would show), then names the key's project with a marker word (:data:`MARKERS`) no other key's prompts
contain, then the question. Kinds (:data:`KINDS`): chat, completions (one with ``logprobs``) and
``/v1/responses``, each streamed and not; a JSON ``response_format`` (chat) and ``text.format`` JSON
schema (responses); streams the client drops after their first text (``*_disconnect``); a completion
whose ``cache_salt`` is new (``fresh_salt``: a scope nobody used); and what a model without
fill-in-the-middle tokens or a tool template refuses (``FIM_KINDS``, ``TOOL_KINDS``): completions with
``suffix``, ``POST /infill``, chat and responses with ``tools``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx
import openai

PREAMBLE = ("You help the maintainers of a small open-source library that reads calendar files. Answer "
            "briefly, in plain English, without code unless asked. The library reads iCalendar files, "
            "expands recurring events, converts time zones and writes the result as JSON for a web page. "
            "Its users are volunteers who organise weekly meetings in community centres.")
#: one made-up word per API key, in every prompt of that key and of no other
MARKERS = ("zorblax", "quenmirth", "vadrelkin")
QUESTIONS = ("What does the library do with recurring events?", "How should a volunteer report a bug?")
KINDS = ("chat", "chat_stream", "completions", "completions_stream", "completions_logprobs", "responses",
         "responses_stream", "chat_json", "responses_json", "chat_disconnect", "completions_suffix", "infill",
         "chat_tools", "responses_tools", "fresh_salt", "chat_stream", "chat", "completions",
         "responses_disconnect", "completions_stream")
FIM_KINDS = frozenset({"completions_suffix", "infill"})
TOOL_KINDS = frozenset({"chat_tools", "responses_tools"})
#: kinds whose answer is the same text as another kind's (the same request but for streaming or
#: logprobs): the key of the reference answer
FAMILY = {"chat": "chat", "chat_stream": "chat", "chat_disconnect": "chat", "completions": "completions",
          "completions_stream": "completions", "completions_logprobs": "completions", "fresh_salt": "completions",
          "responses": "responses", "responses_stream": "responses", "responses_disconnect": "responses",
          "chat_json": "chat_json", "responses_json": "responses_json"}
MAX_TOKENS = 12
TOOL = {"name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@dataclass(frozen=True)
class LoadRequest:
    """One request of the mix: its index, client, key (an index into the keys and :data:`MARKERS`),
    kind (:data:`KINDS`) and question (an index into :data:`QUESTIONS`)."""

    index: int
    client: int
    key: int
    kind: str
    question: int

    @property
    def text(self) -> str:
        """The user's text: the shared preamble, the key's marker, the question."""
        return f"{PREAMBLE}\n\nProject {MARKERS[self.key]}. {QUESTIONS[self.question]}"

    @property
    def reference_key(self) -> tuple | None:
        """What identifies the answer's text (None: no answer to compare: refused or cut short)."""
        family = FAMILY.get(self.kind)
        return None if family is None else (self.key, family, self.question)


@dataclass
class Outcome:
    """What came back for one :class:`LoadRequest`: ``status`` the HTTP status (0: no answer: the
    connection failed or timed out, ``error`` says how), ``text`` the answer's text (a dropped stream's:
    what came before the drop), ``tokens`` completion tokens (usage; a dropped stream's: its chunks),
    ``cached_tokens`` and ``memory`` (localspec's ``speculation.memory``) where the answer has them,
    ``seconds`` from sending to the last byte, ``ttft`` seconds to the first text of a stream."""

    request: LoadRequest
    status: int = 0
    text: str | None = None
    tokens: int = 0
    cached_tokens: int | None = None
    memory: dict | None = None
    speculation: dict | None = None
    error: str | None = None
    code: str | None = None
    seconds: float = 0.0
    ttft: float | None = None
    dropped: bool = False
    extra: dict = field(default_factory=dict)


def plan(n: int = 200, clients: int = 8, keys: int = 3) -> list[LoadRequest]:
    """The mix's ``n`` requests (see the module docstring); ``keys`` at most ``len(MARKERS)``."""
    if not 1 <= keys <= len(MARKERS):
        raise ValueError(f"keys must be 1 to {len(MARKERS)} (got {keys})")
    return [LoadRequest(i, i % clients, (i % clients) % keys, KINDS[i % len(KINDS)], (i // clients) % len(QUESTIONS))
            for i in range(n)]


def completion_prompt(req: LoadRequest) -> str:
    """The prompt of ``req``'s completions kinds (the chat and responses kinds send :attr:`LoadRequest.text`
    as one user message)."""
    return f"{req.text} The short answer is that"


def send(req: LoadRequest, base_url: str, api_key: str, model: str = "model", *, reference: bool = False,
         salt_nonce: str = "", timeout: float = 300.0) -> Outcome:
    """Send ``req`` to the server at ``base_url`` (``http://host:port``, no ``/v1``) with ``api_key``.

    ``reference``: send it as the request whose answer the others are compared with: not streamed, not
    dropped, with ``cache_prompt: false`` (no cache read or fed). ``salt_nonce`` makes a ``fresh_salt``
    request's salt unique to one run. Never raises for what the server answers: an error status is an
    :class:`Outcome` with ``status``, ``code`` and ``error``.
    """
    out = Outcome(req)
    client = openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, max_retries=0, timeout=timeout)
    extra = {"cache_prompt": False} if reference else {}
    kind = "completions" if reference and req.kind == "fresh_salt" else req.kind
    if reference:
        kind = {"chat_stream": "chat", "chat_disconnect": "chat", "completions_stream": "completions",
                "completions_logprobs": "completions", "responses_stream": "responses",
                "responses_disconnect": "responses"}.get(kind, kind)
    t0 = time.perf_counter()
    try:
        _SENDERS[kind.split("_")[0]](client, req, kind, out, extra, model, salt_nonce, base_url, api_key, t0)
        out.status = out.status or 200
    except openai.APIStatusError as e:
        out.status = e.status_code
        body = e.body if isinstance(e.body, dict) else {}
        body = body.get("error", body) if isinstance(body.get("error", body), dict) else body
        out.code, out.error = body.get("code"), str(body.get("message", e))[:300]
    except (openai.APIConnectionError, httpx.HTTPError) as e:
        out.status, out.error = 0, f"{type(e).__name__}: {e}"[:300]
    out.seconds = time.perf_counter() - t0
    return out


def _chat(client, req, kind, out, extra, model, salt_nonce, base_url, api_key, t0) -> None:
    kw = {"model": model, "messages": [{"role": "user", "content": req.text}], "max_tokens": MAX_TOKENS,
          "temperature": 0, "extra_body": extra or None}
    if kind == "chat_json":
        kw["response_format"] = {"type": "json_object"}
    if kind == "chat_tools":
        kw["tools"] = [{"type": "function", "function": TOOL}]
    if kind in ("chat_stream", "chat_disconnect"):
        stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
        text = ""
        for ch in stream:
            if ch.usage is not None:
                out.tokens, out.cached_tokens = ch.usage.completion_tokens, _cached(ch.usage.prompt_tokens_details)
            if ch.choices and ch.choices[0].delta.content:
                out.ttft = out.ttft if out.ttft is not None else time.perf_counter() - t0
                text += ch.choices[0].delta.content
                if kind == "chat_disconnect":
                    out.dropped, out.tokens = True, 1
                    stream.close()
                    break
        out.text = text
        return
    r = client.chat.completions.create(**kw)
    out.text = r.choices[0].message.content or ""
    out.tokens, out.cached_tokens = r.usage.completion_tokens, _cached(r.usage.prompt_tokens_details)
    out.speculation = (r.model_extra or {}).get("speculation")


def _completions(client, req, kind, out, extra, model, salt_nonce, base_url, api_key, t0) -> None:
    kw = {"model": model, "prompt": completion_prompt(req), "max_tokens": MAX_TOKENS, "temperature": 0}
    if kind == "fresh_salt":
        extra = {**extra, "cache_salt": f"fresh-{salt_nonce}-{req.index}"}
    if kind == "completions_suffix":
        kw["suffix"] = "\n\nThat is all for project " + MARKERS[req.key] + "."
    if kind == "completions_logprobs":
        kw["logprobs"] = 2
    kw["extra_body"] = extra or None
    if kind == "completions_stream":
        text = ""
        for ch in client.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            if ch.usage is not None:
                out.tokens, out.cached_tokens = ch.usage.completion_tokens, _cached(ch.usage.prompt_tokens_details)
            if ch.choices and ch.choices[0].text:
                out.ttft = out.ttft if out.ttft is not None else time.perf_counter() - t0
                text += ch.choices[0].text
        out.text = text
        return
    r = client.completions.create(**kw)
    out.text = r.choices[0].text
    out.tokens, out.cached_tokens = r.usage.completion_tokens, _cached(r.usage.prompt_tokens_details)
    out.speculation = (r.model_extra or {}).get("speculation")
    out.memory = (out.speculation or {}).get("memory")
    if kind == "completions_logprobs" and r.choices[0].logprobs is not None:
        lp = r.choices[0].logprobs
        out.extra["logprob_tokens"] = [*(lp.tokens or []), *(t for d in lp.top_logprobs or [] for t in (d or {}))]


def _responses(client, req, kind, out, extra, model, salt_nonce, base_url, api_key, t0) -> None:
    kw = {"model": model, "input": req.text, "max_output_tokens": MAX_TOKENS, "temperature": 0,
          "extra_body": extra or None}
    if kind == "responses_json":
        kw["text"] = {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA}}
    if kind == "responses_tools":
        kw["tools"] = [{"type": "function", **TOOL}]
    if kind in ("responses_stream", "responses_disconnect"):
        stream = client.responses.create(stream=True, **kw)
        text = ""
        for ev in stream:
            if ev.type == "response.output_text.delta" and ev.delta:
                out.ttft = out.ttft if out.ttft is not None else time.perf_counter() - t0
                text += ev.delta
                if kind == "responses_disconnect":
                    out.dropped, out.tokens = True, 1
                    stream.close()
                    break
            elif ev.type in ("response.completed", "response.incomplete") and ev.response.usage is not None:
                out.tokens = ev.response.usage.output_tokens
                out.cached_tokens = _cached(ev.response.usage.input_tokens_details)
        out.text = text
        return
    r = client.responses.create(**kw)
    out.text = r.output_text
    out.tokens, out.cached_tokens = r.usage.output_tokens, _cached(r.usage.input_tokens_details)
    out.speculation = (r.model_extra or {}).get("speculation")


def _infill(client, req, kind, out, extra, model, salt_nonce, base_url, api_key, t0) -> None:
    body = {"input_prefix": f"# project {MARKERS[req.key]}\ndef next_meeting(events):\n    ",
            "input_suffix": "\n    return meeting\n", "n_predict": MAX_TOKENS, "temperature": 0, **extra}
    r = httpx.post(base_url.rstrip("/") + "/infill", json=body, headers={"Authorization": f"Bearer {api_key}"},
                   timeout=client.timeout)
    out.status = r.status_code
    try:
        answer = r.json()
    except json.JSONDecodeError:
        answer = {}
    if r.status_code == 200:
        out.text, out.tokens = answer.get("content", ""), answer.get("tokens_predicted", 0)
    else:
        err = answer.get("error", answer) if isinstance(answer, dict) else {}
        err = err if isinstance(err, dict) else {}
        out.code, out.error = err.get("code"), str(err.get("message", r.text))[:300]


def _cached(details) -> int | None:
    return None if details is None else (details.cached_tokens or 0)


_SENDERS = {"chat": _chat, "completions": _completions, "fresh": _completions, "responses": _responses,
            "infill": _infill}


def other_markers(out: Outcome) -> list[str]:
    """The markers of other keys found (case-insensitively) in what ``out`` carries back: its text, its
    logprobs' tokens joined, its ``speculation`` object."""
    own = MARKERS[out.request.key]
    seen = " ".join([out.text or "", "".join(out.extra.get("logprob_tokens", [])),
                     json.dumps(out.speculation or {})]).lower()
    return [m for m in MARKERS if m != own and m in seen]


def percentiles(xs: list[float], qs=(50, 90, 99)) -> list[float | None]:
    """The ``qs`` percentiles of ``xs`` (nearest rank; None for an empty list)."""
    s = sorted(xs)
    return [s[min(len(s) - 1, max(0, -(-q * len(s) // 100) - 1))] if s else None for q in qs]
