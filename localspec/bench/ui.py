"""What the terminal UI costs: ``python -m localspec.bench.ui``.

Two benchmarks (not tests: they print measurements, they assert nothing):

1. **Streaming** (default, no model): feeds ``tui.widgets.TokenStream`` 8,000 coloured
   tokens in 400 updates of 20, headless, in one long line and in lines of 12 tokens,
   and prints the milliseconds per update (process CPU time of ``add`` plus the screen
   update that follows) around 1k, 4k and 8k tokens, and the 8k/1k ratio.
2. **Decoding** (``--decode``, real models): the same greedy code edit (a ~150-line file,
   ``--lines``) decoded in the TUI's code-edit screen, driven headless with Pilot, and by
   ``localspec generate`` in a subprocess, alternating, ``--repeats`` times. Prints both
   decode rates (tokens / decode seconds, as ``localspec bench`` and the statistics
   panel define it) and their per-repetition ratio.

The TUI is imported lazily, so ``localspec`` never depends on it at import time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from localspec.core.events import GenerationStats

KINDS = ("accepted", "accepted", "resampled", "bonus", "target")


def stream_pieces(n_tokens: int, line_tokens: int | None) -> list[tuple[str, str, int]]:
    """``n_tokens`` (text, kind, round) pieces: words of 3-6 characters, every kind, a new
    round every 4 tokens; a newline after every ``line_tokens`` tokens (None: one line)."""
    out = []
    for i in range(n_tokens):
        word = " " + "abcdefgh"[i % 7:][:3 + i % 4]
        if line_tokens and (i + 1) % line_tokens == 0:
            word += "\n"
        out.append((word, KINDS[i % len(KINDS)], i // 4))
    return out


async def _feed(pieces, per_update: int, widget: str = "TokenStream", size=(120, 40)
                ) -> list[tuple[int, float, float]]:
    """(tokens so far, CPU ms, wall ms) per update of ``per_update`` pieces.

    ``widget`` "TokenStream" is ours in a VerticalScroll, as in the chat transcript (kept
    scrolled to the end); "Log" is Textual's own plain-text ``Log`` fed the same text, as a
    reference for what any append-only widget costs in Textual on this machine.
    """
    from textual.app import App
    from textual.containers import VerticalScroll
    from textual.widgets import Log

    from localspec import tui
    from localspec.tui.widgets import TokenStream

    class StreamApp(App):
        CSS_PATH = str(Path(tui.__file__).with_name("app.tcss"))

        def compose(self):
            if widget == "Log":
                yield Log()
            else:
                with VerticalScroll(id="transcript"):
                    yield TokenStream()

    app = StreamApp()
    out = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if widget == "Log":
            log = app.query_one(Log)

            def feed(batch):
                log.write("".join(p[0] for p in batch))
        else:
            stream = app.query_one(TokenStream)
            scroll = app.query_one(VerticalScroll)

            def feed(batch):
                stream.add(batch)
                scroll.scroll_end(animate=False)
        for i in range(0, len(pieces), per_update):
            c0, w0 = time.process_time(), time.perf_counter()
            feed(pieces[i:i + per_update])
            await pilot.pause()
            out.append((i + per_update, (time.process_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3))
        if widget != "Log":
            assert stream.text == "".join(p[0] for p in pieces)
    return out


def _around(samples, n_tokens: int, window: int = 1000) -> float:
    """Mean CPU ms of the updates in the ``window`` tokens up to ``n_tokens`` (the periodic
    relayouts included, not only the typical update)."""
    xs = [ms for n, ms, _w in samples if n_tokens - window < n <= n_tokens]
    return sum(xs) / len(xs) if xs else float("nan")


def bench_stream(n_tokens: int = 8000, updates: int = 400) -> dict:
    per = max(1, n_tokens // updates)
    result = {}
    for widget in ("TokenStream", "Log"):
        for name, line_tokens in (("one long line", None), ("lines of 12 tokens", 12)):
            samples = asyncio.run(_feed(stream_pieces(n_tokens, line_tokens), per, widget))
            marks = {k: _around(samples, k) for k in (1000, 4000, n_tokens)}
            result[f"{widget}, {name}"] = {"ms_per_update": marks, "ratio_last_first": marks[n_tokens] / marks[1000],
                                           "max_ms": max(ms for _n, ms, _w in samples), "samples": samples}
    return result


def format_stream(result: dict, n_tokens: int) -> str:
    per = "per update of 20 tokens"
    lines = [f"ms of process CPU time {per} (mean over the 1,000 tokens up to each mark), headless, 120x40",
             f"{'widget, layout':<34} {'1k':>7} {'4k':>7} {f'{n_tokens // 1000}k':>7} {'8k/1k':>7} {'max':>7}"]
    for name, r in result.items():
        m = r["ms_per_update"]
        lines.append(f"{name:<34} {m[1000]:7.2f} {m[4000]:7.2f} {m[n_tokens]:7.2f} {r['ratio_last_first']:7.2f}"
                     f" {r['max_ms']:7.1f}")
    lines.append("(Log: Textual's own plain-text Log widget fed the same text, for reference)")
    return "\n".join(lines)


# -- the TUI's decode rate against the CLI's -----------------------------------------------
def edit_file_text(n_lines: int) -> str:
    """A deterministic Python module of about ``n_lines`` lines (small functions)."""
    out = ['"""Helpers for a small inventory."""', "", ""]
    i = 0
    while len(out) < n_lines:
        out += [f"def parse_item_{i}(line: str) -> dict:",
                f'    """Parse one record of kind {i} from a comma-separated line."""',
                "    fields = [f.strip() for f in line.split(',')]",
                f"    return {{'name': fields[0], 'count': int(fields[1]) + {i}, 'kind': {i}}}",
                "", ""]
        i += 1
    return "\n".join(out[:n_lines]) + "\n"


INSTRUCTION = "Rename every function parse_item_N to read_item_N. Keep everything else exactly as it is."


async def _tui_once(settings, path: Path) -> dict:
    from localspec.tui.app import make_app
    from localspec.tui.widgets import StatsPanel

    app = make_app(settings, edit_file=str(path), remember=False)
    try:
        async with app.run_test(size=(150, 40)) as pilot:
            async def idle(timeout: float = 3600.0) -> None:
                # polls with a plain sleep: Pilot.pause() makes every widget process its
                # queue and redraws the screen, work a user's app never does
                t_end = time.monotonic() + timeout
                while time.monotonic() < t_end:
                    await asyncio.sleep(0.5)
                    if app.busy is None and app.engine_state != "loading":
                        return
                raise TimeoutError("the TUI did not finish")

            await idle()
            if app.engine_state != "ready":
                raise RuntimeError("the TUI could not load the models")
            box = app.screen.query_one("#edit-instruction")
            box.value = INSTRUCTION
            await box.action_submit()
            await pilot.pause(0.5)
            await idle()
            s = app.screen.query_one(StatsPanel).stats
            return {"tokens": s.tokens, "tok_s": s.tokens_per_second, "decode_seconds": s.decode_seconds}
    finally:
        app.close_engines()


def _cli_once(settings, messages_path: Path, drafting, max_tokens: int) -> dict:
    cmd = [sys.executable, "-m", "localspec.cli", "generate", "--json", "--messages", str(messages_path),
           "--mode", drafting.mode, "--draft-max", str(drafting.cap), "--temperature", "0",
           "--max-tokens", str(max_tokens), "--n-ctx", str(settings.target.n_ctx),
           "--target", settings.target.model, "--draft", settings.draft.model]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    stats = [json.loads(x) for x in r.stdout.splitlines() if x.startswith('{"type": "stats"')]
    if r.returncode != 0 or not stats:
        raise RuntimeError(f"localspec generate failed:\n{r.stderr[-2000:]}")
    s = GenerationStats.from_dict(stats[-1])
    return {"tokens": s.tokens, "tok_s": s.tokens_per_second, "decode_seconds": s.decode_seconds}


def bench_decode(n_lines: int, repeats: int, target: str | None, draft: str | None) -> list[dict]:
    from localspec.config import MIN_DEFAULT_CONTEXT, GenerationParams, SamplingParams, Settings

    from localspec.app.codeedit import edit_prompt

    base = Settings()
    settings = base.model_copy(update={
        "sampling": SamplingParams(temperature=0.0),
        "generation": GenerationParams(max_tokens=base.generation.max_tokens),
        # a fixed window, as before the default followed the model's training context: both sides the same
        "target": base.target.model_copy(update={"n_ctx": base.target.n_ctx or MIN_DEFAULT_CONTEXT}
                                         | ({"model": target} if target else {})),
        "draft": base.draft.model_copy(update={"model": draft} if draft else {}),
    })
    # what the code-edit screen drafts with: prompt lookup, draft length at least 16
    d = settings.drafting
    drafting = d.model_copy(update={"mode": "lookup", "draft_max": max(d.cap, 16)})
    work = Path(tempfile.mkdtemp(prefix="localspec-bench-ui-"))
    path = work / "inventory.py"
    content = edit_file_text(n_lines)
    path.write_text(content)
    messages = work / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": edit_prompt(path, content, INSTRUCTION)}]))
    max_tokens = min(settings.target.n_ctx // 2, 4 * len(content) // 3 + 256)  # the edit screen's cap is larger
    rows = []
    for rep in range(repeats):
        order = ("tui", "cli") if rep % 2 == 0 else ("cli", "tui")
        row = {"repeat": rep + 1, "load": os.getloadavg()[0]}
        for side in order:
            row[side] = (asyncio.run(_tui_once(settings, path)) if side == "tui"
                         else _cli_once(settings, messages, drafting, max_tokens))
            print(f"  repeat {rep + 1} {side}: {row[side]['tokens']} tokens, {row[side]['tok_s']:.1f} tok/s decode",
                  file=sys.stderr, flush=True)
        row["ratio"] = row["tui"]["tok_s"] / row["cli"]["tok_s"]
        rows.append(row)
    return rows


def format_decode(rows: list[dict]) -> str:
    lines = ["TUI (code-edit screen, headless Pilot) vs localspec generate: decode tokens/s, greedy, alternating",
             f"{'rep':>3} {'tokens':>7} {'TUI tok/s':>10} {'CLI tok/s':>10} {'TUI/CLI':>8} {'load':>6}"]
    for r in rows:
        lines.append(f"{r['repeat']:>3} {r['tui']['tokens']:>4}/{r['cli']['tokens']:<4} {r['tui']['tok_s']:10.1f} "
                     f"{r['cli']['tok_s']:10.1f} {r['ratio']:8.3f} {r['load']:6.2f}")
    ratios = sorted(r["ratio"] for r in rows)
    n = len(ratios)
    med = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
    lines.append(f"median TUI/CLI {med:.3f} (range {ratios[0]:.3f} to {ratios[-1]:.3f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localspec.bench.ui", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=8000, help="streaming: tokens fed (default 8000)")
    p.add_argument("--updates", type=int, default=400, help="streaming: updates they come in (default 400)")
    p.add_argument("--decode", action="store_true", help="also compare the TUI's decode rate with the CLI's")
    p.add_argument("--lines", type=int, default=150, help="decode: lines of the edited file (default 150)")
    p.add_argument("--repeats", type=int, default=3, help="decode: alternating repetitions (default 3)")
    p.add_argument("--target", default=None, help="decode: target model (default preset)")
    p.add_argument("--draft", default=None, help="decode: draft model (default preset)")
    p.add_argument("--no-stream", action="store_true", help="skip the streaming benchmark")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    out: dict = {"cpu": _cpu_name(), "cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    print(f"CPU: {out['cpu']}, {out['cpus']} CPUs, load average {out['load_before']:.2f}"
          + ("  (busy machine: timings are disturbed)" if out["load_before"] > 0.5 * (os.cpu_count() or 1) else ""))
    if args.tokens < 1000 or args.updates < 1:
        p.error("--tokens must be at least 1000 and --updates at least 1")
    if not args.no_stream:
        res = bench_stream(args.tokens, args.updates)
        print(format_stream(res, args.tokens))
        out["stream"] = {k: {kk: vv for kk, vv in v.items() if kk != "samples"} for k, v in res.items()}
    if args.decode:
        rows = bench_decode(args.lines, args.repeats, args.target, args.draft)
        print(format_decode(rows))
        out["decode"] = rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "?"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
