"""The conversation browser (Ctrl+O in chat): the kept conversations, newest first; search, reopen,
rename, delete, export; and opening a conversation file saved elsewhere.

Keys, on the list: Enter opens, ``/`` searches, ``r`` renames, ``d`` deletes (after a confirmation),
``e`` exports (.md or .json), ``f`` opens a file; in the search box, typing filters the list, Up/Down
move in it and Enter opens the highlighted one. Esc closes. Every key has a button for the mouse.
Titles, texts and paths are shown as plain text, never read as markup.
"""

from __future__ import annotations

import re
from datetime import datetime

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Static

from localspec.app.conversation import save_conversation
from localspec.app.store import ConversationInfo, ConversationStore
from localspec.errors import LocalspecError

from localspec.tui.dialogs import Confirm, PathPrompt

#: (button id, label, key) of the browser's actions, in order
ACTIONS = (("open", "Open ⏎", "enter"), ("rename", "Rename r", "r"), ("delete", "Delete d", "d"),
           ("export", "Export e", "e"), ("file", "File… f", "f"), ("close", "Close esc", "escape"))


def when(iso: str) -> str:
    """A stored UTC time as the local ``YYYY-MM-DD HH:MM``."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso[:16]


def export_name(title: str, suffix: str = ".md") -> str:
    """A file name for an export of a conversation titled ``title``."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower()[:40] or "conversation"
    return slug + suffix


class ConversationBrowser(ModalScreen[tuple[str, object] | None]):
    """Dismissed with ``("open", id)``, ``("file", path)`` or None (Esc). Renames, deletions and
    exports happen here, in the store; ``on_delete(id)`` is called after a deletion (the chat
    screen forgets the conversation it shows, when that one is deleted)."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("slash", "search", "Search", show=False),
        Binding("r", "rename", "Rename", show=False),
        Binding("d,delete", "delete", "Delete", show=False),
        Binding("e", "export", "Export", show=False),
        Binding("f", "file", "Open file", show=False),
        Binding("down", "move(1)", show=False),
        Binding("up", "move(-1)", show=False),
    ]

    def __init__(self, store: ConversationStore, on_delete=None, current: int | None = None) -> None:
        super().__init__()
        self.store = store
        self.on_delete = on_delete
        self.current = current
        self.rows: list[ConversationInfo] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog browser-dialog"):
            yield Static("Conversations  (Enter opens, / searches, Esc closes)", classes="dialog-title")
            yield Input(placeholder="search the titles and messages", id="browser-search", compact=True)
            yield DataTable(id="browser-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="browser-detail", markup=False)
            with Horizontal(classes="browser-buttons"):
                for bid, label, _key in ACTIONS:
                    yield Button(label, id=f"browser-{bid}", compact=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_column("updated", width=16, key="updated")
        table.add_column("msgs", width=4, key="msgs")
        table.add_column("title", key="title")
        self.refresh_rows()
        table.focus()

    # -- the list -----------------------------------------------------------------------------
    def refresh_rows(self, keep: int | None = None) -> None:
        query = self.query_one("#browser-search", Input).value
        try:
            self.rows = self.store.list(query)
        except Exception as e:  # a locked or damaged file: say so, keep the dialog usable
            self.app.notify_error(f"cannot read the conversation store: {e}")
            self.rows = []
        table = self.query_one(DataTable)
        table.clear()
        for info in self.rows:
            mark = "● " if info.id == self.current else ""
            table.add_row(when(info.updated), str(info.messages), Text(mark + info.title, no_wrap=True),
                          key=str(info.id))
        if keep is not None:
            index = next((i for i, r in enumerate(self.rows) if r.id == keep), 0)
            table.move_cursor(row=index)
        self._detail()

    def selected(self) -> ConversationInfo | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row is None or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def _detail(self) -> None:
        info = self.selected()
        detail = self.query_one("#browser-detail", Static)
        if info is None:
            query = self.query_one("#browser-search", Input).value.strip()
            detail.update(f"no conversation matches {query!r}" if query else
                          "no conversations yet: each chat is kept here as you go")
            return
        extra = [f"preset {info.preset}"] if info.preset else []
        if info.system:
            extra.append("system prompt: " + info.system.splitlines()[0][:50])
        text = info.match or info.title
        detail.update(text + (f"\n{' · '.join(extra)}" if extra else ""))

    @on(DataTable.RowHighlighted)
    def _highlighted(self) -> None:
        self._detail()

    @on(Input.Changed, "#browser-search")
    def _search(self) -> None:
        self.refresh_rows()

    @on(Input.Submitted, "#browser-search")
    @on(DataTable.RowSelected)
    def action_open(self) -> None:
        info = self.selected()
        if info is not None:
            self.dismiss(("open", info.id))

    def action_move(self, delta: int) -> None:
        table = self.query_one(DataTable)
        if self.rows:
            table.move_cursor(row=max(0, min(len(self.rows) - 1, (table.cursor_row or 0) + delta)))

    def action_search(self) -> None:
        self.query_one("#browser-search", Input).focus()

    def action_close(self) -> None:
        self.dismiss(None)

    # -- actions on the highlighted conversation ---------------------------------------------------
    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        action = (event.button.id or "").removeprefix("browser-")
        getattr(self, f"action_{action}")()

    def action_rename(self) -> None:
        info = self.selected()
        if info is None:
            return

        def done(title: str | None) -> None:
            if title:
                self._guard(lambda: self.store.rename(info.id, title))
                self.refresh_rows(keep=info.id)

        self.app.push_screen(PathPrompt("Rename the conversation", info.title, "Enter renames, Esc cancels"), done)

    def action_delete(self) -> None:
        info = self.selected()
        if info is None:
            return

        def done(yes: bool | None) -> None:
            if yes:
                self._guard(lambda: self.store.delete(info.id))
                if self.on_delete is not None:
                    self.on_delete(info.id)
                self.refresh_rows()
                self.notify(f"deleted {info.title!r}", timeout=3)

        self.app.push_screen(Confirm(f"Delete {info.title!r} and its {info.messages} messages? This cannot be undone."),
                             done)

    def action_export(self) -> None:
        info = self.selected()
        if info is None:
            return

        def done(path: str | None) -> None:
            if path:
                try:
                    p = save_conversation(self.store.load(info.id, with_system=True), path).resolve()
                    self.notify(f"exported {p.name} in {p.parent}", timeout=5)
                except LocalspecError as e:
                    self.app.notify_error(e.message, e.hint)
                except KeyError:
                    self.app.notify_error("that conversation is gone (deleted meanwhile)")

        self.app.push_screen(PathPrompt("Export the conversation as (.md or .json)", export_name(info.title),
                                        "Enter exports, Esc cancels; .md writes Markdown, anything else JSON"), done)

    def action_file(self) -> None:
        def done(path: str | None) -> None:
            if path:
                self.dismiss(("file", path))

        self.app.push_screen(PathPrompt("Open a conversation file (.json or .md)", "",
                                        "Enter opens, Esc cancels; it is kept with the others from then on"), done)

    def _guard(self, fn) -> None:
        try:
            fn()
        except KeyError:
            self.app.notify_error("that conversation is gone (deleted meanwhile)")
        except Exception as e:
            self.app.notify_error(f"cannot change the conversation store: {e}")
