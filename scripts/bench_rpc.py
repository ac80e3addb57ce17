#!/usr/bin/env python3
"""Speculation over the network: the target on two RPC workers behind a delaying proxy, at several
latencies, localspec's modes beside llama-server ``--rpc`` (not a timed test; prints a table).

    scripts/bench_rpc.py --llama-server /path/to/llama-server --delays 0,1,5 --repeats 1

Starts two ``localspec worker``s on loopback (``--worker-threads`` each), then per one-way delay
(milliseconds per message, ``scripts/rpc_delay_proxy.py``) runs ``scripts/bench_llama_server.py
--design sequential --rpc PROXY1,PROXY2`` (a worker serves one client at a time, so one server at a
time) with the servers ``lp-none, lp-lookup, lp-auto`` (localspec modes none, lookup, auto) and,
with ``--llama-server`` (built with ``-DGGML_RPC=ON``), ``ls-plain, ls-ngram``. Everything shares
this machine's CPUs: the workers, the proxy and the client; say so beside the figures.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from localspec.server.process import free_port

HERE = Path(__file__).resolve().parent


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: {what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"error: {what} did not listen on {port}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-server", default=None, help="llama-server built with -DGGML_RPC=ON (adds ls-plain, "
                   "ls-ngram)")
    p.add_argument("--delays", default="0,1,5", help="one-way delays per message, ms (default 0,1,5)")
    p.add_argument("--tasks", default="code-edit,chat")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--worker-threads", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the client's threads")
    p.add_argument("--out", default="rpc-bench", help="folder for each delay's JSON")
    args, passed_on = p.parse_known_args(argv)  # others go to bench_llama_server.py (--target, --draft, ...)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = ["lp-none", "lp-lookup", "lp-auto"] + (["ls-plain", "ls-ngram"] if args.llama_server else [])
    wports = [free_port(), free_port()]
    workers = []
    procs = []
    try:
        for port in wports:
            w = subprocess.Popen([sys.executable, "-m", "localspec.cli", "worker", "--port", str(port), "--threads",
                                  str(args.worker_threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            workers.append(w)
            wait_port(port, w, "a worker")
        for delay in [float(d) for d in args.delays.split(",")]:
            pports = [free_port(), free_port()]
            proxy = subprocess.Popen([sys.executable, str(HERE / "rpc_delay_proxy.py"), "--delay-ms", f"{delay:g}",
                                      *(f"127.0.0.1:{a}=127.0.0.1:{b}" for a, b in zip(pports, wports))],
                                     stdout=subprocess.DEVNULL)
            procs.append(proxy)
            wait_port(pports[0], proxy, "the proxy")
            print(f"\n=== one-way delay {delay:g} ms per message ===", flush=True)
            cmd = [sys.executable, str(HERE / "bench_llama_server.py"), "--design", "sequential", "--rpc",
                   ",".join(f"127.0.0.1:{q}" for q in pports), "--servers", ",".join(servers), "--tasks", args.tasks,
                   "--repeats", str(args.repeats), "--repack", "off", "--reference", "lp-none",
                   "--threads", str(args.threads), "--json", str(out / f"delay-{delay:g}ms.json")]
            if args.llama_server:
                cmd += ["--llama-server", args.llama_server]
            if args.max_tokens:
                cmd += ["--max-tokens", str(args.max_tokens)]
            cmd += passed_on
            rc = subprocess.call(cmd)
            proxy.terminate()
            proxy.wait()
            if rc != 0:
                return rc
    finally:
        for proc in procs + workers:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
