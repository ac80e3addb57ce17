"""The command line: argument parsing and pretty output; the only place errors become exit codes.

``localspec`` alone opens the terminal UI; ``localspec generate`` streams an answer with
tokens coloured by kind; ``localspec models`` lists the catalog.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pydantic import ValidationError

from .config import DraftParams, GenerationParams, ModelSettings, SamplingParams, Settings, format_validation_error
from .errors import ConfigError, LocalspecError

#: terminal style per token kind (the TUI keeps its colours in tui/app.tcss)
KIND_STYLES = {
    "accepted": "bold green",
    "resampled": "bold red",
    "bonus": "bold cyan",
    "target": "",
}
LEGEND = [("accepted", "accepted draft"), ("resampled", "resampled"), ("bonus", "bonus"), ("target", "target-only")]


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Model and hardware options shared by every subcommand that loads models."""
    g = p.add_argument_group("models")
    g.add_argument("--target", default=None, help="target model: preset name, .gguf path or hf:OWNER/REPO/FILE "
                   "(default qwen2.5-coder-1.5b)")
    g.add_argument("--draft", default=None, help="draft model (default qwen2.5-coder-0.5b); same tokenizer as the target")
    g.add_argument("--n-ctx", type=int, default=None, help="context window, tokens (default 4096)")
    g.add_argument("--n-batch", type=int, default=None, help="most tokens per llama_decode (default 512)")
    g.add_argument("--n-threads", type=int, default=None, help="CPU threads (default: all cores)")
    g.add_argument("--n-gpu-layers", type=int, default=None,
                   help="target layers on the GPU (-1 = all; needs a CUDA/Metal build of llama-cpp-python)")
    g.add_argument("--draft-n-gpu-layers", type=int, default=None, help="draft layers on the GPU (-1 = all)")
    g.add_argument("--flash-attn", choices=["auto", "on", "off"], default=None,
                   help="llama.cpp flash attention: auto (default) = the faster one as measured by "
                        "localspec calibrate (off until measured)")


def add_generation_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--mode", choices=["auto", "draft", "lookup", "none"], default=None,
                   help="auto: measured choice per round; draft: draft model; lookup: prompt lookup; none: target only")
    g.add_argument("--draft-max", type=int, default=None, help="most tokens drafted per round (default 8)")
    g.add_argument("--draft-min", type=int, default=None, help="drafts shorter than this are not verified")
    g.add_argument("--draft-p-min", type=float, default=None, help="draft model stops below this top-1 probability")
    g.add_argument("--temperature", type=float, default=None, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--max-tokens", type=int, default=None, help="most tokens generated (default 512)")
    g.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")


def _pick(ns: argparse.Namespace, mapping: dict[str, str]) -> dict:
    return {field: getattr(ns, arg) for arg, field in mapping.items() if getattr(ns, arg, None) is not None}


def settings_from_args(ns: argparse.Namespace, base: Settings | None = None) -> Settings:
    """Merge command-line options over ``base`` and validate.

    Raises:
        ConfigError: with one line per invalid setting.
    """
    base = base or Settings()
    try:
        target = base.target.model_dump() | _pick(ns, {"target": "model", "n_ctx": "n_ctx", "n_batch": "n_batch",
                                                       "n_threads": "n_threads", "n_gpu_layers": "n_gpu_layers",
                                                       "flash_attn": "flash_attn"})
        draft = base.draft.model_dump() | _pick(ns, {"draft": "model", "n_ctx": "n_ctx", "n_batch": "n_batch",
                                                     "n_threads": "n_threads", "draft_n_gpu_layers": "n_gpu_layers",
                                                     "flash_attn": "flash_attn"})
        sampling = base.sampling.model_dump() | _pick(ns, {"temperature": "temperature", "top_k": "top_k",
                                                           "top_p": "top_p", "min_p": "min_p", "seed": "seed"})
        drafting = base.drafting.model_dump() | _pick(ns, {"mode": "mode", "draft_max": "draft_max",
                                                           "draft_min": "draft_min", "draft_p_min": "draft_p_min"})
        generation = base.generation.model_dump() | _pick(ns, {"max_tokens": "max_tokens"})
        if getattr(ns, "stop", None):
            generation["stop"] = tuple(ns.stop)
        return Settings(
            target=ModelSettings(**target),
            draft=ModelSettings(**draft),
            sampling=SamplingParams(**sampling),
            drafting=DraftParams(**drafting),
            generation=GenerationParams(**generation),
        )
    except ValidationError as e:
        raise ConfigError("invalid settings:\n" + format_validation_error(e),
                          "see localspec generate --help for the allowed values") from e


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


def _format_stats(stats) -> list[tuple[str, str]]:
    ar = stats.acceptance_rate
    mal = stats.mean_accepted_length
    tpp = stats.tokens_per_target_pass
    ttft = stats.time_to_first_token
    return [
        ("tokens", f"{stats.tokens}"),
        ("tokens/s", f"{stats.tokens_per_second:.1f}"),
        ("acceptance", "n/a (nothing drafted)" if ar is None else f"{ar:.0%} of {stats.drafted} drafted"),
        ("mean accepted length", "n/a" if mal is None else f"{mal:.2f}"),
        ("tokens per target pass", "n/a" if tpp is None else f"{tpp:.2f}"),
        ("rounds", f"{stats.rounds}"),
        ("time to first token", "n/a" if ttft is None else f"{ttft * 1000:.0f} ms"),
        ("prompt", f"{stats.prompt_tokens} tokens, prefill {stats.prefill_seconds * 1000:.0f} ms"),
        ("end", stats.end_reason.value if stats.end_reason else "?"),
    ]


def _read_prompt(ns: argparse.Namespace) -> tuple[str | None, list[dict] | None]:
    """(raw prompt, chat messages): exactly one of them is set."""
    text = ns.prompt
    if text == "-":
        text = sys.stdin.read()
    if ns.messages:
        try:
            messages = json.loads(Path(ns.messages).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read chat messages from {ns.messages}: {e}",
                              'write a JSON list like [{"role": "user", "content": "..."}]') from e
        if not (isinstance(messages, list) and all(isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
                                                   and isinstance(m.get("content"), str) for m in messages)):
            raise ConfigError(f"{ns.messages} is not a list of {{role, content}} messages",
                              'write a JSON list like [{"role": "user", "content": "..."}]')
        if text:
            messages = messages + [{"role": "user", "content": text}]
        return None, messages
    if text is None:
        raise ConfigError("no prompt given", 'localspec generate "your question" (or - to read stdin)')
    if not text.strip():
        raise ConfigError("the prompt is empty", 'localspec generate "your question" (or - to read stdin)')
    if ns.file:
        try:
            data = Path(ns.file).read_bytes()
            if b"\x00" in data:
                raise ConfigError(f"{ns.file} looks like a binary file (it contains NUL bytes)", "pass a text file")
            body = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{ns.file} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})",
                              "pass a text file, or convert it to UTF-8 first") from e
        except OSError as e:
            raise ConfigError(f"cannot read {ns.file}: {e.strerror or e}", "check the path") from e
        text = f"{text}\n\n```\n{body}\n```"
    if ns.raw:
        return text, None
    messages = ([{"role": "system", "content": ns.system}] if ns.system else []) + [{"role": "user", "content": text}]
    return None, messages


def cmd_generate(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.text import Text

    from .events import RoundStats, TokenEvent
    from .loader import load_engine

    settings = settings_from_args(ns)
    raw, messages = _read_prompt(ns)
    err = Console(stderr=True, no_color=ns.no_color)
    out = Console(no_color=ns.no_color, highlight=False, soft_wrap=True)
    if not ns.json:
        err.print(f"[dim]mode {settings.drafting.mode}, target {settings.target.model}"
                  + (f", draft {settings.draft.model}" if settings.drafting.mode in ("draft", "auto") else "")
                  + "[/dim]")
    engine = load_engine(settings, progress=None if ns.json else _progress_printer(sys.stderr))
    try:
        if settings.drafting.mode == "auto" and not ns.json:
            from .costmodel import load_costs

            if load_costs(engine.target, settings.drafting.draft_max + 1) is None:
                err.print("[dim]measuring this machine's decode costs once (cached; localspec calibrate shows them)"
                          "…[/dim]")
        if raw is not None:
            prompt = engine.tokenize(raw)
            gen = engine.generate(prompt, settings.sampling, settings.drafting, settings.generation)
        else:
            # chat: the oldest turns are dropped to fit the context (localspec.chat)
            from .chat import ChatSession

            session = ChatSession(engine, settings, messages=messages)
            gen = session.answer().generation
            if session.last_prompt.dropped and not ns.json:
                err.print(f"[yellow]note: left out the {session.last_prompt.dropped} oldest messages "
                          f"to fit the context window of {engine.n_ctx}[/yellow]")
        if not ns.json:
            legend = Text("legend: ")
            for kind, label in LEGEND:
                legend.append(label, style=KIND_STYLES[kind] or "default")
                legend.append("  ")
            err.print(legend)
        interrupted = False
        try:
            for ev in gen:
                if isinstance(ev, TokenEvent):
                    if ns.json:
                        print(json.dumps({"type": "token", "id": ev.token_id, "text": ev.text, "kind": ev.kind.value,
                                          "round": ev.round, "position": ev.position}, ensure_ascii=False), flush=True)
                    elif ev.text:
                        out.print(Text(ev.text, style=KIND_STYLES[ev.kind.value]), end="")
                elif isinstance(ev, RoundStats) and ns.json:
                    print(json.dumps({"type": "round", "round": ev.round, "drafter": ev.drafter,
                                      "drafted": ev.drafted, "accepted": ev.accepted, "committed": ev.committed,
                                      "draft_tokens": list(ev.draft_tokens), "target_tokens": list(ev.target_tokens),
                                      "draft_seconds": ev.draft_seconds, "verify_seconds": ev.verify_seconds,
                                      "draft_len_chosen": ev.draft_len_chosen, "reason": ev.reason}), flush=True)
        except KeyboardInterrupt:
            interrupted = True
            gen.close()
        stats = gen.stats
        if ns.json:
            print(json.dumps({"type": "stats", **stats.as_dict(), "text": gen.text}, ensure_ascii=False), flush=True)
        else:
            out.print()
            err.print()
            err.print("  ".join(f"[dim]{k}:[/dim] {v}" for k, v in _format_stats(stats)))
        return 130 if interrupted else 0
    finally:
        engine.close()


def cmd_models(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .models import cache_dir, load_catalog, locate, weights_dir

    catalog = load_catalog()
    table = Table(title="localspec models", title_justify="left")
    for col in ("preset", "size", "resolves from", "description"):
        table.add_column(col)
    for name, preset in catalog.models.items():
        where = locate(name, catalog)
        src = f"{where.source}: {where.path}" if where.path else f"{where.source}: {where.detail}"
        table.add_row(name, f"{preset.size / 1e6:,.0f} MB", src, preset.description)
    pairs = Table(title="pairs (target + draft)", title_justify="left")
    for col in ("pair", "target", "draft", "description"):
        pairs.add_column(col)
    for name, pair in catalog.pairs.items():
        default = " (default)" if name == catalog.default_pair else ""
        pairs.add_row(name + default, pair.target, pair.draft, pair.description)
    con = Console()
    con.print(table)
    con.print(pairs)
    con.print(f"local weights folder: {weights_dir()}\ncache: {cache_dir()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="localspec", description="Local speculative decoding on GGUF models.")
    sub = p.add_subparsers(dest="command")
    g = sub.add_parser("generate", help="stream an answer, tokens coloured by kind, then the statistics")
    g.add_argument("prompt", nargs="?", help='the prompt ("-" reads stdin); sent as a chat message unless --raw')
    g.add_argument("--raw", action="store_true", help="send the prompt as raw text, without the chat template")
    g.add_argument("--system", default=None, help="system message")
    g.add_argument("--messages", default=None, help="JSON file with chat messages [{role, content}, ...]")
    g.add_argument("--file", default=None, help="append this text file to the prompt in a code block")
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
    sub.add_parser("bench", help="benchmark modes side by side (localspec bench --help)", add_help=False)
    sub.add_parser("calibrate", help="measure the cost curve of the loaded models (localspec calibrate --help)",
                   add_help=False)
    return p


def _run_tui(ns: argparse.Namespace) -> int:
    try:
        from tui.app import run_app
    except ImportError as e:
        raise LocalspecError(f"the terminal UI is not available: {e}", "use localspec generate") from e
    from .userconfig import load_user_settings

    settings = settings_from_args(ns, base=load_user_settings())
    run_app(settings, edit_file=getattr(ns, "file", None), race=ns.command == "race")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":
            from .bench import cli_bench

            return cli_bench(argv[1:])
        if argv and argv[0] == "calibrate":
            from .costmodel import cli_calibrate

            return cli_calibrate(argv[1:])
        ns = build_parser().parse_args(argv)
        if ns.command == "generate":
            return cmd_generate(ns)
        if ns.command == "models":
            return cmd_models(ns)
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
