"""The coloured token stream: every token of an answer in its kind's colour, wrapped and selectable.

Why these hold together: the token colour classes (:func:`token_css`), the word wrapping and
:class:`TokenStream` that draws with both, line by line as the answer streams; the other widgets
(:mod:`localspec.tui.widgets`) take the same classes from here.

Token colours are CSS component classes (``tok--accepted`` ...) styled by :func:`token_css` from
the colour roles of :mod:`localspec.tui.kinds` (theme variables: no literal colour is written here).
"""

from __future__ import annotations

import bisect
import re

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.message import Message
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget

from localspec.core.events import TokenKind

from localspec.tui.kinds import LOOKS

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
