"""Race mode (F3): target-only and speculative decoding side by side, with the speedup."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Input, Static

from localspec.tui.messages import GenerationFailed, RaceFinished, TokensEmitted
from localspec.tui.footer import KeyFooter
from localspec.tui.prompt import PromptArea
from localspec.tui.stats import LiveStats, fmt_rate, median_spread, plural, race_speedup
from localspec.tui.widgets import Legend, TokenStream, update_in_place, wrapped_lines
from localspec.tui.screens.base import LoadBar, new_tag


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
        line = (f"{plural(s.tokens, 'token')} in {s.decode_seconds:.2f} s: {fmt_rate(s.rate)} tok/s decode"
                f"  accept {fmt_rate(None if rate is None else rate * 100, '%', 0)}"
                f"  prefill {s.warmup_seconds + s.prefill_seconds:.2f} s (untimed)"
                + (f"  catch-up {s.catchup_seconds:.2f} s (untimed)" if s.catchup_tokens else ""))
        if done:
            self.border_subtitle = f"decoded in {s.decode_seconds:.2f} s"
        static = self.query_one(".race-line", Static)
        update_in_place(static, line, wrapped_lines(static, Text(line)))
        self.query_one(".race-scroll", VerticalScroll).scroll_end(animate=False)


#: fewer generated tokens than this on a side, and a race's decode rates are not worth comparing
MIN_RACE_TOKENS = 16
#: speedups closer to 1 than this are reported as no measurable difference (one race's noise)
RACE_NOISE = 0.05


def race_verdict(target: LiveStats, spec: LiveStats, texts: dict[str, str]) -> tuple[float | None, str]:
    """The race's headline: (speedup, one line saying what was compared and whether the outputs agree).

    The speedup is ``None`` when the figure would mean nothing, and the line says why: a
    side produced no tokens; the speculative side drafted nothing (both decoded target-only);
    a side produced fewer than :data:`MIN_RACE_TOKENS` tokens. A speedup within
    :data:`RACE_NOISE` of 1 is returned (it counts towards the median) but the line calls it
    no measurable difference.
    """
    sp = race_speedup(target, spec)
    if sp is None:
        return None, "no result: a side produced no tokens"
    if spec.drafted == 0:
        return None, ("no speedup figure: the speculative side drafted nothing (mode auto judged that "
                      "speculation does not pay here, or nothing matched), so both sides decoded target-only")
    fewest = min(spec.tokens, target.tokens)
    if fewest < MIN_RACE_TOKENS:
        return None, (f"no speedup figure: {plural(fewest, 'token')} on a side are too few to time "
                      f"(at least {MIN_RACE_TOKENS}; ask for a longer answer)")
    a, b = texts.get("target", ""), texts.get("spec", "")
    if a == b:
        same = "same text"
    else:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        same = f"outputs differ from character {at}: the rates are over different texts"
    if abs(sp - 1) < RACE_NOISE:
        verdict = f"no measurable difference: within measurement noise ({RACE_NOISE:.0%})"
    else:
        verdict = "speculation was faster" if sp >= 1 else "speculation was slower"
    return sp, (f"speculative {spec.rate:.1f} tok/s vs target-only {target.rate:.1f} tok/s, decode rates "
                f"({spec.tokens} vs {plural(target.tokens, 'token')}, {same}): {verdict}")


class RaceScreen(Screen):
    """One prompt through target-only and speculative decoding, side by side, live.

    Before timing, both sides put the prompt in their KV caches (the draft model's too);
    the headline is decode rate over decode rate. ``repeat`` races the same prompt N
    times (F6 races again); from 3 races on the median and range of the speedups show.
    """

    # F6 has priority: the prompt (a TextArea) binds F6 to "select line"
    BINDINGS = [Binding("f5", "app.cycle_mode", "Mode"), Binding("f6", "race_again", "Again", priority=True)]
    #: on a narrow screen the footer leaves out F1-F3 only (this screen has few keys of its own)
    NARROW_HIDDEN = frozenset({"switch_mode('chat')", "switch_mode('edit')", "switch_mode('race')"})

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
                yield PromptArea(placeholder="One prompt for both runs: Enter races, Ctrl+J new line, Esc stops",
                                 id="race-prompt")
                yield Static("repeat", id="race-repeat-label")
                yield Input("1", type="integer", id="race-repeats", tooltip="races per Enter or F6 (median from 3)")
            with Horizontal(id="race-panes"):
                yield RacePane("target only", id="race-target")
                yield RacePane("speculative", id="race-spec")
            yield Static("", id="race-result")
            yield Legend()
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "race: target-only vs speculative"
        self._titles()
        self.query_one("#race-result", Static).update(
            "Both sides first prefill the prompt (untimed), then alternate round by round in one thread; "
            "each is timed over its own rounds, and the speedup is decode rate over decode rate.")
        self.query_one("#race-prompt", PromptArea).focus()

    def on_screen_resume(self) -> None:
        self._titles()

    def _titles(self) -> None:
        d = self.app.race_drafting()
        self.query_one("#race-spec", RacePane).border_title = f"speculative: {d.mode}, draft length {d.cap}"
        self.query_one("#race-target", RacePane).border_title = "target only"

    def repeats(self) -> int:
        try:
            return max(1, min(50, int(self.query_one("#race-repeats", Input).value or "1")))
        except ValueError:
            return 1

    @on(PromptArea.Submitted, "#race-prompt")
    def _go(self, event: PromptArea.Submitted) -> None:
        self._start(event.value.strip())

    @on(Input.Submitted, "#race-repeats")
    def _go_repeats(self, event: Input.Submitted) -> None:
        self._start(self.query_one("#race-prompt", PromptArea).value.strip())

    def action_race_again(self) -> None:
        self._start(self.prompt_text or self.query_one("#race-prompt", PromptArea).value.strip())

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
        app = self.app
        app.last_speedup_mode = app.race_drafting().mode
        if sp is None:
            result.update(Text(line + (" (stopped early)" if msg.cancelled else "")))
            app.last_speedup, app.last_speedup_note = None, "n/a (latest race: no figure; see F3)"
            return
        if not msg.cancelled:
            self.ratios.append(sp)
        noise = abs(sp - 1) < RACE_NOISE
        app.last_speedup = None if noise else sp
        app.last_speedup_note = "none measurable (latest race: within noise)" if noise else ""
        head = (("no measurable speedup", "bold reverse") if noise else (f"{sp:.2f}x", "bold reverse"))
        out = Text.assemble(("speedup ", "bold"), head, f"  {line}", " (stopped early)" if msg.cancelled else "")
        if msg.repeats > 1:
            out.append(f"\nrace {msg.repeat} of {msg.repeats}")
        if len(self.ratios) >= 3:
            med, lo, hi = median_spread(self.ratios)
            spans_one = lo <= 1 <= hi
            app.last_speedup = None if spans_one else med
            app.last_speedup_note = "none measurable (races: the range includes 1.00x)" if spans_one else ""
            out.append(f"\nmedian {med:.2f}x over {len(self.ratios)} races of this prompt "
                       f"(range {lo:.2f}x to {hi:.2f}x" + ("; it includes 1.00x: no measurable difference)"
                                                         if spans_one else ")"), "bold")
        elif self.ratios:
            out.append(f"\n{plural(len(self.ratios), 'race')} of this prompt so far; F6 races again "
                       "(median and range from 3)", "dim")
        result.update(out)
        if msg.repeat < msg.repeats:
            for pane in self.query(RacePane):
                pane.stream.set_pieces([])

    @on(GenerationFailed)
    def _failed(self, msg: GenerationFailed) -> None:
        if msg.tag == self.tag:
            self.app.notify_error(msg.message, msg.hint)
            self.query_one("#race-result", Static).update(Text(f"failed: {msg.message}"))
