#!/usr/bin/env python3
"""Mode auto replayed on the recorded traces and CPU curves, beside its comparisons (issue 31, item 4).

For every recorded trace (``tests/data/traces``) and every cost curve of its target model
(``tests/data/cpu-curves``), with and without the prediction, and a round's fixed cost of 0 and 0.1
T(1): the seconds mode auto takes (:func:`localspec.bench.replay.replay`), the best fixed draft
length chosen in hindsight, llama.cpp's ngram-mod rule (64 once 24 tokens match), SuffixDecoding's
rule (the length from the match length) and the per-round oracle (a lower bound, for information),
each as auto's speedup over it (> 1: auto is faster). No model runs; a few minutes on 2 cores.
With ``--off KIND:FACTOR`` (``scale:1.3``, ``slope:0.7``: :func:`traces.off_curve`) auto's policy believes
a curve that far off from the one charged, and a column gives target-only's time over auto's.

Usage::

    PYTHONPATH=$PWD .venv/bin/python scripts/replay_policy.py [--traces a,b] [--shares 0,0.1] [--no-oracle]
        [--off slope:0.7]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from localspec.bench.replay import (NgramModRule, SuffixRule, Trace, auto_policy, best_fixed,  # noqa: E402
                                    oracle_seconds, replay, target_only_seconds)
from traces import load_trace, off_curve, recorded_curves, trace_names  # noqa: E402


def row(name, cpu, curve, share, pred, oracle, off=None, warm=False):
    src = load_trace(name)
    tr = Trace(src.name, src.prompt, src.answer, src.prediction, src.eog)
    tr = tr.asked_again() if warm else tr
    ov = share * curve.seconds[0]
    believed = curve if off is None else off_curve(curve, off[0], off[1])
    auto = replay(tr, auto_policy(believed), curve, ov, use_prediction=pred)
    g, fixed = best_fixed(tr, curve, ov, use_prediction=pred)
    ngram = replay(tr, NgramModRule(), curve, ov, use_prediction=pred)
    suffix = replay(tr, SuffixRule(), curve, ov, use_prediction=pred)
    orc = oracle_seconds(tr, curve, ov, use_prediction=pred) if oracle else None
    cells = [name, cpu, str(curve.key.get("n_ctx", "?")), "yes" if pred else "no", f"{share:.1f}",
             f"{auto.seconds:.2f}", str(auto.rounds), f"{fixed.seconds / auto.seconds:.2f} (g={g})",
             f"{ngram.seconds / auto.seconds:.2f}", f"{suffix.seconds / auto.seconds:.2f}",
             "-" if orc is None else f"{orc / auto.seconds:.2f}",
             f"{target_only_seconds(tr, curve, ov) / auto.seconds:.3f}"]
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--traces", default=None, help="comma-separated trace names (default all)")
    p.add_argument("--shares", default="0,0.1", help="a round's fixed cost, as shares of T(1)")
    p.add_argument("--no-oracle", action="store_true", help="skip the per-round oracle (the slow part)")
    p.add_argument("--warm", action="store_true",
                   help="the warm regime of issue 44: each trace asked again with its first answer remembered, "
                        "replayed as a prediction equal to the answer (ngram-mod's pool holds it too)")
    p.add_argument("--off", default=None, help="KIND:FACTOR: auto's policy believes the curve off so (scale:1.3, "
                                               "slope:0.7; see tests/traces.py off_curve)")
    args = p.parse_args(argv)
    names = args.traces.split(",") if args.traces else trace_names()
    off = None
    if args.off:
        kind, _, factor = args.off.partition(":")
        off = (kind, float(factor))
        print(f"auto's policy believes the curve off: {kind} x{factor}\n")
    print("| trace | CPU | n_ctx | prediction | fixed cost / T(1) | auto s | rounds | best fixed / auto | "
          "ngram-mod / auto | suffix / auto | oracle / auto | target-only / auto |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        stem = load_trace(name).target.rsplit("/", 1)[-1].removesuffix(".gguf")
        for cpu, model, curve in recorded_curves():
            if model != stem or len(curve.seconds) < 65:
                continue
            for pred in ((True,) if args.warm else (True, False)):
                for share in (float(s) for s in args.shares.split(",")):
                    print(row(name, cpu, curve, share, pred, not args.no_oracle, off, args.warm), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
