"""``localspec bench``: our modes and llama-cpp-python's side by side, in one process.

For every task of a built-in suite (plus user prompts), every mode runs ``--repeats``
times; the order of the modes alternates (forwards, backwards) between repetitions,
and each run's speed is divided by target-only decoding (ours) of the same repetition.
The reported speedup is the median of those ratios, so a machine that gets busier or
quieter during the run moves numerator and denominator together.

Modes: ``target`` (ours, no speculation), ``peer-target`` (llama-cpp-python
``create_completion``), ``lookup gN`` (our prompt lookup, draft length N),
``peer-lookup nN`` (llama-cpp-python ``LlamaPromptLookupDecoding(num_pred_tokens=N)``),
``draft gN`` (our draft model, fixed draft length N) and ``auto``.

Greedy decoding throughout; the token ids of our modes are checked equal to
target-only decoding, and a difference is reported with its position and the target's
top-2 logit gap there (``shared/cases.md`` C1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .config import DraftParams, GenerationParams, SamplingParams
from .costmodel import acceptance_by_position, ceiling, expected_tokens, textbook_speedup, verify_cost
from .errors import ConfigError
from .machine import load_average
from .options import add_model_arguments, add_numeric, settings_from_args

# -- the built-in suite ------------------------------------------------------------------
_EDIT_FILE = '''import csv
import sys
from dataclasses import dataclass


@dataclass
class Record:
    name: str
    city: str
    amount: float


def parse_line(line: str) -> Record:
    """Split one CSV line into a Record."""
    name, city, amount = next(csv.reader([line]))
    return Record(name.strip(), city.strip(), float(amount))


def load(path: str) -> list[Record]:
    records = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i == 0 or not line.strip():
                continue
            records.append(parse_line(line))
    return records


def total_by_city(records: list[Record]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for r in records:
        totals[r.city] = totals.get(r.city, 0.0) + r.amount
    return totals


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: totals.py FILE", file=sys.stderr)
        return 2
    records = load(argv[1])
    for city, total in sorted(total_by_city(records).items()):
        print(f"{city:20s} {total:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

_SUMMARY_TEXT = (
    "The town of Haldor sits where two rivers meet, and for three centuries its fortunes rose and fell "
    "with the water. In the early years the rivers carried timber from the northern forests, and the "
    "sawmills along the banks employed half the town. When the forests were cut back, the mills closed "
    "one by one, and many families moved south to the cities. The town survived by turning to the "
    "rivers in another way: a canal was dug in 1871 to connect Haldor to the coast, and for fifty years "
    "barges carried grain and wool through its locks. The railway ended that trade almost overnight. "
    "By 1930 the canal was silting up and the locks were rusted shut. What saved Haldor the second time "
    "was an accident. A group of students mapping the old canal found that the lock-keepers' cottages "
    "were among the best preserved examples of their kind, and a small museum opened in one of them. "
    "Visitors came for the museum and stayed for the walks along the towpath. Today the canal has been "
    "partly restored, a few of the locks work again for pleasure boats, and tourism employs more people "
    "in Haldor than the mills ever did. The town council has voted to restore the remaining locks by "
    "2030, although some residents worry that the crowds are changing the character of the place."
)


@dataclass(frozen=True)
class Task:
    name: str
    messages: tuple[dict, ...]
    kind: str = "builtin"


BUILTIN_TASKS: tuple[Task, ...] = (
    Task("code-completion", ({"role": "user", "content":
         "Complete this Python function. Reply with the code only.\n\n```python\n"
         "def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
         '    """Merge overlapping closed intervals and return them sorted by start."""\n'},)),
    Task("code-edit", ({"role": "user", "content":
         "Rename the function `parse_line` to `parse_record` everywhere in this file. "
         "Reply with the complete updated file only, no explanation.\n\n```python\n" + _EDIT_FILE + "```"},)),
    Task("summarize", ({"role": "user", "content":
         "Summarise the following text in four sentences.\n\n" + _SUMMARY_TEXT},)),
    Task("prose", ({"role": "user", "content":
         "Write a short story about a lighthouse keeper who finds a message in a bottle."},)),
    Task("chat", ({"role": "user", "content":
         "What is the difference between a process and a thread? Explain it to a new programmer."},)),
)

QUICK_TASKS = ("code-edit", "chat")


def load_user_prompts(path: Path) -> list[Task]:
    """User prompts: ``.jsonl`` lines ``{"name": ..., "prompt": ...}`` or ``{"name", "messages"}``,
    or a text file with prompts separated by lines holding only ``---``.

    Raises:
        ConfigError: the file is missing, empty or malformed.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read the prompts file {path}: {e.strerror}", "check the path") from None
    tasks: list[Task] = []
    if path.suffix == ".jsonl":
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                msgs = d.get("messages") or [{"role": "user", "content": d["prompt"]}]
                tasks.append(Task(str(d.get("name") or f"user-{len(tasks) + 1}"), tuple(msgs), "user"))
            except (ValueError, KeyError, TypeError, AttributeError):
                raise ConfigError(f"{path}:{i}: expected a JSON object with \"prompt\" or \"messages\"",
                                  'one object per line, e.g. {"name": "t1", "prompt": "..."}') from None
    else:
        chunks = [c.strip() for c in "\n".join(
            "\x00" if ln.strip() == "---" else ln for ln in text.splitlines()).split("\x00")]
        for c in chunks:
            if c:
                tasks.append(Task(f"user-{len(tasks) + 1}", ({"role": "user", "content": c},), "user"))
    if not tasks:
        raise ConfigError(f"no prompts in {path}", "separate prompts with lines holding only ---, or use .jsonl")
    return tasks


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


@dataclass
class Run:
    task: str
    mode: str
    repeat: int
    tokens: int
    seconds: float
    token_ids: list[int]
    stats: dict = field(default_factory=dict)
    rounds: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per round
    drafters: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    decode_seconds: float = 0.0
    overhead_per_round: float | None = None
    predicted: float | None = None

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class _DecodeTimer:
    """Wraps a model's ``decode`` (instance attribute) and sums the seconds spent in it."""

    def __init__(self, model) -> None:
        self.model = model
        self.seconds = 0.0
        self._orig = model.decode

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return self._orig(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0

        model.decode = timed

    def close(self) -> None:
        try:
            del self.model.decode
        except AttributeError:
            pass


class CpuMeter:
    """CPU time used by *other* processes (Linux ``/proc``): the machine's busy time minus ours.

    ``other_fraction()`` is the share of all CPUs other processes used since the last
    ``start()``; None where ``/proc`` is not available.
    """

    def __init__(self) -> None:
        self._t0 = self._state()

    @staticmethod
    def _state():
        try:
            with open("/proc/stat") as f:
                parts = f.readline().split()[1:]
            vals = [int(x) for x in parts[:8]]
            busy = sum(vals) - vals[3] - vals[4]  # minus idle and iowait
            with open("/proc/self/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            mine = int(st[11]) + int(st[12])  # utime + stime of every thread, clock ticks
            return busy, mine, time.monotonic()
        except (OSError, ValueError, IndexError):
            return None

    def start(self) -> None:
        self._t0 = self._state()

    def other_fraction(self) -> float | None:
        t1 = self._state()
        if t1 is None or self._t0 is None:
            return None
        busy, mine, wall = (a - b for a, b in zip(t1, self._t0))
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        total = wall * hz * (os.cpu_count() or 1)
        return max(0.0, (busy - mine) / total) if total > 0 else None


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


def _top2_gap(target, seq: Sequence[int]) -> float | None:
    """Top-2 logit gap of the target's next-token logits after ``seq`` (one-token decode)."""
    try:
        seq = list(seq)
        n = target.sync(seq)  # caches a prefix of seq, at most len(seq) - 1 tokens
        row = target.decode(seq[n:], "last")[0]
        top = np.partition(row, -2)[-2:]
        return float(abs(top[1] - top[0]))
    except Exception:  # pragma: no cover - diagnostics only
        return None


def run_bench(engine, tasks: Sequence[Task], modes: Sequence[Mode], *, repeats: int, max_tokens: int,
              target_path: Path, n_ctx: int, n_threads: int, n_gpu_layers: int = 0,
              wait_idle: float = 0.0, busy_threshold: float = 0.15, max_retries: int = 2, recalibrate: bool = False,
              log: Callable[[str], None] = print, checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Run every (task, mode) ``repeats`` times side by side; return the JSON-able result.

    With ``wait_idle`` > 0, each repetition waits (up to that many seconds) for other
    processes to leave the CPUs, and a repetition during which other processes used more
    than ``busy_threshold`` of the CPUs is run again (at most ``max_retries`` times); the
    share of the CPUs others used is kept with every repetition either way.
    """
    from .backend import close_llama_cpp_peers, run_llama_cpp_peer

    sampling = SamplingParams(temperature=0.0)
    gen = GenerationParams(max_tokens=max_tokens)
    # auto may draft as long as the longest fixed length, so the oracle is within its reach
    draft_max_auto = max([8] + [m.g for m in modes if m.family in ("lookup", "draft")])
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
                lookup_num_pred_tokens=m.g if m.family == "peer-lookup" else None, n_gpu_layers=n_gpu_layers)
            return Run(task.name, m.name, rep, len(ids), secs, list(ids))
        timers = [_DecodeTimer(engine.target)]
        if engine.draft_model is not None and engine.draft_model is not engine.target:
            timers.append(_DecodeTimer(engine.draft_model))
        try:
            ids, secs, g = ours(tokens, m, max_tokens)
        finally:
            for tm in timers:
                tm.close()
        rounds = [(r.drafted, r.accepted) for r in g.rounds]
        drafters: dict[str, int] = {}
        reasons: dict[str, int] = {}
        for r in g.rounds:
            drafters[r.drafter] = drafters.get(r.drafter, 0) + 1
            key = r.reason.split(":")[0] if r.reason else ""
            reasons[key] = reasons.get(key, 0) + 1
        dec = sum(tm.seconds for tm in timers)
        run = Run(task.name, m.name, rep, len(ids), secs, list(ids), g.stats.as_dict(), rounds, drafters, reasons,
                  dec, (secs - dec) / max(g.stats.rounds, 1))
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
                                       n_gpu_layers=n_gpu_layers)
            for rep in range(repeats):
                order = list(modes) if rep % 2 == 0 else list(reversed(modes))
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
                                           "top2_gap": _top2_gap(engine.target, tokens + base.token_ids[:pos])})
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


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


#: the fixed modes the oracle picks from (ours; auto chooses among these)
ORACLE_FAMILIES = ("target", "lookup", "draft")


def oracle_row(task_rows: list[dict], runs: Sequence[Run]) -> dict | None:
    """The oracle of one task: the fixed mode of ours with the highest median speedup, as a row.

    Also sets ``auto_oracle`` on the task's auto row: the median over repetitions of auto's
    rate over the oracle mode's rate in the same repetition.
    """
    fixed = [r for r in task_rows if r["family"] in ORACLE_FAMILIES and r["speedup"] is not None]
    if not fixed:
        return None
    best = max(fixed, key=lambda r: r["speedup"])
    row = dict(best, mode="oracle", family="oracle", oracle_of=best["mode"])
    task = best["task"]
    rate = {(r.mode, r.repeat): r.rate for r in runs if r.task == task}
    for auto in (r for r in task_rows if r["family"] == "auto"):
        ratios = [rate[(auto["mode"], rep)] / rate[(best["mode"], rep)] for (m, rep) in rate
                  if m == auto["mode"] and rate.get((best["mode"], rep))]
        auto["auto_oracle"] = _median(ratios)
        auto["oracle_of"] = best["mode"]
    return row


def summarise(tasks, modes, runs, mismatches, verify, draft_token, t1, repeats, max_tokens, ec,
              prompt_tokens: dict[str, int] | None = None) -> dict:
    rows = []
    g_ceiling = max([8] + [m.g for m in modes if m.family in ("lookup", "draft")])
    g_ceiling = min(g_ceiling, len(ec.target.seconds) - 1)
    ceilings = []
    for task in tasks:
        task_start = len(rows)
        base_rates = [r.rate for r in runs if r.task == task.name and r.mode == "target"]
        for m in modes:
            rs = [r for r in runs if r.task == task.name and r.mode == m.name]
            if not rs:
                continue
            drafted = sum(r.stats.get("drafted", 0) for r in rs)
            accepted = sum(r.stats.get("accepted", 0) for r in rs)
            drafting_rounds = sum(r.stats.get("drafting_rounds", 0) for r in rs)
            tokens = sum(r.tokens for r in rs)
            passes = sum(r.stats.get("target_passes", 0) for r in rs)
            a = accepted / drafted if drafted else None
            row = {
                "task": task.name,
                "mode": m.name,
                "family": m.family,
                "g": m.g,
                "tokens": _median([r.tokens for r in rs]),
                "tok_s": _median([r.rate for r in rs]),
                "speedup": _median([r.stats.get("speedup") for r in rs]) if m.name != "target" else 1.0,
                "speedups": [r.stats.get("speedup") for r in rs],
                "acceptance_rate": a if m.ours else None,
                "drafted": drafted if m.ours else None,
                "mean_accepted_length": accepted / drafting_rounds if drafting_rounds else None,
                "tokens_per_pass": tokens / passes if passes else None,
                "predicted": _median([r.predicted for r in rs]) if m.ours else None,
                "textbook": (textbook_speedup(a, m.g, draft_token / t1 if m.family == "draft" else 0.0)
                             if a is not None and m.family in ("lookup", "draft") else None),
                "overhead_ms_per_round": (_median([r.overhead_per_round for r in rs]) or 0.0) * 1e3 if m.ours else None,
                "identical": all(not (mm["task"] == task.name and mm["mode"] == m.name) for mm in mismatches),
                "target_rate_median": _median(base_rates),
            }
            if m.family == "auto":
                d: dict[str, int] = {}
                reasons: dict[str, int] = {}
                for r in rs:
                    for k, v in r.drafters.items():
                        d[k] = d.get(k, 0) + v
                    for k, v in r.reasons.items():
                        reasons[k] = reasons.get(k, 0) + v
                row["auto_drafters"] = d
                row["auto_choices"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:6])
                row["mean_draft_len"] = drafted / drafting_rounds if drafting_rounds else 0.0
            rows.append(row)
        orc = oracle_row(rows[task_start:], runs)
        if orc is not None:
            rows.append(orc)
        if prompt_tokens and task.name in prompt_tokens:
            pos = prompt_tokens[task.name] + max_tokens // 2  # the middle of the answer
            x, g = ceiling(ec.target.curve_at(pos), g_ceiling)
            ceilings.append({"task": task.name, "position": pos, "speedup": x, "g": g})
    goals = evaluate_goals(rows, t1)
    return {
        "version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
                    "python": sys.version.split()[0], "load_avg_end": load_average(), **_machine_info()},
        "settings": {"repeats": repeats, "max_tokens": max_tokens, "greedy": True},
        "costs": {"target_seconds": verify, "target_ratios": [v / verify[0] for v in verify],
                  "draft_token_seconds": draft_token, "draft_ratio": draft_token / t1 if t1 else None,
                  "target_key": ec.target.key, "draft_key": ec.draft.key if ec.draft else None,
                  "contexts": ec.target.contexts, "target_curves": ec.target.curves,
                  "target_prefill_token_seconds": ec.target.prefill_token_seconds,
                  "draft_prefill_token_seconds": ec.draft_prefill_token_seconds,
                  "target_flash_attn": ec.target.flash_attn, "target_flash_attn_scores": ec.target.flash_attn_scores,
                  "draft_flash_attn": ec.draft.flash_attn if ec.draft else None,
                  "calibration_seconds": ec.target.calibration_seconds + (ec.draft.calibration_seconds if ec.draft
                                                                          else 0.0),
                  "ceiling": [{"context": c, "speedup": x, "g": g} for c in ec.target.contexts
                              for x, g in [ceiling(ec.target.curve_at(c), g_ceiling)]],
                  "ceiling_by_task": ceilings},
        "rows": rows,
        "mismatches": mismatches,
        "goals": goals,
        "runs": [{"task": r.task, "mode": r.mode, "repeat": r.repeat, "tokens": r.tokens, "seconds": r.seconds,
                  "tok_s": r.rate, "speedup": r.stats.get("speedup"), "decode_seconds": r.decode_seconds,
                  "overhead_per_round": r.overhead_per_round, "predicted": r.predicted,
                  "rounds": r.stats.get("rounds"), "drafted": r.stats.get("drafted"),
                  "accepted": r.stats.get("accepted"), "drafters": r.drafters} for r in runs],
    }


def _machine_info() -> dict:
    from .machine import machine_info

    try:
        return machine_info()
    except Exception:  # pragma: no cover - diagnostics only
        return {}


def evaluate_goals(rows: list[dict], t1: float) -> list[dict]:
    """The issue's goals, measured: each with the numbers and met / not met."""
    goals = []
    autos = [r for r in rows if r["family"] == "auto"]
    if autos:
        worst = min(autos, key=lambda r: r["speedup"] or 0.0)
        goals.append({"goal": "auto >= 0.97x target-only on every task", "met": (worst["speedup"] or 0) >= 0.97,
                      "value": {r["task"]: r["speedup"] for r in autos},
                      "detail": f"worst {worst['task']} {worst['speedup']:.2f}x"})
        orc = [r for r in autos if r.get("auto_oracle") is not None]
        if orc:
            w = min(orc, key=lambda r: r["auto_oracle"])
            goals.append({"goal": "auto >= 0.9x the oracle (best fixed mode of the run) on every task",
                          "met": w["auto_oracle"] >= 0.9, "value": {r["task"]: r["auto_oracle"] for r in orc},
                          "detail": f"worst {w['task']} {w['auto_oracle']:.2f}x of {w['oracle_of']}"})
    peer = [r for r in rows if r["family"] == "peer-target" and r["speedup"]]
    if peer:
        # speedup of peer-target = peer rate / ours (median of per-repetition ratios); ours / peer is its inverse
        w = max(peer, key=lambda r: r["speedup"])
        goals.append({"goal": "our target-only >= 0.98x llama-cpp-python's Llama on every task",
                      "met": 1.0 / w["speedup"] >= 0.98, "value": {r["task"]: 1.0 / r["speedup"] for r in peer},
                      "detail": f"worst {w['task']} {1.0 / w['speedup']:.2f}x"})
    edit = [r for r in rows if r["task"] == "code-edit"]
    lk = [r for r in edit if r["family"] == "lookup"]
    if lk:
        best = max(lk, key=lambda r: r["speedup"] or 0.0)
        goals.append({"goal": "prompt lookup >= 1.4x target-only on code-edit", "met": (best["speedup"] or 0) >= 1.4,
                      "value": best["speedup"], "detail": f"best {best['mode']} {best['speedup']:.2f}x"})
        peers = [r for r in edit if r["family"] == "peer-lookup"]
        if peers:
            bp = max(peers, key=lambda r: r["speedup"] or 0.0)
            ratio = (best["speedup"] or 0) / bp["speedup"] if bp["speedup"] else None
            goals.append({"goal": "our prompt lookup >= 1.1x LlamaPromptLookupDecoding on code-edit",
                          "met": ratio is not None and ratio >= 1.1, "value": ratio,
                          "detail": f"{best['mode']} {best['speedup']:.2f}x vs {bp['mode']} {bp['speedup']:.2f}x"})
    ov = [r["overhead_ms_per_round"] for r in rows if r.get("overhead_ms_per_round") is not None]
    if ov:
        worst = max(ov)
        goals.append({"goal": "engine overhead per round < 5% of one target pass", "met": worst / (t1 * 1e3) < 0.05,
                      "value": worst / (t1 * 1e3),
                      "detail": f"worst {worst:.2f} ms/round vs target pass {t1 * 1e3:.1f} ms "
                                f"(median {statistics.median(ov):.2f} ms)"})
    return goals


def _f(x, fmt="{:.2f}", none="n/a"):
    return none if x is None else fmt.format(x)


def format_table(result: dict) -> str:
    head = (f"{'task':<16} {'mode':<16} {'tok/s':>6} {'speedup':>7} {'auto/orc':>8} {'accept':>7} {'drafted':>7} "
            f"{'mean acc':>8} {'tok/pass':>8} {'pred':>5} {'textbk':>6} {'ovh ms':>6} {'same':>4}")
    mach = result.get("machine", {})
    lines = [head, "-" * len(head)]
    if mach.get("cpu"):
        avx = mach.get("avx512")
        lines.insert(0, f"CPU {mach['cpu']}, {mach.get('cpu_count')} CPUs; vector extensions: "
                        f"{' '.join(mach.get('vector_extensions') or []) or 'unknown'}"
                        + ("" if avx is None else ("" if avx else " (no AVX-512)"))
                        + f"; llama-cpp-python {mach.get('llama_cpp', '?')}")
    last = None
    for r in result["rows"]:
        if last is not None and r["task"] != last:
            lines.append("")
        last = r["task"]
        same = ("" if r["identical"] is None or r["mode"] == "target" or r["family"] == "oracle"
                else ("yes" if r["identical"] else "NO"))
        name = f"oracle={r['oracle_of']}" if r["family"] == "oracle" else r["mode"]
        lines.append(f"{r['task']:<16} {name:<16} {_f(r['tok_s'], '{:.1f}'):>6} {_f(r['speedup']):>7} "
                     f"{_f(r.get('auto_oracle'), none=''):>8} "
                     f"{_f(r['acceptance_rate']):>7} {_f(r['drafted'], '{:d}', ''):>7} "
                     f"{_f(r['mean_accepted_length']):>8} {_f(r['tokens_per_pass']):>8} {_f(r['predicted'], none=''):>5} "
                     f"{_f(r['textbook'], none=''):>6} {_f(r['overhead_ms_per_round'], none=''):>6} {same:>4}")
    c = result["costs"]
    lines.append("")
    lines.append("verify cost (ratio to one target token, b = 1..): " +
                 " ".join(f"{x:.2f}" for x in c["target_ratios"]) +
                 f"; one target token {c['target_seconds'][0] * 1e3:.1f} ms" +
                 (f"; draft token {c['draft_token_seconds'] * 1e3:.1f} ms = {c['draft_ratio']:.2f} of a target pass"
                  if c["draft_token_seconds"] else ""))
    for ctx, curve in zip(c.get("contexts") or [], c.get("target_curves") or []):
        lines.append(f"  at {ctx} tokens of context: " + " ".join(f"{x / curve[0]:.2f}" for x in curve)
                     + f"; one token {curve[0] * 1e3:.1f} ms")
    if c.get("ceiling"):
        lines.append("calibrated ceiling (a perfect free drafter with this curve): " + ", ".join(
            f"{x['speedup']:.2f}x at g={x['g']} ({x['context']} tokens of context)" for x in c["ceiling"])
            + ("; by task (middle of the answer): " + ", ".join(
                f"{x['task']} {x['speedup']:.2f}x" for x in c.get("ceiling_by_task", [])) if c.get("ceiling_by_task")
               else ""))
    fa = c.get("target_flash_attn")
    if fa is not None or c.get("target_prefill_token_seconds"):
        sc = c.get("target_flash_attn_scores") or {}
        lines.append(f"target flash attention {'on' if fa else 'off' if fa is not None else 'llama.cpp default'}"
                     + (" (measured, time relative to the faster: " + ", ".join(
                         f"{k} {v:.3f}" for k, v in sorted(sc.items())) + ")"
                        if sc else "")
                     + (f"; prefill {c['target_prefill_token_seconds'] * 1e3:.2f} ms/token"
                        if c.get("target_prefill_token_seconds") else "")
                     + (f"; draft catch-up {c['draft_prefill_token_seconds'] * 1e3:.2f} ms/token"
                        if c.get("draft_prefill_token_seconds") else "")
                     + (f"; calibration {c['calibration_seconds']:.0f} s" if c.get("calibration_seconds") else ""))
    busy = [r["other_cpu"] for r in result.get("repeats", []) if r.get("other_cpu") is not None]
    if busy:
        lines.append(f"CPU share used by other processes during a repetition: median {statistics.median(busy):.0%}, "
                     f"max {max(busy):.0%} (over 15% means the timings are disturbed)")
    for r in result["rows"]:
        if r["family"] == "auto":
            lines.append(f"auto on {r['task']}: rounds by drafter {r['auto_drafters']}; choices {r['auto_choices']}")
    if result["mismatches"]:
        lines.append("")
        lines.append("greedy outputs that differ from ours target-only (first position, top-2 logit gap of the "
                     "target there; peers are llama-cpp-python):")
        for mm in result["mismatches"]:
            lines.append(f"  {mm['task']} {mm['mode']} repeat {mm['repeat']}: position {mm['position']}, "
                         f"ours {mm['ours']} vs target {mm['target']}, gap {_f(mm['top2_gap'], '{:.4f}')}")
    lines.append("")
    for gl in result["goals"]:
        lines.append(f"[{'met' if gl['met'] else 'NOT MET'}] {gl['goal']}: {gl['detail']}")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """Speedup against draft length, one panel per task, with the break-even line at 1.0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in result["rows"]))
    ncol = min(3, len(tasks))
    nrow = (len(tasks) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.8 * nrow), squeeze=False, sharey=True)
    styles = {"draft": ("o-", "tab:blue"), "lookup": ("s-", "tab:green"), "peer-lookup": ("^--", "tab:red")}
    for ax, task in zip(axes.flat, tasks):
        rows = [r for r in result["rows"] if r["task"] == task]
        for fam, (st, col) in styles.items():
            pts = sorted((r["g"], r["speedup"]) for r in rows if r["family"] == fam and r["speedup"] is not None)
            if pts:
                label = {"draft": "ours: draft model", "lookup": "ours: prompt lookup",
                         "peer-lookup": "llama-cpp-python lookup"}[fam]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], st, color=col, label=label)
            pred = sorted((r["g"], r["predicted"]) for r in rows if r["family"] == fam and r.get("predicted"))
            if pred:
                ax.plot([p[0] for p in pred], [p[1] for p in pred], "x:", color=col, alpha=0.6,
                        label=f"{fam}: cost-model prediction")
        for r in rows:
            if r["family"] == "auto" and r["speedup"] is not None:
                ax.axhline(r["speedup"], color="tab:purple", ls="-.", lw=1.2, label=f"auto {r['speedup']:.2f}x")
            if r["family"] == "peer-target" and r["speedup"] is not None:
                ax.axhline(r["speedup"], color="tab:gray", ls=":", lw=1, label="llama-cpp-python target-only")
        ax.axhline(1.0, color="black", lw=1, label="break-even (target-only)")
        ax.set_title(task)
        ax.set_xlabel("draft length g")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("speedup over target-only")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("auto "):
                handles.append(h)
                labels.append(lab)
    from matplotlib.lines import Line2D

    handles.append(Line2D([], [], color="tab:purple", ls="-.")); labels.append("auto (this task)")
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"localspec bench: speedup vs draft length (greedy, {result['settings']['max_tokens']} tokens, "
                 f"median of {result['settings']['repeats']})")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ints(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None
    if any(x < 1 for x in out):
        raise argparse.ArgumentTypeError("lengths must be >= 1")
    return out


def cli_bench(argv: list[str]) -> int:
    """``localspec bench``: table on the terminal, JSON and a PNG plot under ``--out``."""
    p = argparse.ArgumentParser(prog="localspec bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    add_numeric(p, "draft_max", int, "drafting", "most tokens drafted per round in the settings", "8")
    p.add_argument("--out", default="bench-out", help="output folder for bench.json and bench.png (default bench-out/)")
    p.add_argument("--prompts", type=Path, default=None, help="extra prompts: .jsonl or text separated by --- lines")
    p.add_argument("--only-prompts", action="store_true", help="run the --prompts file only, not the built-in suite")
    p.add_argument("--tasks", default=None, help="comma-separated built-in task names (default all)")
    p.add_argument("--repeats", type=int, default=3, help="repetitions of each mode (median; default 3)")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens generated per run (default 128)")
    p.add_argument("--draft-lengths", type=_ints, default=[1, 2, 4], help="fixed draft lengths of draft mode")
    p.add_argument("--lookup-lengths", type=_ints, default=[2, 4, 8], help="fixed draft lengths of our prompt lookup")
    p.add_argument("--peer-lookup", type=_ints, default=[2, 10],
                   help="num_pred_tokens of llama-cpp-python's LlamaPromptLookupDecoding")
    p.add_argument("--no-peers", action="store_true", help="skip llama-cpp-python's own runs")
    p.add_argument("--no-draft", action="store_true", help="no draft model (auto then chooses lookup or none)")
    p.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                   help="before each repetition wait up to SECONDS for other processes to leave the CPUs, and "
                        "run a repetition again when others used over 15%% of the CPUs during it (shared machines)")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure the cost curves (and the flash-attention choice) again before the run instead of "
                        "using the cached calibration")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: tasks code-edit and chat, 1 repeat, 24 tokens, one length per drafter")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.max_tokens = 1, min(args.max_tokens, 24)
        args.draft_lengths, args.lookup_lengths, args.peer_lookup = [2], [4], [4]
        if args.tasks is None:
            args.tasks = ",".join(QUICK_TASKS)
    if args.repeats < 1 or args.max_tokens < 1:
        raise ConfigError("--repeats and --max-tokens must be >= 1")
    if args.n_ctx is None:
        args.n_ctx = 2048
    args.mode = "draft" if not args.no_draft else "lookup"
    settings = settings_from_args(args, command="bench")

    tasks: list[Task] = []
    if not args.only_prompts:
        names = [t.name for t in BUILTIN_TASKS]
        wanted = args.tasks.split(",") if args.tasks else names
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise ConfigError(f"unknown task {unknown[0]!r}", f"built-in tasks: {', '.join(names)}")
        tasks = [t for t in BUILTIN_TASKS if t.name in wanted]
    if args.prompts is not None:
        tasks += load_user_prompts(args.prompts)
    if not tasks:
        raise ConfigError("no tasks to run", "pass --prompts FILE, or drop --only-prompts")

    from .loader import load_engine
    from .models import resolve_model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {load_average()} on {os.cpu_count()} CPUs"
          + ("  (busy machine: timings will be noisy)" if (load_average() or [0])[0] > 0.5 * (os.cpu_count() or 1) else ""),
          file=sys.stderr)
    engine = load_engine(settings, stage=lambda s: print(s, file=sys.stderr))
    try:
        modes = build_modes(args.lookup_lengths, args.peer_lookup, args.draft_lengths, peers=not args.no_peers,
                            draft=engine.has_draft_model)
        t0 = time.perf_counter()
        result = run_bench(engine, tasks, modes, repeats=args.repeats, max_tokens=args.max_tokens,
                           target_path=resolve_model(settings.target.model), n_ctx=settings.target.n_ctx,
                           n_threads=settings.target.n_threads, n_gpu_layers=settings.target.n_gpu_layers,
                           wait_idle=args.wait_idle, recalibrate=args.recalibrate,
                           log=lambda s: print(s, file=sys.stderr),
                           checkpoint=lambda part: (out / "bench.partial.json").write_text(json.dumps(part, indent=1)))
    finally:
        engine.close()
    result["settings"].update({"target": settings.target.model_dump(), "draft": settings.draft.model_dump(),
                               "quick": args.quick, "wall_seconds": time.perf_counter() - t0})
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    print(format_table(result))
    print(f"\nwrote {out / 'bench.json'}")
    if not args.no_plot:
        print(f"wrote {plot(result, out / 'bench.png')}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_bench(sys.argv[1:]))
