#!/usr/bin/env python3
"""Record acceptance traces of greedy code edits, for replaying drafting policies offline.

A trace is a property of the text and the models, not of the CPU: for one greedy generation, the
prompt's token ids, the request's predicted output (the original file) and the answer. Given those,
any free drafter (prompt lookup over prompt + answer, or following the prediction) can be replayed
exactly: what it would propose at each position, and how many of those tokens the answer then
agrees with. Combined with a measured cost curve (``tests/data/cpu-curves``) a replay prices a policy
on a CPU nobody has at hand.

What runs: for each edit task of ``scripts/bench_llama_server.py`` (``tasks()``: ``code-edit``,
``colorsys-docstrings``, ``fnmatch-rename``, ``colorsys-unchanged``), the prompt built as
``localspec serve`` builds it (one user message through the target's chat template,
``engine.chat_tokens``; the prediction tokenized as plain text, ``engine.tokenize(special=False)``),
loaded as the server loads (:func:`localspec.app.loader.load_engine`, weight-repacking probe included),
generated greedily in mode ``lookup`` with the prediction (fast; the greedy answer is the target's in
every mode, near-ties aside), then again in mode ``none`` (target only) to check exactly that.

Held-out tasks (:data:`HELD_OUT_TASKS`, ``bisect-rename``, ``glob-rename``): edits of files the policy's
constants were never tuned on (``scripts/held_out_files/bisect.py``, ``glob.py``), meant for another target
(``--target qwen2.5-coder-0.5b``); their traces say ``held_out: true``.

Output: one JSON per task, ``tests/data/traces/<task>.json`` (``tiny-<task>.json`` for
``--tiny``: SmolLM2-135M as the target, no draft model), every id list on one line:

* ``task``, ``target``, ``draft`` (model file names; ``draft`` null with ``--tiny`` or another
  ``--target``), ``n_ctx``, ``max_tokens``, ``mode`` and ``draft_max`` of the recorded run;
* ``prompt``, ``prediction``, ``answer``: token ids (``answer`` without the end-of-generation token);
* ``eog``: the token id that ended the answer (null when it ended otherwise), ``end_reason``;
* ``answer_is_file``: whether the answer's outer code block is the original file exactly;
* ``greedy_mode_none_equal``: whether mode ``none`` gave the same ids, and when not,
  ``first_difference`` (the first index where the two answers differ) and ``none_answer_tokens``.
  Absent when not checked (``--skip-none``, or the check interrupted: the file is written before it).

Usage (a few minutes per task on a 2-core CPU; ``--skip-none`` halves it)::

    PYTHONPATH=$PWD .venv/bin/python scripts/record_traces.py [--tasks code-edit,...] [--tiny] [--out DIR]
        [--target qwen2.5-coder-0.5b]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_llama_server import tasks  # noqa: E402

from localspec.app.catalog import load_catalog  # noqa: E402
from localspec.app.codeedit import extract_block  # noqa: E402
from localspec.app.loader import load_engine  # noqa: E402
from localspec.config import DraftParams, GenerationParams, ModelSettings, SamplingParams, Settings  # noqa: E402
from localspec.core.events import EndReason, RoundStats  # noqa: E402

EDIT_TASKS = ("code-edit", "colorsys-docstrings", "fnmatch-rename", "colorsys-unchanged")
#: chat answers (the benchmark's chat task opened by the nonce of repetition i, as the paired design sends it):
#: ``chat-<i>``; no prediction, prompt lookup only drafts from the prompt and the answer so far
CHAT_TASKS = tuple(f"chat-{i}" for i in range(6))
#: prose answers (``prose-<topic>``): explanations that restate their own phrases, where prompt lookup copies
#: from the answer itself (``localspec.core.policy.SELF_REPEAT_TOKENS``); no prediction, mode none's answer
PROSE_TASKS = {
    "prose-gil": "Explain Python's global interpreter lock to a beginner, with its pros and cons.",
    "prose-lists": "What is the difference between a list and a tuple in Python? Give examples.",
    "prose-tcp": "Compare TCP and UDP. When should I use each?",
}
PROSE_MAX_TOKENS = 320
#: edits of files no tuned constant has seen (CPython 3.11.7's bisect.py and glob.py, kept in scripts/held_out_files, apart from the benchmarks' files)
_BISECT = (HERE / "held_out_files" / "bisect.py").read_text()
_GLOB = (HERE / "held_out_files" / "glob.py").read_text()
HELD_OUT_TASKS = {
    "bisect-rename": ("Rename the parameter `hi` to `high` in every function of this file (signatures, bodies and "
                      "docstrings). Change nothing else. Reply with the complete updated file only, no explanation."
                      f"\n\n```python\n{_BISECT}```", _BISECT, 4096),
    "glob-rename": ("Rename the function `_iglob` to `_iter_glob` everywhere in this file (its definition and its "
                    "calls). Change nothing else. Reply with the complete updated file only, no explanation."
                    f"\n\n```python\n{_GLOB}```", _GLOB, 4096),
}
TINY_TASKS = ("code-edit", "colorsys-unchanged")
OUT = HERE.parent / "tests" / "data" / "traces"
#: the context window: the longest task's prompt and answer (fnmatch.py twice, ~4,500 tokens) fit, as in
#: bench_llama_server.py's servers
N_CTX = 8192
#: lookup's longest draft when recording: a long prediction run is verified in few passes (the answer is
#: the target's greedy one at any length; mode none checks it)
DRAFT_MAX = 32


def _generate(engine, prompt: list[int], prediction: list[int] | None, mode: str, max_tokens: int):
    """One greedy generation; (answer ids, its text, end-of-generation id or None, end reason, seconds)."""
    t0 = time.perf_counter()
    gen = engine.generate(prompt, SamplingParams(temperature=0.0),
                          DraftParams(mode=mode, draft_max=DRAFT_MAX if mode != "none" else None),
                          GenerationParams(max_tokens=max_tokens), prediction=prediction)
    last: RoundStats | None = None
    for ev in gen:
        if isinstance(ev, RoundStats):
            last = ev
    eog = None  # the target's token at the last verified position: the one that ended the answer
    if gen.stats.end_reason is EndReason.EOG and last is not None and last.target_tokens:
        tok = int(last.target_tokens[-1])
        eog = tok if engine.target.is_eog(tok) else None
    return [int(t) for t in gen.token_ids], gen.text, eog, gen.stats.end_reason.value, time.perf_counter() - t0


def record(engine, task: str, target: str, draft: str | None, skip_none: bool, path: Path) -> dict:
    """The trace of one task (see the module's docstring), written to ``path`` as soon as it is recorded
    and again with mode none's verdict (a long check interrupted keeps the trace)."""
    message, original, max_tokens = (chat_task(task) if task.startswith("chat-") else
                                     (PROSE_TASKS[task], None, PROSE_MAX_TOKENS) if task in PROSE_TASKS else
                                     HELD_OUT_TASKS[task] if task in HELD_OUT_TASKS else tasks()[task])
    prompt = [int(t) for t in engine.chat_tokens([{"role": "user", "content": message}])]
    prediction = [int(t) for t in engine.tokenize(original, special=False)] if original else []
    # an edit: fast in mode lookup with the prediction, then checked against mode none; a chat answer (no
    # prediction) is mode none's own (lookup's long drafts from the prompt mostly fail: slower than none)
    mode = "lookup" if prediction else "none"
    answer, text, eog, end, secs = _generate(engine, prompt, prediction or None, mode, max_tokens)
    is_file = bool(original) and extract_block(text, original).body == original.rstrip("\n")
    print(f"{task}: prompt {len(prompt)}, prediction {len(prediction)}, answer {len(answer)} tokens "
          f"({end}, eog {eog}) in {secs:.0f} s; answer is the file: {is_file}", flush=True)
    out = {"task": task, "target": target, "draft": draft, "n_ctx": engine.n_ctx, "max_tokens": max_tokens,
           "mode": mode, "draft_max": DRAFT_MAX if prediction else None, "end_reason": end, "eog": eog, "answer_is_file": is_file}
    if task in HELD_OUT_TASKS:
        out["held_out"] = True
    ids = {"prompt": prompt, "prediction": prediction, "answer": answer}
    path.write_text(dump(out | ids))
    if not skip_none and mode != "none":
        ref, _, ref_eog, ref_end, ref_secs = _generate(engine, prompt, None, "none", max_tokens)
        equal = ref == answer and ref_eog == eog
        out["greedy_mode_none_equal"] = equal
        if not equal:
            out["first_difference"] = next((i for i, (a, b) in enumerate(zip(answer, ref)) if a != b),
                                           min(len(answer), len(ref)))
            out["none_answer_tokens"] = len(ref)
        print(f"  mode none: {len(ref)} tokens ({ref_end}) in {ref_secs:.0f} s; equal: {equal}"
              + ("" if equal else f", first difference at {out['first_difference']}"), flush=True)
        path.write_text(dump(out | ids))
    return out | ids


def chat_task(task: str) -> tuple[str, None, int]:
    """``chat-<i>``: the benchmark's chat task with the nonce of repetition i (a fixed one, so the trace can be
    recorded again), no prediction."""
    i = int(task.removeprefix("chat-"))
    message, _, max_tokens = tasks()["chat"]
    return f"(request {i}.{i * 7919 % 10**6}.0)\n" + message, None, max_tokens


def dump(trace: dict) -> str:
    """JSON with one key a line and each id list on its line."""
    return "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}"
                              for k, v in trace.items()) + "\n}\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=None, help=f"default: {','.join(EDIT_TASKS)} ({','.join(TINY_TASKS)} with --tiny); "
                                                 f"also chat-0 .. chat-{len(CHAT_TASKS) - 1}, {','.join(PROSE_TASKS)}, "
                                                 f"{','.join(HELD_OUT_TASKS)}")
    p.add_argument("--tiny", action="store_true", help="SmolLM2-135M as the target, no draft model")
    p.add_argument("--target", default=None, help="another catalog model as the target (no draft model), e.g. "
                                                  "qwen2.5-coder-0.5b for the held-out tasks")
    p.add_argument("--skip-none", action="store_true", help="do not check against mode none")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    names = [t for t in (args.tasks or ",".join(TINY_TASKS if args.tiny else EDIT_TASKS)).split(",") if t]
    catalog = load_catalog()
    pair = catalog.default
    target_ref = "smollm2-135m" if args.tiny else args.target or pair.target
    settings = Settings(target=ModelSettings(model=target_ref, n_ctx=N_CTX), draft=ModelSettings(model=pair.draft),
                        drafting=DraftParams(mode="lookup"))
    engine = load_engine(settings, calibrate=False)
    target = Path(engine.target.path).name
    draft = None if args.tiny or target_ref != pair.target else catalog.models[pair.draft].hf_file
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for task in names:
            record(engine, task, target, draft, args.skip_none, out / f"{'tiny-' if args.tiny else ''}{task}.json")
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
