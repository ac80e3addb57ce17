#!/usr/bin/env python3
"""Benchmark ``localspec serve`` against llama-cpp-python's own OpenAI server (not a timed test).

The same code-edit requests, greedy, through the ``openai`` client, streamed, to

* ``a-plain``:  ``python -m llama_cpp.server`` (the ``llama-cpp-python[server]`` extra);
* ``a-lookup``: the same with ``--draft_model prompt-lookup-decoding`` (num_pred_tokens 10);
* ``b``:        ``localspec serve`` (mode auto), without a prediction;
* ``c``:        ``localspec serve`` (mode auto), with the original file as ``prediction``;

same model file, threads, context size and weight-repacking choice (localspec's probe,
``localspec.backend.repack``, decides it once; the peer's server loads with it too), greedy everywhere (the peer is sent ``repeat_penalty``
1.0: its default 1.1 changes the answer); the order of the servers alternates (forwards,
backwards) between repetitions; medians. Per request: end-to-end latency (request sent to
last chunk, seconds) and decode tokens/s ((tokens - 1) / (last chunk - first chunk)).
Speedups are ratios of end-to-end latency, taken per repetition, then the median.

Tasks: the built-in ``code-edit`` task of ``localspec bench`` and two real files
(``scripts/bench_files``: fnmatch.py, a rename; colorsys.py, add type hints), whole file
expected back. The calibrated ceiling (the best speedup any free drafter could reach
with this machine's measured verify curve, every token accepted) is printed beside the
goals: (c) >= 1.5x (a-plain) where the ceiling allows it (else >= 0.97x), and
(c) >= 1.2x (a-lookup).

Usage: ``.venv/bin/python scripts/bench_server.py [--tasks code-edit,fnmatch-rename,colorsys-hints]
[--repeats 3] [--threads N] [--json out.json]``; needs ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai

from localspec.bench import _EDIT_FILE, BUILTIN_TASKS
from localspec.app.catalog import load_catalog, resolve_model
from localspec.backend.repack import decide_repack, describe_choice
from localspec.server.process import ServerProcess

HERE = Path(__file__).resolve().parent
SERVERS = ("a-plain", "a-lookup", "b", "c")


def tasks() -> dict[str, tuple[str, str]]:
    """name -> (user message, the original file: the prediction)."""
    edit = next(t for t in BUILTIN_TASKS if t.name == "code-edit")
    fn = (HERE / "bench_files" / "fnmatch.py").read_text()
    cs = (HERE / "bench_files" / "colorsys.py").read_text()
    return {
        "code-edit": (edit.messages[0]["content"], _EDIT_FILE),
        "fnmatch-rename": ("Rename the function `translate` to `glob_to_regex` everywhere in this file (its "
                           "definition, its calls, __all__ and the comments). Reply with the complete updated file "
                           f"only, no explanation.\n\n```python\n{fn}```", fn),
        "colorsys-hints": ("Add type hints to every function in this file (float parameters, "
                           "tuple[float, float, float] results). Change nothing else. Reply with the complete "
                           f"updated file only, no explanation.\n\n```python\n{cs}```", cs),
    }


def ceiling(target: str, threads: int, draft_max: int, n_ctx: int) -> tuple[float, int] | None:
    """(best speedup of a free drafter with every token accepted, its g) from ``localspec calibrate``.

    Calibrates with the settings ``localspec serve`` gets below (draft model included), so
    the servers find the measurement in the cache instead of calibrating while starting."""
    out = subprocess.run([sys.executable, "-m", "localspec.cli", "calibrate", "--target", target,
                          "--json", "--n-threads", str(threads), "--draft-max", str(draft_max), "--n-ctx", str(n_ctx)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"(no calibrated ceiling: {out.stderr.strip()[-300:]})")
        return None
    sec = json.loads(out.stdout)["target"]["seconds"]
    return max(((g + 1) * sec[0] / sec[g], g) for g in range(1, len(sec)))


#: what llama-cpp-python's server must be sent to decode greedily as ours does: its requests default
#: to ``repeat_penalty`` 1.1 (llama_cpp/server/types.py), which changes a greedy answer (and punishes
#: exactly the copying a code edit is made of); top_k 40 and min_p 0.05 do not matter at temperature 0
PEER_GREEDY = {"repeat_penalty": 1.0}


def timed_request(client: openai.OpenAI, message: str, prediction: str | None, max_tokens: int, nonce: str,
                  peer: bool = False) -> dict:
    """One streamed request. ``nonce`` opens the message, so no server reuses the cached prompt
    of its previous request (each code edit is a new file: prefill is part of the cost);
    ``peer``: llama-cpp-python's server, sent :data:`PEER_GREEDY`."""
    extra = {"prediction": {"type": "content", "content": prediction}} if prediction else {}
    if peer:
        extra["extra_body"] = dict(PEER_GREEDY)
    t0 = time.perf_counter()
    first = last = None
    text, n_chunks, usage, spec = [], 0, None, None
    for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": nonce + message}],
                                                max_tokens=max_tokens, temperature=0, stream=True,
                                                stream_options={"include_usage": True}, **extra):
        spec = (chunk.model_extra or {}).get("speculation") or spec
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            first = first or now
            last = now
            n_chunks += 1
            text.append(chunk.choices[0].delta.content)
    end = time.perf_counter()
    # llama-cpp-python streams one token per chunk and may send no usage
    n = usage.completion_tokens if usage is not None else n_chunks
    decode = (n - 1) / (last - first) if first is not None and last > first and n > 1 else float("nan")
    return {"latency": end - t0, "tokens": n, "decode_tps": decode, "text": "".join(text), "speculation": spec,
            "accepted_prediction": getattr(getattr(usage, "completion_tokens_details", None),
                                           "accepted_prediction_tokens", None) if usage else None}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="code-edit,fnmatch-rename,colorsys-hints")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--max-tokens", type=int, default=3000)
    p.add_argument("--draft-max", type=int, default=16, help="localspec serve --draft-max (auto chooses up to it)")
    p.add_argument("--json", default=None, help="write every measurement here")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    all_tasks = tasks()
    names = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in names if t not in all_tasks]
    if unknown:
        print(f"error: unknown task {unknown[0]!r}\nhint: choose from {', '.join(all_tasks)}", file=sys.stderr)
        return 2
    target = str(resolve_model(load_catalog().default.target))
    tmp = Path(tempfile.mkdtemp(prefix="localspec-bench-server-"))
    common = ["--n_threads", str(args.threads), "--n_threads_batch", str(args.threads), "--n_ctx", str(args.n_ctx)]
    # both sides load the weights with the same repacking choice: localspec's probe decides it once
    # (on virtualized AMX Xeons llama.cpp's repacked weights crash the first batched decode)
    verdict = decide_repack(target, "auto", n_threads=args.threads, stage=lambda s: print(s, file=sys.stderr))
    repack = bool(verdict and verdict.use)
    print(f"target {describe_choice(repack, verdict)}; llama-cpp-python's server loads it the same way",
          file=sys.stderr)
    peer_main = ("import runpy, llama_cpp\nfrom localspec.bench.peer import peer_extra_bufts\n"
                 f"with peer_extra_bufts(llama_cpp, {repack}):\n"
                 "    runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")
    peer = [sys.executable, "-c", peer_main, "--model", target, "--host", "127.0.0.1", "--port", "{port}", *common]
    ours = [sys.executable, "-m", "localspec.cli", "serve", "--target", target, "--port", "{port}",
            "--n-threads", str(args.threads), "--n-ctx", str(args.n_ctx), "--draft-max", str(args.draft_max),
            "--repack", "on" if repack else "off", "--log-level", "warning"]
    ceil = ceiling(target, args.threads, args.draft_max, args.n_ctx)
    procs = {
        "a-plain": ServerProcess(peer, tmp / "a-plain.log", ready_path="/v1/models"),
        "a-lookup": ServerProcess(peer + ["--draft_model", "prompt-lookup-decoding",
                                          "--draft_model_num_pred_tokens", "10"], tmp / "a-lookup.log",
                                  ready_path="/v1/models"),
        # b and c on two servers, so neither reuses the other's cached prompt
        "b": ServerProcess(ours, tmp / "b.log", timeout=1200),
        "c": ServerProcess(ours, tmp / "c.log", timeout=1200),
    }
    runs: list[dict] = []
    try:
        for proc in procs.values():
            proc.__enter__()
        clients = {k: openai.OpenAI(base_url=v.base_url + "/v1", api_key="none", max_retries=0, timeout=3600)
                   for k, v in procs.items()}
        for rep in range(args.repeats):
            order = SERVERS if rep % 2 == 0 else tuple(reversed(SERVERS))
            for task in names:
                message, original = all_tasks[task]
                nonce = f"(request {rep}.{time.time_ns() % 10**6})\n"  # the same for every server
                for server in order:
                    client = clients[server]
                    r = timed_request(client, message, original if server == "c" else None, args.max_tokens, nonce,
                                      peer=server.startswith("a-"))
                    r.update(task=task, server=server, rep=rep)
                    runs.append(r)
                    print(f"rep {rep} {task:15s} {server:9s} {r['latency']:7.2f} s  {r['tokens']:5d} tokens  "
                          f"decode {r['decode_tps']:6.1f} tok/s", flush=True)
    finally:
        for proc in procs.values():
            proc.stop()
    print_table(runs, names, ceil)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "ceiling": ceil, "threads": args.threads}, indent=1))
    return 0


def print_table(runs: list[dict], names: list[str], ceil: tuple[float, int] | None) -> None:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?")
    print(f"\nCPU: {cpu}; load average at the end: {os.getloadavg()[0]:.2f}")
    if ceil:
        print(f"calibrated ceiling of a free drafter (every token accepted): {ceil[0]:.2f}x at g={ceil[1]}")
    print("| task | server | e2e latency (s) | decode tok/s | tokens | vs a-plain | vs a-lookup | same text as a-plain |")
    print("|---|---|---|---|---|---|---|---|")
    for task in names:
        by = {(r["server"], r["rep"]): r for r in runs if r["task"] == task}
        reps = sorted({rep for _, rep in by})
        for server in SERVERS:
            rs = [by[(server, rep)] for rep in reps if (server, rep) in by]
            if not rs:
                continue

            def ratio(base: str) -> str:
                xs = [by[(base, rep)]["latency"] / by[(server, rep)]["latency"] for rep in reps
                      if (base, rep) in by and (server, rep) in by]
                return f"{statistics.median(xs):.2f}x" if xs else "n/a"

            same = all(by.get(("a-plain", r["rep"]), {}).get("text") == r["text"] for r in rs)
            print(f"| {task} | {server} | {statistics.median(r['latency'] for r in rs):.2f} | "
                  f"{statistics.median(r['decode_tps'] for r in rs):.1f} | {rs[0]['tokens']} | {ratio('a-plain')} | "
                  f"{ratio('a-lookup')} | {'yes' if same else 'no'} |")
    goal = 1.5 if ceil is None or ceil[0] >= 1.5 else 0.97
    print(f"goals: (c) >= {goal}x a-plain" + ("" if goal == 1.5 else f" (the ceiling {ceil[0]:.2f}x is below 1.5x)")
          + ", (c) >= 1.2x a-lookup")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
