"""Widgets: the token stream's legend, the statistics panel, the round inspector.

Why these hold together: the widgets that show a generation's tokens and statistics, every one styled
by the same token colour classes (:func:`token_css`) and fed the same events; the stream itself is
:class:`~localspec.tui.token_stream.TokenStream`, re-exported here.

Token colours are CSS component classes (``tok--accepted`` ...) styled by :func:`token_css` from
the colour roles of :mod:`localspec.tui.kinds` (theme variables: no literal colour is written here).
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from localspec.core.events import DrafterId
from localspec.tui.stats import LiveStats, fmt_rate, plural

from localspec.tui.token_stream import KIND_LABELS, KINDS, TOKEN_CLASSES
# re-exported: the screens, the app and the tests import them from here
from localspec.tui.token_stream import TokenStream, _cells, token_css, wrap_rows  # noqa: F401


class Legend(Widget):
    """The four token kinds in their colours; always visible."""

    COMPONENT_CLASSES = TOKEN_CLASSES
    DEFAULT_CSS = "Legend { height: auto; }"

    def render(self) -> Text:
        out = Text(no_wrap=False, overflow="fold")  # wraps on a narrow screen, never cut
        for i, k in enumerate(KINDS):
            if i:
                out.append("  ")
            out.append(f" {KIND_LABELS[k]} ", self.get_component_rich_style(f"tok--{k}", partial=True))
        return out


class MiniStats(Static):
    """One line of the statistics panel's main figures, shown when the panel is folded away
    (a narrow screen); F10 opens the panel."""

    DEFAULT_CSS = "MiniStats { height: auto; padding: 0 1; color: $text-muted; }"

    def __init__(self, **kw) -> None:
        super().__init__("", markup=False, **kw)

    def show(self, stats: LiveStats, mode: str) -> None:
        rate = stats.acceptance_rate
        parts = [mode or "-"]
        if stats.tokens:
            parts += [fmt_rate(stats.rate, " tok/s"),
                      f"accepted {fmt_rate(None if rate is None else rate * 100, '%', 0)}",
                      plural(stats.tokens, "token")]
        self.update(" · ".join(parts) + " · F10 more")


class StatsPanel(Vertical):
    """Live statistics of the current answer, and a sparkline of accepted lengths per round."""

    def __init__(self, title: str = "Statistics", **kw) -> None:
        super().__init__(**kw)
        self.title_text = title
        self.stats = LiveStats()
        self.mode = ""  #: the drafting mode set now (the next answer's)
        self.figures_mode = ""  #: the mode of the answer whose figures are shown ("" = as set now)
        self.speedup: float | None = None
        self.speedup_note = "n/a (race: F3)"

    def compose(self):
        yield Static(id="stats-table", classes="stats-table")
        yield Static("accepted length per round", classes="spark-title")
        yield Sparkline([0], id="stats-spark", summary_function=max)  # hidden until a round drafts

    def on_mount(self) -> None:
        self.border_title = self.title_text
        self.tooltip = STATS_TOOLTIP
        self._redraw()

    def show(self, stats: LiveStats | None = None, *, mode: str | None = None, figures_mode: str | None = None,
             speedup: float | None | str = "keep", note: str | None = None) -> None:
        """Show ``stats``; ``mode`` is the mode set now, ``figures_mode`` the mode the figures
        were made with (an answer that starts passes both)."""
        if stats is not None:
            self.stats = stats
        if mode is not None:
            self.mode = mode
        if figures_mode is not None:
            self.figures_mode = figures_mode
        if speedup != "keep":
            self.speedup = speedup
        if note is not None:
            self.speedup_note = note
        if self.is_mounted:
            self._redraw()

    def _redraw(self) -> None:
        s = self.stats
        t = Table.grid(padding=(0, 1))
        # labels never shrink (no truncation at any width); values wrap when long
        t.add_column(style="bold", no_wrap=True, min_width=max(len(k) for k in STAT_LABELS))
        t.add_column(overflow="fold")
        rate = s.acceptance_rate
        shown = s.tokens or s.rounds or s.final
        if shown and self.figures_mode and self.figures_mode != self.mode:
            # the figures below are the previous answer's: say its mode, and what the next one uses
            t.add_row("mode", Text(self.figures_mode))
            t.add_row("next answer", Text(self.mode or "-"))
        else:
            t.add_row("mode", Text(self.mode or "-"))
        t.add_row("decode rate", fmt_rate(s.rate, " tok/s"))
        cached = s.prompt_tokens - s.prompt_tokens_read
        prompt = (f"{s.prompt_tokens_read} new, {cached} cached" if cached
                  else plural(s.prompt_tokens, "token"))
        t.add_row("prefill", f"{s.prefill_seconds:.2f} s ({prompt})" if s.prompt_tokens else "-")
        t.add_row("draft catch-up", f"{s.catchup_seconds:.2f} s ({plural(s.catchup_tokens, 'token')})"
                  if s.catchup_tokens else "none")
        t.add_row("first token", fmt_rate(s.time_to_first_token, " s", 2))
        t.add_row("acceptance", f"{fmt_rate(None if rate is None else rate * 100, '%', 0)}"
                                f" ({s.accepted}/{s.drafted} drafted)")
        t.add_row("mean accepted", fmt_rate(s.mean_accepted_length, digits=2))
        # nothing drafted: every pass gave one token (less, counting the prefill's): not a figure
        t.add_row("tokens/target pass", fmt_rate(s.tokens_per_target_pass, digits=2) if s.drafted
                  else "n/a (nothing drafted)")
        nothing = s.drafter in ("", DrafterId.NONE) or not s.draft_len
        t.add_row("draft length", "-" if s.draft_len is None else "0 (this round drafted nothing)" if nothing
                  else f"{s.draft_len} ({s.drafter})")
        sp = f"{self.speedup:.2f}x {self.speedup_note}" if self.speedup is not None else self.speedup_note
        t.add_row("speedup", Text(sp))
        end = s.end_text
        t.add_row("tokens", f"{plural(s.tokens, 'token')} in {plural(s.rounds, 'round')}" + (f", {end}" if end else ""))
        parts: list = [t]
        table = self.query_one("#stats-table", Static)
        if s.draft_reason:  # the policy's reason has its own line and wraps
            reason = s.draft_reason
            if reason.startswith("fixed"):
                reason = "draft length fixed by the settings (F4)" + reason.removeprefix("fixed") \
                    + "; mode auto adapts it"
            parts.append(Text.assemble(("why ", "bold"), reason, overflow="fold"))
        group = Group(*parts)
        update_in_place(table, group, rendered_lines(table, group))
        for mini in self.screen.query(MiniStats):  # the same figures, in one line, on a narrow screen
            mini.show(s, self.figures_mode if shown and self.figures_mode else self.mode)
        self._redraw_spark(table)

    def _redraw_spark(self, table: Static) -> None:
        """The sparkline of the last 60 rounds' accepted lengths and its title (wrapped as ``table`` wraps)."""
        data = list(self.stats.accepted_lengths[-60:])
        spark = self.query_one("#stats-spark", Sparkline)
        # before the first drafted round there is nothing to draw (no row of empty blocks)
        if spark.display != any(data):
            spark.display = any(data)
        same = len(set(data)) == 1
        # Sparkline scales from the lowest value to the highest: equal values would all sit at
        # the bottom; one value draws full bars, and the title says which value it is
        spark.data = (data[:1] if same else data) or [0]
        if not any(data):
            title = "accepted length per round: none yet"
        elif same:
            title = f"accepted length per round: {data[0]} every round"
        else:
            title = f"accepted length per round: {min(data)} to {max(data)}"
        update_in_place(self.query_one(".spark-title", Static), title, wrapped_lines(table, Text(title)))


def wrapped_lines(widget: Widget, text: Text) -> int:
    """Lines ``text`` takes at ``widget``'s width (-1 before the widget has a size)."""
    width = widget.size.width
    return len(text.wrap(widget.app.console, width)) if width else -1


def rendered_lines(widget: Widget, renderable) -> int:
    """Lines ``renderable`` takes at ``widget``'s content width, wrapped rows included
    (-1 before the widget has a size)."""
    width = widget.content_region.width or widget.size.width
    if not width:
        return -1
    console = widget.app.console
    return len(console.render_lines(renderable, console.options.update(width=width, height=None), pad=False))


def update_in_place(static: Static, content, lines: int) -> None:
    """``Static.update`` that lays the screen out again only when the height (``lines``)
    changes: a relayout repaints the whole screen, several times a second while streaming."""
    layout = lines < 0 or getattr(static, "_shown_lines", None) != lines
    static._shown_lines = lines
    static.update(content, layout=layout)


#: the statistics panel's labels and what each means (its tooltip)
STAT_LABELS = {
    "mode": "the drafting mode (F5 cycles it)",
    "decode rate": "generated tokens / decode seconds: prefill and draft catch-up excluded "
                   "(the definition of localspec bench)",
    "prefill": "time to put the prompt in the target's KV cache",
    "draft catch-up": "time the draft model spent bringing its KV cache up to the committed tokens",
    "first token": "time to first token (TTFT), prefill included",
    "acceptance": "accepted / drafted draft tokens",
    "mean accepted": "accepted draft tokens per round that drafted",
    "tokens/target pass": "generated tokens per target verification pass",
    "draft length": "draft length chosen for the latest round, and its drafter",
    "next answer": "the drafting mode set now, when the figures are of an answer made with another",
    "speedup": "decode rate over target-only decode rate, measured by the latest race (F3)",
    "tokens": "generated tokens, rounds, and why the answer ended",
    "why": "the adaptive policy's reason for the latest draft length",
}
STATS_TOOLTIP = "\n".join(f"{k}: {v}" for k, v in STAT_LABELS.items())


def show_token(text: str) -> str:
    """A token's text made visible: spaces as ·, newlines as ⏎, tabs as →."""
    return text.replace(" ", "·").replace("\n", "⏎").replace("\t", "→") or "∅"


def _text(texts, i: int, token: int) -> str:
    return texts[i] if i < len(texts) else f"#{token}"


class RoundInspector(Static):
    """One round's verify step: what the drafter proposed, what the target chose, the verdict.

    Rows are positions (like the verify step in Leviathan et al. 2022, Fig. 1, turned on
    its side so it fits a sidebar).
    """

    COMPONENT_CLASSES = TOKEN_CLASSES | {"verdict--rejected", "verdict--discarded"}

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.rounds: list = []
        self.index: int | None = None

    def on_mount(self) -> None:
        self.border_title = "Round inspector (F7/F8)"
        self._redraw()

    def set_rounds(self, rounds, index: int | None = None) -> None:
        self.rounds = list(rounds)
        if index is None:
            index = len(self.rounds) - 1 if self.rounds else None
        self.index = index
        self._redraw()

    def show_round(self, rnd: int) -> bool:
        for i, rs in enumerate(self.rounds):
            if rs.round == rnd:
                self.index = i
                self._redraw()
                return True
        return False

    def step(self, delta: int) -> int | None:
        if not self.rounds:
            return None
        cur = self.index if self.index is not None else len(self.rounds) - 1
        self.index = max(0, min(len(self.rounds) - 1, cur + delta))
        self._redraw()
        return self.rounds[self.index].round

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        if not self.rounds or self.index is None:
            self.update(Text("no rounds yet: ask something", style="italic"), layout=False)
            return
        rs = self.rounds[self.index]
        st = {k: self.get_component_rich_style(f"tok--{k}", partial=True) for k in KINDS}
        rej = self.get_component_rich_style("verdict--rejected", partial=True)
        dis = self.get_component_rich_style("verdict--discarded", partial=True)
        head = Text.assemble((f"round {rs.round + 1}/{len(self.rounds)}", "bold"),
                             f"  {rs.drafter}: drafted {rs.drafted}, accepted {rs.accepted}")
        t = Table(box=None, padding=(0, 1), show_edge=False, expand=False)
        t.add_column("#", justify="right", no_wrap=True, min_width=2)
        t.add_column("draft", no_wrap=True, min_width=6, max_width=12, overflow="ellipsis")
        t.add_column("target", no_wrap=True, min_width=6, max_width=12, overflow="ellipsis")
        t.add_column("verdict", no_wrap=True)
        n = max(rs.drafted, len(rs.target_tokens))
        for i in range(n):
            d = rs.draft_tokens[i] if i < rs.drafted else None
            tt = rs.target_tokens[i] if i < len(rs.target_tokens) else None
            dtext = Text(show_token(_text(rs.draft_texts, i, d))) if d is not None else Text("-")
            ttext = Text(show_token(_text(rs.target_texts, i, tt))) if tt is not None else Text("-")
            if i < rs.accepted:
                verdict = Text("✓ accepted", st["accepted"])
                dtext.stylize(st["accepted"])
                ttext.stylize(st["accepted"])
            elif i == rs.accepted and tt is not None:
                if d is None and rs.drafted == 0:
                    verdict = Text("= target", st["target"])
                    ttext.stylize(st["target"])
                elif d is None:
                    verdict = Text("+ bonus", st["bonus"])
                    ttext.stylize(st["bonus"])
                else:
                    verdict = Text("✗ rejected", rej)
                    dtext.stylize(rej)
                    ttext.stylize(st["resampled"])
            else:
                verdict = Text("discarded", dis)
                dtext.stylize(dis)
            t.add_row(str(i + 1), dtext, ttext, verdict)
        foot = Text("target row: the token committed there (resampled at a rejection)\n", "dim")
        foot += Text(f"verify {rs.verify_seconds * 1000:.0f} ms, draft {rs.draft_seconds * 1000:.0f} ms", "dim")
        if rs.catchup_tokens:  # the draft model's catch-up: its own line, not part of drafting
            foot += Text(f"\ndraft catch-up {rs.catchup_seconds * 1000:.0f} ms ({plural(rs.catchup_tokens, 'token')})",
                         "dim")
        self.update(Group(head, t, foot), layout=False)  # its height is fixed by the CSS (1fr)
