"""The localspec Textual app. Entry points: :func:`run_app` (the CLI) and :func:`make_app` (tests).

Why these hold together: the app owns the one engine and its lock, the settings and the workers that
load and run it; the screens ask it for all of that, so what touches the engine is here and nowhere else
in the UI.

Threads: the engine is not thread-safe, so every use of it (loading, a chat answer, a
code edit, a race) runs in one worker at a time, holding :attr:`LocalspecApp.engine_lock`;
workers post Messages and never touch widgets.

A target on RPC workers that lost one (a generation failed with a
:class:`~localspec.errors.WorkerError` naming it: the worker died or stopped answering) is loaded
again before the next generation (:meth:`LocalspecApp._reload_lost`), with the load bar's stage line;
while a worker is still down that generation fails the same way, naming it, and the next one tries again.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import HelpPanel

from localspec.config import DraftParams, Settings, needs_draft_model
from localspec.errors import LocalspecError
from localspec.app.run_order import run_order

from localspec.tui.dialogs import MODE_CYCLE, PathPrompt, SettingsScreen
from localspec.tui.driver import RaceSide, drive, race, warm_up
from localspec.tui.messages import (EngineReady, GenerationFailed, GenerationFinished, JobDone, LoadFailed, LoadProgress,
                       LoadStage, Notice, PrefillProgress, RaceFinished, TargetReloading, TokensEmitted)
from localspec.tui.screens import ChatScreen, EditScreen, RaceScreen
from localspec.tui.widgets import token_css

#: engine_factory(settings, progress, stage) -> engine (default: localspec.app.loader.load_engine)
EngineFactory = Callable[..., object]
#: the interpreter's GIL switch interval while an answer streams, seconds (see LocalspecApp._streaming)
STREAM_SWITCH_INTERVAL = 0.0005


def _default_factory(settings: Settings, progress=None, stage=None):
    from localspec.app.loader import load_engine

    # the calibration's measurement steps go to the same progress callback, counted in steps
    steps = (lambda what, done, total: progress(what, done, total, "steps")) if progress else None
    return load_engine(settings, progress=progress, stage=stage, steps=steps)


class LocalspecApp(App):
    """Chat, code-edit and race modes over one speculative engine."""

    CSS_PATH = "app.tcss"
    CSS = token_css()  # the token colours, from localspec.tui.kinds (one definition for the CLI and the TUI)
    TITLE = "localspec"
    MODES = {"chat": ChatScreen, "edit": EditScreen, "race": RaceScreen}
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("escape", "stop", "Stop"),
        Binding("f1", "switch_mode('chat')", "Chat"),
        Binding("f2", "switch_mode('edit')", "Edit"),
        Binding("f3", "switch_mode('race')", "Race"),
        Binding("f4", "settings", "Settings"),
        Binding("f5", "cycle_mode", "Mode"),
        Binding("ctrl+l", "models", "Models", show=False,
                tooltip="pick the target or draft model among the presets and the GGUF files on this machine"),
    ]

    engine_state: reactive[str] = reactive("loading")  # loading | ready | failed
    load_text: reactive[str] = reactive("")
    load_fraction: reactive[float | None] = reactive(None)

    def __init__(self, settings: Settings, engine_factory: EngineFactory | None = None, *,
                 edit_file: str | None = None, race: bool = False, clock: Callable[[], float] = time.perf_counter,
                 remember: bool = True) -> None:
        super().__init__()
        self.settings = settings
        self.engine_factory = engine_factory or _default_factory
        self.pending_edit_file = edit_file
        self.start_race_mode = race
        self.clock = clock
        self.remember = remember
        self.engine = None
        self.target_engine = None  # target-only engine of race mode, loaded on first race
        self.engine_lock = threading.Lock()
        self.busy: str | None = None
        self.current_gens: list = []
        self._stop_requested = False
        self._reload_pending = False
        self._switch_interval: float | None = None  #: the interpreter's, while an answer streams
        self.last_speedup: float | None = None  # measured by the latest race
        self.last_speedup_mode = ""
        self.last_speedup_note = ""  #: why the latest race gave no speedup figure (empty: none yet, or it did)
        self._store = None  #: the conversation store, opened on first use (False: it failed to open)

    def conversation_store(self):
        """The conversation store (:class:`~localspec.app.store.ConversationStore`), opened on first use;
        None when it cannot be opened (said once, with the reason: chats are then not kept)."""
        if self._store is None:
            from localspec.app.store import ConversationStore

            try:
                self._store = ConversationStore()
            except LocalspecError as e:
                self._store = False
                self.notify_error(e.message + "\nconversations are not kept in this session", e.hint)
        return self._store or None

    # -- lifecycle ------------------------------------------------------------------------
    def on_mount(self) -> None:
        from localspec.app.settings_file import take_reports

        for problem in take_reports():  # e.g. a corrupt settings file set aside by the CLI
            self.notify(problem, title="settings", severity="warning", timeout=10)
        if self.start_race_mode:
            self.switch_mode("race")
        elif self.pending_edit_file:
            self.switch_mode("edit")
        else:
            self.switch_mode("chat")
        self.load()

    def notify(self, message: str, *, title: str = "", severity="information", timeout: float | None = None,
               markup: bool = False) -> None:
        """A notification, always plain text: messages carry paths, model names and user or
        model text, none of which is markup (``[b]`` stays ``[b]``)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def notify_error(self, message: str, hint: str = "") -> None:
        self.notify(message + (f"\nhint: {hint}" if hint else ""), title="error", severity="error", timeout=12)

    def mode_label(self) -> str:
        d = self.settings.drafting
        return "none (target only)" if d.mode == "none" else f"{d.mode}, draft length {d.cap}"

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Chat mode", "the chat screen (F1)", lambda: self.switch_mode("chat"))
        yield SystemCommand("Code-edit mode", "rewrite a file with prompt lookup (F2)", lambda: self.switch_mode("edit"))
        yield SystemCommand("Race mode", "target-only vs speculative, side by side (F3)",
                            lambda: self.switch_mode("race"))
        yield SystemCommand("Settings", "mode, draft length, sampling, models (F4)", self.action_settings)
        yield SystemCommand("Models", "pick the target or draft model: presets and GGUF files here (Ctrl+L)",
                            self.action_models)
        yield SystemCommand("Cycle drafting mode", "draft -> lookup -> none -> auto (F5)", self.action_cycle_mode)
        yield SystemCommand("Stop the answer", "end the current generation cleanly (Esc)", self.action_stop)
        yield SystemCommand("Reload models", "load the target and draft models again", self.load)
        if isinstance(screen, ChatScreen):
            yield SystemCommand("Save conversation", "as JSON or Markdown (Ctrl+S)", screen.action_save)
            yield SystemCommand("Conversations", "the kept chats: search, reopen, rename, delete, export (Ctrl+O)",
                                screen.action_open)
            yield SystemCommand("Open conversation file", "a saved .json or .md (Ctrl+O, then f)",
                                lambda: self.push_screen(PathPrompt("Open conversation (.json or .md)", "",
                                                                    "Enter opens, Esc cancels"),
                                                         lambda path: path and screen.open_file(path)))
            yield SystemCommand("New chat", "clear the transcript (Ctrl+N)", screen.action_new_chat)
            yield SystemCommand("Retry", "ask the last question again (F6)", screen.action_retry)
            yield SystemCommand("Edit the last question", "and ask it again in place of the last turn (Ctrl+R)",
                                screen.action_edit_last)
            yield SystemCommand("System prompt and preset", "this conversation's own (F9)", screen.action_chat_options)
            yield SystemCommand("Markdown / tokens", "read the answer rendered, or coloured by speculation (Ctrl+T)",
                                screen.action_toggle_view)
            yield SystemCommand("Copy code block", "the answer's last code block, to the clipboard (Ctrl+B)",
                                screen.action_copy_code)
            yield SystemCommand("Copy answer", "the whole answer, to the clipboard (Ctrl+G)", screen.action_copy_answer)
        if isinstance(screen, EditScreen):
            yield SystemCommand("Open file to edit", "(Ctrl+O)", screen.action_open_file)
            yield SystemCommand("Diff / answer", "switch between the diff and the answer stream (Ctrl+D)",
                                screen.action_toggle_diff)
            yield SystemCommand("Save edited file as new", "(Ctrl+S)", screen.action_save_new)
            yield SystemCommand("Replace original (backup kept)", "(Ctrl+R)", screen.action_replace)

    async def action_quit(self) -> None:
        self.action_stop()
        self.exit()

    def close_engines(self, timeout: float = 30.0) -> None:
        """Stop any generation, wait for the worker to leave the engine, then free the models
        (and close the conversation store)."""
        if self._store:
            self._store.close()
            self._store = False
        self._restore_switch_interval()
        for g in list(self.current_gens):
            g.cancel()
        if not self.engine_lock.acquire(timeout=timeout):
            return  # a load is still running; the process exit frees it
        try:
            for eng in (self.engine, self.target_engine):
                if eng is not None:
                    eng.close()
            self.engine = self.target_engine = None
        finally:
            self.engine_lock.release()

    # -- loading ----------------------------------------------------------------------------
    def load(self) -> None:
        """(Re)load the engine for the current settings in a worker."""
        if self.busy:
            self.notify("wait for the current answer to end (Esc stops it)", severity="warning")
            return
        old = [e for e in (self.engine, self.target_engine) if e is not None]
        self.engine = self.target_engine = None
        self.busy = "loading"
        self.engine_state = "loading"
        self.load_fraction = None
        self.load_text = f"loading {self.settings.target.model}"
        self._load_worker(self.settings, old)

    @work(thread=True, exclusive=True, exit_on_error=False, group="load")
    def _load_worker(self, settings: Settings, old: list) -> None:
        last = [0.0]

        def progress(stage: str, done: int, total: int, unit: str = "bytes") -> None:
            now = time.monotonic()
            if now - last[0] >= 0.1 or (total and done >= total) or unit == "steps":
                last[0] = now
                self.post_message(LoadProgress(stage, done, total, unit))

        def stage(text: str) -> None:
            self.post_message(LoadStage(text))

        with self.engine_lock:
            for eng in old:
                eng.close()
            try:
                engine = self.engine_factory(settings, progress, stage)
            except LocalspecError as e:
                self.post_message(LoadFailed(e.message, e.hint))
                return
            except Exception as e:  # never crash the UI on a load failure
                self.post_message(LoadFailed(f"{type(e).__name__}: {e}", "this looks like a bug in localspec"))
                return
        draft = settings.draft.model if engine.has_draft_model else "no draft model"
        self.post_message(EngineReady(engine, f"{settings.target.model} + {draft}"))

    def on_load_progress(self, msg: LoadProgress) -> None:
        words = {"assemble": "assembling the offline mirror", "download": "downloading", "verify": "verifying"}
        what = words.get(msg.stage, msg.stage)
        if msg.total and msg.unit == "steps":
            self.load_fraction = min(1.0, msg.done / msg.total)
            # kept for later starts on this machine, unless other programs disturbed it (calibration.get_costs)
            self.load_text = f"{what} (kept for later starts unless other programs disturb it): {msg.done}/{msg.total}"
        elif msg.total:
            self.load_fraction = min(1.0, msg.done / msg.total)
            self.load_text = f"{what}: {msg.done / 1e6:.0f} / {msg.total / 1e6:.0f} MB"
        else:
            self.load_fraction = None
            self.load_text = f"{what}…"

    def on_load_stage(self, msg: LoadStage) -> None:
        self.load_text = msg.text
        self.load_fraction = None

    def on_engine_ready(self, msg: EngineReady) -> None:
        self.engine = msg.engine
        self.busy = None
        self.engine_state = "ready"
        self.notify(f"loaded {msg.description}", timeout=3, markup=False)
        for notice in getattr(msg.engine, "notices", ()):  # e.g. weight repacking turned off by the probe
            self.notify(notice, severity="warning", timeout=20, markup=False)
        self._maybe_reload()

    def on_target_reloading(self, msg: TargetReloading) -> None:
        """The load bar while a lost target is loaded again (the engine stays: only its target reloads)."""
        self.engine_state = "ready" if msg.done else "loading"
        self.load_fraction = None

    def on_load_failed(self, msg: LoadFailed) -> None:
        self.busy = None
        self.engine_state = "failed"
        self.notify_error(msg.message, msg.hint or "change the models in Settings (F4)")
        self._maybe_reload()

    # -- settings ---------------------------------------------------------------------------
    def action_settings(self) -> None:
        self.push_screen(SettingsScreen(self.settings), self.apply_settings)

    def action_models(self) -> None:
        """Ctrl+L: the model picker; the model picked is saved like a settings change and the engine
        reloads (the conversation stays)."""
        from localspec.tui.model_picker import ModelPicker

        target = getattr(self.engine, "target", None)
        self.push_screen(ModelPicker(self.settings.target.model, self.settings.draft.model,
                                     getattr(target, "path", None)), self._picked)

    def _picked(self, choice: tuple[str, str, bool | None] | None) -> None:
        if not choice:
            return
        role, ref, pairs = choice
        s = self.settings
        if role == "target":
            from localspec.app.flags import paired_draft

            draft = paired_draft(ref, s.draft.model)  # a catalog pair's draft comes with its target
            new = s.model_copy(update={"target": s.target.model_copy(update={"model": ref}),
                                       "draft": s.draft.model_copy(update={"model": draft})})
            if draft == s.draft.model and pairs is False and needs_draft_model(s):
                # the draft model cannot draft for this target: prompt lookup until one of its family is picked
                new = new.model_copy(update={"drafting": s.drafting.model_copy(update={"mode": "lookup"})})
                self.notify(f"{s.draft.model} has another tokenizer than {ref}: drafting switched to prompt "
                            "lookup; Ctrl+L, d picks a draft model of its family", severity="warning", timeout=12)
        else:
            new = s.model_copy(update={"draft": s.draft.model_copy(update={"model": ref})})
        if new == s:
            self.notify(f"{ref} is the {role} already", timeout=3)
            return
        self.notify(f"{role}: {ref}; loading…", timeout=4)
        self.apply_settings(new)

    def action_cycle_mode(self) -> None:
        cur = self.settings.drafting.mode
        nxt = MODE_CYCLE[(MODE_CYCLE.index(cur) + 1) % len(MODE_CYCLE)]
        self.apply_settings(self.settings.model_copy(
            update={"drafting": self.settings.drafting.model_copy(update={"mode": nxt})}))
        self.notify(f"mode: {self.mode_label()}", timeout=2)

    def apply_settings(self, new: Settings | None) -> None:
        if new is None or new == self.settings:
            return
        old = self.settings
        self.settings = new
        if self.remember:  # only what the user changed: a command-line flag holds for this run only
            from localspec.app.settings_file import remember_changes

            try:
                remember_changes(old, new)
            except LocalspecError as e:
                self.notify_error(e.message, e.hint)
        screen = self.screen
        if hasattr(screen, "refresh_stats"):
            screen.refresh_stats()
        if isinstance(screen, RaceScreen):
            screen._titles()
        models_changed = new.target != old.target or new.draft != old.draft
        needs_draft = (needs_draft_model(new) and self.engine is not None
                       and not self.engine.has_draft_model)
        # mode auto needs measured costs up to the cap: loading measures them, with its progress bar
        needs_costs = (new.drafting.mode == "auto" and self.engine is not None
                       and not self.engine.has_costs(new.drafting.cap))
        if models_changed or needs_draft or needs_costs or self.engine_state == "failed":
            if self.busy:
                self._reload_pending = True
                self.notify("the models reload when the current work ends", timeout=4)
            else:
                self.load()

    def race_drafting(self) -> DraftParams:
        d = self.settings.drafting
        return d if d.mode != "none" else d.model_copy(update={"mode": "draft"})

    # -- generation ---------------------------------------------------------------------------
    def can_generate(self) -> bool:
        if self.busy == "loading":
            self.notify("the models are still loading", severity="warning")
            return False
        if self.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return False
        if self.engine is None:
            self.notify_error("no model is loaded", "fix the models in Settings (F4), then they load again")
            return False
        return True

    def action_stop(self) -> None:
        """Esc: end the current generation after its current round (both KV caches stay consistent);
        with no generation running, close the keys panel if it is open."""
        if not self.current_gens and not self.busy and self.screen.query(HelpPanel):
            self.action_hide_help_panel()
            return
        self._stop_requested = True
        gens = list(self.current_gens)
        for g in gens:
            g.cancel()
        if gens:
            self.notify("stopping after the current round…", timeout=2)

    def start_job(self, screen, tag: str, engine, make_gen: Callable[[], object]) -> None:
        """Run ``make_gen()`` and stream it to ``screen`` in the engine worker."""
        self.busy = tag
        self._stop_requested = False
        self._streaming(True)
        self._job_worker(screen, tag, engine, make_gen)

    def _streaming(self, on: bool) -> None:
        """While an answer streams: the cursors stop blinking and the GIL is handed over quickly.

        A blink redraws the screen twice a second; on a 2-core machine every redraw is CPU
        taken from llama.cpp. And the engine's worker thread, returning from each llama.cpp
        call, waits for the GIL while this thread draws: up to the interpreter's switch
        interval (5 ms) each time, several times a round. At 0.5 ms (:data:`STREAM_SWITCH_INTERVAL`)
        the TUI decoded a 432-token code edit at 0.97-1.00x the CLI's rate instead of 0.93-0.95x
        (docs/benchmark-history.md, "The GIL and a redraw budget"). Both are restored when the
        answer ends.
        """
        if on:
            if self._switch_interval is None:
                self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(STREAM_SWITCH_INTERVAL)
        else:
            self._restore_switch_interval()
        self._pause_blinking(on)

    def _restore_switch_interval(self) -> None:
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None

    def _pause_blinking(self, pause: bool) -> None:
        """Stop the text cursors blinking while an answer streams, restore them after."""
        if pause:
            self._blinking = {}
            for inp in self.screen.query("Input, TextArea"):
                self._blinking[inp] = inp.cursor_blink
                inp.cursor_blink = False
        else:
            for inp, blink in getattr(self, "_blinking", {}).items():
                inp.cursor_blink = blink
            self._blinking = {}

    def _track(self, gen) -> None:
        self.current_gens.append(gen)
        if self._stop_requested:
            gen.cancel()

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine")
    def _job_worker(self, screen, tag: str, engine, make_gen) -> None:
        gen = None
        try:
            with self.engine_lock:
                try:
                    self._reload_lost(engine)
                    gen = make_gen()
                    gen.on_prefill = lambda done, total: screen.post_message(PrefillProgress(tag, done, total))
                    self._track(gen)
                    post = lambda p, r, s: screen.post_message(TokensEmitted(tag, p, r, s))  # noqa: E731
                    stats, rounds = drive(gen, engine, post, self.clock)
                    screen.post_message(GenerationFinished(tag, gen.text, stats, rounds))
                except Exception as e:
                    screen.post_message(failure(tag, e))
        finally:
            if gen in self.current_gens:
                self.current_gens.remove(gen)
            self.post_message(JobDone(tag))

    def _reload_lost(self, engine) -> None:
        """In an engine worker, before a generation: load ``engine``'s target again when it lost its RPC
        workers (:func:`~localspec.app.loader.reload_lost_target`), the load bar naming them.

        Raises:
            WorkerError: a worker is still down or silent (named); the next generation tries again.
        """
        from localspec.app.loader import reload_lost_target

        if engine is None or not getattr(getattr(engine, "target", None), "lost", False):
            return
        self.post_message(TargetReloading())
        try:
            reload_lost_target(engine, stage=lambda text: self.post_message(LoadStage(text)))
        finally:
            self.post_message(TargetReloading(done=True))
        self.post_message(Notice(f"{Path(engine.target.path).name} is loaded again on its RPC workers"))

    def on_notice(self, msg: Notice) -> None:
        self.notify(msg.text, severity=msg.severity, timeout=6, markup=False)

    def on_job_done(self, msg: JobDone) -> None:
        self._job_done(msg.tag)

    def _job_done(self, tag: str) -> None:
        if self.busy == tag:
            self.busy = None
            self._streaming(False)
            self._maybe_reload()

    def _maybe_reload(self) -> None:
        """Settings changed the models while the engine was busy: load them now."""
        if self._reload_pending and not self.busy:
            self._reload_pending = False
            self.load()

    def start_race(self, screen, tag: str, prompt_text: str, repeats: int = 1) -> None:
        self.busy = tag
        self._stop_requested = False
        self._streaming(True)
        self._race_worker(screen, tag, prompt_text, self.settings, self.race_drafting(), max(1, repeats))

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine")
    def _race_worker(self, screen, tag: str, prompt_text: str, settings: Settings, drafting: DraftParams,
                     repeats: int = 1) -> None:
        try:
            with self.engine_lock:
                try:
                    spec_engine = self.engine
                    self._reload_lost(spec_engine)
                    self._reload_lost(self.target_engine)
                    if drafting.mode == "draft" and not spec_engine.has_draft_model:
                        drafting = drafting.model_copy(update={"mode": "lookup"})
                    if self.target_engine is None:
                        # the engine holds one KV cache per model, so two generations cannot
                        # interleave on it: the target-only side gets its own target instance
                        # (llama.cpp maps the same weights file, so this costs a KV cache, not a copy)
                        self.post_message(Notice(f"race: loading a second instance of {settings.target.model} "
                                                 "for the target-only side (once)…"))
                        only = settings.model_copy(update={"drafting": settings.drafting.model_copy(
                            update={"mode": "none"})})
                        self.target_engine = self.engine_factory(only, None, None)
                        self.post_message(Notice("race: target-only instance loaded; racing…"))
                    tgt = self.target_engine
                    chat = [{"role": "user", "content": prompt_text}]
                    none = drafting.model_copy(update={"mode": "none"})
                    for rep in range(1, repeats + 1):
                        if self._stop_requested:
                            break
                        sides = []
                        for name, eng, dp in (("target", tgt, none), ("spec", spec_engine, drafting)):
                            tokens = eng.chat_tokens(chat)
                            # fair by construction: both caches (and the draft model's) hold the
                            # prompt before any round is timed; the prefill is shown, not timed
                            warm = warm_up(eng, tokens)
                            sides.append(RaceSide(name, eng.generate(tokens, settings.sampling, dp,
                                                                     settings.generation), eng, warm))
                        sides = run_order(sides, rep - 1)  # alternate which side decodes first (rep from 1)
                        for s in sides:
                            self._track(s.gen)

                        def post(side, pieces, rounds, stats):
                            screen.post_message(TokensEmitted(f"{tag}:{side}", pieces, rounds, stats))

                        results = race(sides, post, self.clock, cancelled=lambda: self._stop_requested)
                        self.current_gens.clear()
                        screen.post_message(RaceFinished(results, cancelled=self._stop_requested,
                                                         texts={s.name: s.gen.text for s in sides},
                                                         repeat=rep, repeats=repeats))
                except Exception as e:
                    screen.post_message(failure(tag, e))
        finally:
            self.current_gens.clear()
            self.post_message(JobDone(tag))


def make_app(settings: Settings | None = None, engine_factory: EngineFactory | None = None, *,
             edit_file: str | None = None, race: bool = False, clock: Callable[[], float] = time.perf_counter,
             remember: bool = True) -> LocalspecApp:
    """Build the app. ``engine_factory(settings, progress, stage)`` returns an engine
    (default :func:`localspec.app.loader.load_engine`); tests pass a scripted fake."""
    return LocalspecApp(settings or Settings(), engine_factory, edit_file=edit_file, race=race, clock=clock,
                        remember=remember)


def run_app(settings: Settings, *, edit_file: str | None = None, race: bool = False) -> None:
    """Open the app (what ``localspec``, ``localspec chat``, ``edit FILE`` and ``race`` call)."""
    app = make_app(settings, edit_file=edit_file, race=race)
    try:
        app.run()
    finally:
        app.close_engines()


def failure(tag: str, error: Exception) -> GenerationFailed:
    """The message a worker posts when a generation fails: a localspec error's message and hint, or
    any other exception named as a bug."""
    if isinstance(error, LocalspecError):
        return GenerationFailed(tag, error.message, error.hint)
    return GenerationFailed(tag, f"{type(error).__name__}: {error}",
                            "this looks like a bug in localspec; please report it")
