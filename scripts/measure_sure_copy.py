#!/usr/bin/env python3
"""A sure copy on this machine: the unchanged file returned with its prediction, in mode auto (issue 44, item 3).

Loads the default pair as ``localspec serve`` does (:func:`localspec.app.loader.load_engine`, this machine's
calibrated costs), generates the ``colorsys-unchanged`` task of ``scripts/bench_llama_server.py`` greedily with
the file as the request's ``prediction``, and prints, with the CPU's name:

* tokens per verification pass: the median (and quartiles) of the tokens each round committed, and the
  draft lengths chosen;
* the decode rate (generated tokens / decode seconds, prefill excluded) beside the *calibrated ceiling for
  free drafts at that context*: the time a perfect free drafter would take for the same tokens from the same
  position, each round drafting the length with the least cost per token on the calibrated curve at its
  position (:meth:`ModelCosts.curve_at`; no acceptance risk), with the round's fixed cost this generation
  measured (its rounds' time outside the passes) and without it;
* whether the answer's token ids equal the recorded trace's (``tests/data/traces/colorsys-unchanged.json``, the
  same prompt) and, with ``--check-none``, mode none's on this machine (greedy exactness).

Usage (a minute or two on a 2-core CPU once the costs are cached)::

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_sure_copy.py [--reps 1] [--n-ctx 8192] [--check-none]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_llama_server import cpu_description, tasks  # noqa: E402

from localspec.app.catalog import load_catalog  # noqa: E402
from localspec.app.loader import load_engine  # noqa: E402
from localspec.config import DraftParams, GenerationParams, ModelSettings, SamplingParams, Settings  # noqa: E402
from localspec.core.costmodel import verify_cost  # noqa: E402
from localspec.core.events import DrafterId, RoundStats  # noqa: E402

TASK = "colorsys-unchanged"
TRACE = HERE.parent / "tests" / "data" / "traces" / f"{TASK}.json"


def ceiling_seconds(curve_at, start: int, tokens: int, g_max: int, overhead: float) -> float:
    """Seconds a perfect free drafter takes for ``tokens`` tokens from position ``start``: each round drafts the
    g <= ``g_max`` with the least (T_p(g + 1) + ``overhead``) / (g + 1) on the curve at its position p."""
    pos, left, total = start, tokens, 0.0
    while left > 0:
        curve = curve_at(pos)
        g = min(range(0, min(g_max, left - 1) + 1), key=lambda g: (verify_cost(curve, g + 1) + overhead) / (g + 1))
        total += verify_cost(curve, g + 1) + overhead
        pos, left = pos + g + 1, left - g - 1
    return total


def run_once(engine, prompt: list[int], prediction: list[int], max_tokens: int) -> dict:
    rounds: list[RoundStats] = []
    t0 = time.perf_counter()
    gen = engine.generate(prompt, SamplingParams(temperature=0.0), DraftParams(mode="auto"),
                          GenerationParams(max_tokens=max_tokens), prediction=prediction)
    for ev in gen:
        if isinstance(ev, RoundStats):
            rounds.append(ev)
    wall = time.perf_counter() - t0
    st = gen.stats
    per_pass = [r.committed for r in rounds]
    outside = [r.round_seconds - r.verify_seconds - r.catchup_seconds - (r.draft_seconds if r.drafter == DrafterId.DRAFT else 0)
               for r in rounds if r.round_seconds > 0]
    return {"ids": [int(t) for t in gen.token_ids], "tokens": len(gen.token_ids), "rounds": len(rounds), "per_pass": per_pass,
            "lengths": [r.drafted for r in rounds], "decode_s": st.decode_seconds, "prefill_s": st.prefill_seconds,
            "wall_s": wall, "overhead_s": statistics.median(outside) if outside else 0.0,
            "verify_s": sum(r.verify_seconds for r in rounds), "stats": rounds}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--nonce", default="", help="text put before the task's message, as scripts/bench_llama_server.py "
                                                "opens each repetition's prompt (e.g. '(request 1.123456.1)\\n')")
    p.add_argument("--rounds", action="store_true", help="print every round: drafter, drafted, accepted, pass seconds")
    p.add_argument("--check-none", action="store_true", help="also generate in mode none and compare the ids")
    p.add_argument("--max-tokens", type=int, default=None, help="stop the answer there (the trace's first tokens "
                                                                 "are compared); default: the task's")
    args = p.parse_args(argv)
    pair = load_catalog().default
    settings = Settings(target=ModelSettings(model=pair.target, n_ctx=args.n_ctx),
                        draft=ModelSettings(model=pair.draft), drafting=DraftParams(mode="auto"))
    engine = load_engine(settings)
    try:
        message, original, max_tokens = tasks()[TASK]
        message = args.nonce.replace("\\n", "\n") + message
        max_tokens = args.max_tokens or max_tokens
        prompt = [int(t) for t in engine.chat_tokens([{"role": "user", "content": message}])]
        prediction = [int(t) for t in engine.tokenize(original, special=False)]
        costs = engine.cost_model
        g_max = DraftParams(mode="auto").cap
        print(f"CPU: {cpu_description()}")
        print(f"task {TASK}: prompt {len(prompt)} tokens, prediction {len(prediction)}; mode auto, draft_max {g_max}, "
              f"greedy, n_ctx {engine.n_ctx}")
        trace = json.loads(TRACE.read_text()) if TRACE.exists() else {}
        same_prompt = trace.get("prompt") == prompt
        reference = None
        if args.check_none:
            gen = engine.generate(prompt, SamplingParams(temperature=0.0), DraftParams(mode="none"),
                                  GenerationParams(max_tokens=max_tokens))
            reference = [int(t) for t in gen.run().token_ids]
        for rep in range(args.reps):
            r = run_once(engine, prompt, prediction, max_tokens)
            q = statistics.quantiles(r["per_pass"], n=4) if len(r["per_pass"]) > 1 else [0, 0, 0]
            rate = r["tokens"] / r["decode_s"]
            ceil0 = ceiling_seconds(costs.target.curve_at, len(prompt), r["tokens"], g_max, 0.0)
            ceil1 = ceiling_seconds(costs.target.curve_at, len(prompt), r["tokens"], g_max, r["overhead_s"])
            print(f"rep {rep}: {r['tokens']} tokens in {r['rounds']} rounds; tokens per verification pass: median "
                  f"{statistics.median(r['per_pass']):.0f} (quartiles {q[0]:.0f}, {q[2]:.0f}); draft lengths "
                  f"{r['lengths']}")
            print(f"  decode {r['decode_s']:.2f} s ({rate:.1f} tok/s; passes {r['verify_s']:.2f} s), prefill "
                  f"{r['prefill_s']:.2f} s; round's time outside its pass: median {1000 * r['overhead_s']:.1f} ms")
            print(f"  calibrated ceiling for free drafts at this context: {r['tokens'] / ceil0:.1f} tok/s without a "
                  f"fixed cost -> decode / ceiling {ceil0 / r['decode_s']:.3f}; with this run's fixed cost "
                  f"{r['tokens'] / ceil1:.1f} tok/s -> {ceil1 / r['decode_s']:.3f}", flush=True)
            if args.rounds:
                for i, x in enumerate(r["stats"]):
                    print(f"    round {i}: {x.drafter.value} drafted {x.drafted} accepted {x.accepted} committed "
                          f"{x.committed}; pass {x.verify_seconds:.3f} s, draft {x.draft_seconds:.3f} s, catch-up "
                          f"{x.catchup_tokens} tok {x.catchup_seconds:.3f} s, round {x.round_seconds:.3f} s")
            print(f"  answer ids equal the recorded trace's: "
                  f"{r['ids'] == trace.get('answer', [])[:len(r['ids'])] if same_prompt else 'not compared (another prompt)'}"
                  + ("" if reference is None else f"; equal mode none's here: {r['ids'] == reference}"), flush=True)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
