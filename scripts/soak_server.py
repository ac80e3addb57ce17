#!/usr/bin/env python3
"""Soak benchmark of ``localspec serve`` (not a timed test; run by hand).

Starts ``localspec serve`` on the tiny model (SmolLM2-135M, mode auto) on a free
loopback port, then sends through the ``openai`` client

1. ``--sequential`` requests (default 300) of mixed kind and length: chat and
   completions, streamed and not, with and without a prediction, max_tokens from 1 to
   128, greedy and sampled;
2. ``--clients`` clients (default 4) x ``--per-client`` requests (default 25) at once.

Checks: no error; every response complete (a finish_reason; a stream ends with its
usage chunk, and its text equals the chunks joined; completion_tokens <= max_tokens
and == max_tokens when the reason is "length"); the server's RSS after request 50
within 5 % of its RSS after the last sequential request. Exit status 1 if a check fails.

Usage: ``.venv/bin/python scripts/soak_server.py [--sequential 300] [--clients 4] [--per-client 25]``
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

from localspec.app.catalog import resolve_model
from localspec.server.process import ServerProcess

LENGTHS = (1, 2, 4, 8, 16, 32, 64, 128)
TOPICS = ("the sea", "a city at night", "binary search", "a red bicycle", "tea", "prime numbers", "autumn")
CODE = "def area(r):\n    return 3.14159 * r * r\n\n\ndef perimeter(r):\n    return 2 * 3.14159 * r\n"


def one_request(client: openai.OpenAI, i: int, rng: random.Random) -> str | None:
    """Send request ``i``; return a description of what is wrong with the answer, or None."""
    max_tokens = rng.choice(LENGTHS)
    topic = rng.choice(TOPICS)
    kind = i % 4
    sampled = {"temperature": 0.7, "seed": i} if i % 3 == 0 else {"temperature": 0}
    if kind == 3:  # completions
        r = client.completions.create(model="tiny", prompt=f"A short note about {topic}:", max_tokens=max_tokens,
                                      **sampled)
        return check(r.choices[0].finish_reason, r.usage.completion_tokens, max_tokens)
    messages = [{"role": "user", "content": f"Write a few lines about {topic}."}]
    extra = {}
    if kind == 2:
        messages = [{"role": "user", "content": "Rename area to circle_area:\n" + CODE}]
        extra = {"prediction": {"type": "content", "content": CODE}}
    if kind == 1:  # streamed
        chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens,
                                                     stream=True, stream_options={"include_usage": True},
                                                     **sampled, **extra))
        if not chunks or chunks[-1].usage is None:
            return "the stream ended without its usage chunk"
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        n_tokens = sum(len((c.choices[0].model_extra or {}).get("tokens", [])) for c in chunks if c.choices)
        if n_tokens != chunks[-1].usage.completion_tokens:
            return f"{n_tokens} streamed tokens but usage says {chunks[-1].usage.completion_tokens}"
        return check(reasons[-1] if reasons else None, n_tokens, max_tokens)
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens, **sampled, **extra)
    return check(r.choices[0].finish_reason, r.usage.completion_tokens, max_tokens)


def check(reason: str | None, n: int, max_tokens: int) -> str | None:
    if reason not in ("stop", "length"):
        return f"finish_reason {reason!r}"
    if n > max_tokens or (reason == "length" and n != max_tokens):
        return f"{n} tokens with max_tokens {max_tokens} and finish_reason {reason}"
    return None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sequential", type=int, default=300)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--per-client", type=int, default=25)
    p.add_argument("--rss-at", type=int, default=50, help="request after which the first RSS is taken")
    p.add_argument("--threads", type=int, default=1, help="server --n-threads (1 keeps a shared machine usable)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    tiny = str(resolve_model("smollm2-135m"))
    tmp = Path(tempfile.mkdtemp(prefix="localspec-soak-"))
    argv_server = [sys.executable, "-m", "localspec.cli", "serve", "--target", tiny, "--draft", tiny,
                   "--port", "{port}", "--n-ctx", "2048", "--n-threads", str(args.threads), "--log-level", "warning"]
    failures: list[str] = []
    with ServerProcess(argv_server, tmp / "server.log") as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0, timeout=300)
        rng = random.Random(0)
        rss = {}
        t0 = time.perf_counter()
        for i in range(args.sequential):
            try:
                bad = one_request(client, i, rng)
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                bad = f"{type(e).__name__}: {e}"
            if bad:
                failures.append(f"sequential {i}: {bad}")
            if i + 1 in (args.rss_at, args.sequential):
                rss[i + 1] = server.rss_bytes()
        t_seq = time.perf_counter() - t0

        def client_loop(c: int) -> None:
            crng = random.Random(1000 + c)
            cl = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0, timeout=600)
            for j in range(args.per_client):
                try:
                    bad = one_request(cl, c * 1000 + j, crng)
                except Exception as e:  # noqa: BLE001
                    bad = f"{type(e).__name__}: {e}"
                if bad:
                    failures.append(f"client {c} request {j}: {bad}")

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_conc = time.perf_counter() - t0
        rss_end = server.rss_bytes()
    print(f"sequential: {args.sequential} requests in {t_seq:.1f} s; concurrent: {args.clients} clients x "
          f"{args.per_client} in {t_conc:.1f} s")
    a, b = rss.get(args.rss_at), rss.get(args.sequential)
    if a and b:
        growth = b / a - 1
        print(f"server RSS after request {args.rss_at}: {a / 2**20:.1f} MiB; after request {args.sequential}: "
              f"{b / 2**20:.1f} MiB ({growth:+.1%}); after the concurrent phase: {rss_end / 2**20:.1f} MiB")
        if abs(growth) > 0.05:
            failures.append(f"RSS grew {growth:+.1%} between request {args.rss_at} and {args.sequential}")
    print(f"failures: {len(failures)}")
    for f in failures[:20]:
        print("  " + f)
    print(f"server log: {tmp / 'server.log'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
