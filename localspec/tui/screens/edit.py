"""Code-edit mode (F2): an instruction on a file, the answer as a diff, saved with a backup."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import ContentSwitcher, Header, Static

from localspec.app.codeedit import (EditResult, apply_answer, continuation_prefix, diff_counts, edit_max_tokens, edit_prompt,
                                file_form, replace_file, save_new)
from localspec.config import DraftParams
from localspec.errors import LocalspecError
from localspec.core.events import TokenEvent
from localspec.app.fileio import expand_path, read_text_file

from localspec.tui.dialogs import Choose, Confirm, FilePicker
from localspec.tui.messages import GenerationFinished
from localspec.tui.footer import NARROW_HIDDEN, KeyFooter
from localspec.tui.prompt import PromptArea
from localspec.tui.stats import LiveStats
from localspec.tui.widgets import Legend, MiniStats, RoundInspector, StatsPanel
from localspec.tui.screens.base import AssistantMessage, GenerationScreen, LoadBar, new_tag, side_panel


class DiffView(Static):
    """A unified diff, coloured by CSS component classes."""

    COMPONENT_CLASSES = {"diff--add", "diff--del", "diff--hunk", "diff--head"}

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.diff = ""

    def set_diff(self, diff: str) -> None:
        self.diff = diff
        out = Text()
        style = {c: self.get_component_rich_style(c, partial=True) for c in self.COMPONENT_CLASSES}
        if not diff:
            out.append("no changes")
        for line in diff.splitlines(keepends=True):
            line = line.rstrip("\r\n") + "\n"  # a CRLF line shows as a line
            if line.startswith(("+++", "---")):
                out.append(line, style["diff--head"])
            elif line.startswith("@@"):
                out.append(line, style["diff--hunk"])
            elif line.startswith("+"):
                out.append(line, style["diff--add"])
            elif line.startswith("-"):
                out.append(line, style["diff--del"])
            else:
                out.append(line)
        self.update(out)


class _Recorded:
    """A generation whose token events are kept: a continuation starts from them
    (:func:`localspec.app.codeedit.continuation_prefix`). Everything else passes through."""

    def __init__(self, gen) -> None:
        self._gen = gen
        self.events: list[TokenEvent] = []

    def __iter__(self):
        return self

    def __next__(self):
        ev = next(self._gen)
        if isinstance(ev, TokenEvent):
            self.events.append(ev)
        return ev

    def __getattr__(self, name):
        return getattr(self._gen, name)


class EditScreen(GenerationScreen):
    """Code-edit mode: the model rewrites a file; prompt lookup drafts from the file itself.

    The logic (prompt, extraction, file form, checks, saving) is :mod:`localspec.app.codeedit`;
    this screen shows the answer and the diff, says why an answer is not a whole file,
    and asks before anything is written over the original.
    """

    BINDINGS = [
        Binding("ctrl+o", "open_file", "Open"),
        # priority: the instruction box (focused by default) would take Ctrl+D as "delete right"
        Binding("ctrl+d", "toggle_diff", "Diff", priority=True, tooltip="switch between the diff and the answer"),
        Binding("ctrl+s", "save_new", "Save new"),
        Binding("ctrl+r", "replace", "Replace"),
        Binding("f9", "continue_answer", "Continue", show=False),  # offered when an answer is cut
        Binding("f7", "prev_round", "Prev round", show=False, priority=True),
        Binding("f8", "next_round", "Next round", show=False, priority=True),
    ]
    PROMPT_ID = "edit-instruction"
    NARROW_HIDDEN = NARROW_HIDDEN | {"settings"}  # the file's keys first; F4 stays in the palette

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.path: Path | None = None
        self.original = ""
        self.result: EditResult | None = None
        self._chat: list[dict] = []
        self._prompt_ids: list[int] = []  #: the edit prompt's token ids
        self._answer_ids: list[int] = []  #: the answer's token ids so far (all parts)
        self._answer_text = ""  #: the answer's text so far (all parts)
        self._gen = None  #: the running generation (set in the worker, read once it finished)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with Vertical(id="main"):
                yield LoadBar()
                yield Static("no file open: Ctrl+O opens one", id="edit-file", markup=False)
                yield PromptArea(placeholder="Instruction, e.g. 'add type hints': Enter runs, Ctrl+J new line, "
                                             "Esc stops", id="edit-instruction")
                with ContentSwitcher(initial="edit-stream-scroll", id="edit-switcher"):
                    with VerticalScroll(id="edit-stream-scroll"):
                        yield AssistantMessage(classes="assistant-msg", id="edit-answer")
                    with VerticalScroll(id="edit-diff-scroll"):
                        yield DiffView(id="edit-diff")
                yield Legend()
                yield MiniStats()
            yield from side_panel()
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "code edit (prompt lookup)"
        self.current = self.query_one("#edit-answer", AssistantMessage)
        self.refresh_stats()
        pending = self.app.pending_edit_file
        self.app.pending_edit_file = None
        if pending:
            self.open_file(pending)
        else:
            self.query_one("#edit-instruction", PromptArea).focus()

    def mode_label(self) -> str:
        d = self.drafting()
        return f"{d.mode}, draft length {d.cap}"

    def drafting(self) -> DraftParams:
        base = self.app.settings.drafting
        return base.model_copy(update={"mode": "lookup", "draft_max": max(base.cap, 16),
                                       "draft_min": min(base.draft_min, 16)})

    def answer_scroll(self) -> VerticalScroll:
        return self.query_one("#edit-stream-scroll", VerticalScroll)

    def open_file(self, path: str) -> bool:
        try:
            content = read_text_file(expand_path(path))
        except LocalspecError as e:
            self.app.notify_error(e.message, e.hint)
            return False
        self.path = expand_path(path)
        self.original = content
        self.result = None
        self._answer_text, self._answer_ids = "", []
        self._show_file()
        self.current.stream.set_pieces([])
        self.current.border_subtitle = ""
        self.query_one(DiffView).set_diff("")
        self.query_one("#edit-switcher", ContentSwitcher).current = "edit-stream-scroll"
        self.query_one("#edit-instruction", PromptArea).focus()
        return True

    def _show_file(self) -> None:
        """The header: the file's path and its line count (of what the file holds now)."""
        n = len(file_form(self.original).endings)
        self.query_one("#edit-file", Static).update(Text(f"{self.path}  ({n} line{'' if n == 1 else 's'})"))

    def action_open_file(self) -> None:
        if self.app.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return
        self.app.push_screen(FilePicker("."), lambda p: p and self.open_file(p))

    @on(PromptArea.Submitted, "#edit-instruction")
    def _run(self, event: PromptArea.Submitted) -> None:
        instruction = event.value.strip()
        if self.path is None:
            self.notify("open a file first (Ctrl+O)", severity="warning")
            return
        if not instruction or not self.app.can_generate():
            return
        self._chat = [{"role": "user", "content": edit_prompt(self.path, self.original, instruction)}]
        self._answer_text, self._answer_ids, self._prompt_ids = "", [], []
        self.current.stream.set_pieces([])
        self._start(continuing=False)

    def action_continue_answer(self) -> None:
        """Generate more of an answer that was cut by max_tokens or stopped."""
        if self.result is None or not self.result.can_continue or not self._prompt_ids:
            self.notify("nothing to continue: the answer is whole, or cannot be continued")
            return
        if not self.app.can_generate():
            return
        self._start(continuing=True)

    def _start(self, continuing: bool) -> None:
        app = self.app
        engine = app.engine
        settings = app.settings
        drafting = self.drafting()
        chat = self._chat
        answer_ids = list(self._answer_ids)
        self.result = None
        self._gen = None
        self.current.rounds = []
        self.current.border_subtitle = "continuing" if continuing else ""
        self.query_one(RoundInspector).set_rounds([])
        self.query_one(StatsPanel).show(LiveStats(), mode=self.mode_label(), figures_mode=self.mode_label())
        self.query_one("#edit-switcher", ContentSwitcher).current = "edit-stream-scroll"

        def make_gen():
            if not self._prompt_ids:
                self._prompt_ids = list(engine.chat_tokens(chat))
            # a continuation extends the same token sequence: the KV cache holds most of it
            prompt = self._prompt_ids + answer_ids
            gen = settings.generation.model_copy(update={"max_tokens": edit_max_tokens(
                len(prompt) - len(answer_ids), settings.generation.max_tokens)})
            self._gen = _Recorded(engine.generate(prompt, settings.sampling, drafting, gen))
            return self._gen

        self.tag = new_tag("edit")
        app.start_job(self, self.tag, engine, make_gen)

    def generation_done(self, msg: GenerationFinished) -> None:
        self._answer_text += msg.text
        if self._gen is not None:
            # a character cut at the end was never shown: the continuation generates it again
            self._answer_ids += continuation_prefix(self._gen.events)
        if not self._answer_text.strip():  # nothing to make a file of: no diff, nothing to keep
            self.result = None
            why = "stopped before the model wrote anything" if msg.stats.end_reason == "cancelled" \
                else "the model answered nothing"
            self.current.border_subtitle = Text(why)
            self.notify(f"{why}: nothing to keep; {self.path.name if self.path else 'the file'} was not changed",
                        timeout=8)
            return
        name = self.path.name if self.path else "file"
        result = self.result = apply_answer(
            self.original, self._answer_text, name=name, end_reason=msg.stats.end_reason,
            tokens=len(self._answer_ids) or msg.stats.tokens, n_ctx=self.app.engine.n_ctx)
        self.query_one(DiffView).set_diff(result.diff)
        self.query_one("#edit-switcher", ContentSwitcher).current = "edit-diff-scroll"
        added, removed = diff_counts(result.diff)
        if result.incomplete:
            self.current.border_subtitle = Text("incomplete: " + result.incomplete[0])
            self._ask_incomplete(result)
            return
        if result.partial:
            self.current.border_subtitle = Text("check: " + result.partial[0])
            self._ask_incomplete(result)
            return
        if not result.changed:
            self.notify("the answer leaves the file unchanged", timeout=6)
            return
        note = ("; check: " + "; ".join(result.warnings)) if result.warnings else ""
        self.notify(f"diff: +{added} -{removed} lines; Ctrl+S saves a new file, Ctrl+R replaces the original{note}",
                    severity="warning" if result.warnings else "information", timeout=8)

    def _ask_incomplete(self, result: EditResult) -> None:
        """Say why the answer is not (or may not be) a whole file, and offer what can be done."""
        choices = [("continue", "Continue (c)", "c")] if result.can_continue else []
        choices += [("new", "Keep as new file (k)", "k"), ("close", "Look first (Esc)", "escape")]
        if result.incomplete:
            head = f"The answer is not a whole file: {'; '.join(result.incomplete)}."
        else:
            head = (f"The answer may not be the whole file: {'; '.join(result.partial)}. "
                    "Ctrl+R can still replace the original after a look.")
        question = (f"{head}\nThe original was not changed. "
                    + ("Continue the answer, keep it as a new file, or look at it first?" if result.can_continue
                       else "Keep it as a new file, or look at it first?"))

        def done(choice: str | None) -> None:
            if choice == "continue":
                self.action_continue_answer()
            elif choice == "new":
                self.action_save_new()

        self.app.push_screen(Choose(question, choices), done)

    def action_toggle_diff(self) -> None:
        sw = self.query_one("#edit-switcher", ContentSwitcher)
        sw.current = "edit-diff-scroll" if sw.current == "edit-stream-scroll" else "edit-stream-scroll"

    def action_save_new(self) -> None:
        if self.result is None or self.path is None:
            self.notify("nothing to save yet: run an instruction first")
            return
        try:
            p = save_new(self.path, self.result).resolve()
            self.notify(f"saved {p.name} in {p.parent}" + (" (an incomplete answer)" if self.result.incomplete else ""))
        except LocalspecError as e:
            self.app.notify_error(e.message, e.hint)

    def action_replace(self) -> None:
        if self.result is None or self.path is None:
            self.notify("nothing to save yet: run an instruction first")
            return
        result, path, original = self.result, self.path, self.original
        if result.incomplete:
            self.app.notify_error(f"not replacing {path.name}: {'; '.join(result.incomplete)}",
                                  "Ctrl+S keeps the answer as a new file" +
                                  (", F9 continues it" if result.can_continue else ""))
            return
        if not result.changed or result.text == original:
            self.notify(f"nothing to replace: {path.name} already holds this result")
            return
        question = f"Replace {path} with the rewritten file? A backup is kept."
        if result.warnings:
            question += "\nCheck first: " + "; ".join(result.warnings) + "."

        def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                backup = replace_file(path, original, result)
                self.original = result.text
                self._show_file()
                self.notify(f"replaced {path}; backup kept at {backup}")
            except LocalspecError as e:
                self.app.notify_error(e.message, e.hint)

        self.app.push_screen(Confirm(question), done)


# -- race -----------------------------------------------------------------------------------
