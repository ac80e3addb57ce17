"""The round's overhead: the time of a generation's rounds spent outside llama.cpp's passes, two trees side by side.

Three uses:

``python scripts/round_overhead.py ROOT MODE N``
    Python-side cost of generations on the fake backend (no llama.cpp), for comparing two trees by instruction
    count: run it under ``valgrind --tool=callgrind`` with N = 1 and N = 3 and take the difference / 2
    (MODE: draft | lookup | none).

``python scripts/round_overhead.py real BEFORE AFTER [--reps 3] [--tasks copy,chat] [--profile DIR]``
    The default pair (Qwen2.5-Coder 1.5B target, 0.5B draft) in the checkouts BEFORE and AFTER, one child
    process per (tree, task) block, the trees alternating (A B, B A, ...): per task and tree, the median
    overhead per round and per drafted token (wall time, and the main thread's CPU time, which other
    processes on a busy machine do not inflate), tokens/s, and AFTER / BEFORE. ``ROUND_OVERHEAD_MAX_TOKENS``
    in the environment shortens the answers. The overhead is measured the
    same way in both trees, whatever their own statistics hold: ``llama_cpp.llama_decode`` is timed (so
    the passes of the target and of the draft model, catch-up included, are what llama.cpp spends), and

        overhead = (wall time of the generation - its prefill's wall time) - (llama_decode time outside the prefill)

    so it holds the logits' copy, the acceptance rule, drafting, the policy, committing and releasing text
    and the generation's end. Tasks: ``copy``, the whole of ``scripts/bench_files/colorsys.py`` asked back
    unchanged with it as the ``prediction`` (drafts of 48 tokens, fixed); ``chat``, the bench's chat question
    answered with the draft model (mode draft, 8 tokens a round, 200 tokens); ``lookup``, the copy without
    the prediction, drafted by prompt lookup (16 tokens). Greedy. ``--profile DIR`` also writes cProfile's
    summary of AFTER's measured generations of each task to ``DIR/<task>.txt``.

``python scripts/round_overhead.py child ROOT TASK REPS [PROFILE]``
    One block (what ``real`` runs): JSON lines, one per measured repetition after a warm-up.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EDIT_TAIL = "Change nothing else. Reply with the complete updated file only, no explanation."
#: task -> (mode, draft_max, max_tokens, with the prediction)
TASKS = {"copy": ("lookup", 48, 1200, True), "lookup": ("lookup", 16, 1200, False), "chat": ("draft", 8, 200, False)}


def fake(root: str, mode: str, n: int) -> None:
    sys.path[:0] = [root, root + "/tests"]
    from fakes import FakeModel
    try:
        from localspec.core.engine import SpeculativeEngine
    except ImportError:
        from localspec.engine import SpeculativeEngine
    from localspec.config import DraftParams, GenerationParams, SamplingParams
    for _ in range(n):
        eng = SpeculativeEngine(FakeModel(n_ctx=4096, n_batch=512), FakeModel(n_ctx=4096, n_batch=512))
        gen = eng.generate([3, 5, 7, 3, 5], SamplingParams(temperature=0.0, seed=1),
                           DraftParams(mode=mode, draft_max=8), GenerationParams(max_tokens=150))
        gen.run()
    print(len(gen.rounds))


def _messages(task: str) -> tuple[list[dict], str | None]:
    if task == "chat":
        from localspec.bench.suite import BUILTIN_TASKS

        return list(next(t for t in BUILTIN_TASKS if t.name == "chat").messages), None
    text = open(os.path.join(HERE, "bench_files", "colorsys.py"), encoding="utf-8").read()
    return [{"role": "user", "content": f"Return this file unchanged. {EDIT_TAIL}\n\n```python\n{text}```"}], text


def child(root: str, task: str, reps: int, profile: str | None = None) -> None:
    sys.path[:0] = [root]
    import llama_cpp

    spent = [0.0, 0.0]  # seconds inside llama_decode: wall, this thread's CPU
    real_decode = llama_cpp.llama_decode

    def timed_decode(ctx, batch):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return real_decode(ctx, batch)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += time.thread_time() - c0

    llama_cpp.llama_decode = timed_decode  # the backend looks it up on the module at every call
    from localspec.app.catalog import load_catalog, resolve_model
    from localspec.app.loader import make_engine
    from localspec.backend.llama import LlamaModel
    from localspec.config import DraftParams, GenerationParams, SamplingParams

    pair = load_catalog().default
    kw = dict(n_ctx=4096, n_batch=512, n_threads=2)
    engine = make_engine(LlamaModel(resolve_model(pair.target), **kw), LlamaModel(resolve_model(pair.draft), **kw))
    mode, draft_max, max_tokens, with_prediction = TASKS[task]
    messages, file_text = _messages(task)
    prompt = engine.chat_tokens(messages)
    prediction = engine.tokenize(file_text, special=False) if with_prediction else None
    in_prefill = [0.0, 0.0, 0.0, 0.0]  # this generation's prefill: wall, CPU, llama_decode wall, llama_decode CPU
    prefill = engine.prefill

    def timed_prefill(*a, **k):
        t0, c0, s0, sc0 = time.perf_counter(), time.thread_time(), spent[0], spent[1]
        try:
            return prefill(*a, **k)
        finally:
            in_prefill[0] += time.perf_counter() - t0
            in_prefill[1] += time.thread_time() - c0
            in_prefill[2] += spent[0] - s0
            in_prefill[3] += spent[1] - sc0

    engine.prefill = timed_prefill
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    max_tokens = int(os.environ.get("ROUND_OVERHEAD_MAX_TOKENS", max_tokens))
    for rep in range(reps + 1):  # repetition 0 (8 tokens) puts the prompt in the caches (not reported)
        in_prefill[:] = [0.0] * 4
        s0, sc0 = spent[0], spent[1]
        gen = engine.generate(prompt, SamplingParams(temperature=0.0), DraftParams(mode=mode, draft_max=draft_max),
                              GenerationParams(max_tokens=max_tokens if rep else 8), prediction=prediction)
        if profiler is not None and rep:
            profiler.enable()
        t0, c0 = time.perf_counter(), time.thread_time()
        gen.run()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if profiler is not None and rep:
            profiler.disable()
        if not rep:
            continue
        s, rounds = gen.stats, len(gen.rounds)
        decode = wall - in_prefill[0]
        passes = spent[0] - s0 - in_prefill[2]
        overhead = decode - passes
        # the same on this thread's CPU clock: what the Python of the rounds cost, whatever the other processes did
        cpu_overhead = (cpu - in_prefill[1]) - (spent[1] - sc0 - in_prefill[3])
        own = {k: getattr(s, k) for k in ("overhead_seconds_per_round", "overhead_seconds_per_drafted_token",
                                          "round_seconds", "pass_seconds") if hasattr(s, k)}
        print(json.dumps({"task": task, "rep": rep, "tokens": s.tokens, "rounds": rounds, "drafted": s.drafted,
                          "accepted": s.accepted, "decode_seconds": decode, "pass_seconds": passes,
                          "overhead_ms_per_round": overhead / rounds * 1e3,
                          "overhead_ms_per_drafted_token": overhead / s.drafted * 1e3 if s.drafted else None,
                          "cpu_overhead_ms_per_round": cpu_overhead / rounds * 1e3,
                          "cpu_overhead_ms_per_drafted_token": cpu_overhead / s.drafted * 1e3 if s.drafted else None,
                          "tok_s": s.tokens / decode, "ids": hash(tuple(gen.token_ids)), "own": own,
                          "load": os.getloadavg()[0]}), flush=True)
    if profiler is not None:
        import io
        import pstats

        out = io.StringIO()
        st = pstats.Stats(profiler, stream=out)
        st.sort_stats("tottime").print_stats(30)
        st.sort_stats("cumulative").print_stats(30)
        os.makedirs(profile, exist_ok=True)
        with open(os.path.join(profile, f"{task}.txt"), "w", encoding="utf-8") as f:
            f.write(out.getvalue().replace(root, "ROOT"))
    engine.close()


def _run_block(root: str, task: str, reps: int, profile: str | None) -> list[dict]:
    cmd = [sys.executable, os.path.abspath(__file__), "child", root, task, str(reps)] + ([profile] if profile else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": root})
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        name = "unknown CPU"
    return f"{name}, {os.cpu_count()} CPUs"


def real(before: str, after: str, reps: int, tasks: list[str], blocks: int, profile: str | None) -> None:
    print(f"{_cpu()}; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    got: dict[tuple[str, str], list[dict]] = {}
    for task in tasks:
        for b in range(blocks):
            for name, root in ((("before", before), ("after", after)) if b % 2 == 0 else
                               (("after", after), ("before", before))):
                rows = _run_block(root, task, reps, profile if name == "after" and b == 0 else None)
                got.setdefault((task, name), []).extend(rows)
                print(f"  {task} {name}: " + ", ".join(f"{r['overhead_ms_per_round']:.2f} ms/round" for r in rows),
                      flush=True)
    keys = ("tok_s", "rounds", "drafted", "overhead_ms_per_round", "overhead_ms_per_drafted_token",
            "cpu_overhead_ms_per_round", "cpu_overhead_ms_per_drafted_token", "pass_seconds")
    print("\nmedians; ovh = wall ms outside llama_decode, cpu = the same on the main thread's CPU clock")
    print(f"{'task':<8} {'tree':<7} {'tok/s':>6} {'rounds':>6} {'drafted':>7} {'ovh/round':>9} {'ovh/drafted':>11} "
          f"{'cpu/round':>9} {'cpu/drafted':>11} {'passes s':>8} {'same ids':>8}")
    for task in tasks:
        med = {}
        for name in ("before", "after"):
            rows = got[(task, name)]
            m = med[name] = {k: statistics.median([r[k] for r in rows if r[k] is not None] or [0.0]) for k in keys}
            same = len({r["ids"] for r in got[(task, "before")] + got[(task, "after")]}) == 1
            print(f"{task:<8} {name:<7} {m['tok_s']:>6.1f} {m['rounds']:>6.0f} {m['drafted']:>7.0f} "
                  f"{m['overhead_ms_per_round']:>9.2f} {m['overhead_ms_per_drafted_token']:>11.3f} "
                  f"{m['cpu_overhead_ms_per_round']:>9.2f} {m['cpu_overhead_ms_per_drafted_token']:>11.3f} "
                  f"{m['pass_seconds']:>8.2f} {'yes' if same else 'NO':>8}")
        b, a = med["before"], med["after"]
        print(f"{task:<8} {'a/b':<7} {a['tok_s'] / b['tok_s']:>6.2f} {'':>6} {'':>7} "
              f"{a['overhead_ms_per_round'] / b['overhead_ms_per_round']:>9.2f} {'':>11} "
              f"{a['cpu_overhead_ms_per_round'] / b['cpu_overhead_ms_per_round']:>9.2f}")
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "child":
        child(args[1], args[2], int(args[3]), args[4] if len(args) > 4 else None)
    elif args and args[0] == "real":
        import argparse

        p = argparse.ArgumentParser(prog="round_overhead.py real")
        p.add_argument("before")
        p.add_argument("after")
        p.add_argument("--reps", type=int, default=2, help="measured generations per block (after a warm-up)")
        p.add_argument("--blocks", type=int, default=2, help="blocks per tree and task, alternating the order")
        p.add_argument("--tasks", default="copy,chat")
        p.add_argument("--profile", help="a folder for cProfile's summaries of AFTER (first block of each task)")
        ns = p.parse_args(args[1:])
        real(os.path.abspath(ns.before), os.path.abspath(ns.after), ns.reps, ns.tasks.split(","), ns.blocks,
             ns.profile)
    else:
        fake(args[0], args[1], int(args[2]))
