"""What the screens share: the load bar, the chat bubbles, the side panel and the generation plumbing."""

from __future__ import annotations

import itertools
import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Markdown, ProgressBar, Static

from localspec.tui.messages import GenerationFailed, GenerationFinished, PrefillProgress, TokensEmitted
from localspec.tui.stats import LiveStats, RoundView
from localspec.tui.footer import NARROW_COLUMNS
from localspec.tui.widgets import RoundInspector, StatsPanel, TokenStream

_tags = itertools.count(1)
#: while an answer streams, the statistics panel and the round inspector redraw at most this often
PANEL_SECONDS = 1.0


class RedrawPacer:
    """When a streaming answer redraws: as often as :attr:`min_seconds` allows while the UI
    thread's CPU stays under ``budget`` of one core, less often (up to :attr:`max_seconds`)
    when each redraw costs more.

    On a 2-core machine every millisecond the UI thread computes is taken from llama.cpp's
    two threads. A long answer that scrolls repaints the whole pane on each update (about
    12 ms of Textual's compositor on an AMD EPYC without AVX-512, docs/benchmark-history.md); at five
    updates a second that was 6 % of a core and the TUI decoded a 1,743-token code edit at
    0.89x the CLI's rate. The pacer measures what the UI thread spent per redraw cycle
    (:func:`time.thread_time`, the message handling and the compositor's work of the last
    cycle) and spaces the next redraw so that cost / interval <= ``budget``.

    Args:
        budget: share of one core the UI thread may use while an answer streams.
        min_seconds, max_seconds: bounds of the interval between redraws, seconds.
        clock, cpu: wall clock and the calling thread's CPU clock (seconds; for tests).
    """

    def __init__(self, budget: float = 0.025, min_seconds: float = 0.2, max_seconds: float = 1.0,
                 clock=time.monotonic, cpu=time.thread_time) -> None:
        self.budget = budget
        self.min_seconds = min_seconds
        self.max_seconds = max_seconds
        self.clock = clock
        self.cpu = cpu
        self.interval = min_seconds
        self.cost: float | None = None  #: CPU seconds per redraw cycle, exponentially weighted
        self._at = clock()
        self._cpu_at = cpu()

    def start(self) -> None:
        """A new answer: draw its first tokens at once."""
        self._at = self.clock() - self.interval
        self._cpu_at = self.cpu()

    def due(self) -> bool:
        return self.clock() - self._at >= self.interval

    def drew(self) -> None:
        """Called on each redraw: learn the cost of the cycle that ended and set the next interval."""
        now, cpu = self.clock(), self.cpu()
        spent = max(0.0, cpu - self._cpu_at)
        self.cost = spent if self.cost is None else 0.7 * self.cost + 0.3 * spent
        self.interval = min(self.max_seconds, max(self.min_seconds, self.cost / self.budget))
        self._at, self._cpu_at = now, cpu


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
        self.query_one("#load-stage", Static).update(Text(app.load_text))
        bar = self.query_one("#load-progress", ProgressBar)
        if app.engine_state != "loading":
            bar.update(total=1, progress=1)  # hidden: an indeterminate bar would animate 15 times a second
        elif app.load_fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=1000, progress=int(app.load_fraction * 1000))


class UserMessage(Static):
    """The user's message, shown as typed (plain text: never read as markup)."""

    def __init__(self, text: str, **kw) -> None:
        super().__init__(text, markup=False, **kw)
        self.text = text

    def on_mount(self) -> None:
        self.border_title = "You"


class AssistantMessage(Vertical):
    """An answer: its coloured stream, and once finished its statistics and rounds.

    A finished answer can also be read as Markdown (:meth:`show_view`): Textual's Markdown widget,
    built on first use from the answer's text, shown in place of the token stream. The model's text
    is only ever Markdown there (Textual markup in it stays literal, links are not opened).
    """

    VIEWS = ("tokens", "markdown")

    def __init__(self, pieces=None, stats: LiveStats | None = None, rounds=None, **kw) -> None:
        super().__init__(**kw)
        self.stream = TokenStream(pieces)
        self.stats = stats or LiveStats()
        self.rounds: list[RoundView] = list(rounds or [])
        self.finished = stats is not None
        self.view = "tokens"
        self.markdown: Markdown | None = None

    def compose(self) -> ComposeResult:
        yield self.stream

    def on_mount(self) -> None:
        self.border_title = "Assistant"

    def show_view(self, view: str) -> bool:
        """Show the answer as ``"tokens"`` (coloured by speculation) or ``"markdown"`` (rendered).
        Returns False (nothing changes) for Markdown while the answer is still streaming."""
        if view == "markdown" and not self.finished:
            return False
        if view == "markdown" and self.markdown is None:
            self.markdown = Markdown(self.stream.text, open_links=False, classes="answer-md")
            self.mount(self.markdown)
        self.view = view
        self.stream.display = view == "tokens"
        if self.markdown is not None:
            self.markdown.display = view == "markdown"
        self.border_title = "Assistant · Markdown" if view == "markdown" else "Assistant"
        return True

    def toggle_view(self) -> bool:
        return self.show_view("tokens" if self.view == "markdown" else "markdown")

    def on_click(self) -> None:
        """A click on an answer makes it the one the answer keys act on (and the inspector shows)."""
        select = getattr(self.screen, "select_answer", None)
        if select is not None:
            select(self)


def side_panel() -> ComposeResult:
    with Vertical(id="side"):
        yield StatsPanel(id="stats")
        yield RoundInspector(id="inspector")


#: prompts with at least this many tokens to read say how far the prefill is (a 2-core CPU reads ~50-100 a second)
PREFILL_NOTE_TOKENS = 256


class GenerationScreen(Screen):
    """What chat and code-edit share: the stats panel, the inspector and the streaming handlers.

    Under :data:`~tui.footer.NARROW_COLUMNS` columns (class ``-narrow``) the side panel folds
    away: one line of statistics stays under the legend, and F10 shows the panel in place
    of the main column (and back).
    """

    BINDINGS = [Binding("f10", "toggle_side", "Stats", priority=True)]

    PROMPT_ID = ""  #: the id of the screen's prompt, where typing goes
    tag: str | None = None
    _panel_at = 0.0  #: time.monotonic() of the latest panel redraw while streaming
    _pacer: RedrawPacer | None = None
    _pending: list | None = None  #: pieces received and not drawn yet
    _pending_tag: str | None = None  #: the answer they belong to
    current: AssistantMessage | None = None  #: the answer being streamed (or the latest)
    inspected: AssistantMessage | None = None  #: the answer whose rounds the inspector shows

    def mode_label(self) -> str:
        return self.app.mode_label()

    def on_screen_resume(self) -> None:
        self.refresh_stats()
        self._fit(self.app.size.width)

    def on_resize(self, event) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        narrow = width < NARROW_COLUMNS
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")
            self.remove_class("-side-open")
            self.refresh_bindings()

    def check_action(self, action: str, parameters) -> bool | None:
        if action == "toggle_side":  # only a narrow screen folds the panel away
            return self.has_class("-narrow")
        return True

    def action_toggle_side(self) -> None:
        self.toggle_class("-side-open")
        if not self.has_class("-side-open"):
            self.focus_prompt()

    def refresh_stats(self) -> None:
        panel = self.query_one(StatsPanel)
        sp = self.app.last_speedup
        if sp is None:
            note = self.app.last_speedup_note or "n/a (race: F3)"
        else:
            note = f"(race, {self.app.last_speedup_mode})"
        panel.show(mode=self.mode_label(), speedup=sp, note=note)

    def answer_scroll(self) -> VerticalScroll:
        raise NotImplementedError

    #: the header's subtitle before a prefill note replaced it
    _sub_before_prefill: str | None = None

    @on(PrefillProgress)
    def _prefill(self, msg: PrefillProgress) -> None:
        """A long prompt being read (over ``PREFILL_NOTE_TOKENS``): the header says how far, until done."""
        if msg.tag != self.tag or msg.total < PREFILL_NOTE_TOKENS:
            return
        if self._sub_before_prefill is None:
            self._sub_before_prefill = self.sub_title
        if msg.done >= msg.total:
            self.sub_title, self._sub_before_prefill = self._sub_before_prefill, None
        else:
            self.sub_title = f"{self._sub_before_prefill} · reading the prompt: {msg.done:,}/{msg.total:,} tokens"

    def _end_prefill_note(self) -> None:
        if self._sub_before_prefill is not None:
            self.sub_title, self._sub_before_prefill = self._sub_before_prefill, None

    @on(TokensEmitted)
    def _tokens(self, msg: TokensEmitted) -> None:
        self._end_prefill_note()
        if msg.tag != self.tag or self.current is None:
            return
        self.current.rounds.extend(msg.rounds)
        if msg.stats is not None:
            self.current.stats = msg.stats
        if self._pending_tag != msg.tag:  # a new answer: its first tokens show at once
            self._pacer = self._pacer or RedrawPacer()
            self._pending_tag, self._pending = msg.tag, []
            self._pacer.start()
        self._pending.extend(msg.pieces)
        if not self._pacer.due():
            return
        self._pacer.drew()
        self._flush_pending()
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

    def _flush_pending(self) -> None:
        if self._pending and self.current is not None:
            self.current.stream.add(self._pending)
        self._pending = []

    @on(GenerationFinished)
    def _finished(self, msg: GenerationFinished) -> None:
        self._end_prefill_note()
        if msg.tag != self.tag or self.current is None:
            return
        cur = self.current
        self._flush_pending()
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
        self._end_prefill_note()
        if msg.tag != self.tag:
            return
        self.app.notify_error(msg.message, msg.hint)
        if self.current is not None:
            self._flush_pending()
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
        self.focus_prompt()  # the click focused the scroll view: typing still goes to the prompt

    def focus_prompt(self) -> None:
        if self.PROMPT_ID:
            self.query_one(f"#{self.PROMPT_ID}").focus()

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
