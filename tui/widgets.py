"""Widgets: the coloured token stream, its legend, the statistics panel, the round inspector.

Token colours are CSS component classes (``tok--accepted`` ...) styled in app.tcss; no
colour is written in Python.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from .stats import LiveStats, fmt_rate

KINDS = ("accepted", "resampled", "bonus", "target")
KIND_LABELS = {
    "accepted": "accepted draft",
    "resampled": "resampled (target corrected)",
    "bonus": "bonus",
    "target": "target-only",
}
TOKEN_CLASSES = {f"tok--{k}" for k in KINDS} | {"tok--selected"}


class TokenStream(Widget):
    """A growing text whose tokens are styled by kind. ``pieces`` are (text, kind, round)."""

    COMPONENT_CLASSES = TOKEN_CLASSES
    DEFAULT_CSS = "TokenStream { height: auto; }"

    selected_round: reactive[int | None] = reactive(None)

    def __init__(self, pieces=None, **kw) -> None:
        super().__init__(**kw)
        self.pieces: list[tuple[str, str, int]] = list(pieces or [])

    def add(self, pieces) -> None:
        """Append a batch of tokens and re-render once."""
        self.pieces.extend(pieces)
        self.refresh(layout=True)

    def set_pieces(self, pieces) -> None:
        self.pieces = list(pieces)
        self.refresh(layout=True)

    @property
    def text(self) -> str:
        return "".join(p[0] for p in self.pieces)

    def render(self) -> Text:
        styles = {k: self.get_component_rich_style(f"tok--{k}", partial=True) for k in KINDS}
        sel = self.get_component_rich_style("tok--selected", partial=True)
        out = Text(no_wrap=False, overflow="fold")
        # merge runs of one kind within one round, so long answers stay cheap to render;
        # each run carries a click action that opens its round in the inspector
        run, run_key = [], None
        for text, kind, rnd in self.pieces:
            if not text:
                continue
            key = (kind, rnd)
            if key != run_key and run:
                out.append("".join(run), self._style(run_key, styles, sel))
                run = []
            run_key = key
            run.append(text)
        if run:
            out.append("".join(run), self._style(run_key, styles, sel))
        return out

    def _style(self, key, styles, sel) -> Style:
        kind, rnd = key
        st = styles.get(kind, styles["target"])
        if rnd == self.selected_round:
            st = st + sel
        if rnd is not None and rnd >= 0:
            st = st + Style(meta={"@click": f"select_round({rnd})"})
        return st

    @property
    def link_style(self) -> Style:
        return Style()  # token colours stay as the CSS says; clicking is an extra

    @property
    def link_style_hover(self) -> Style:
        return Style(underline=True)

    class RoundClicked(Message):
        def __init__(self, stream: "TokenStream", round: int) -> None:
            super().__init__()
            self.stream = stream
            self.round = round

    def action_select_round(self, rnd: int) -> None:
        self.post_message(self.RoundClicked(self, rnd))

    def watch_selected_round(self, _old, _new) -> None:
        self.refresh()


class Legend(Widget):
    """The four token kinds in their colours; always visible."""

    COMPONENT_CLASSES = TOKEN_CLASSES
    DEFAULT_CSS = "Legend { height: 1; }"

    def render(self) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        for i, k in enumerate(KINDS):
            if i:
                out.append("  ")
            out.append(f" {KIND_LABELS[k]} ", self.get_component_rich_style(f"tok--{k}", partial=True))
        return out


class StatsPanel(Vertical):
    """Live statistics of the current answer, and a sparkline of accepted lengths per round."""

    def __init__(self, title: str = "Statistics", **kw) -> None:
        super().__init__(**kw)
        self.title_text = title
        self.stats = LiveStats()
        self.mode = ""
        self.speedup: float | None = None
        self.speedup_note = "n/a (race: F3)"

    def compose(self):
        yield Static(id="stats-table", classes="stats-table")
        yield Static("accepted length per round", classes="spark-title")
        yield Sparkline([0], id="stats-spark", summary_function=max)

    def on_mount(self) -> None:
        self.border_title = self.title_text
        self._redraw()

    def show(self, stats: LiveStats | None = None, *, mode: str | None = None,
             speedup: float | None | str = "keep", note: str | None = None) -> None:
        if stats is not None:
            self.stats = stats
        if mode is not None:
            self.mode = mode
        if speedup != "keep":
            self.speedup = speedup
        if note is not None:
            self.speedup_note = note
        if self.is_mounted:
            self._redraw()

    def _redraw(self) -> None:
        s = self.stats
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column(no_wrap=True, overflow="ellipsis")
        rate = s.acceptance_rate
        t.add_row("mode", self.mode or "-")
        t.add_row("tokens/s", fmt_rate(s.tokens_per_second))
        t.add_row("acceptance", f"{fmt_rate(None if rate is None else rate * 100, '%', 0)}"
                                f" ({s.accepted}/{s.drafted} drafted)")
        t.add_row("mean accepted", fmt_rate(s.mean_accepted_length, digits=2))
        t.add_row("tokens/pass", fmt_rate(s.tokens_per_target_pass, digits=2))
        dl = "-" if s.draft_len is None else f"{s.draft_len}" + (f" ({s.draft_reason})" if s.draft_reason else "")
        t.add_row("draft length", dl)
        t.add_row("TTFT", fmt_rate(s.time_to_first_token, " s", 2))
        sp = f"{self.speedup:.2f}x {self.speedup_note}" if self.speedup is not None else self.speedup_note
        t.add_row("speedup", sp)
        t.add_row("tokens", f"{s.tokens} in {s.rounds} rounds" + (f", {s.end_reason}" if s.end_reason else ""))
        self.query_one("#stats-table", Static).update(t)
        self.query_one("#stats-spark", Sparkline).data = list(s.accepted_lengths[-60:]) or [0]


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
            self.update(Text("no rounds yet: ask something", style="italic"))
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
        self.update(Group(head, t, foot))
