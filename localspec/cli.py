"""The command line: argument parsing and pretty output; the only place errors become exit codes.

Why these hold together: every subcommand's parser and its handler, with the printers they share; the
jobs themselves are in :mod:`localspec.app` (and the bench's in :mod:`localspec.bench`), so this module
only turns flags into calls and results into text and exit codes.

``localspec`` alone opens the terminal UI; ``localspec generate`` streams an answer with
tokens coloured by kind; ``localspec models`` lists the catalog.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from localspec.backend.calibration import LONG_CONTEXT
from localspec.config import AUTO_DRAFT_MAX, cache_root, needs_draft_model
from localspec.errors import ConfigError, LocalspecError
from localspec.app.prompt_input import read_prompt_input
from localspec.app.settings_file import load_settings
from localspec.app.flags import (add_generation_arguments, add_model_arguments, add_option, add_server_arguments,
                                  command_settings, server_settings_from_args)
from localspec.tui.kinds import LOOKS

#: terminal colour of each colour role of localspec.tui.kinds (the TUI takes its theme's)
TERMINAL_COLOURS = {"success": "green", "error": "red", "warning": "yellow"}
#: terminal style per token kind, from its colour role and weight (localspec.tui.kinds.LOOKS)
KIND_STYLES = {k.value: " ".join((["bold"] if look.bold else []) + ([TERMINAL_COLOURS[look.colour]] if look.colour
                                                                     else []))
               for k, look in LOOKS.items()}


def _progress_printer(stream):
    last = {"pct": -1}

    def progress(stage: str, done: int, total: int) -> None:
        if not total:
            print(f"{stage}…", file=stream, flush=True)
            return
        pct = int(100 * done / total)
        if pct != last["pct"] and (pct % 5 == 0 or done == total):
            last["pct"] = pct
            end = "\n" if done >= total else "\r"
            print(f"  {stage}: {pct:3d}% of {total / 1e6:,.0f} MB", end=end, file=stream, flush=True)

    return progress


def _stage_printer(stream):
    """``stage(message)`` for :func:`localspec.app.loader.load_engine`: one line per stage on ``stream``."""
    def stage(message: str) -> None:
        print(f"{message}…", file=stream, flush=True)

    return stage


def _step_printer(stream):
    """``steps(what, done, total)``: ``what: 40% (4/10)``, a line updated in place on a terminal; in a
    log (not a terminal, e.g. ``localspec serve > log``) a line at the start, every quarter and the end."""
    tty = hasattr(stream, "isatty") and stream.isatty()
    last: dict[str, int] = {}

    def steps(what: str, done: int, total: int) -> None:
        if total <= 0:
            return
        pct = 100 * done // total
        if not tty:
            quarter = pct // 25
            if last.get(what) == quarter:
                return
            last[what] = quarter
        end = "\n" if done >= total or not tty else "\r"
        print(f"  {what}: {pct:3d}% ({done}/{total})", end=end, file=stream, flush=True)

    return steps


def _prefill_printer(stream, min_tokens: int = 256):
    """``on_prefill(done, total)`` for a long prompt (at least ``min_tokens`` to prefill): a line
    updated in place while the prompt is read, erased when it is done."""
    def on_prefill(done: int, total: int) -> None:
        if total < min_tokens:
            return
        if done >= total:
            print("\r\033[K", end="", file=stream, flush=True)
        else:
            print(f"\r  reading the prompt: {done:,}/{total:,} tokens", end="", file=stream, flush=True)

    return on_prefill


def print_notices(engine, console) -> None:
    """What the loader found the user should know (``engine.notices``), once, as plain text."""
    from rich.text import Text

    for notice in getattr(engine, "notices", ()):
        console.print(Text("note: " + notice, style="yellow"))


def _format_stats(stats) -> list[tuple[str, str]]:
    ar = stats.acceptance_rate
    mal = stats.mean_accepted_length
    tpp = stats.tokens_per_target_pass
    ttft = stats.time_to_first_token
    return [
        ("tokens", f"{stats.tokens}"),
        ("tokens/s (decode)", f"{stats.tokens_per_second:.1f}"),
        ("acceptance", "n/a (nothing drafted)" if ar is None else f"{ar:.0%} of {stats.drafted} drafted"),
        ("mean accepted length", "n/a" if mal is None else f"{mal:.2f}"),
        ("tokens per target pass", "n/a" if tpp is None else f"{tpp:.2f}"),
        ("rounds", f"{stats.rounds}"),
        ("time to first token", "n/a" if ttft is None else f"{ttft * 1000:.0f} ms"),
        ("prompt", f"{stats.prompt_tokens} tokens, prefill {stats.prefill_seconds * 1000:.0f} ms"),
        *([("draft catch-up", f"{stats.catchup_tokens} tokens, {stats.catchup_seconds * 1000:.0f} ms")]
          if stats.catchup_tokens else []),
        ("end", stats.end_reason.value if stats.end_reason else "?"),
    ]


def _legend():
    """``legend: accepted draft  resampled  ...``: each token kind's label in its terminal style."""
    from rich.text import Text

    from localspec.core.events import TokenKind

    legend = Text("legend: ")
    for kind in TokenKind:
        legend.append(LOOKS[kind].label, style=KIND_STYLES[kind.value] or "default")
        legend.append("  ")
    return legend


def _json_line(ev) -> str:
    """``generate --json``'s line for a streamed event: a token (TokenEvent) or a round (RoundStats, its
    ``line`` view)."""
    from localspec.core.events import TokenEvent
    from localspec.core.figures import view

    if isinstance(ev, TokenEvent):
        return json.dumps({"type": "token", "id": ev.token_id, "text": ev.text, "kind": ev.kind.value,
                           "round": ev.round, "position": ev.position}, ensure_ascii=False)
    return json.dumps({"type": "round", **view(ev, "line")})


def _stats_line(stats, text: str) -> str:
    """``generate --json``'s last line: the generation's statistics (every figure of the record) and its text."""
    return json.dumps({"type": "stats", **stats.as_dict(), "text": text}, ensure_ascii=False)


def cmd_generate(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.text import Text

    from localspec.core.events import TokenEvent
    from localspec.app.loader import load_engine

    settings = command_settings(ns, "generate", load_settings())
    asked = read_prompt_input(ns.prompt, raw=ns.raw, system=ns.system, messages_file=ns.messages, file=ns.file,
                              prediction_file=ns.prediction)
    err = Console(stderr=True, no_color=ns.no_color)
    out = Console(no_color=ns.no_color, highlight=False, soft_wrap=True)
    if not ns.json:
        err.print(Text(f"mode {settings.drafting.mode}, target {settings.target.model}"
                       + (f", draft {settings.draft.model}" if needs_draft_model(settings) else ""),
                       style="dim"))
    quiet = ns.json
    engine = load_engine(settings, progress=None if quiet else _progress_printer(sys.stderr),
                         stage=None if quiet else _stage_printer(sys.stderr),
                         steps=None if quiet else _step_printer(sys.stderr))
    try:
        print_notices(engine, err)
        prediction = engine.tokenize(asked.prediction, special=False) if asked.prediction else None
        if asked.raw is not None:
            prompt = engine.tokenize(asked.raw)
            gen = engine.generate(prompt, settings.sampling, settings.drafting, settings.generation,
                                  prediction=prediction)
        else:
            # chat: the oldest turns are dropped to fit the context (localspec.app.chat)
            from localspec.app.chat import ChatSession

            session = ChatSession(engine, settings, messages=asked.messages)
            gen = session.answer(prediction).generation
            if session.last_prompt.dropped and not ns.json:
                err.print(f"[yellow]note: left out the {session.last_prompt.dropped} oldest messages "
                          f"to fit the context window of {engine.n_ctx}[/yellow]")
        if not ns.json:
            gen.on_prefill = _prefill_printer(sys.stderr)
            err.print(_legend())
        interrupted = False
        try:
            for ev in gen:
                if ns.json:
                    print(_json_line(ev), flush=True)
                elif isinstance(ev, TokenEvent) and ev.text:
                    out.print(Text(ev.text, style=KIND_STYLES[ev.kind.value]), end="")
        except KeyboardInterrupt:
            interrupted = True
            gen.close()
        stats = gen.stats
        if ns.json:
            print(_stats_line(stats, gen.text), flush=True)
        else:
            out.print()
            err.print()
            err.print("  ".join(f"[dim]{k}:[/dim] {v}" for k, v in _format_stats(stats)))
        return 130 if interrupted else 0
    finally:
        engine.close()


def cmd_serve(ns: argparse.Namespace) -> int:
    from localspec.app.loader import load_engine

    settings = command_settings(ns, "serve", load_settings())
    server = server_settings_from_args(ns, api_key_env=os.environ.get("LOCALSPEC_API_KEY"))
    try:
        from localspec.server import serve
    except ImportError as e:
        raise ConfigError(f"the server's dependencies are missing: {e}", "reinstall localspec with its "
                          "dependencies (fastapi, uvicorn, sse-starlette, prometheus-client): pip install "
                          "--force-reinstall localspec, pipx reinstall localspec, or pip install -e . in a "
                          "checkout") from e
    from rich.console import Console

    server = _checked_prompt_store(server)  # said before the models load
    # the probe, the loads and (mode auto, first run) the calibration, each said in the log as it happens
    engine = load_engine(settings, progress=_progress_printer(sys.stderr), stage=_stage_printer(sys.stderr),
                         steps=_step_printer(sys.stderr))
    try:
        print_notices(engine, Console(stderr=True))
        if server.prompt_cache_mb is None:  # the default follows the memory left once the models are in
            from localspec.backend.context import available_memory
            from localspec.backend.context import with_prompt_cache_default
            from localspec.config import PROMPT_CACHE_MB

            available = available_memory()
            server = with_prompt_cache_default(server, available)
            print(f"prompt cache {server.prompt_cache_mb:g} MiB: min({PROMPT_CACHE_MB} MiB, a quarter of the "
                  f"{available / 2**30:.1f} GiB available after loading); --prompt-cache-mb N sets it",
                  file=sys.stderr, flush=True)
        serve(engine, settings, server)
    finally:
        engine.close()
    return 0


def _checked_prompt_store(server):
    """``serve``'s disk tier of the prompt cache, settled before the models load: its folder and budget said in
    the log, or, where the folder cannot be made or written, one warning and the server's settings without it."""
    from localspec.backend.prompt_store import FOLDER_NAME, disk_budget

    if server.prompt_cache_mb == 0 or server.prompt_cache_disk_mb == 0:  # None: the default, set after loading (> 0)
        return server
    folder = cache_root() / FOLDER_NAME
    try:
        budget = disk_budget(folder, server.prompt_cache_disk_mb)
    except OSError as e:
        print(f"warning: prompt snapshots are not kept on disk: {folder} cannot be made or written "
              f"({e.strerror or e}); serving without them (set LOCALSPEC_CACHE to a writable folder, or "
              "--prompt-cache-disk-mb 0 to turn them off)", file=sys.stderr, flush=True)
        return server.model_copy(update={"prompt_cache_disk_mb": 0.0})
    if budget > 0:
        print(f"prompt snapshots on disk: {folder}, at most {budget / (1 << 20):,.0f} MiB (--prompt-cache-disk-mb; "
              "0 = off)", file=sys.stderr, flush=True)
    return server.model_copy(update={"prompt_cache_disk_mb": budget / (1 << 20)})


def cmd_models(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from localspec.app.catalog import cache_dir, load_catalog, locate, weights_dir

    catalog = load_catalog()
    table = Table(title="localspec models", title_justify="left")
    for col in ("preset", "size", "resolves from", "description"):
        table.add_column(col)
    for name, preset in catalog.models.items():
        where = locate(name, catalog)
        src = f"{where.source}: {where.path}" if where.path else f"{where.source}: {where.detail}"
        table.add_row(*map(Text, (name, f"{preset.size / 1e6:,.0f} MB", src, preset.description)))
    pairs = Table(title="pairs (target + draft)", title_justify="left")
    for col in ("pair", "target", "draft", "description"):
        pairs.add_column(col)
    for name, pair in catalog.pairs.items():
        default = " (default)" if name == catalog.default_pair else ""
        pairs.add_row(*map(Text, (name + default, pair.target, pair.draft, pair.description)))
    con = Console()
    con.print(table)
    con.print(pairs)  # paths and catalog text are data, never markup ("localspec[models]", a folder "w[red]x")
    con.print(f"local weights folder: {weights_dir()}\ncache: {cache_dir()}", markup=False, highlight=False)
    return 0


CALIBRATE_DESCRIPTION = (
    "Measure the target's verify cost for b = 1..draft_max+1 tokens (every b up to 8, then 12, 16, 32, "
    "64, ... and draft_max+1, interpolated between) at a short context, and what a long context adds at four of "
    "them, after comparing flash attention off and on (keeping the faster), and the draft model's cost per "
    "token and per catch-up token on this machine; cached per model, settings, llama.cpp build and machine "
    "(not when other processes disturbed it: measured again next time).")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="localspec", description="Local speculative decoding on GGUF models.")
    sub = p.add_subparsers(dest="command")
    g = sub.add_parser("generate", help="stream an answer, tokens coloured by kind, then the statistics")
    g.add_argument("prompt", nargs="?", help='the prompt ("-" reads stdin); sent as a chat message unless --raw')
    g.add_argument("--raw", action="store_true", help="send the prompt as raw text, without the chat template")
    g.add_argument("--system", default=None, help="system message; with --messages it replaces the file's leading "
                   "system message (or is put first when there is none); not with --raw")
    g.add_argument("--messages", default=None, help="JSON file with chat messages [{role, content}, ...] (content "
                   "a string or a list of text parts); the prompt, if given, is added as the last user message; a "
                   "final assistant message with text is continued (a prefill)")
    g.add_argument("--file", default=None, help="append this text file to the prompt in a code block")
    g.add_argument("--prediction", default=None, metavar="FILE",
                   help="predicted output: a text file the answer will mostly repeat (e.g. the file being edited); "
                        "drafted before prompt lookup, the output is unchanged by it")
    g.add_argument("--json", action="store_true", help="one JSON object per line: token, round and stats events")
    g.add_argument("--no-color", action="store_true", help="plain text output")
    add_generation_arguments(g)
    add_model_arguments(g)
    sub.add_parser("models", help="list the model presets and where each resolves")
    for name, helptext in (("chat", "open the terminal UI (the default)"),
                           ("race", "open the terminal UI in race mode: target-only vs speculative")):
        c = sub.add_parser(name, help=helptext)
        add_generation_arguments(c)
        add_model_arguments(c)
    e = sub.add_parser("edit", help="open the terminal UI in code-edit mode on FILE (prompt lookup)")
    e.add_argument("file")
    add_generation_arguments(e)
    add_model_arguments(e)
    sv = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions)")
    add_server_arguments(sv)
    add_generation_arguments(sv)
    add_model_arguments(sv)
    sub.add_parser("bench", help="benchmark modes side by side (localspec bench --help)", add_help=False)
    cal = sub.add_parser("calibrate", help="measure the cost curve of the loaded models",
                         description=CALIBRATE_DESCRIPTION)
    cal.add_argument("--remeasure", action="store_true", help="measure again even if a cached measurement exists")
    cal.add_argument("--repeats", type=int, default=2,
                     help="repetitions per batch size (median; one more where they differ by over 10%%)")
    cal.add_argument("--long-context", type=int, default=LONG_CONTEXT,
                     help=f"the long context measured, tokens (default {LONG_CONTEXT}; capped by --n-ctx)")
    cal.add_argument("--no-draft", action="store_true", help="measure the target only")
    cal.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_option(cal.add_argument_group("decoding"), "draft_max", default_text=f"{AUTO_DRAFT_MAX}, mode auto's")
    add_model_arguments(cal)
    _add_worker_parser(sub)
    return p


def _add_worker_parser(sub) -> None:
    from localspec.rpc_endpoints import RPC_DEFAULT_PORT

    w = sub.add_parser("worker", help="serve this machine's CPU to another machine's localspec (--rpc HOST:PORT)",
                       description="A llama.cpp RPC worker (ggml's rpc-server, from localspec's own llama.cpp, so "
                       "the protocol versions match). It has NO authentication and runs whatever it is sent: "
                       "make it reachable only from trusted machines.")
    w.add_argument("--host", default="127.0.0.1", help="IPv4 address or host name to listen on (default 127.0.0.1: "
                   "this machine only; a LAN address or 0.0.0.0 lets other machines in: trusted networks only). A "
                   "name is resolved to its IPv4 address; IPv6 is refused (llama.cpp's RPC server listens on IPv4 only)")
    w.add_argument("--port", type=int, default=RPC_DEFAULT_PORT, help=f"TCP port (default {RPC_DEFAULT_PORT})")
    w.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default all cores)")
    w.add_argument("--cache", default=None, metavar="DIR",
                   help="keep the tensors it is sent in DIR, so a restarted client loads faster (default none)")


def cmd_worker(ns: argparse.Namespace) -> int:
    """``localspec worker``: a llama.cpp RPC worker on ``--host:--port`` until stopped (Ctrl-C)."""
    import signal
    import socket

    from localspec.backend import rpc
    from localspec.rpc_endpoints import parse_endpoint

    host = rpc.listen_address(ns.host)  # ggml's server binds only an IPv4 literal
    try:
        host, port = parse_endpoint(f"{host}:{ns.port}")
    except ValueError as e:
        raise ConfigError(str(e), "use --host NAME_OR_IPV4 --port 1..65535") from None
    threads = ns.threads or os.cpu_count() or 1
    if threads < 1:
        raise ConfigError(f"--threads {ns.threads}: must be at least 1", "leave it out to use every core")
    rpc.require_support()
    try:  # the port is free and the address is ours: said here, not by a C message
        with socket.create_server((host, port)):
            pass
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                          "pick another --port, or stop the program that uses it") from None
    exposed = not host.startswith("127.")
    named = f" ({ns.host.strip()})" if ns.host.strip() != host else ""
    print(f"localspec worker on {host}:{port}{named}, {threads} threads, RPC protocol "
          f"{rpc.RPC_PROTOCOL[0]}.{rpc.RPC_PROTOCOL[1]}; connect with --rpc {host}:{port}", file=sys.stderr)
    print(("WARNING: reachable from other machines. " if exposed else "") + "A worker has no authentication and runs "
          "whatever it is sent: only trusted machines may reach it. Ctrl-C stops it.", file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the C loop never returns to Python: Ctrl-C ends the process
    rpc.serve_worker(host, port, threads, ns.cache)
    raise ConfigError(f"the worker on {host}:{port} stopped", "see the message above")


def cmd_calibrate(ns: argparse.Namespace) -> int:
    """``localspec calibrate``: measure (or show the cached) cost curve of the loaded models."""
    from localspec.backend.calibration import calibration_contexts, cost_cache_path, describe_costs, format_curve, get_costs
    from localspec.core.costmodel import ceiling, expected_tokens
    from localspec.app.loader import load_model
    from localspec.backend.machine import describe

    if ns.repeats < 1 or ns.long_context < 1:
        raise ConfigError("--repeats and --long-context must be >= 1")
    settings = command_settings(ns, "calibrate", load_settings())
    draft_max = settings.drafting.cap
    from rich.console import Console

    from localspec.backend.repack import choice_json, describe_choice

    out: dict = {}
    huge: dict[str, int] = {}  # bytes of each model's weights in huge pages
    repack: dict[str, tuple] = {}  # each model's weight-repacking choice and probe verdict
    notices: list[str] = []
    stage, steps = _stage_printer(sys.stderr), _step_printer(sys.stderr)
    target = load_model(settings.target, stage=stage, notices=notices)
    huge["target"] = target.huge_page_bytes
    repack["target"] = (target.repack, target.repack_verdict, getattr(target, "prefill_copy", None) is not None)
    try:
        out["target"] = get_costs(target, draft_max + 1, remeasure=ns.remeasure, repeats=ns.repeats,
                                  contexts=calibration_contexts(target, draft_max + 1, ns.long_context),
                                  progress=steps)
    finally:
        target.close()
    if not ns.no_draft:
        draft = load_model(settings.draft, stage=stage, notices=notices)
        huge["draft"] = draft.huge_page_bytes
        repack["draft"] = (draft.repack, draft.repack_verdict, getattr(draft, "prefill_copy", None) is not None)
        try:
            out["draft"] = get_costs(draft, 2, remeasure=ns.remeasure, repeats=ns.repeats, progress=steps,
                                     contexts=calibration_contexts(draft, 2, ns.long_context), keep_longer=True)
        finally:
            draft.close()
    if ns.json:
        print(json.dumps({k: {**v.to_json(), "weight_repacking": choice_json(*repack[k])} for k, v in out.items()},
                         indent=1))
        return 0
    for notice in notices:
        Console(stderr=True).print("note: " + notice, style="yellow", markup=False, highlight=False)
    tc = out["target"]
    if any(c.disturbed and time.time() - c.created < 120 for c in out.values()):  # others' CPU share, not the load
        print("warning: other processes used the CPUs while measuring: these numbers are distorted and not saved "
              "(rerun on an idle machine)", file=sys.stderr)
    src = "measured now" if time.time() - tc.created < 120 else "cached " + time.strftime(
        "%Y-%m-%d %H:%M", time.localtime(tc.created))
    print(describe())
    print("weights in 2 MiB huge pages: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in huge.items())
          + ("" if any(huge.values()) else " (--huge-pages off, or not available on this system)"))
    for name, choice in repack.items():
        print(f"{name} {describe_choice(*choice)}")
    print(format_curve(tc, f"target {settings.target.model} ({src}, {tc.key.get('n_threads')} threads, "
                           f"median of {tc.repeats}); cache: {cost_cache_path(tc.key)}"))
    print(describe_costs(tc))
    if "draft" in out:
        dc = out["draft"]
        c = dc.seconds[0] / tc.seconds[0]
        print(f"\ndraft {settings.draft.model}: {dc.seconds[0] * 1e3:.2f} ms/token = {c:.2f} of a target pass; "
              + describe_costs(dc))
        best = []
        for g in range(1, draft_max + 1):
            best.append((expected_tokens([1.0] * g) / (tc.t(g + 1) + g * dc.seconds[0]) * tc.seconds[0], g))
        bound, g = max(best)
        verdict = "can pay" if bound > 1.0 else "cannot pay on this machine: auto will not use it"
        print(f"upper bound with a perfect draft (every token accepted): {bound:.2f}x at g={g} -> draft model {verdict}")
    for ctx in tc.contexts:
        x, g = ceiling(tc.curve_at(ctx), draft_max)
        print(f"calibrated ceiling at {ctx} tokens of context (free drafts, every token accepted): {x:.2f}x at g={g}")
    return 0


def _run_tui(ns: argparse.Namespace) -> int:
    try:
        from localspec.tui.app import run_app
    except ImportError as e:
        raise LocalspecError(f"the terminal UI is not available: {e}", "use localspec generate") from e
    from localspec.config import Settings

    # the UI: every section of the settings file
    settings = command_settings(ns, ns.command or "chat", load_settings(), tuple(Settings.model_fields))
    edit_file = getattr(ns, "file", None)
    if edit_file is not None:  # a missing or binary file fails here, with error:/hint:, not in the UI
        from localspec.app.fileio import read_text_file

        read_text_file(edit_file)
    run_app(settings, edit_file=edit_file, race=ns.command == "race")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":
            from localspec.bench import cli_bench

            return cli_bench(argv[1:])
        if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
            argv = ["chat", *argv]  # `localspec --target X` is `localspec chat --target X`
        ns = build_parser().parse_args(argv)
        if ns.command == "generate":
            return cmd_generate(ns)
        if ns.command == "models":
            return cmd_models(ns)
        if ns.command == "serve":
            return cmd_serve(ns)
        if ns.command == "calibrate":
            return cmd_calibrate(ns)
        if ns.command == "worker":
            return cmd_worker(ns)
        if ns.command is None:
            ns = build_parser().parse_args(["chat", *argv])
        return _run_tui(ns)
    except LocalspecError as e:
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: still one clear message; the traceback on request
        if os.environ.get("LOCALSPEC_DEBUG"):
            raise
        print(f"error: unexpected {type(e).__name__}: {e}", file=sys.stderr)
        print("hint: this is a bug in localspec; rerun with LOCALSPEC_DEBUG=1 to see the traceback, and report it",
              file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
