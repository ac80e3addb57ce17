"""Widgets: the coloured token stream, its legend, the statistics panel, the round inspector.

Why these hold together: the widgets that show a generation's tokens and statistics, every one styled
by the same token colour classes (:func:`token_css`) and fed the same events.

Token colours are CSS component classes (``tok--accepted`` ...) styled by :func:`token_css` from
the colour roles of :mod:`localspec.tui.kinds` (theme variables: no literal colour is written here).
"""

from __future__ import annotations

import bisect
import re

from rich.cells import cell_len
from rich.console import Group
from rich.segment import Segment
from rich.table import Table
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.containers import Vertical
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from localspec.core.events import DrafterId, TokenKind

from localspec.tui.kinds import LOOKS
from localspec.tui.stats import LiveStats, fmt_rate, plural

#: the token kinds (localspec.core.events.TokenKind, in its order) and their legend labels; colours: token_css()
KINDS = tuple(k.value for k in TokenKind)
KIND_LABELS = {k.value: look.label + (f" ({look.detail})" if look.detail else "") for k, look in LOOKS.items()}
TOKEN_CLASSES = {f"tok--{k}" for k in KINDS} | {"tok--selected"}


def token_css() -> str:
    """The CSS of the token colours (component classes ``tok--<kind>``), from each kind's colour
    role and weight (:data:`localspec.tui.kinds.LOOKS`): a colour role becomes the theme's
    ``$text-<role>`` on ``$<role>-muted``, so the tokens stay readable on light and dark
    themes. The app adds it to its CSS (app.tcss)."""
    rules = []
    for k, look in LOOKS.items():
        sel = ", ".join(f"{w} > .tok--{k.value}" for w in ("TokenStream", "Legend", "RoundInspector"))
        body = ([f"color: $text-{look.colour};", f"background: ${look.colour}-muted;"] if look.colour
                else ["color: $foreground;"]) + (["text-style: bold;"] if look.bold else [])
        rules.append(f"{sel} {{\n    " + "\n    ".join(body) + "\n}")
    return "\n".join(rules) + "\n"


_WORD = re.compile(r"\n|[ \t]+|[^ \t\n]+")
TAB = "    "
GROW_ROWS = 8  #: a streaming TokenStream grows by this many rows at a time


def _cells(text: str) -> int:
    return cell_len(text.replace("\t", TAB)) if "\t" in text else cell_len(text)


def wrap_rows(text: str, start: int, width: int) -> list[tuple[int, int]]:
    """Greedy word wrap of ``text[start:]`` into rows of at most ``width`` cells.

    A row ends at a newline (not included) or before a word that does not fit; a word
    longer than a row is folded. Whitespace stays at the end of its row (cropped when
    drawn). Rows are decided left to right from their own start only, so the rows before
    the last one never change when text is appended: re-wrapping from the start of the
    last row gives what wrapping everything again would.

    Returns:
        (start, end) character offsets into ``text``, one per row (at least one).
    """
    width = max(1, width)
    rows: list[tuple[int, int]] = []
    row_start, col = start, 0
    for m in _WORD.finditer(text, start):
        word = m.group()
        a, b = m.span()
        if word == "\n":
            rows.append((row_start, a))
            row_start, col = b, 0
            continue
        w = _cells(word)
        if word[0] in " \t" or col + w <= width:
            col += w
            continue
        if col > 0:  # does not fit after what is on this row: start a new one
            rows.append((row_start, a))
            row_start, col = a, 0
        if w <= width:
            col = w
            continue
        for i, ch in enumerate(word):  # fold a word longer than a row
            cw = _cells(ch)
            if col + cw > width and col > 0:
                rows.append((row_start, a + i))
                row_start, col = a + i, 0
            col += cw
    rows.append((row_start, len(text)))
    return rows


class TokenStream(Widget):
    """A growing text whose tokens are styled by kind. ``pieces`` are (text, kind, round).

    Appending costs the new pieces, not the answer: the text is kept as style runs and
    wrapped rows; :meth:`add` re-wraps only the last row and what follows it, and each
    row's rendered strip is cached (Textual's line API: only visible rows are drawn).
    Colours come from the CSS component classes ``tok--<kind>``.
    """

    COMPONENT_CLASSES = TOKEN_CLASSES
    DEFAULT_CSS = "TokenStream { height: auto; }"

    selected_round: reactive[int | None] = reactive(None)

    def __init__(self, pieces=None, **kw) -> None:
        super().__init__(**kw)
        self.pieces: list[tuple[str, str, int]] = []
        self._clear()
        if pieces:
            self._append(pieces)

    def _clear(self) -> None:
        self._streaming = False
        self._text = ""
        self._run_starts: list[int] = []  # style runs: start offset and (kind, round)
        self._run_keys: list[tuple[str, int]] = []
        self._rows: list[tuple[int, int]] = []
        self._wrap_width = 0
        self._strips: dict[int, Strip] = {}
        self._run_styles: dict[tuple[str, int], Style] = {}  # cleared on a style change
        self._base_style: Style | None = None

    def _append(self, pieces) -> None:
        chunks = []
        n = len(self._text)
        for piece in pieces:
            text, kind, rnd = piece
            self.pieces.append((text, kind, rnd))
            if not text:
                continue
            key = (kind, rnd)
            if not self._run_keys or self._run_keys[-1] != key:
                self._run_starts.append(n)
                self._run_keys.append(key)
            chunks.append(text)
            n += len(text)
        self._text += "".join(chunks)

    def _rewrap(self, width: int) -> None:
        """Re-wrap from the start of the last row (everything when the width changed)."""
        if width != self._wrap_width or not self._rows:
            self._wrap_width = width
            self._rows = wrap_rows(self._text, 0, width) if self._text else []
            self._strips.clear()
            return
        last = len(self._rows) - 1
        start = self._rows[last][0]
        del self._rows[last:]
        self._strips.pop(last, None)  # rows after the last were never drawn
        self._rows.extend(wrap_rows(self._text, start, width))

    def add(self, pieces) -> None:
        """Append a batch of tokens; only the rows they touch are wrapped and drawn again.

        While streaming, the height grows in steps of ``GROW_ROWS`` rows, so most batches
        repaint a few rows instead of relaying out (and scrolling) the whole screen;
        :meth:`settle` trims the spare rows once the answer is complete.
        """
        height = self._height()
        first = max(len(self._rows) - 1, 0)
        self._append(pieces)
        self._streaming = True
        if self._wrap_width:
            self._rewrap(self._wrap_width)
        if not self._wrap_width or self._height() != height:
            self.refresh(layout=True)  # the height changed
        else:
            self.refresh(Region(0, first, self.size.width, len(self._rows) - first))

    def settle(self) -> None:
        """The answer is complete: the height becomes exactly its rows."""
        if self._streaming:
            self._streaming = False
            self.refresh(layout=True)

    def set_pieces(self, pieces) -> None:
        self.pieces = []
        self._clear()
        self._append(pieces)
        self.refresh(layout=True)

    def _height(self) -> int:
        n = len(self._rows)
        return -(-n // GROW_ROWS) * GROW_ROWS if self._streaming else n

    @property
    def text(self) -> str:
        return "".join(p[0] for p in self.pieces)

    # -- Textual's line API --------------------------------------------------------------
    def get_content_width(self, container: Size, viewport: Size) -> int:
        return container.width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width != self._wrap_width:
            self._rewrap(width)
        return self._height()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._restyle()  # a theme or CSS change restyles every row

    def _restyle(self) -> None:
        self._strips.clear()
        self._run_styles.clear()
        self._base_style = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._base_style is None:
            self._base_style = self.rich_style
        base = self._base_style
        if width != self._wrap_width:
            self._rewrap(width)
        if y >= len(self._rows):
            return Strip.blank(width, base)
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(y)) is not None:
            return self._selected(self._render_row(y, base), span).crop_extend(0, width, base).apply_offsets(0, y)
        strip = self._strips.get(y)
        if strip is None:
            # offsets: where each character is, for selecting text with the mouse
            strip = self._strips[y] = self._render_row(y, base).crop_extend(0, width, base).apply_offsets(0, y)
        return strip

    def _selected(self, strip: Strip, span: tuple[int, int]) -> Strip:
        """``strip`` with the characters ``span`` (of the row as drawn) in the selection style."""
        drawn = "".join(seg.text for seg in strip)
        start, end = span
        end = len(drawn) if end == -1 else end
        cuts = [cell_len(drawn[:start]), cell_len(drawn[:end]), strip.cell_length]
        parts = strip.divide(cuts)
        before, inside, after = (parts + [Strip([])] * 3)[:3]
        sel = self.screen.get_component_rich_style("screen--selection")
        inside = Strip([Segment(t, (st + sel) if st else sel, c) for t, st, c in inside])
        return Strip.join([before, inside, after])

    def _char_at(self, offset) -> int:
        """The index in :attr:`text` of the character drawn at ``offset`` (x: character of
        the row as drawn, tabs drawn as four spaces; y: row)."""
        if offset.y >= len(self._rows):
            return len(self._text)
        if offset.y < 0:
            return 0
        a, b = self._rows[offset.y]
        i, drawn = a, 0
        while i < b and drawn < offset.x:
            drawn += len(TAB) if self._text[i] == "\t" else 1
            i += 1
        return i

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The selected part of the answer's text, as generated (wrapped rows joined again)."""
        if not self._wrap_width and self.size.width:
            self._rewrap(self.size.width)
        start = 0 if selection.start is None else self._char_at(selection.start)
        end = len(self._text) if selection.end is None else self._char_at(selection.end)
        return self._text[start:end], "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()

    def _render_row(self, y: int, base: Style) -> Strip:
        a, b = self._rows[y]
        if a >= b:
            return Strip([])
        i = bisect.bisect_right(self._run_starts, a) - 1
        segments = []
        pos = a
        while pos < b:
            end = self._run_starts[i + 1] if i + 1 < len(self._run_starts) else len(self._text)
            end = min(end, b)
            text = self._text[pos:end].replace("\t", TAB)
            segments.append(Segment(text, self._style(self._run_keys[max(i, 0)], base)))
            pos = end
            i += 1
        return Strip(segments)

    def _style(self, key: tuple[str, int], base: Style) -> Style:
        st = self._run_styles.get(key)
        if st is None:
            kind, rnd = key
            if kind not in KINDS:
                kind = "target"
            st = base + self.get_component_rich_style(f"tok--{kind}", partial=True)
            if rnd == self.selected_round:
                st = st + self.get_component_rich_style("tok--selected", partial=True)
            if rnd is not None and rnd >= 0:
                st = st + Style(meta={"@click": f"select_round({rnd})"})
            self._run_styles[key] = st
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
        self._restyle()
        self.refresh()


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
