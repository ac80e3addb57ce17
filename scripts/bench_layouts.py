#!/usr/bin/env python3
"""llama.cpp's repacked weight layout against the standard one, side by side, per pass size (not a timed test).

Loads the model twice in this process (``LlamaModel(repack=True)`` and ``repack=False``), reads the same
context into both, then times ``llama_decode`` of k tokens after it for each ``--sizes`` k, the two
layouts alternating, and prints the medians and their ratio: the passes where repacking pays (short:
decoding, verification) and where it does not (long: reading a prompt). This is what the repack
probe's choice and ``--prefill-copy`` rest on (docs/machines.md, "Weight repacking").

Usage::

    .venv/bin/python scripts/bench_layouts.py [--model qwen2.5-coder-1.5b] [--sizes 1,8,16,32,64,240]
        [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.app.catalog import load_catalog, resolve_model  # noqa: E402
from localspec.backend.llama import LlamaModel  # noqa: E402
from localspec.backend.machine import cpu_model, vector_extensions  # noqa: E402

CONTEXT = 200


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="preset or .gguf (default: the catalog's default target)")
    p.add_argument("--sizes", default="1,8,16,32,64,240", help="tokens per pass, comma-separated")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        print(f"error: --sizes takes whole numbers separated by commas, got {args.sizes!r}", file=sys.stderr)
        return 2
    path = resolve_model(args.model or load_catalog().default.target)
    n_ctx = CONTEXT + max(sizes) + 16
    models = {name: LlamaModel(path, n_ctx=n_ctx, n_batch=max(512, max(sizes)), n_threads=args.threads,
                               repack=(name == "repacked"))
              for name in ("standard", "repacked")}
    if not models["repacked"].repack:
        print("note: this llama.cpp build has no repacked layout for this CPU: both rows are the standard one",
              file=sys.stderr)
    text = Path(fnmatch.__file__).read_text() * 4
    tokens = models["standard"].tokenize(text, add_special=False)[: n_ctx]
    for m in models.values():
        m.decode(tokens[:CONTEXT], ())
    print(f"{Path(path).name}, {args.threads} threads, {cpu_model()} ({' '.join(vector_extensions())}); "
          f"passes after {CONTEXT} cached tokens, median of {args.repeats}")
    print(f"{'tokens':>6} {'standard ms':>12} {'repacked ms':>12} {'repacked/standard':>18}")
    for k in sizes:
        times: dict[str, list[float]] = {name: [] for name in models}
        for rep in range(args.repeats):
            order = list(models.items()) if rep % 2 == 0 else list(reversed(models.items()))
            for name, m in order:
                t0 = time.perf_counter()
                m.decode(tokens[CONTEXT: CONTEXT + k], "last" if k > 16 else "all")
                times[name].append(time.perf_counter() - t0)
                m.truncate(CONTEXT)
        std, rep_ = (statistics.median(times[n]) for n in ("standard", "repacked"))
        print(f"{k:6d} {std * 1e3:12.1f} {rep_ * 1e3:12.1f} {rep_ / std:18.2f}", flush=True)
    for m in models.values():
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
