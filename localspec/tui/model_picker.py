"""The model picker (Ctrl+L): the catalog's presets and the GGUF files on this machine (weights folder,
localspec's cache, the Hugging Face cache) with size, quantisation, training context and whether each
pairs with the current target (same tokenizer). Enter or ``t`` makes the highlighted model the target,
``d`` the draft model; the engine reloads and the conversation stays. ``h`` browses a Hugging Face
repo's GGUF files and fetches one (:mod:`localspec.tui.hub_browser`), which then shows here, highlighted;
a preset not on this machine yet is fetched by the load that follows, with its progress bar.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

from localspec.app.catalog import human_size
from localspec.app.models_list import GGUFFacts, ModelChoice, gguf_facts, list_models, pairs_with
from localspec.errors import LocalspecError


def _facts(path: Path | None) -> GGUFFacts | None:
    if path is None:
        return None
    try:
        return gguf_facts(path)
    except LocalspecError:
        return None


class ModelPicker(ModalScreen[tuple[str, str, bool | None] | None]):
    """Dismissed with ``("target" | "draft", model reference, pairs)`` or None (Esc); ``pairs``: whether
    the picked target and the current draft share a tokenizer (None: unknown, or a draft was picked)."""

    BINDINGS = [Binding("escape", "close", "Close"), Binding("t", "pick('target')", "Target", show=False),
                Binding("d", "pick('draft')", "Draft", show=False), Binding("h", "hub", "Hub", show=False)]

    class Facts(Message):
        def __init__(self, rows: list[tuple[ModelChoice, GGUFFacts | None, bool | None]]) -> None:
            super().__init__()
            self.rows = rows

    def __init__(self, target_ref: str, draft_ref: str, target_path: str | None = None) -> None:
        """``target_path``: the loaded target's file (for a preset assembled or fetched on load)."""
        super().__init__()
        self.target_ref, self.draft_ref = target_ref, draft_ref
        self.target_path = target_path
        self.choices: list[ModelChoice] = []
        self.facts: list[GGUFFacts | None] = []  #: per choice
        self.highlight: Path | None = None  #: a file just fetched: the cursor goes to it once listed

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog picker-dialog models-dialog"):
            yield Static("Models  (Enter/t: target, d: draft, h: Hugging Face, Esc closes)", classes="dialog-title")
            yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
            yield Static("reading the models' headers…", id="models-detail", markup=False)
            with Horizontal(classes="browser-buttons"):
                yield Button("Use as target t", id="models-target", compact=True)
                yield Button("Use as draft d", id="models-draft", compact=True)
                yield Button("Hugging Face h", id="models-hub", compact=True)
                yield Button("Close esc", id="models-close", compact=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in (("model", 30), ("where", 8), ("size", 7), ("quant", 7), ("ctx", 6), ("pairs", 6)):
            table.add_column(label, width=width, key=label)
        table.focus()
        self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, group="models")
    def _read(self) -> None:
        """List the models and read their headers (a few hundred ms each) off the UI thread."""
        choices = list_models()
        target = next((c for c in choices if self.target_ref in (c.ref, str(c.path))), None)
        path = target.path if target is not None and target.path is not None else self.target_path or self.target_ref
        target_facts = _facts(Path(path))
        rows = []
        for c in choices:
            facts = _facts(c.path)
            rows.append((c, facts, pairs_with(target_facts, facts)))
        self.post_message(self.Facts(rows))

    @on(Facts)
    def _show(self, msg: Facts) -> None:
        table = self.query_one(DataTable)
        table.clear()
        self.choices, self.facts = [], []
        for c, facts, pairs in msg.rows:
            role = "target" if self.target_ref in (c.ref, str(c.path)) else (
                "draft" if self.draft_ref in (c.ref, str(c.path)) else "")
            name = {"target": "T ", "draft": "D "}.get(role, "  ") + c.name
            pair = "?" if pairs is None else "yes" if pairs else "no"
            where = c.where if c.path is not None else "not here"
            table.add_row(Text(name, no_wrap=True), where, human_size(c.size), facts.quant if facts else "",
                          f"{facts.n_ctx_train:,}" if facts and facts.n_ctx_train else "", pair)
            self.choices.append(c)
            self.facts.append(facts)
        if self.highlight is not None:
            row = next((i for i, c in enumerate(self.choices) if c.path is not None
                        and c.path.resolve() == self.highlight.resolve()), None)
            if row is not None:
                table.move_cursor(row=row)
        self._detail()

    @on(DataTable.RowHighlighted)
    def _detail(self) -> None:
        c = self.selected()
        detail = self.query_one("#models-detail", Static)
        if c is None:
            detail.update("no models found")
            return
        where = str(c.path) if c.path else f"{c.ref}: fetched or assembled when loaded"
        detail.update(f"{where}\nT target, D draft; pairs: same tokenizer as the target (?: a file not here)")

    def selected(self) -> ModelChoice | None:
        table = self.query_one(DataTable)
        if not self.choices or not 0 <= table.cursor_row < len(self.choices):
            return None
        return self.choices[table.cursor_row]

    @on(DataTable.RowSelected)
    def _enter(self) -> None:
        self.action_pick("target")

    def action_pick(self, role: str) -> None:
        c = self.selected()
        if c is None:
            return
        pairs = None
        if role == "target":
            chosen = self.facts[self.choices.index(c)]
            draft = next((f for d, f in zip(self.choices, self.facts) if self.draft_ref in (d.ref, str(d.path))), None)
            pairs = pairs_with(chosen, draft)
        self.dismiss((role, c.ref, pairs))

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        what = (event.button.id or "").removeprefix("models-")
        if what == "close":
            self.action_close()
        elif what == "hub":
            self.action_hub()
        else:
            self.action_pick(what)

    def action_hub(self) -> None:
        from localspec.tui.hub_browser import HubBrowser

        self.app.push_screen(HubBrowser(), self._fetched)

    def _fetched(self, path: Path | None) -> None:
        """A file fetched from the hub: list the models again, the cursor on it."""
        if path is not None:
            self.highlight = path
            self._read()

    def action_close(self) -> None:
        self.dismiss(None)
