"""Chat mode (F1): a conversation with the speculative engine.

Why these hold together: one screen and its key bindings, from the prompt typed to the answer streamed,
kept, saved and opened again; its widgets are in :mod:`localspec.tui.widgets`, the session it drives in
:mod:`localspec.app.chat`."""

from __future__ import annotations

import time

from pydantic import ValidationError
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Header

from localspec.app.chat import ChatSession
from localspec.app.conversation import Conversation, Message, code_blocks, load_conversation, save_conversation
from localspec.errors import LocalspecError
from localspec.app.fileio import expand_path
from localspec.app.store import title_from
from localspec.config import DraftParams, preset_sampling

from localspec.tui.browser import ConversationBrowser
from localspec.tui.chat_options import ChatOptions
from localspec.tui.dialogs import Confirm, PathPrompt
from localspec.tui.messages import GenerationFailed, GenerationFinished, Notice
from localspec.tui.footer import KeyFooter
from localspec.tui.prompt import PromptArea
from localspec.tui.stats import LiveStats, RoundView, plural
from localspec.tui.widgets import Legend, MiniStats, RoundInspector, StatsPanel
from localspec.tui.screens.base import AssistantMessage, GenerationScreen, LoadBar, UserMessage, new_tag, side_panel


class AnswerKeys:
    """The answer keys of the chat screen: Markdown or tokens (Ctrl+T), copy the last code block
    (Ctrl+B) or the whole answer (Ctrl+G) to the clipboard (the terminal's, through OSC 52)."""

    def select_answer(self, answer: AssistantMessage) -> None:
        """A clicked answer: the answer keys act on it, the inspector shows its rounds."""
        if answer is self.inspected:
            return
        for other in self.query(AssistantMessage):
            if other is not answer:
                other.stream.selected_round = None
        self.inspected = answer
        self.query_one(RoundInspector).set_rounds(answer.rounds)

    def target_answer(self) -> AssistantMessage | None:
        """The answer last clicked (while it is on screen and finished), else the latest finished one."""
        if self.inspected is not None and self.inspected.is_attached and self.inspected.finished:
            return self.inspected
        done = [a for a in self.query(AssistantMessage) if a.finished]
        return done[-1] if done else None

    def action_toggle_view(self) -> None:
        answer = self.target_answer()
        if answer is None:
            self.notify("no finished answer yet")
            return
        answer.toggle_view()
        answer.scroll_visible(animate=False)

    def action_copy_code(self) -> None:
        answer = self.target_answer()
        if answer is None:
            self.notify("no finished answer yet")
            return
        blocks = code_blocks(answer.stream.text)
        if not blocks:
            self.notify("this answer has no code block; Ctrl+G copies all of it")
            return
        self.app.copy_to_clipboard(blocks[-1])
        self.notify(f"copied the last code block ({plural(len(blocks[-1].splitlines()), 'line')})", timeout=3)

    def action_copy_answer(self) -> None:
        answer = self.target_answer()
        if answer is None:
            self.notify("no finished answer yet")
            return
        self.app.copy_to_clipboard(answer.stream.text)
        self.notify(f"copied the answer ({plural(len(answer.stream.text), 'character')})", timeout=3)


class ChatScreen(AnswerKeys, GenerationScreen):
    """A transcript, an input box, the coloured answer stream, statistics and the inspector."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+o", "open", "Open", tooltip="the kept conversations: search, reopen, rename, delete, export"),
        Binding("ctrl+n", "new_chat", "New"),
        # priority: the prompt (a TextArea) binds F6 and F7 to selections
        Binding("f6", "retry", "Retry", priority=True),
        Binding("f7", "prev_round", "Prev round", show=False, priority=True),
        Binding("f8", "next_round", "Next round", show=False, priority=True),
        # the answer keys act on the answer last clicked, else the latest finished one
        Binding("ctrl+t", "toggle_view", "Markdown/tokens", show=False, priority=True,
                tooltip="read the answer as rendered Markdown, or as the speculation-coloured tokens"),
        Binding("ctrl+b", "copy_code", "Copy code", show=False, priority=True,
                tooltip="copy the answer's last code block to the clipboard"),
        Binding("ctrl+g", "copy_answer", "Copy answer", show=False, priority=True,
                tooltip="copy the whole answer to the clipboard"),
        Binding("ctrl+r", "edit_last", "Edit last question", show=False, priority=True,
                tooltip="put the last question in the prompt; sending it replaces the last turn (again: cancel)"),
        Binding("f9", "chat_options", "System prompt/preset", show=False, priority=True,
                tooltip="this conversation's system prompt and sampling preset"),
    ]
    PROMPT_ID = "prompt"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.messages: list[dict] = []  # role, content, and for answers segments/stats/rounds
        self.saved_count = 0  #: len(messages) when the chat was last saved, kept or opened
        self.conv_id: int | None = None  #: the conversation in the store (None: not kept yet)
        self.system_prompt = ""  #: this conversation's system prompt ("" none)
        self.preset = ""  #: this conversation's sampling preset (config.SAMPLING_PRESETS; "" the settings')
        self.editing = False  #: the prompt holds the last question, edited: sending replaces the last turn

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with Vertical(id="main"):
                yield LoadBar()
                yield VerticalScroll(id="transcript")
                yield Legend()
                yield MiniStats()
                yield PromptArea(placeholder="Ask something: Enter sends, Ctrl+J starts a new line, Esc stops",
                                 id="prompt")
            yield from side_panel()
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "chat"
        self.refresh_stats()
        self.query_one("#prompt", PromptArea).focus()

    def answer_scroll(self) -> VerticalScroll:
        return self.query_one("#transcript", VerticalScroll)

    # -- sending ----------------------------------------------------------------------
    @on(PromptArea.Submitted, "#prompt")
    def _submit(self, event: PromptArea.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if not self.app.can_generate():
            return
        if self.editing:
            self._drop_last_turn()
        event.input.value = ""
        session = self._session()
        self.messages.append({"role": "user", "content": text})
        self.answer_scroll().mount(UserMessage(text, classes="user-msg"))
        self._keep(self.messages[-1])
        self._ask(session, lambda: session.send(text))

    def _session(self) -> ChatSession:
        """A :class:`ChatSession` over the transcript as it is now (the transcript stays the
        history this screen shows and saves; the session fits it into the context and answers)."""
        settings = self.app.settings
        if self.preset:
            settings = settings.model_copy(update={"sampling": preset_sampling(self.preset, settings.sampling)})
        return ChatSession(self.app.engine, settings, system=self.system_prompt or None,
                           messages=[{"role": m["role"], "content": m["content"]} for m in self.messages])

    # -- editing the last question --------------------------------------------------------
    def action_edit_last(self) -> None:
        """Ctrl+R: the last question into the prompt, to edit; sending it replaces the last turn
        (question and answer). Ctrl+R again, or emptying the prompt, cancels."""
        prompt = self.query_one("#prompt", PromptArea)
        if self.editing:
            self._set_editing(False)
            prompt.value = ""
            return
        if self.app.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return
        last = next((m for m in reversed(self.messages) if m["role"] == "user"), None)
        if last is None:
            self.notify("nothing to edit: ask something first")
            return
        prompt.value = last["content"]
        prompt.focus()
        self._set_editing(True)

    def _set_editing(self, on: bool) -> None:
        self.editing = on
        prompt = self.query_one("#prompt", PromptArea)
        prompt.border_title = "editing the last question: Enter asks it in its place, ^R cancels" if on else None
        prompt.set_class(on, "-editing")

    @on(PromptArea.Changed, "#prompt")
    def _prompt_changed(self, event: PromptArea.Changed) -> None:
        if self.editing and not event.text_area.text.strip():
            self._set_editing(False)

    def _drop_last_turn(self) -> None:
        """Remove the last question and everything after it, on screen and in the store."""
        self._set_editing(False)
        i = max((k for k, m in enumerate(self.messages) if m["role"] == "user"), default=None)
        users = self.query(UserMessage)
        if i is None or not users:
            return
        scroll = self.answer_scroll()
        children = list(scroll.children)
        for w in children[children.index(users.last()):]:
            w.remove()
            if w is self.current or w is self.inspected:
                self.current = self.inspected = None
        del self.messages[i:]
        self._forget_after(i)

    # -- the conversation's own settings --------------------------------------------------
    def action_chat_options(self) -> None:
        """F9: this conversation's system prompt and sampling preset (kept with it in the store)."""

        def done(result) -> None:
            if result is None:
                return
            self.system_prompt, self.preset = result
            self._show_options()
            store = self.app.conversation_store()
            if store is not None and self.conv_id is not None:
                try:
                    store.set_options(self.conv_id, system=self.system_prompt, preset=self.preset)
                except Exception as e:
                    self.app.notify_error(f"the conversation store was not updated: {e}")

        self.app.push_screen(ChatOptions(self.system_prompt, self.preset, self.app.settings.sampling), done)

    def _show_options(self) -> None:
        """The header says the conversation's preset and whether it has a system prompt."""
        parts = ["chat"] + ([f"preset {self.preset}"] if self.preset else []) + (
            ["system prompt"] if self.system_prompt else [])
        self.sub_title = " · ".join(parts)

    def _ask(self, session: ChatSession, start) -> None:
        """Stream the answer ``start()`` begins (``session.send`` or ``session.retry``) in the engine worker."""
        app = self.app
        if self.inspected is not None:
            self.inspected.stream.selected_round = None
        self.inspected = None
        self.current = AssistantMessage(classes="assistant-msg")
        self.answer_scroll().mount(self.current)
        self.answer_scroll().scroll_end(animate=False)
        self.query_one(RoundInspector).set_rounds([])
        self.query_one(StatsPanel).show(LiveStats(), mode=self.mode_label(), figures_mode=self.mode_label())

        def make_gen():
            # the session's overflow policy: drop the oldest turns that do not fit
            turn = start()
            dropped = turn.prompt.dropped
            if dropped:
                app.post_message(Notice(f"the context window is full: the oldest {plural(dropped, 'message')} "
                                        "were left out of this prompt (they stay in the transcript)", "warning"))
            return turn

        self.tag = new_tag("chat")
        app.start_job(self, self.tag, session.engine, make_gen)

    def generation_done(self, msg: GenerationFinished) -> None:
        cur = self.current
        if self.app.settings.ui.answer_view == "markdown":
            cur.show_view("markdown")
        self.messages.append({"role": "assistant", "content": msg.text, "segments": list(cur.stream.pieces),
                              "stats": msg.stats, "rounds": cur.rounds, "models": self._models()})
        self._keep(self.messages[-1])

    def _models(self) -> dict:
        """The models that answer now: the target, the draft model (None when none is loaded), the mode."""
        settings, engine = self.app.settings, self.app.engine
        has_draft = engine is not None and getattr(engine, "has_draft_model", False)
        return {"target": settings.target.model, "draft": settings.draft.model if has_draft else None,
                "mode": settings.drafting.mode}

    def _keep(self, m: dict) -> None:
        """Write message ``m`` (just added to :attr:`messages`) to the conversation store, in its own
        transaction; the first one creates the conversation. A store that fails is said once."""
        store = self.app.conversation_store()
        if store is None:
            return
        try:
            if self.conv_id is None:
                self.conv_id = store.create(title_from(m["content"]), self.app.settings.model_dump(mode="json"),
                                            system=self.system_prompt, preset=self.preset)
            store.add_message(self.conv_id, to_message(m))
            self.saved_count = len(self.messages)
        except KeyError:  # deleted in the browser meanwhile: keep it again, whole
            self.conv_id = None
            self._keep_all()
        except Exception as e:
            self.app.notify_error(f"this message was not kept in the conversation store: {e}")

    def _keep_all(self) -> None:
        store = self.app.conversation_store()
        if store is None or not self.messages:
            return
        self.conv_id = store.create(title_from(self.messages[0]["content"]), self.app.settings.model_dump(mode="json"),
                                    system=self.system_prompt, preset=self.preset)
        for m in self.messages:
            store.add_message(self.conv_id, to_message(m))
        self.saved_count = len(self.messages)

    def _forget_after(self, keep: int) -> None:
        """The store keeps the first ``keep`` messages (a retried turn replaces the rest)."""
        store = self.app.conversation_store()
        if store is not None and self.conv_id is not None:
            try:
                store.truncate(self.conv_id, keep)
            except Exception as e:
                self.app.notify_error(f"the conversation store was not updated: {e}")

    def generation_failed(self, msg: GenerationFailed) -> None:
        # keep the question; drop the empty answer so a retry asks again
        if self.current is not None and not self.current.stream.pieces:
            self.current.remove()
            self.current = None

    def action_retry(self) -> None:
        if not self.app.can_generate():
            return
        session = self._session()
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages.pop()
            self._forget_after(len(self.messages))
            answers = self.query(AssistantMessage)
            if answers:
                answers.last().remove()
        if not self.messages or self.messages[-1]["role"] != "user":
            self.notify("nothing to retry: ask something first")
            return
        self._ask(session, session.retry)

    def action_new_chat(self) -> None:
        if self.app.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return
        if len(self.messages) > self.saved_count:
            self.app.push_screen(Confirm("Clear this chat? It has not been saved (Ctrl+S saves it)."),
                                 lambda yes: yes and self.clear_chat())
            return
        self.clear_chat()

    def clear_chat(self) -> None:
        self.saved_count = 0
        self.conv_id = None
        self.system_prompt = self.preset = ""
        self._show_options()
        self._set_editing(False)
        self.messages.clear()
        self.current = self.inspected = None
        self.answer_scroll().remove_children()
        self.query_one(RoundInspector).set_rounds([])
        self.query_one(StatsPanel).show(LiveStats(), figures_mode="")

    # -- conversations ----------------------------------------------------------------
    def conversation(self) -> Conversation:
        system = [Message(role="system", content=self.system_prompt)] if self.system_prompt else []
        return Conversation(settings=self.app.settings.model_dump(mode="json"),
                            messages=system + [to_message(m) for m in self.messages])

    def action_save(self) -> None:
        if not self.messages:
            self.notify("nothing to save yet")
            return
        default = f"conversation-{time.strftime('%Y%m%d-%H%M%S')}.json"

        def done(path: str | None) -> None:
            if path:
                try:
                    p = save_conversation(self.conversation(), path).resolve()
                    self.saved_count = len(self.messages)
                    self.notify(f"saved {p.name} in {p.parent}")
                except LocalspecError as e:
                    self.app.notify_error(e.message, e.hint)

        self.app.push_screen(PathPrompt("Save conversation as (.json or .md)", default,
                                        "Enter saves, Esc cancels; .md saves Markdown, anything else JSON"), done)

    def action_open(self) -> None:
        """Ctrl+O: the conversation browser (without a store: a conversation file's path)."""
        if self.app.busy:
            self.notify("an answer is running; Esc stops it", severity="warning")
            return
        store = self.app.conversation_store()
        if store is None:
            self.app.push_screen(PathPrompt("Open conversation (.json or .md)", "",
                                            "Enter opens, Esc cancels; a .json or .md file saved by localspec"),
                                 lambda path: path and self.open_file(path))
            return

        def done(choice) -> None:
            if not choice:
                return
            what, arg = choice
            if what == "file":
                self.open_file(arg)
            else:
                self.open_kept(arg)

        self.app.push_screen(ConversationBrowser(store, on_delete=self._deleted, current=self.conv_id), done)

    def _deleted(self, conv_id: int) -> None:
        """The browser deleted ``conv_id``: when it is the one shown, the screen starts a new chat."""
        if conv_id == self.conv_id:
            self.clear_chat()

    def open_kept(self, conv_id: int) -> None:
        """Show the kept conversation ``conv_id``; what is asked next is added to it."""
        store = self.app.conversation_store()
        try:
            conv, info = store.load(conv_id), store.info(conv_id)
        except KeyError:
            self.app.notify_error("that conversation is gone (deleted meanwhile)")
            return
        self.show_conversation(conv)
        self.conv_id = conv_id
        self.system_prompt, self.preset = info.system, info.preset
        self._show_options()
        self.notify(f"opened {info.title!r}", timeout=3)

    def open_file(self, path: str) -> None:
        """Show a conversation file saved by localspec (JSON or Markdown) and keep it in the store."""
        try:
            conv = load_conversation(path)
        except LocalspecError as e:
            self.app.notify_error(e.message, e.hint)
            return
        full = expand_path(path).resolve()
        self.show_conversation(conv)
        store = self.app.conversation_store()
        if store is not None:
            try:
                self.conv_id = store.import_conversation(conv, full.stem)
            except Exception as e:
                self.app.notify_error(f"the conversation was opened but not kept: {e}")
        self.notify(f"opened {full}")

    def show_conversation(self, conv: Conversation) -> None:
        self.clear_chat()
        scroll = self.answer_scroll()
        last = None
        for m in conv.messages:
            if m.role == "system":  # the conversation's system prompt (F9), not a bubble
                self.system_prompt = m.content
            elif m.role == "assistant":
                rounds = [RoundView.from_dict(r) for r in (m.rounds or [])]
                segs = m.segments if m.segments is not None else [(m.content, "target")]
                pieces = [(seg[0], seg[1], seg[2] if len(seg) > 2 else -1) for seg in segs]
                stats = LiveStats.from_dict(m.stats) if m.stats else LiveStats(final=True)
                last = AssistantMessage(pieces, stats, rounds, classes="assistant-msg")
                scroll.mount(last)
                if self.app.settings.ui.answer_view == "markdown":
                    last.show_view("markdown")
                self.messages.append({"role": "assistant", "content": m.content, "segments": pieces,
                                      "stats": stats, "rounds": rounds, "models": m.models})
            else:
                scroll.mount(UserMessage(m.content, classes="user-msg"))
                self.messages.append({"role": m.role, "content": m.content})
        self.current = last
        self.saved_count = len(self.messages)
        self._show_options()
        self.query_one("#prompt", PromptArea).sent = [m["content"] for m in self.messages if m["role"] == "user"]
        if last is not None:
            self.query_one(StatsPanel).show(last.stats, figures_mode=saved_mode_label(conv.settings))
            self.query_one(RoundInspector).set_rounds(last.rounds)
        scroll.scroll_end(animate=False)


def to_message(m: dict) -> Message:
    """A transcript entry of :class:`ChatScreen` as a :class:`Message` of the conversation format."""
    if m["role"] != "assistant":
        return Message(role=m["role"], content=m["content"])
    return Message(role="assistant", content=m["content"], segments=[(t, k, r) for t, k, r in m["segments"]],
                   stats=m["stats"].as_dict(), rounds=[r.as_dict() for r in m["rounds"]], models=m.get("models"))


def saved_mode_label(settings: dict) -> str:
    """The drafting mode a saved conversation was made with, as the statistics panel says it."""
    d = (settings or {}).get("drafting") or {}
    mode = d.get("mode")
    if not mode:
        return ""
    try:
        cap = DraftParams.model_validate(d).cap  # no draft_max: the mode's own
    except ValidationError:
        cap = d.get("draft_max") or "?"
    return "none (target only)" if mode == "none" else f"{mode}, draft length {cap}"


# -- code edit ----------------------------------------------------------------------------
