"""Browse a Hugging Face repo's GGUF files and fetch one (the model picker's ``h``): type ``OWNER/REPO``,
Enter lists its ``.gguf`` files with their sizes and whether each fits the free space of the Hugging Face
cache; Enter on a file asks to confirm (size and free space said), then downloads it with a progress
bar. The hub is reached only in thread workers; every failure (offline, no such repo, no GGUF files, a
full disk) is one line with a hint, the one ``hf:`` references give (:mod:`localspec.app.catalog`).
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
from textual.widgets import Button, DataTable, Input, ProgressBar, Static

from localspec.app import catalog
from localspec.app.catalog import HubFile, human_size
from localspec.app.models_list import quant_from_name
from localspec.errors import LocalspecError
from localspec.tui.dialogs import Confirm


class HubBrowser(ModalScreen[Path | None]):
    """Dismissed with the fetched file's path, or None (Esc)."""

    BINDINGS = [Binding("escape", "close", "Back")]

    class Listed(Message):
        def __init__(self, repo: str, files: list[HubFile], folder: Path, free: int) -> None:
            super().__init__()
            self.repo, self.files, self.folder, self.free = repo, files, folder, free

    class Failed(Message):
        def __init__(self, error: LocalspecError) -> None:
            super().__init__()
            self.error = error

    class Progress(Message):
        def __init__(self, done: int, total: int) -> None:
            super().__init__()
            self.done, self.total = done, total

    class Fetched(Message):
        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = path

    def __init__(self, repo: str = "") -> None:
        super().__init__()
        self.repo = repo
        self.files: list[HubFile] = []
        self.folder: Path | None = None
        self.free = 0
        self.fetching: HubFile | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog picker-dialog models-dialog"):
            yield Static("Hugging Face  (OWNER/REPO, Enter lists; Enter on a file fetches; Esc back)",
                         classes="dialog-title")
            yield Input(self.repo, placeholder="OWNER/REPO, e.g. bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF",
                        id="hub-repo")
            yield DataTable(id="hub-table", cursor_type="row", zebra_stripes=True)
            yield Static("type a repo id and press Enter", id="hub-detail", markup=False)
            yield ProgressBar(total=None, show_eta=False, id="hub-progress")
            with Horizontal(classes="browser-buttons"):
                yield Button("Fetch ⏎", id="hub-fetch", compact=True)
                yield Button("Back esc", id="hub-close", compact=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in (("file", 44), ("size", 8), ("quant", 7), ("fits", 4)):
            table.add_column(label, width=width, key=label)
        self.query_one("#hub-progress").display = False
        self.query_one(Input).focus()

    def _say(self, text: str) -> None:
        self.query_one("#hub-detail", Static).update(text)

    # -- listing --------------------------------------------------------------------------------
    @on(Input.Submitted, "#hub-repo")
    def _submitted(self, event: Input.Submitted) -> None:
        repo = event.value.strip().removeprefix("hf:").removeprefix("https://huggingface.co/").strip("/")
        if not repo or self.fetching is not None:
            return
        self.repo = repo
        self.query_one(DataTable).clear()
        self.files = []
        self._say(f"listing {repo}…")
        self._list(repo)

    @work(thread=True, exclusive=True, exit_on_error=False, group="hub-list")
    def _list(self, repo: str) -> None:
        """The repo's GGUF files and the cache's free space, off the UI thread (a network call)."""
        try:
            files = catalog.hub_gguf_files(repo)
            folder = catalog.hub_cache_root()
            self.post_message(self.Listed(repo, files, folder, catalog.free_space(folder)))
        except LocalspecError as e:
            self.post_message(self.Failed(e))
        except Exception as e:  # never a traceback in the UI
            self.post_message(self.Failed(LocalspecError(f"{type(e).__name__}: {e}", "this looks like a bug")))

    @on(Listed)
    def _listed(self, msg: Listed) -> None:
        if msg.repo != self.repo:
            return  # an older listing
        self.files, self.folder, self.free = msg.files, msg.folder, msg.free
        table = self.query_one(DataTable)
        table.clear()
        for f in msg.files:
            table.add_row(Text(f.name, no_wrap=True), human_size(f.size) if f.size else "?",
                          quant_from_name(f.name), "yes" if f.size <= msg.free else "no")
        table.move_cursor(row=0)
        table.focus()
        self._detail()

    @on(Failed)
    def _failed(self, msg: Failed) -> None:
        self.fetching = None
        self.query_one("#hub-progress").display = False
        text = msg.error.message + (f"\n{msg.error.hint}" if msg.error.hint else "")
        self._say(text)
        self.notify(text, severity="error", timeout=10)

    @on(DataTable.RowHighlighted)
    def _detail(self) -> None:
        f = self.selected()
        if f is None or self.fetching is not None:
            return
        fits = "Enter fetches it" if f.size <= self.free else "does not fit"
        self._say(f"{f.name}: {human_size(f.size)}; {human_size(self.free)} free in {self.folder}\n{fits}")

    def selected(self) -> HubFile | None:
        table = self.query_one(DataTable)
        if not self.files or not 0 <= table.cursor_row < len(self.files):
            return None
        return self.files[table.cursor_row]

    # -- fetching -------------------------------------------------------------------------------
    @on(DataTable.RowSelected)
    @on(Button.Pressed, "#hub-fetch")
    def action_fetch(self) -> None:
        f = self.selected()
        if f is None or self.fetching is not None:
            return
        try:
            free = catalog.check_fits(f.name, f.size, self.folder or catalog.hub_cache_root())
        except LocalspecError as e:
            self._failed(self.Failed(e))
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._start(f)

        self.app.push_screen(Confirm(f"Download {f.name} ({human_size(f.size)}) from {self.repo} into "
                                     f"{self.folder}? {human_size(free)} free there."), answered)

    def _start(self, f: HubFile) -> None:
        self.fetching = f
        bar = self.query_one("#hub-progress", ProgressBar)
        bar.update(total=f.size or None, progress=0)
        bar.display = True
        self._say(f"downloading {f.name} ({human_size(f.size)})…")
        self._fetch(self.repo, f)

    @work(thread=True, exclusive=True, exit_on_error=False, group="hub-fetch")
    def _fetch(self, repo: str, f: HubFile) -> None:
        try:
            path = catalog.hub_fetch(repo, f, lambda _stage, done, total: self.post_message(self.Progress(done, total)))
        except LocalspecError as e:
            self.post_message(self.Failed(e))
            return
        except Exception as e:  # never a traceback in the UI
            self.post_message(self.Failed(LocalspecError(f"{type(e).__name__}: {e}", "this looks like a bug")))
            return
        self.post_message(self.Fetched(path))

    @on(Progress)
    def _progress(self, msg: Progress) -> None:
        if self.fetching is None:
            return
        bar = self.query_one("#hub-progress", ProgressBar)
        total = msg.total or self.fetching.size
        if total:
            bar.update(total=total, progress=min(msg.done, total))
            self._say(f"downloading {self.fetching.name}: {msg.done / 1e6:.0f} / {total / 1e6:.0f} MB")

    @on(Fetched)
    def _fetched(self, msg: Fetched) -> None:
        bar = self.query_one("#hub-progress", ProgressBar)
        bar.update(total=bar.total or 1, progress=bar.total or 1)
        self.fetching = None
        self.notify(f"fetched {msg.path.name}: pick it as the target (t) or the draft (d)", timeout=6)
        self.dismiss(msg.path)

    @on(Button.Pressed, "#hub-close")
    def action_close(self) -> None:
        if self.fetching is not None:
            self.notify(f"{self.fetching.name} goes on downloading; it shows in the model list (Ctrl+L) when done",
                        timeout=8)
        self.dismiss(None)
