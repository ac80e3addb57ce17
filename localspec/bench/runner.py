"""Running the benchmark: every (task, mode) side by side, repetitions in alternating order,
with the machine's load metered and busy repetitions run again."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from localspec.config import DRAFT_MAX_LIMIT, DraftParams, GenerationParams, SamplingParams
from localspec.core.costmodel import acceptance_by_position, expected_tokens, verify_cost
from localspec.core.events import drafter_tallies
from localspec.app.run_order import run_order
from localspec.backend.load import BUSY_THRESHOLD, CpuMeter
from localspec.bench.report import Run, summarise
from localspec.bench.suite import Task


# -- modes -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mode:
    name: str
    family: str  # target | peer-target | lookup | peer-lookup | draft | auto
    g: int = 0

    @property
    def ours(self) -> bool:
        return not self.family.startswith("peer")


def build_modes(lookup_lengths: Sequence[int], peer_lookup: Sequence[int], draft_lengths: Sequence[int],
                peers: bool, draft: bool) -> list[Mode]:
    modes = [Mode("target", "target")]
    if peers:
        modes.append(Mode("peer-target", "peer-target"))
    modes += [Mode(f"lookup g{g}", "lookup", g) for g in lookup_lengths]
    if peers:
        modes += [Mode(f"peer-lookup n{n}", "peer-lookup", n) for n in peer_lookup]
    if draft:
        modes += [Mode(f"draft g{g}", "draft", g) for g in draft_lengths]
    modes.append(Mode("auto", "auto"))
    return modes


def wait_for_idle(max_seconds: float, threshold: float = 0.1, log: Callable[[str], None] = print) -> bool:
    """Wait until other processes use under ``threshold`` of the CPUs over 3 s; False on timeout."""
    meter = CpuMeter()
    deadline = time.monotonic() + max_seconds
    said = False
    while True:
        meter.start()
        time.sleep(3.0)
        f = meter.other_fraction()
        if f is None or f < threshold:
            return True
        if time.monotonic() >= deadline:
            log(f"  machine still busy ({f:.0%} of the CPUs used by other processes); going on")
            return False
        if not said:
            log(f"  waiting for other processes to finish ({f:.0%} of the CPUs busy)...")
            said = True


def _predicted(rounds: Sequence[tuple[int, int]], accept: Sequence[float], verify: Sequence[float],
               draft_token: float) -> float | None:
    """Speedup the cost model predicts for these rounds: sum E[tokens] / sum T, over 1 / T(1)."""
    if not rounds:
        return None
    e = t = 0.0
    for drafted, _ in rounds:
        e += expected_tokens(accept[:drafted])
        t += verify_cost(verify, drafted + 1) + drafted * draft_token
    return e / t * verify[0]


def _top2_gap(engine, seq: Sequence[int]) -> float | None:
    """Top-2 logit gap of the target's next-token logits after ``seq`` (one-token decode)."""
    try:
        top = np.partition(engine.next_token_logits(seq), -2)[-2:]
        return float(abs(top[1] - top[0]))
    except Exception:  # pragma: no cover - diagnostics only
        return None


def run_bench(engine, tasks: Sequence[Task], modes: Sequence[Mode], *, repeats: int, max_tokens: int,
              target_path: Path, n_ctx: int, n_threads: int, n_gpu_layers: int = 0, repack: bool = False,
              wait_idle: float = 0.0, busy_threshold: float = BUSY_THRESHOLD, max_retries: int = 2, recalibrate: bool = False,
              log: Callable[[str], None] = print, checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Run every (task, mode) ``repeats`` times side by side; return the JSON-able result.

    With ``wait_idle`` > 0, each repetition waits (up to that many seconds) for other
    processes to leave the CPUs, and a repetition during which other processes used more
    than ``busy_threshold`` of the CPUs is run again (at most ``max_retries`` times); the
    share of the CPUs others used is kept with every repetition either way. The llama-cpp-python
    peers load the target with ``repack``, the weight-repacking choice our target was loaded with
    (:mod:`localspec.backend.repack`), so both sides run the same kernels.
    """
    from localspec.bench.peer import close_llama_cpp_peers, run_llama_cpp_peer

    sampling = SamplingParams(temperature=0.0)
    # auto drafts up to its own default cap (or the longest fixed length), so the oracle is within its reach
    fixed = [m.g for m in modes if m.family in ("lookup", "draft")]
    draft_max_auto = min(DRAFT_MAX_LIMIT, max([DraftParams(mode="auto").cap] + fixed))
    ec = engine.calibrated_costs(draft_max_auto, remeasure=recalibrate)
    verify = list(ec.target.seconds)
    t1 = verify[0]
    draft_token = ec.draft_token or 0.0
    runs: list[Run] = []
    mismatches: list[dict] = []
    busy_reps: list[dict] = []
    prompt_tokens: dict[str, int] = {}

    def ours(task_tokens, mode: Mode, n: int) -> tuple[list[int], float, object]:
        if mode.family == "target":
            dp = DraftParams(mode="none")
        elif mode.family == "auto":
            dp = DraftParams(mode="auto", draft_max=draft_max_auto)
        else:
            dp = DraftParams(mode=mode.family, draft_max=mode.g)
        t0 = time.perf_counter()
        g = engine.generate(task_tokens, sampling, dp, GenerationParams(max_tokens=n)).run()
        return g.token_ids, time.perf_counter() - t0, g

    def one_run(task: Task, tokens: list[int], m: Mode, rep: int) -> Run:
        if not m.ours:
            ids, _text, secs = run_llama_cpp_peer(
                target_path, tokens, max_tokens, n_ctx=n_ctx, n_threads=n_threads,
                lookup_num_pred_tokens=m.g if m.family == "peer-lookup" else None, n_gpu_layers=n_gpu_layers,
                repack=repack)
            return Run(task.name, m.name, rep, len(ids), secs, list(ids))
        in_models = engine.model_seconds()
        ids, secs, g = ours(tokens, m, max_tokens)
        rounds = [(r.drafted, r.accepted) for r in g.rounds]
        drafters = {name: t["rounds"] for name, t in drafter_tallies(g.rounds).items()}
        reasons: dict[str, int] = {}
        for r in g.rounds:
            key = r.reason.split(":")[0] if r.reason else ""
            reasons[key] = reasons.get(key, 0) + 1
        dec = engine.model_seconds() - in_models  # seconds inside llama.cpp decode calls
        run = Run(task.name, m.name, rep, len(ids), secs, list(ids), {**g.stats.as_dict(), **g.stats.view("bench_run")},
                  rounds, drafters, reasons, dec, totals=g.stats)
        gm = max([d for d, _ in rounds] + [1])
        acc = [a if a is not None else 0.0 for a in acceptance_by_position(rounds, gm)]
        run.predicted = _predicted(rounds, acc, verify, draft_token if m.family == "draft" else 0.0)
        return run

    meter = CpuMeter()
    try:
        for task in tasks:
            tokens = engine.chat_tokens(task.messages)
            prompt_tokens[task.name] = len(tokens)
            log(f"task {task.name}: prompt {len(tokens)} tokens")
            # warm-up: every cache holds the prompt before timing (ours, the draft model's, each peer's)
            ours(tokens, Mode("draft", "draft", 1) if engine.has_draft_model else Mode("target", "target"), 4)
            for m in modes:
                if not m.ours:
                    run_llama_cpp_peer(target_path, tokens, 1, n_ctx=n_ctx, n_threads=n_threads,
                                       lookup_num_pred_tokens=m.g if m.family == "peer-lookup" else None,
                                       n_gpu_layers=n_gpu_layers, repack=repack)
            for rep in range(repeats):
                order = run_order(modes, rep)
                for attempt in range(max_retries + 1):
                    if wait_idle > 0:
                        wait_for_idle(wait_idle, log=log)
                    meter.start()
                    rep_runs = {m.name: one_run(task, tokens, m, rep) for m in order}
                    busy = meter.other_fraction()
                    if wait_idle <= 0 or busy is None or busy < busy_threshold or attempt == max_retries:
                        break
                    log(f"  repeat {rep + 1}: other processes used {busy:.0%} of the CPUs; running it again")
                busy_reps.append({"task": task.name, "repeat": rep, "other_cpu": busy, "attempts": attempt + 1})
                runs.extend(rep_runs[m.name] for m in order)
                base = rep_runs["target"]
                for m in modes:
                    r = rep_runs[m.name]
                    r.stats["speedup"] = r.rate / base.rate if base.rate > 0 else None
                    if m.name != "target" and r.token_ids != base.token_ids:
                        pos = next((i for i, (a, b) in enumerate(zip(r.token_ids, base.token_ids)) if a != b),
                                   min(len(r.token_ids), len(base.token_ids)))
                        mismatches.append({"task": task.name, "mode": m.name, "peer": not m.ours, "repeat": rep,
                                           "position": pos,
                                           "ours": r.token_ids[pos:pos + 1], "target": base.token_ids[pos:pos + 1],
                                           "top2_gap": _top2_gap(engine, tokens + base.token_ids[:pos])})
                log(f"  repeat {rep + 1}/{repeats}: " + ", ".join(
                    f"{m.name} {rep_runs[m.name].rate:.1f}" for m in modes) + " tok/s"
                    + (f" (others used {busy:.0%} of the CPUs)" if busy is not None else ""))
            if checkpoint is not None:  # results so far, so a long run that is stopped is not lost
                done = [t for t in tasks if any(r.task == t.name for r in runs)]
                part = summarise(done, modes, runs, mismatches, verify, draft_token, t1, repeats, max_tokens, ec,
                                 prompt_tokens)
                part["repeats"] = busy_reps
                checkpoint(part)
    finally:
        close_llama_cpp_peers()
    result = summarise(tasks, modes, runs, mismatches, verify, draft_token, t1, repeats, max_tokens, ec,
                       prompt_tokens)
    result["repeats"] = busy_reps
    return result
