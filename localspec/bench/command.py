"""``localspec bench``: the command line (table on the terminal, JSON and PNG under ``--out``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from localspec.config import AUTO_DRAFT_MAX, FIXED_DRAFT_MAX, Settings
from localspec.errors import ConfigError
from localspec.backend.load import load_average
from localspec.app.flags import add_model_arguments, add_option, command_settings
from localspec.app.settings_file import load_settings
from localspec.bench.report import format_table, plot
from localspec.bench.runner import build_modes, run_bench
from localspec.bench.suite import BUILTIN_TASKS, QUICK_TASKS, Task, load_user_prompts


def _ints(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None
    if any(x < 1 for x in out):
        raise argparse.ArgumentTypeError("lengths must be >= 1")
    return out


def bench_settings(args: argparse.Namespace) -> Settings:
    """The settings file's models under the flags (:func:`~localspec.app.flags.command_settings`), with a
    window of 2,048 tokens where neither the flag nor the file sets one."""
    settings = command_settings(args, "bench", load_settings())
    if args.n_ctx is None and settings.target.n_ctx is None:
        settings = settings.model_copy(update={s: getattr(settings, s).model_copy(update={"n_ctx": 2048})
                                               for s in ("target", "draft")})
    return settings


def cli_bench(argv: list[str]) -> int:
    """``localspec bench``: table on the terminal, JSON and a PNG plot under ``--out``."""
    p = argparse.ArgumentParser(prog="localspec bench", description=sys.modules[__package__].__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    add_option(p, "draft_max", help="most tokens drafted per round in the settings",
               default_text=f"{AUTO_DRAFT_MAX} in mode auto, {FIXED_DRAFT_MAX} otherwise")
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
    args.mode = "draft" if not args.no_draft else "lookup"
    settings = bench_settings(args)

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

    from localspec.app.loader import load_engine
    from localspec.app.catalog import resolve_model
    from localspec.backend.repack import choice_json, describe_choice

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {load_average()} on {os.cpu_count()} CPUs"
          + ("  (busy machine: timings will be noisy)" if (load_average() or [0])[0] > 0.5 * (os.cpu_count() or 1) else ""),
          file=sys.stderr)
    engine = load_engine(settings, stage=lambda s: print(s, file=sys.stderr))
    for notice in engine.notices:
        print("note: " + notice, file=sys.stderr)
    loaded = engine.loaded_models()
    repack = {role: choice_json(m.repack, m.repack_verdict, m.prefill_copy) for role, m in loaded.items()}
    t = loaded["target"]
    print(f"target {describe_choice(t.repack, t.repack_verdict, t.prefill_copy)}; the llama-cpp-python "
          "peers load the target the same way", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        modes = build_modes(args.lookup_lengths, args.peer_lookup, args.draft_lengths, peers=_peers(args, settings),
                            draft=engine.has_draft_model)
        result = run_bench(engine, tasks, modes, repeats=args.repeats, max_tokens=args.max_tokens,
                           target_path=resolve_model(settings.target.model), n_ctx=settings.target.n_ctx,
                           n_threads=settings.target.n_threads, n_gpu_layers=settings.target.n_gpu_layers,
                           repack=loaded["target"].repack,
                           wait_idle=args.wait_idle, recalibrate=args.recalibrate,
                           log=lambda s: print(s, file=sys.stderr),
                           checkpoint=lambda part: (out / "bench.partial.json").write_text(json.dumps(part, indent=1)))
    finally:
        engine.close()
    result["settings"].update({"target": settings.target.model_dump(), "draft": settings.draft.model_dump(),
                               "quick": args.quick, "wall_seconds": time.perf_counter() - t0,
                               "weight_repacking": repack,
                               "huge_page_bytes": {"target": loaded["target"].huge_page_bytes,
                                                   "draft": loaded["draft"].huge_page_bytes if "draft" in loaded
                                                   else None}})
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    print(format_table(result))
    print(f"\nwrote {out / 'bench.json'}")
    if not args.no_plot:
        print(f"wrote {plot(result, out / 'bench.png')}")
    return 0


def _peers(args, settings) -> bool:
    """Whether to run the llama-cpp-python peers: not with --no-peers, nor with --rpc (they would load
    the target on this machine: said once)."""
    if settings.target.rpc and not args.no_peers:
        print("note: --rpc: the llama-cpp-python peers are left out (they cannot use the workers)", file=sys.stderr)
    return not args.no_peers and not settings.target.rpc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_bench(sys.argv[1:]))
