"""Load on the tiny model (issue 42, item 7): 8 concurrent clients under 3 API keys send 200 mixed requests
(tests/load_mix.py: chat, completions and responses, streamed and not, JSON formats, streams dropped after
their first text, a fresh ``cache_salt``, and completions with ``suffix``, ``/infill`` and ``tools``, which
SmolLM2 refuses: no fill-in-the-middle tokens, no tool template) to one ``localspec serve`` (mode lookup)
whose stores are small enough to evict: 3 MiB of prompt snapshots in memory, 3 MiB on disk (a SmolLM2
snapshot of the ~90-token prompts here takes about 2 MiB), 1,000 tokens of draft memory.

Checked: no 5xx and no dropped connection; each refused kind is the 400 that says why; every greedy answer
(streamed or not, and the text a dropped stream got before it dropped) is, near-ties aside (below), the answer
to the same request sent alone, not streamed and with ``cache_prompt: false``, to a fresh server without any
store (one reference per distinct request, computed first, sequentially); the stores stayed within their budgets at
every scrape of ``/metrics`` during the load (and the disk folder at the end) and evicted; no answer,
logprobs token or ``speculation`` object carries another key's marker word; a request in a scope nobody
used (a new ``cache_salt``; its prompt opens with the preamble every key sent) reads no cached token and
drafts nothing from the draft memory. The load is bounded: 200 requests, 10 minutes.

Greedy answers may differ where batched verification breaks a near-tie (cases.md C1), and the load's answers
are drafted from a memory the reference's are not, so their passes batch differently. Both servers run SmolLM2
with flash attention on, where its batched passes give the one-token passes' logits exactly (AMD Zen 3, both
weight layouts: 0.0 over random splits of 24 tokens after 130; with it off up to 2.2 apart, and "The long
answer" came back as "The longer answer"). Some rounding still differs under load (our reading: where a
sequence's cells sit in the KV cache), so an answer may part from the reference where the target's top two
tokens are within ``NEAR_TIE`` (one-token decoding in this process; AMD Zen 3: 6 of 160 answers, at gaps such
as 0.044), and nowhere else. A JSON answer is read without the whitespace its grammar leaves to the model
(``json_skeleton``): under a grammar the tokens are not the text's own (``"ans" "w" "er"`` where the text
tokenizes as ``"answer"``), so where to measure a gap is not known from the text, and such a parting
came back as ``{ "answer": `` against ``{ "answer" : ``. The mix keeps to few, short, distinct prompts.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from helpers import NEAR_TIE, metric, tiny_lookup_process, top2_gap
from load_mix import FAMILY, FIM_KINDS, MARKERS, TOOL_KINDS, completion_prompt, other_markers, plan, send

pytestmark = pytest.mark.tiny

KEYS = ("load-key-one", "load-key-two", "load-key-three")
N_REQUESTS, N_CLIENTS = 200, 8
#: seconds the whole load may take (the test fails past it, with what was done)
DEADLINE = 600.0
PROMPT_CACHE_MB, DISK_MB, MEMORY_TOKENS = 3, 3, 1000
#: localspec.config.DRAFT_MEMORY_BYTES_PER_TOKEN, and one separator a text (each text here is over 40 tokens)
MEMORY_BYTES = 16 * MEMORY_TOKENS * 41 // 40
GAUGES = ("localspec_prompt_cache_bytes", "localspec_prompt_cache_disk_bytes", "localspec_draft_memory_bytes",
          "localspec_draft_memory_tokens", "localspec_prompt_cache_evictions_total")


def key_flags(*more: str) -> tuple[str, ...]:
    """The flags for the 2nd and 3rd key (the first is tiny_lookup_process's), flash attention on (the module's
    docstring says why), then ``more``."""
    return ("--api-key", KEYS[1], "--api-key", KEYS[2], "--queue-size", "16", "--flash-attn", "on", *more)


def scrape(base_url: str) -> dict[str, float]:
    """The :data:`GAUGES` from ``/metrics`` now."""
    return {name: metric(base_url, name, KEYS[0]) for name in GAUGES}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def references(tiny_path, tmp_path_factory):
    """(key, family, question) -> the answer's text, each request sent alone to a server without stores."""
    tmp = tmp_path_factory.mktemp("load-reference")
    flags = key_flags("--prompt-cache-mb", "0", "--prompt-cache-disk-mb", "0", "--draft-memory-tokens", "0")
    refs = {}
    with tiny_lookup_process(tiny_path, tmp, KEYS[0], flags) as proc:
        for req in plan(N_REQUESTS, N_CLIENTS, len(KEYS)):
            if req.reference_key is None or req.reference_key in refs:
                continue
            out = send(req, proc.base_url, KEYS[req.key], "tiny", reference=True)
            assert out.status == 200, (req, out.status, out.error)
            refs[req.reference_key] = out.text
    return refs


@pytest.fixture(scope="module")
def load(tiny_path, tmp_path_factory):
    """The load run: (outcomes in request order, the gauges' maxima over the run, the last scrape, the disk
    folder's bytes at the end, the server log, the outcomes of one request sent twice after the load)."""
    tmp = tmp_path_factory.mktemp("load")
    flags = key_flags("--prompt-cache-mb", str(PROMPT_CACHE_MB), "--prompt-cache-disk-mb", str(DISK_MB),
                      "--draft-memory-tokens", str(MEMORY_TOKENS))
    requests = plan(N_REQUESTS, N_CLIENTS, len(KEYS))
    outcomes, peaks, stop = {}, {}, threading.Event()
    nonce = uuid.uuid4().hex[:8]
    with tiny_lookup_process(tiny_path, tmp, KEYS[0], flags) as proc:
        start = time.monotonic()

        def client(c: int) -> None:
            for req in requests[c::N_CLIENTS]:
                if time.monotonic() - start > DEADLINE:
                    return
                outcomes[req.index] = send(req, proc.base_url, KEYS[req.key], "tiny", salt_nonce=nonce, timeout=120)

        def monitor() -> None:
            while not stop.wait(1.0):
                for name, value in scrape(proc.base_url).items():
                    peaks[name] = max(peaks.get(name, 0.0), value)

        watcher = threading.Thread(target=monitor, daemon=True)
        watcher.start()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(N_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE + 150)
        stop.set()
        watcher.join(30)
        # the same request twice in a row, under one key, after the load: the second reads the first's prefix
        again = next(r for r in requests if r.kind == "completions")
        repeated = [send(again, proc.base_url, KEYS[again.key], "tiny", timeout=120) for _ in range(2)]
        last = scrape(proc.base_url)
        for name, value in last.items():
            peaks[name] = max(peaks.get(name, 0.0), value)
        elapsed = time.monotonic() - start
    log = (tmp / "server.log").read_text(errors="replace")
    print(f"load: {len(outcomes)} requests in {elapsed:.0f} s; peaks {peaks}")
    return ([outcomes[i] for i in sorted(outcomes)], peaks, last, folder_bytes(tmp / "cache" / "prompts"), log,
            repeated)


def test_every_request_is_answered_without_a_server_error(load):
    outcomes, *_, log, _ = load
    assert len(outcomes) == N_REQUESTS, f"only {len(outcomes)} of {N_REQUESTS} requests in {DEADLINE:.0f} s"
    failed = [(o.request.index, o.request.kind, o.status, o.error) for o in outcomes if o.status == 0 or o.status >= 500]
    assert failed == []
    assert "Traceback" not in log, log[-3000:]


def test_what_the_tiny_model_cannot_do_is_a_400_that_says_why(load):
    outcomes = load[0]
    for o in outcomes:
        if o.request.kind in FIM_KINDS:
            assert (o.status, o.code) == (400, "fim_unsupported"), (o.request, o.status, o.error)
        elif o.request.kind in TOOL_KINDS:
            assert o.status == 400 and "tool" in (o.error or "").lower(), (o.request, o.status, o.error)
        else:
            assert o.status == 200, (o.request, o.status, o.error)


def prompt_of(engine, req) -> list[int]:
    """The prompt token ids the server reads for ``req``: its completions prompt, else its text as one user
    message."""
    if FAMILY[req.kind] == "completions":
        return engine.tokenize(completion_prompt(req))
    return engine.chat_tokens([{"role": "user", "content": req.text}])


def parted_at_a_near_tie(engine, req, got: str, expected: str) -> str | None:
    """None where answer ``got`` parts from ``expected`` (the answer sent alone) only where the target's top two
    next tokens are within NEAR_TIE (one-token decoding of the prompt and the answers' common start); else why
    not."""
    ref, out = (engine.tokenize(t, special=False, bos=False) for t in (expected, got))
    first = next((i for i, (a, b) in enumerate(zip(ref, out)) if a != b), None)
    if first is None:
        return f"one answer is the other's start ({len(out)} and {len(ref)} tokens)"
    gap = top2_gap(engine.target, prompt_of(engine, req) + ref[:first])
    return None if gap < NEAR_TIE else f"parted at token {first}, where the top-2 gap is {gap:.3f}"


#: kinds answered under a JSON grammar
JSON_KINDS = frozenset({"chat_json", "responses_json"})


def json_skeleton(text: str) -> str:
    """``text`` without the whitespace outside JSON strings (the grammar lets the model choose it)."""
    out, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch.isspace():
            continue
        out.append(ch)
    return "".join(out)


def test_json_skeleton_drops_only_the_whitespace_between_json_tokens():
    assert json_skeleton('{ "answer" : "a \\" b" ,\n "c" : 1 }') == '{"answer":"a \\" b","c":1}'
    assert json_skeleton('{ "answer": "Project zorbl') == json_skeleton('{ "answer" : "Project zorbl')


def same_json_cut_elsewhere(got: str, expected: str) -> bool:
    """Whether two JSON answers cut at the same number of tokens are one text but for whitespace."""
    a, b = json_skeleton(got), json_skeleton(expected)
    return a.startswith(b) or b.startswith(a)


def test_every_greedy_answer_is_the_answer_sent_alone(load, references, tiny_engine):
    """Equal, or parted at a near-tie (the module's docstring; seen on AMD Zen 3: "community-driven," against
    "community-driven project", a gap of 0.044)."""
    outcomes = load[0]
    compared, ties = 0, []
    for o in outcomes:
        key = o.request.reference_key
        if key is None or o.status != 200:
            continue
        expected = references[key]
        if o.dropped:  # a dropped stream: what came before the drop
            assert o.text and expected.startswith(o.text), (o.request, o.text, expected)
        elif o.text != expected and not (o.request.kind in JSON_KINDS and same_json_cut_elsewhere(o.text, expected)):
            why = parted_at_a_near_tie(tiny_engine, o.request, o.text, expected)
            assert why is None, (o.request, o.text, expected, why)
            ties.append(o.request.index)
        compared += 1
    print(f"{compared} answers compared; parted at a near-tie: requests {ties}")
    assert compared >= N_REQUESTS * 3 // 4


def test_no_key_sees_another_keys_text(load):
    outcomes = load[0]
    leaks = [(o.request.index, o.request.kind, MARKERS[o.request.key], other_markers(o)) for o in outcomes
             if other_markers(o)]
    assert leaks == []
    fresh = [o for o in outcomes if o.request.kind == "fresh_salt"]
    assert fresh
    for o in fresh:  # a scope nobody used: no cached prefix (all keys sent the preamble), no memory draft
        assert o.cached_tokens == 0, (o.request, o.cached_tokens)
        assert o.memory is not None and o.memory["drafted"] == 0 and o.memory["rounds"] == 0, o.memory
    # the check can fail: within a key, a request sent again reads its prefix from the cache (during the load
    # that depends on which key the server served last, so it is checked once, sequentially, after it)
    repeated = load[-1]
    assert [o.status for o in repeated] == [200, 200]
    assert repeated[1].cached_tokens, [o.cached_tokens for o in repeated]


def test_the_stores_stay_within_their_budgets_and_evict(load):
    _, peaks, last, disk_bytes, *_ = load
    assert 0 < peaks["localspec_prompt_cache_bytes"] <= PROMPT_CACHE_MB * 2**20, peaks
    assert last["localspec_prompt_cache_evictions_total"] > 0, last
    assert 0 < peaks["localspec_prompt_cache_disk_bytes"] <= DISK_MB * 2**20, peaks
    assert 0 < disk_bytes <= DISK_MB * 2**20
    assert 0 < peaks["localspec_draft_memory_tokens"] <= MEMORY_TOKENS, peaks
    assert peaks["localspec_draft_memory_bytes"] <= MEMORY_BYTES, peaks
    # filled to its budget, so it evicted: the requests fed it over 90 tokens each, 20 times its budget
    assert peaks["localspec_draft_memory_tokens"] >= MEMORY_TOKENS // 2, peaks
