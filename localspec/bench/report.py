"""The benchmark's report: medians per (task, mode), the oracle, the goals, the table and the plot."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from localspec.core.costmodel import ceiling, textbook_speedup
from localspec.core.events import GenerationStats
from localspec.core.figures import view_names
from localspec.backend.load import load_average


@dataclass
class Run:
    """One timed generation of a (task, mode) repetition, as the runner made it and the report reads it."""

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
    predicted: float | None = None
    totals: GenerationStats | None = None  #: the engine's statistics of this run (None for a peer's)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


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
            total = GenerationStats()  # the engine's accumulator, over the repetitions (peers have none)
            for r in rs:
                if r.totals is not None:
                    total.add(r.totals)
            a = total.acceptance_rate
            row = {
                "task": task.name,
                "mode": m.name,
                "family": m.family,
                "g": m.g,
                "tokens": _median([r.tokens for r in rs]),
                "tok_s": _median([r.rate for r in rs]),
                "speedup": _median([r.stats.get("speedup") for r in rs]) if m.name != "target" else 1.0,
                "speedups": [r.stats.get("speedup") for r in rs],
                # the record's bench_row figures over the repetitions (None for a peer)
                **(total.view("bench_row") if m.ours else dict.fromkeys(view_names(GenerationStats, "bench_row"))),
                "tokens_per_pass": total.tokens_per_target_pass,
                "predicted": _median([r.predicted for r in rs]) if m.ours else None,
                "textbook": (textbook_speedup(a, m.g, draft_token / t1 if m.family == "draft" else 0.0)
                             if a is not None and m.family in ("lookup", "draft") else None),
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
                row["mean_draft_len"] = total.drafted / total.drafting_rounds if total.drafting_rounds else 0.0
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
                  "predicted": r.predicted,
                  **{k: r.stats.get(k) for k in view_names(GenerationStats, "bench_run")}, "drafters": r.drafters}
                 for r in runs],
    }


def _machine_info() -> dict:
    from localspec.backend.machine import machine_info

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
    ov = [r["overhead_seconds_per_round"] * 1e3 for r in rows if r.get("overhead_seconds_per_round") is not None]
    if ov:
        worst = max(ov)
        goals.append({"goal": "engine overhead per round < 5% of one target pass", "met": worst / (t1 * 1e3) < 0.05,
                      "value": worst / (t1 * 1e3),
                      "detail": f"worst {worst:.2f} ms/round vs target pass {t1 * 1e3:.1f} ms "
                                f"(median {statistics.median(ov):.2f} ms)"})
    return goals


def _f(x, fmt="{:.2f}", none="n/a"):
    return none if x is None else fmt.format(x)


def _ms(seconds, fmt="{:.2f}"):
    """Seconds as milliseconds, blank when not measured."""
    return _f(None if seconds is None else seconds * 1e3, fmt, none="")


def format_table(result: dict) -> str:
    head = (f"{'task':<16} {'mode':<16} {'tok/s':>6} {'speedup':>7} {'auto/orc':>8} {'accept':>7} {'drafted':>7} "
            f"{'mean acc':>8} {'tok/pass':>8} {'pred':>5} {'textbk':>6} {'ovh ms':>6} {'ovh/dr':>6} {'same':>4}")
    mach = result.get("machine", {})
    lines = [head, "-" * len(head)]
    if mach.get("cpu"):
        avx = mach.get("avx512")
        lines.insert(0, f"CPU {mach['cpu']}, {mach.get('cpu_count')} CPUs; vector extensions: "
                        f"{' '.join(mach.get('vector_extensions') or []) or 'unknown'}"
                        + ("" if avx is None else ("" if avx else " (no AVX-512)"))
                        + f"; llama-cpp-python {mach.get('llama_cpp', '?')}")
    hp = (result.get("settings") or {}).get("huge_page_bytes") or {}
    if hp.get("target") is not None:
        lines.insert(1, f"weights in 2 MiB huge pages: target {hp['target'] / 2**20:.0f} MiB"
                        + (f", draft {hp['draft'] / 2**20:.0f} MiB" if hp.get("draft") is not None else "")
                        + f" (THP {mach.get('transparent_huge_pages')}; llama-cpp-python's Llama maps the file)")
    rp = (result.get("settings") or {}).get("weight_repacking") or {}
    if rp.get("target"):
        lines.insert(1 + bool(hp.get("target") is not None),
                     "weight repacking (llama.cpp extra buffer types): "
                     + ", ".join(f"{k} {'on' if v.get('repack') else 'off'}" for k, v in rp.items())
                     + "; llama-cpp-python's Llama loads the target the same way")
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
                     f"{_f(r['textbook'], none=''):>6} {_ms(r.get('overhead_seconds_per_round')):>6} "
                     f"{_ms(r.get('overhead_seconds_per_drafted_token'), '{:.3f}'):>6} {same:>4}")
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
