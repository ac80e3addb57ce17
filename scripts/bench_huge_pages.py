#!/usr/bin/env python3
"""Weights in huge pages vs mapped from the file: one-token decode time, side by side (not a test).

Loads the same GGUF three times in one process and decodes the same tokens one per
``llama_decode`` (the target-only loop), in alternating blocks:

* ``huge``:  ``LlamaModel(huge_pages=True)``: read into memory, collapsed into 2 MiB pages
  (localspec's default where the kernel allows it);
* ``mmap``:  ``LlamaModel(huge_pages=False)``: llama.cpp's default, the file mapped in 4 KiB pages
  (what llama-cpp-python's ``Llama`` does);
* ``read``:  read into memory without huge pages (the control: separates the page size from
  the copy).

Prints the CPU, the kernel's THP mode, the bytes collapsed, the median ms per token of each
and the per-block time ratios huge/mmap and read/mmap (medians of the blocks).

Usage: ``.venv/bin/python scripts/bench_huge_pages.py [--model qwen2.5-coder-1.5b] [--tokens 48]
[--blocks 10] [--threads N]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    from localspec.app.catalog import load_catalog

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=load_catalog().default.target, help="catalog name or .gguf path")
    ap.add_argument("--tokens", type=int, default=48, help="tokens decoded per block")
    ap.add_argument("--blocks", type=int, default=10, help="blocks per variant (order alternates)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    from localspec.backend import llama as backend

    from localspec.backend import hugepages
    from localspec.backend.machine import describe
    from localspec.app.catalog import resolve_model

    path = resolve_model(args.model)
    print(f"CPU: {describe()}")
    print(f"model: {path.name}; THP mode: {hugepages.thp_mode()}")
    kw = dict(n_ctx=2048, n_batch=512, n_threads=args.threads, flash_attn=False)
    models = {"huge": backend.LlamaModel(path, huge_pages=True, **kw),
              "mmap": backend.LlamaModel(path, huge_pages=False, **kw)}
    # the control: read into memory like "huge" but leave the pages as they are
    orig = hugepages.collapse
    hugepages.collapse = lambda regions, min_bytes=0: 0
    try:
        models["read"] = backend.LlamaModel(path, huge_pages=True, **kw)
    finally:
        hugepages.collapse = orig
    for name, m in models.items():
        print(f"  {name}: huge_pages={m.huge_pages}, weights collapsed into huge pages: "
              f"{m.huge_page_bytes / 2**20:.0f} MiB")

    ref = models["mmap"]
    prompt = ref.tokenize("Write a Python function that parses an ISO 8601 date and explain each step.\n")
    row = ref.decode(prompt)[-1]
    cont = []
    for _ in range(args.tokens):
        cont.append(int(np.argmax(row)))
        row = ref.decode([cont[-1]])[-1]
    for m in models.values():
        m.reset()
        m.decode(prompt)

    def block(m) -> float:
        m.truncate(len(prompt))
        t0 = time.perf_counter()
        for t in cont:
            int(np.argmax(m.decode([t])[-1]))
        return (time.perf_counter() - t0) / len(cont) * 1000

    ms: dict[str, list[float]] = {k: [] for k in models}
    names = list(models)
    for b in range(args.blocks):
        for name in (names if b % 2 == 0 else names[::-1]):
            ms[name].append(block(models[name]))
    for name in names:
        print(f"{name:5s} {statistics.median(ms[name]):7.2f} ms/token (median of {args.blocks} blocks of "
              f"{args.tokens}; min {min(ms[name]):.2f}, max {max(ms[name]):.2f})")
    for name in ("huge", "read"):
        r = [a / b for a, b in zip(ms[name], ms["mmap"])]
        print(f"{name}/mmap time per token: median {statistics.median(r):.3f} "
              f"(blocks: {', '.join(f'{x:.3f}' for x in r)})")
    for m in models.values():
        m.close()


if __name__ == "__main__":
    main()
