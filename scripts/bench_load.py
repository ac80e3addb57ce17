#!/usr/bin/env python3
"""Many clients at once: the load of tests/integration/test_server_load.py (tests/load_mix.py: chat,
completions and responses, streamed and not, JSON formats, dropped streams, a fresh ``cache_salt``,
``suffix``, ``/infill`` and ``tools``; all greedy) sent to running servers, one after the other, with
throughput and latency percentiles side by side (not a timed test; run by hand).

Give each server as ``NAME=URL`` (``http://host:port``, no ``/v1``), e.g. a ``localspec serve`` and a
``llama-server`` loaded with the same GGUF, threads and context, with ``-np`` equal to ``--clients``
(llama-server's parallel slots; localspec serves one request at a time and queues the rest: give it
``--queue-size`` at least ``--clients``) and both with the same keys (``--api-key K1 --api-key K2 ...``
for localspec, ``--api-key K1,K2,...`` for llama-server; the script's defaults are the test's three).
Each server gets the same ``--requests`` from ``--clients`` threads, each client keeping one key; the
order of the servers alternates between ``--repeats``.

Printed per server and repetition: what came back (2xx, 4xx, 5xx, no answer), wall seconds, requests
and completion tokens per second over the whole load, end-to-end latency of the answered requests and
time to first text of the streams (p50 / p90 / p99, seconds, nearest rank), and how many answers equal
the first server's for the same request (greedy; a difference can be a near-tie, cases.md C1, or a
server that refuses a kind the other serves). The CPU (lscpu's model name, AVX-512/AMX) comes first.
``--json`` saves every request's outcome.

Usage::

    .venv/bin/python scripts/bench_load.py localspec=http://127.0.0.1:8080 llama=http://127.0.0.1:8081 \\
        [--clients 8] [--requests 200] [--repeats 1] [--api-key K ...] [--model NAME] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_llama_server import cpu_description  # noqa: E402  (this folder is on the path of a script)
from load_mix import Outcome, percentiles, plan, send  # noqa: E402

KEYS = ("load-key-one", "load-key-two", "load-key-three")


def run_load(url: str, keys: list[str], n: int, clients: int, model: str, timeout: float) -> tuple[list[Outcome], float]:
    """The mix's ``n`` requests from ``clients`` threads to ``url``: (outcomes in request order, wall seconds)."""
    requests = plan(n, clients, len(keys))
    outcomes: dict[int, Outcome] = {}
    nonce = uuid.uuid4().hex[:8]

    def client(c: int) -> None:
        for req in requests[c::clients]:
            outcomes[req.index] = send(req, url, keys[req.key], model, salt_nonce=nonce, timeout=timeout)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [outcomes[i] for i in sorted(outcomes)], time.perf_counter() - t0


def summary(outcomes: list[Outcome], wall: float, first: list[Outcome] | None) -> dict:
    """The printed figures of one server's load (see the module docstring)."""
    ok = [o for o in outcomes if 200 <= o.status < 300]
    streams = [o.ttft for o in ok if o.ttft is not None]
    same = None
    if first is not None:
        pairs = [(a, b) for a, b in zip(first, outcomes) if a.status == b.status == 200 and not a.dropped
                 and not b.dropped]
        same = f"{sum(a.text == b.text for a, b in pairs)}/{len(pairs)}"
    return {"2xx": len(ok), "4xx": sum(400 <= o.status < 500 for o in outcomes),
            "5xx": sum(o.status >= 500 for o in outcomes), "none": sum(o.status == 0 for o in outcomes),
            "wall_s": wall, "req_per_s": len(outcomes) / wall, "tok_per_s": sum(o.tokens for o in ok) / wall,
            "latency": percentiles([o.seconds for o in ok]), "ttft": percentiles(streams), "same_as_first": same}


def fmt(ps: list[float | None]) -> str:
    return " / ".join("-" if p is None else f"{p:.2f}" for p in ps)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("servers", nargs="+", metavar="NAME=URL", help="a running server, e.g. localspec=http://127.0.0.1:8080")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--repeats", type=int, default=1, help="loads per server, the servers' order alternating")
    p.add_argument("--api-key", action="append", default=None, help="up to 3 (default: the test's three)")
    p.add_argument("--model", default="model", help="the model name sent (both servers serve one model)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one request may take")
    p.add_argument("--json", type=Path, default=None, help="save every request's outcome here")
    args = p.parse_args(argv)
    servers = dict(s.split("=", 1) for s in args.servers)
    keys = args.api_key or list(KEYS)
    print(f"CPU: {cpu_description()}")
    print(f"load: {args.requests} requests from {args.clients} clients under {len(keys)} keys, greedy, "
          f"answers of at most 12 tokens")
    rows, saved, first = [], [], None
    for rep in range(args.repeats):
        names = list(servers) if rep % 2 == 0 else list(reversed(servers))
        for name in names:
            outcomes, wall = run_load(servers[name], keys, args.requests, args.clients, args.model, args.timeout)
            s = summary(outcomes, wall, first)
            first = first or outcomes
            rows.append((name, rep, s))
            saved.append({"server": name, "repeat": rep, **s,
                          "outcomes": [{**asdict(o), "request": asdict(o.request)} for o in outcomes]})
    print(f"{'server':<12} {'rep':>3} {'2xx/4xx/5xx/none':>17} {'wall s':>7} {'req/s':>6} {'tok/s':>6}  "
          f"{'latency p50/p90/p99 s':<22} {'TTFT p50/p90/p99 s':<20} same")
    for name, rep, s in rows:
        counts = f"{s['2xx']}/{s['4xx']}/{s['5xx']}/{s['none']}"
        print(f"{name:<12} {rep:>3} {counts:>17} {s['wall_s']:>7.1f} {s['req_per_s']:>6.2f} {s['tok_per_s']:>6.1f}  "
              f"{fmt(s['latency']):<22} {fmt(s['ttft']):<20} {s['same_as_first'] or '(first)'}")
    if args.json:
        args.json.write_text(json.dumps(saved, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
