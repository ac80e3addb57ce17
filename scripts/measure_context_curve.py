#!/usr/bin/env python3
"""The target's verification-pass cost at the contexts a task uses (issue 44, item 3: "measure it there").

Loads the default pair as ``localspec serve`` does (:func:`localspec.app.loader.load_engine`) and times, with
:func:`localspec.backend.calibration.measure_decode_costs` (the calibration's own timing: logits for every
row, two samples each, a third where they differ), a pass over b tokens for every b in ``--points`` at every
context in ``--contexts`` (tokens cached). Prints, with the CPU's name, seconds and milliseconds per token;
``--json`` keeps them. Nothing is cached: the calibration the engine uses is not touched.

Usage (a minute or two on a 2-core CPU)::

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_context_curve.py [--contexts 16,512,2048,3072]
        [--points 1,8,16,24,32,48,64,65] [--n-ctx 8192] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_llama_server import cpu_description  # noqa: E402

from localspec.app.catalog import load_catalog  # noqa: E402
from localspec.app.loader import load_engine  # noqa: E402
from localspec.backend.calibration import measure_decode_costs  # noqa: E402
from localspec.config import DraftParams, ModelSettings, Settings  # noqa: E402


def _ints(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--contexts", type=_ints, default=_ints("16,512,2048,3072"), help="tokens cached, comma-separated")
    p.add_argument("--points", type=_ints, default=_ints("1,8,16,24,32,48,64,65"), help="batch sizes b")
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.contexts[-1] + args.points[-1] > args.n_ctx:
        p.error(f"--n-ctx {args.n_ctx} cannot hold {args.contexts[-1]} cached + {args.points[-1]} tokens; "
                f"raise --n-ctx or lower --contexts")
    pair = load_catalog().default
    engine = load_engine(Settings(target=ModelSettings(model=pair.target, n_ctx=args.n_ctx),
                                  draft=ModelSettings(model=pair.draft), drafting=DraftParams(mode="auto")))
    try:
        costs = measure_decode_costs(engine.target, args.points[-1], repeats=2, contexts=args.contexts,
                                     points=args.points, long_points=args.points)
    finally:
        engine.close()
    print(f"CPU: {cpu_description()}; {pair.target}, flash attention {costs.flash_attn}")
    print("| cached tokens | " + " | ".join(f"T({b}) ms" for b in args.points) + " | "
          + " | ".join(f"ms/token at {b}" for b in args.points if b >= 16) + " |")
    print("|---" * (1 + len(args.points) + sum(b >= 16 for b in args.points)) + "|")
    for ctx, med in zip(costs.contexts, costs.point_seconds):
        print(f"| {ctx} | " + " | ".join(f"{1000 * s:.0f}" for s in med) + " | "
              + " | ".join(f"{1000 * s / b:.1f}" for b, s in zip(args.points, med) if b >= 16) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_description(), "contexts": costs.contexts,
                                               "points": args.points, "point_seconds": costs.point_seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
