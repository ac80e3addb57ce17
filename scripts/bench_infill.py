#!/usr/bin/env python3
"""Latency of fill-in-the-middle: ``POST /infill`` on localspec against llama.cpp's ``llama-server``
(not a timed test).

Requests: ``--requests`` cuts at random points of real files (``scripts/bench_files/*.py``,
CPython's colorsys.py and fnmatch.py): the prefix is the file up to the cut, the suffix the rest
(or, with ``--prefix-lines``/``--suffix-lines``, that many lines around the cut, as editors send), and the answer may be 16 to 64 tokens (``n_predict`` drawn per request); greedy
(``temperature`` 0, ``repeat_penalty`` 1), ``cache_prompt`` on, not streamed, as llama.vim sends
them. The draws are seeded (``--seed``), so a run can be repeated. With ``--editor``, each request
also carries llama.vim's ``n_indent`` (the indentation of the cursor's line: the answer ends before
a later line indented less, a blank line too), as the editor plugins send it; with
``--t-max-predict-ms MS``, their time limit (the answer ends at the first newline after MS since its
first token: answers then depend on each server's speed, so "same answer" counts drop).

Servers, all running at once, each request sent to every one of them in a shuffled order (a
paired comparison: the same cut everywhere, no server always first):

* ``localspec``: ``localspec serve`` (``--mode``, default auto; mode auto measures this machine's
  costs once at its first start, cached);
* ``ls-plain``: ``llama-server`` on the same target file, threads and ``-c`` (with ``--llama-server PATH``);
* ``ls-ngram``: the same with ``--spec-type ngram-mod``;
* ``ls-plain-nr``, ``ls-ngram-nr`` (with ``--no-repack-too``): both again with ``--no-repack``
  (llama.cpp's repacked CPU kernels decode faster but read long prompts slower on some CPUs, AMD
  Zen 4 among them: there llama-server's fastest prompt read is without repacking).

Per server: p50 and p90 of the end-to-end latency (request sent to answer read, ms), mean tokens
predicted; per llama-server configuration, the median of the per-request ratio (its latency /
localspec's: > 1 = localspec faster), and how often the two answers are the same text. For
localspec, prompt lookup's share of the tokens (drafted from the suffix and the prefix).

Usage::

    .venv/bin/python scripts/bench_infill.py [--requests 50] [--llama-server PATH] [--target MODEL]
        [--draft MODEL] [--mode auto] [--threads N] [--n-ctx 4096] [--prefix-lines N] [--suffix-lines N]
        [--seed 0] [--json out.json] [--no-repack-too] [--editor] [--t-max-predict-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from localspec.app.catalog import load_catalog, resolve_model
from localspec.server.process import ServerProcess

HERE = Path(__file__).resolve().parent


def window(text: str, at: int, before: int | None, after: int | None) -> tuple[str, str]:
    """The prefix (at most ``before`` lines above the cut's line, and that line up to the cut) and
    the suffix (the rest of the line and at most ``after`` lines below); None: to the file's edge."""
    prefix, suffix = text[:at], text[at:]
    if before is not None:
        lines = prefix.split("\n")
        prefix = "\n".join(lines[max(0, len(lines) - 1 - before):])
    if after is not None:
        suffix = "\n".join(suffix.split("\n")[:after + 1])
    return prefix, suffix


def cuts(n: int, seed: int, before: int | None = None, after: int | None = None) -> list[dict]:
    """``n`` requests: a random file, a random cut point (not in the first or last 5% of it), the
    window around it (:func:`window`), and ``n_predict`` in 16..64."""
    rng = random.Random(seed)
    files = sorted((HERE / "bench_files").glob("*.py"))
    out = []
    for _ in range(n):
        f = rng.choice(files)
        text = f.read_text()
        at = rng.randint(len(text) // 20, len(text) - len(text) // 20)
        prefix, suffix = window(text, at, before, after)
        out.append({"file": f.name, "at": at, "input_prefix": prefix, "input_suffix": suffix,
                    "n_predict": rng.randint(16, 64)})
    return out


def server_argv(name: str, args, target: str, draft: str | None) -> list[str]:
    common_ls = [args.llama_server, "-m", target, "--host", "127.0.0.1", "--port", "{port}", "-t", str(args.threads),
                 "-tb", str(args.threads), "-c", str(args.n_ctx), "-np", "1", "--no-webui"]
    if name.endswith("-nr"):
        common_ls = common_ls + ["--no-repack"]
    if name.startswith("ls-plain"):
        return common_ls
    if name.startswith("ls-ngram"):
        return common_ls + ["--spec-type", "ngram-mod"]
    return [sys.executable, "-m", "localspec.cli", "serve", "--target", target, "--port", "{port}",
            "--n-threads", str(args.threads), "--n-ctx", str(args.n_ctx), "--mode", args.mode,
            "--log-level", "warning"] + (["--draft", draft] if draft else [])


def cursor_indent(prefix: str) -> int:
    """llama.vim's ``n_indent``: the spaces and tabs that begin the cursor's line (the prefix's last line)."""
    line = prefix.rsplit("\n", 1)[-1]
    return len(line) - len(line.lstrip(" \t"))


def infill(base: str, req: dict) -> dict:
    body = {"input_prefix": req["input_prefix"], "input_suffix": req["input_suffix"], "n_predict": req["n_predict"],
            "temperature": 0, "repeat_penalty": 1.0, "cache_prompt": True, "stream": False,
            **{k: req[k] for k in ("n_indent", "t_max_predict_ms") if k in req}}
    t0 = time.perf_counter()
    r = httpx.post(base + "/infill", json=body, timeout=600)
    ms = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        raise SystemExit(f"error: {base}/infill answered {r.status_code}: {r.text[:500]}\n"
                         "hint: a cut too long for the context? raise --n-ctx")
    out = r.json()
    return {"ms": ms, "content": out.get("content", ""), "tokens": out.get("tokens_predicted"),
            "timings": out.get("timings"), "speculation": out.get("speculation")}


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def report(results: dict[str, list[dict]]) -> list[str]:
    lines = [f"{'server':<12} {'p50 ms':>8} {'p90 ms':>8} {'mean tokens':>12}"]
    for name, rs in results.items():
        ms = [r["ms"] for r in rs]
        lines.append(f"{name:<12} {percentile(ms, 0.5):8.0f} {percentile(ms, 0.9):8.0f} "
                     f"{statistics.mean(r['tokens'] or 0 for r in rs):12.1f}")
    ours = results["localspec"]
    for name, rs in results.items():
        if name == "localspec":
            continue
        ratios = [p["ms"] / o["ms"] for p, o in zip(rs, ours)]
        same = sum(p["content"] == o["content"] for p, o in zip(rs, ours))
        lines.append(f"{name} / localspec latency, per request: median {statistics.median(ratios):.2f}x "
                     f"(range {min(ratios):.2f}-{max(ratios):.2f}); same answer {same}/{len(rs)}")
    lookup = [((r["speculation"] or {}).get("drafters") or {}).get("lookup", {}).get("accepted", 0) for r in ours]
    total = sum(r["tokens"] or 0 for r in ours)
    lines.append(f"localspec: {sum(lookup)} of {total} tokens were prompt-lookup drafts accepted "
                 f"({sum(1 for x in lookup if x)} of {len(ours)} requests)")
    return lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--llama-server", default=None, help="path to a llama-server binary (adds ls-plain, ls-ngram)")
    p.add_argument("--no-repack-too", action="store_true",
                   help="with --llama-server: also run it with --no-repack (adds ls-plain-nr, ls-ngram-nr)")
    p.add_argument("--target", default=None, help="model (preset or .gguf); default: the catalog's default target")
    p.add_argument("--draft", default=None, help="localspec's draft model; default: the target's pair's")
    p.add_argument("--mode", default="auto", choices=("auto", "draft", "lookup", "none"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix-lines", type=int, default=None,
                   help="lines above the cut sent as prefix (llama.vim: 256); default: the whole file")
    p.add_argument("--suffix-lines", type=int, default=None,
                   help="lines below the cut sent as suffix (llama.vim: 64); default: the whole file")
    p.add_argument("--json", default=None, help="write every request's result here")
    p.add_argument("--editor", action="store_true",
                   help="send llama.vim's n_indent (the cursor line's indentation) with each request")
    p.add_argument("--t-max-predict-ms", type=int, default=None,
                   help="send this t_max_predict_ms (llama.vim: 500) with each request")
    args = p.parse_args(argv)
    pair = load_catalog().default
    target = str(resolve_model(args.target or pair.target))
    draft = str(resolve_model(args.draft)) if args.draft else None
    servers = ["localspec"]
    if args.llama_server:
        if not Path(args.llama_server).is_file():
            print(f"error: no llama-server at {args.llama_server}", file=sys.stderr)
            return 2
        servers += ["ls-plain", "ls-ngram"] + (["ls-plain-nr", "ls-ngram-nr"] if args.no_repack_too else [])
    reqs = cuts(args.requests, args.seed, args.prefix_lines, args.suffix_lines)
    for req in reqs:
        if args.editor:
            req["n_indent"] = cursor_indent(req["input_prefix"])
        if args.t_max_predict_ms is not None:
            req["t_max_predict_ms"] = args.t_max_predict_ms
    rng = random.Random(args.seed + 1)
    tmp = Path(tempfile.mkdtemp(prefix="localspec-bench-infill-"))
    procs = {name: ServerProcess(server_argv(name, args, target, draft), tmp / f"{name}.log", timeout=1800)
             for name in servers}
    results: dict[str, list[dict]] = {name: [] for name in servers}
    try:
        for proc in procs.values():
            proc.__enter__()
        for name, proc in procs.items():  # warm-up: load pages, first-request setup
            infill(proc.base_url, {"input_prefix": "def f():\n    ", "input_suffix": "\n", "n_predict": 4})
        for i, req in enumerate(reqs):
            order = rng.sample(servers, len(servers))
            for name in order:
                results[name].append(infill(procs[name].base_url, req))
            print(f"request {i + 1}/{len(reqs)} ({req['file']}@{req['at']}, n_predict {req['n_predict']}): "
                  + ", ".join(f"{n} {results[n][-1]['ms']:.0f} ms" for n in servers), flush=True)
    finally:
        for proc in procs.values():
            proc.stop()
    print(f"\n{len(reqs)} infill requests, target {Path(target).name}, {args.threads} threads, -c {args.n_ctx}, "
          f"localspec mode {args.mode}" + (", n_indent sent" if args.editor else "")
          + (f", t_max_predict_ms {args.t_max_predict_ms}" if args.t_max_predict_ms is not None else ""))
    print("\n".join(report(results)))
    if args.json:
        Path(args.json).write_text(json.dumps({"requests": [{k: r[k] for k in ("file", "at", "n_predict")} for r in reqs],
                                               "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
