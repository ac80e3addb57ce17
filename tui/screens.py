"""The three screens (app modes): chat, code-edit, race."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Footer, Header, Input, ProgressBar, Static

from localspec.chat import fit_messages
from localspec.codeedit import (EditResult, apply_answer, continuation_prefix, diff_counts, edit_max_tokens, edit_prompt, file_form,
                                replace_file, save_new)
from localspec.config import DraftParams
from localspec.conversation import Conversation, Message, load_conversation, save_conversation
from localspec.errors import LocalspecError
from localspec.events import TokenEvent
from localspec.fileio import expand_path, read_text_file

from .dialogs import Choose, Confirm, FilePicker, PathPrompt
from .messages import GenerationFailed, GenerationFinished, Notice, RaceFinished, TokensEmitted
from .stats import LiveStats, RoundView, fmt_rate, median_spread, race_speedup
from .widgets import Legend, RoundInspector, StatsPanel, TokenStream, update_in_place, wrapped_lines

_tags = itertools.count(1)
#: while an answer streams, the statistics panel and the round inspector redraw at most this often
PANEL_SECONDS = 1.0


def new_tag(kind: str) -> str:
    return f"{kind}-{next(_tags)}"


class LoadBar(Vertical):
    """Model loading: a stage line and a progress bar; hidden once the engine is ready."""

    def compose(self) -> ComposeResult:
        yield Static("", id="load-stage")
        yield ProgressBar(total=None, show_eta=False, id="load-progress")

    def on_mount(self) -> None:
        self.watch(self.app, "load_text", self._update)
        self.watch(self.app, "load_fraction", self._update)
        self.watch(self.app, "engine_state", self._update)

    def _update(self, _=None) -> None:
        app = self.app
        self.display = app.engine_state == "loading"
        self.query_one("#load-stage", Static).update(app.load_text)
        bar = self.query_one("#load-progress", ProgressBar)
        if app.engine_state != "loading":
            bar.update(total=1, progress=1)  # hidden: an indeterminate bar would animate 15 times a second
        elif app.load_fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=1000, progress=int(app.load_fraction * 1000))


class UserMessage(Static):
    def on_mount(self) -> None:
        self.border_title = "You"


class AssistantMessage(Vertical):
    """An answer: its coloured stream, and once finished its statistics and rounds."""

    def __init__(self, pieces=None, stats: LiveStats | None = None, rounds=None, **kw) -> None:
        super().__init__(**kw)
        self.stream = TokenStream(pieces)
        self.stats = stats or LiveStats()
        self.rounds: list[RoundView] = list(rounds or [])
        self.finished = stats is not None

    def compose(self) -> ComposeResult:
        yield self.stream

    def on_mount(self) -> None:
        self.border_title = "Assistant"


def side_panel() -> ComposeResult:
    with Vertical(id="side"):
        yield StatsPanel(id="stats")
        yield RoundInspector(id="inspector")


class GenerationScreen(Screen):
    """What chat and code-edit share: the stats panel, the inspector and the streaming handlers."""

    tag: str | None = None
    _panel_at = 0.0  #: time.monotonic() of the latest panel redraw while streaming
    current: AssistantMessage | None = None  #: the answer being streamed (or the latest)
    inspected: AssistantMessage | None = None  #: the answer whose rounds the inspector shows

    def mode_label(self) -> str:
        return self.app.mode_label()

    def on_screen_resume(self) -> None:
        self.refresh_stats()

    def refresh_stats(self) -> None:
        panel = self.query_one(StatsPanel)
        sp = self.app.last_speedup
        panel.show(mode=self.mode_label(), speedup=sp, note="n/a (race: F3)" if sp is None
                   else f"(race, {self.app.last_speedup_mode})")

    def answer_scroll(self) -> VerticalScroll:
        raise NotImplementedError

    @on(TokensEmitted)
    def _tokens(self, msg: TokensEmitted) -> None:
        if msg.tag != self.tag or self.current is None:
            return
        self.current.stream.add(msg.pieces)
        self.current.rounds.extend(msg.rounds)
        if msg.stats is not None:
            self.current.stats = msg.stats
        # the tables of the panel and the inspector cost far more to draw than the tokens:
        # while streaming they follow at most every PANEL_SECONDS (the final figures always show)
        now = time.monotonic()
        if now - self._panel_at >= PANEL_SECONDS:
            self._panel_at = now
            if msg.stats is not None:
                self.query_one(StatsPanel).show(msg.stats)
            if self.inspected in (None, self.current):
                self.query_one(RoundInspector).set_rounds(self.current.rounds)
        self.answer_scroll().scroll_end(animate=False)

    @on(GenerationFinished)
    def _finished(self, msg: GenerationFinished) -> None:
        if msg.tag != self.tag or self.current is None:
            return
        cur = self.current
        cur.stream.settle()
        cur.stats = msg.stats
        cur.rounds = list(msg.rounds)
        cur.finished = True
        self.query_one(StatsPanel).show(msg.stats)
        if self.inspected in (None, cur):
            self.query_one(RoundInspector).set_rounds(cur.rounds)
        if msg.stats.end_reason == "cancelled":
            cur.border_subtitle = "stopped"
            self.notify("stopped; the KV caches are consistent", timeout=3)
        self.answer_scroll().scroll_end(animate=False)
        self.generation_done(msg)

    @on(GenerationFailed)
    def _failed(self, msg: GenerationFailed) -> None:
        if msg.tag != self.tag:
            return
        self.app.notify_error(msg.message, msg.hint)
        if self.current is not None:
            self.current.stream.settle()
            self.current.border_subtitle = "failed"
        self.generation_failed(msg)

    def generation_done(self, msg: GenerationFinished) -> None:
        pass

    def generation_failed(self, msg: GenerationFailed) -> None:
        pass

    @on(TokenStream.RoundClicked)
    def _round_clicked(self, msg: TokenStream.RoundClicked) -> None:
        """A click on a token opens its round in the inspector."""
        answer = msg.stream.parent
        if not isinstance(answer, AssistantMessage):
            return
        for other in self.query(AssistantMessage):
            if other is not answer:
                other.stream.selected_round = None
        self.inspected = answer
        insp = self.query_one(RoundInspector)
        insp.set_rounds(answer.rounds)
        if insp.show_round(msg.round):
            answer.stream.selected_round = msg.round

    def action_prev_round(self) -> None:
        self._step_round(-1)

    def action_next_round(self) -> None:
        self._step_round(+1)

    def _step_round(self, delta: int) -> None:
        answer = self.inspected or self.current
        if answer is None:
            return
        insp = self.query_one(RoundInspector)
        if insp.rounds != answer.rounds:
            insp.set_rounds(answer.rounds)
        rnd = insp.step(delta)
        answer.stream.selected_round = rnd


class ChatScreen(GenerationScreen):
    """A transcript, an input box, the coloured answer stream, statistics and the inspector."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+o", "open", "Open"),
        Binding("ctrl+n", "new_chat", "New"),
        Binding("f6", "retry", "Retry"),
        Binding("f7", "prev_round", "◀Rnd"),
        Binding("f8", "next_round", "Rnd▶"),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.messages: list[dict] = []  # role, content, and for answers segments/stats/rounds

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with Vertical(id="main"):
                yield LoadBar()
                yield VerticalScroll(id="transcript")
                yield Legend()
                yield Input(placeholder="Ask something; Enter sends, Esc stops the answer", id="prompt")
            yield from side_panel()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "chat"
        self.refresh_stats()
        self.query_one("#prompt", Input).focus()

    def answer_scroll(self) -> VerticalScroll:
        return self.query_one("#transcript", VerticalScroll)

    # -- sending ----------------------------------------------------------------------
    @on(Input.Submitted, "#prompt")
    def _submit(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if not self.app.can_generate():
            return
        event.input.value = ""
        self.messages.append({"role": "user", "content": text})
        self.answer_scroll().mount(UserMessage(text, classes="user-msg"))
        self._ask()

    def _ask(self) -> None:
        app = self.app
        if self.inspected is not None:
            self.inspected.stream.selected_round = None
        self.inspected = None
        self.current = AssistantMessage(classes="assistant-msg")
        self.answer_scroll().mount(self.current)
        self.answer_scroll().scroll_end(animate=False)
        self.query_one(RoundInspector).set_rounds([])
        self.query_one(StatsPanel).show(LiveStats(), mode=self.mode_label())
        chat = [{"role": m["role"], "content": m["content"]} for m in self.messages]
        settings = app.settings
        drafting = app.effective_drafting(settings.drafting)
        engine = app.engine

        def make_gen():
            # the engine's overflow policy: drop the oldest turns that do not fit
            fitted = fit_messages(engine, chat, settings.generation.max_tokens)
            if fitted.dropped:
                app.post_message(Notice(f"the context window is full: the oldest {fitted.dropped} message(s) "
                                        "were left out of this prompt (they stay in the transcript)", "warning"))
            return engine.generate(fitted.tokens, settings.sampling, drafting, settings.generation)

        self.tag = new_tag("chat")
        app.start_job(self, self.tag, engine, make_gen)

    def generation_done(self, msg: GenerationFinished) -> None:
        cur = self.current
        self.messages.append({"role": "assistant", "content": msg.text, "segments": list(cur.stream.pieces),
                              "stats": msg.stats, "rounds": cur.rounds})

    def generation_failed(self, msg: GenerationFailed) -> None:
        # keep the question; drop the empty answer so a retry asks again
        if self.current is not None and not self.current.stream.pieces:
            self.current.remove()
            self.current = None

    def action_retry(self) -> None:
        if not self.app.can_generate():
            return
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages.pop()
            answers = self.query(AssistantMessage)
            if answers:
                answers.last().remove()
        if not self.messages or self.messages[-1]["role"] != "user":
            self.notify("nothing to retry: ask something first")
            return
        self._ask()

    def action_new_chat(self) -> None:
        if self.app.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return
        self.messages.clear()
        self.current = self.inspected = None
        self.answer_scroll().remove_children()
        self.query_one(RoundInspector).set_rounds([])
        self.query_one(StatsPanel).show(LiveStats())

    # -- conversations ----------------------------------------------------------------
    def conversation(self) -> Conversation:
        msgs = []
        for m in self.messages:
            if m["role"] == "assistant":
                msgs.append(Message(role="assistant", content=m["content"],
                                    segments=[(t, k, r) for t, k, r in m["segments"]],
                                    stats=m["stats"].as_dict(), rounds=[r.as_dict() for r in m["rounds"]]))
            else:
                msgs.append(Message(role=m["role"], content=m["content"]))
        return Conversation(settings=self.app.settings.model_dump(mode="json"), messages=msgs)

    def action_save(self) -> None:
        if not self.messages:
            self.notify("nothing to save yet")
            return
        default = f"conversation-{time.strftime('%Y%m%d-%H%M%S')}.json"

        def done(path: str | None) -> None:
            if path:
                try:
                    p = save_conversation(self.conversation(), path)
                    self.notify(f"saved {p}")
                except LocalspecError as e:
                    self.app.notify_error(e.message, e.hint)

        self.app.push_screen(PathPrompt("Save conversation as (.json or .md)", default), done)

    def action_open(self) -> None:
        if self.app.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return

        def done(path: str | None) -> None:
            if path:
                try:
                    self.show_conversation(load_conversation(path))
                    self.notify(f"opened {path}")
                except LocalspecError as e:
                    self.app.notify_error(e.message, e.hint)

        self.app.push_screen(PathPrompt("Open conversation (.json or .md)", ""), done)

    def show_conversation(self, conv: Conversation) -> None:
        self.action_new_chat()
        scroll = self.answer_scroll()
        last = None
        for m in conv.messages:
            if m.role == "assistant":
                rounds = [RoundView.from_dict(r) for r in (m.rounds or [])]
                segs = m.segments if m.segments is not None else [(m.content, "target")]
                pieces = [(seg[0], seg[1], seg[2] if len(seg) > 2 else -1) for seg in segs]
                stats = LiveStats.from_dict(m.stats) if m.stats else LiveStats(final=True)
                last = AssistantMessage(pieces, stats, rounds, classes="assistant-msg")
                scroll.mount(last)
                self.messages.append({"role": "assistant", "content": m.content, "segments": pieces,
                                      "stats": stats, "rounds": rounds})
            else:
                scroll.mount(UserMessage(m.content, classes="user-msg"))
                self.messages.append({"role": m.role, "content": m.content})
        self.current = last
        if last is not None:
            self.query_one(StatsPanel).show(last.stats)
            self.query_one(RoundInspector).set_rounds(last.rounds)
        scroll.scroll_end(animate=False)


# -- code edit ----------------------------------------------------------------------------
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
    (:func:`localspec.codeedit.continuation_prefix`). Everything else passes through."""

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

    The logic (prompt, extraction, file form, checks, saving) is :mod:`localspec.codeedit`;
    this screen shows the answer and the diff, says why an answer is not a whole file,
    and asks before anything is written over the original.
    """

    BINDINGS = [
        Binding("ctrl+o", "open_file", "Open"),
        Binding("ctrl+d", "toggle_diff", "Diff"),
        Binding("ctrl+s", "save_new", "Save new"),
        Binding("ctrl+r", "replace", "Replace"),
        Binding("f9", "continue_answer", "Continue", show=False),  # offered when an answer is cut
        Binding("f7", "prev_round", "◀Rnd"),
        Binding("f8", "next_round", "Rnd▶"),
    ]

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
                yield Static("no file open: Ctrl+O opens one", id="edit-file")
                yield Input(placeholder="Instruction, e.g. 'add type hints'; Enter runs, Esc stops",
                            id="edit-instruction")
                with ContentSwitcher(initial="edit-stream-scroll", id="edit-switcher"):
                    with VerticalScroll(id="edit-stream-scroll"):
                        yield AssistantMessage(classes="assistant-msg", id="edit-answer")
                    with VerticalScroll(id="edit-diff-scroll"):
                        yield DiffView(id="edit-diff")
                yield Legend()
            yield from side_panel()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "code edit (prompt lookup)"
        self.current = self.query_one("#edit-answer", AssistantMessage)
        self.refresh_stats()
        pending = self.app.pending_edit_file
        self.app.pending_edit_file = None
        if pending:
            self.open_file(pending)
        else:
            self.query_one("#edit-instruction", Input).focus()

    def mode_label(self) -> str:
        d = self.drafting()
        return f"{d.mode}, draft length {d.draft_max}"

    def drafting(self) -> DraftParams:
        base = self.app.settings.drafting
        return base.model_copy(update={"mode": "lookup", "draft_max": max(base.draft_max, 16),
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
        n = len(file_form(content).endings)
        self.query_one("#edit-file", Static).update(f"{self.path}  ({n} lines)")
        self.current.stream.set_pieces([])
        self.current.border_subtitle = ""
        self.query_one(DiffView).set_diff("")
        self.query_one("#edit-switcher", ContentSwitcher).current = "edit-stream-scroll"
        self.query_one("#edit-instruction", Input).focus()
        return True

    def action_open_file(self) -> None:
        if self.app.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return
        self.app.push_screen(FilePicker("."), lambda p: p and self.open_file(p))

    @on(Input.Submitted, "#edit-instruction")
    def _run(self, event: Input.Submitted) -> None:
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
        self.query_one(StatsPanel).show(LiveStats(), mode=self.mode_label())
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
        name = self.path.name if self.path else "file"
        result = self.result = apply_answer(
            self.original, self._answer_text, name=name, end_reason=msg.stats.end_reason,
            tokens=len(self._answer_ids) or msg.stats.tokens, n_ctx=getattr(self.app.engine, "n_ctx", None))
        self.query_one(DiffView).set_diff(result.diff)
        self.query_one("#edit-switcher", ContentSwitcher).current = "edit-diff-scroll"
        added, removed = diff_counts(result.diff)
        if result.incomplete:
            self.current.border_subtitle = "incomplete: " + result.incomplete[0]
            self._ask_incomplete(result)
            return
        if result.partial:
            self.current.border_subtitle = "check: " + result.partial[0]
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
            p = save_new(self.path, self.result)
            self.notify(f"saved {p}" + (" (an incomplete answer)" if self.result.incomplete else ""))
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
        if not result.changed:
            self.notify("nothing to replace: the result equals the original")
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
                self.notify(f"replaced {path}; backup kept at {backup}")
            except LocalspecError as e:
                self.app.notify_error(e.message, e.hint)

        self.app.push_screen(Confirm(question), done)


# -- race -----------------------------------------------------------------------------------
class RacePane(Vertical):
    def __init__(self, title: str, **kw) -> None:
        super().__init__(**kw)
        self.title_text = title
        self.stream = TokenStream()
        self.stats = LiveStats()

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="race-scroll"):
            yield self.stream
        yield Static("", classes="race-line")

    def on_mount(self) -> None:
        self.border_title = self.title_text
        self.show_stats(self.stats)

    def reset(self) -> None:
        self.stream.set_pieces([])
        self.stats = LiveStats()
        self.border_subtitle = ""
        self.show_stats(self.stats)

    def show_stats(self, s: LiveStats, done: bool = False) -> None:
        self.stats = s
        rate = s.acceptance_rate
        line = (f"{s.tokens} tokens in {s.decode_seconds:.2f} s: {fmt_rate(s.rate)} tok/s decode"
                f"  accept {fmt_rate(None if rate is None else rate * 100, '%', 0)}"
                f"  prefill {s.warmup_seconds + s.prefill_seconds:.2f} s (untimed)"
                + (f"  catch-up {s.catchup_seconds:.2f} s (untimed)" if s.catchup_tokens else ""))
        if done:
            self.border_subtitle = f"decoded in {s.decode_seconds:.2f} s"
        static = self.query_one(".race-line", Static)
        update_in_place(static, line, wrapped_lines(static, Text(line)))
        self.query_one(".race-scroll", VerticalScroll).scroll_end(animate=False)


def race_verdict(target: LiveStats, spec: LiveStats, texts: dict[str, str]) -> tuple[float | None, str]:
    """The race's headline: (speedup, one line saying what was compared and whether the outputs agree)."""
    sp = race_speedup(target, spec)
    if sp is None:
        return None, "no result: a side produced no tokens"
    a, b = texts.get("target", ""), texts.get("spec", "")
    if a == b:
        same = "same text"
    else:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        same = f"outputs differ from character {at}: the rates are over different texts"
    verdict = "faster" if sp >= 1 else "slower"
    return sp, (f"speculative {spec.rate:.1f} tok/s vs target-only {target.rate:.1f} tok/s, decode rates "
                f"({spec.tokens} vs {target.tokens} tokens, {same}): speculation was {verdict}")


class RaceScreen(Screen):
    """One prompt through target-only and speculative decoding, side by side, live.

    Before timing, both sides put the prompt in their KV caches (the draft model's too);
    the headline is decode rate over decode rate. ``repeat`` races the same prompt N
    times (F6 races again); from 3 races on the median and range of the speedups show.
    """

    BINDINGS = [Binding("f5", "app.cycle_mode", "Mode"), Binding("f6", "race_again", "Again")]

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.tag: str | None = None
        self.prompt_text = ""
        self.ratios: list[float] = []  #: speedups of the races of this prompt and mode
        self._ratio_key: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="race-body"):
            yield LoadBar()
            with Horizontal(id="race-controls"):
                yield Input(placeholder="One prompt for both runs; Enter races, Esc stops", id="race-prompt")
                yield Static("repeat", id="race-repeat-label")
                yield Input("1", type="integer", id="race-repeats", tooltip="races per Enter or F6 (median from 3)")
            with Horizontal(id="race-panes"):
                yield RacePane("target only", id="race-target")
                yield RacePane("speculative", id="race-spec")
            yield Static("", id="race-result")
            yield Legend()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "race: target-only vs speculative"
        self._titles()
        self.query_one("#race-result", Static).update(
            "Both sides first prefill the prompt (untimed), then alternate round by round in one thread; "
            "each is timed over its own rounds, and the speedup is decode rate over decode rate.")
        self.query_one("#race-prompt", Input).focus()

    def on_screen_resume(self) -> None:
        self._titles()

    def _titles(self) -> None:
        d = self.app.race_drafting()
        self.query_one("#race-spec", RacePane).border_title = f"speculative: {d.mode}, draft length {d.draft_max}"
        self.query_one("#race-target", RacePane).border_title = "target only"

    def repeats(self) -> int:
        try:
            return max(1, min(50, int(self.query_one("#race-repeats", Input).value or "1")))
        except ValueError:
            return 1

    @on(Input.Submitted, "#race-prompt")
    def _go(self, event: Input.Submitted) -> None:
        self._start(event.value.strip())

    @on(Input.Submitted, "#race-repeats")
    def _go_repeats(self, event: Input.Submitted) -> None:
        self._start(self.query_one("#race-prompt", Input).value.strip())

    def action_race_again(self) -> None:
        self._start(self.prompt_text or self.query_one("#race-prompt", Input).value.strip())

    def _start(self, text: str) -> None:
        if not text or not self.app.can_generate():
            return
        self._titles()
        d = self.app.race_drafting()
        key = (text, d.mode, d.draft_max, self.app.settings.sampling, self.app.settings.generation)
        if key != self._ratio_key:
            self.ratios, self._ratio_key = [], key
        self.prompt_text = text
        for pane in self.query(RacePane):
            pane.reset()
        self.query_one("#race-result", Static).update("racing…")
        self.tag = new_tag("race")
        self.app.start_race(self, self.tag, text, self.repeats())

    @on(TokensEmitted)
    def _tokens(self, msg: TokensEmitted) -> None:
        if not msg.tag.startswith(f"{self.tag}:"):
            return
        side = msg.tag.split(":", 1)[1]
        pane = self.query_one(f"#race-{side}", RacePane)
        pane.stream.add(msg.pieces)
        if msg.stats is not None:
            pane.show_stats(msg.stats)

    @on(RaceFinished)
    def _done(self, msg: RaceFinished) -> None:
        t, s = msg.results["target"], msg.results["spec"]
        for pane in self.query(RacePane):
            pane.stream.settle()
        self.query_one("#race-target", RacePane).show_stats(t, done=True)
        self.query_one("#race-spec", RacePane).show_stats(s, done=True)
        sp, line = race_verdict(t, s, msg.texts)
        result = self.query_one("#race-result", Static)
        if sp is None:
            result.update(line)
            return
        if not msg.cancelled:
            self.ratios.append(sp)
        self.app.last_speedup = sp
        self.app.last_speedup_mode = self.app.race_drafting().mode
        out = Text.assemble(("speedup ", "bold"), (f"{sp:.2f}x", "bold reverse"), f"  {line}",
                            " (stopped early)" if msg.cancelled else "")
        if msg.repeats > 1:
            out.append(f"\nrace {msg.repeat} of {msg.repeats}")
        if len(self.ratios) >= 3:
            med, lo, hi = median_spread(self.ratios)
            self.app.last_speedup = med
            out.append(f"\nmedian {med:.2f}x over {len(self.ratios)} races of this prompt "
                       f"(range {lo:.2f}x to {hi:.2f}x)", "bold")
        elif self.ratios:
            out.append(f"\n{len(self.ratios)} race(s) of this prompt so far; F6 races again "
                       "(median and range from 3)", "dim")
        if s.drafted == 0:
            out.append("\nthe speculative side drafted nothing (mode auto judged that speculation does not pay "
                       "here), so both sides decoded target-only: the difference is measurement noise")
        result.update(out)
        if msg.repeat < msg.repeats:
            for pane in self.query(RacePane):
                pane.stream.set_pieces([])

    @on(GenerationFailed)
    def _failed(self, msg: GenerationFailed) -> None:
        if msg.tag == self.tag:
            self.app.notify_error(msg.message, msg.hint)
            self.query_one("#race-result", Static).update(f"failed: {msg.message}")
