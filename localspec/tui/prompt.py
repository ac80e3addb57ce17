"""PromptArea: the multi-line prompt of chat, code edit and race (a Textual TextArea).

Enter sends; Ctrl+J (or Shift+Enter / Alt+Enter where the terminal tells them apart)
starts a new line; a paste keeps all its lines. Up on the first line (or in an empty prompt) recalls
the previous text sent, Down on the last line goes forward again, past the newest back to what was
being typed (a shell's history).
"""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

#: the keys that insert a new line instead of sending (Ctrl+J works in every terminal)
NEWLINE_KEYS = ("ctrl+j", "shift+enter", "alt+enter", "newline")


class PromptArea(TextArea):
    """A TextArea that sends its text on Enter (:class:`PromptArea.Submitted`).

    ``value`` and :meth:`action_submit` mirror :class:`textual.widgets.Input`, so code and
    tests written for an Input keep working.
    """

    DEFAULT_CSS = """
    PromptArea { height: auto; min-height: 3; max-height: 8; }
    """
    BINDINGS = [Binding("ctrl+j", "newline", "New line", show=False)]

    class Submitted(Message):
        """Enter was pressed: ``value`` is the whole text, every line of it."""

        def __init__(self, prompt: "PromptArea", value: str) -> None:
            super().__init__()
            self.input = prompt
            self.value = value

        @property
        def control(self) -> "PromptArea":
            return self.input

    def __init__(self, text: str = "", *, placeholder: str = "", id: str | None = None, **kw) -> None:
        super().__init__(text, soft_wrap=True, tab_behavior="focus", show_line_numbers=False,
                         highlight_cursor_line=False, placeholder=placeholder, id=id, **kw)
        self.sent: list[str] = []  #: texts sent, oldest first
        self._recalled: int | None = None  #: index into history shown now (None: the text being typed)
        self._typed = ""  #: what was being typed when the history was entered

    def remember(self, text: str) -> None:
        """Add a sent text to the history (not twice in a row) and leave the history."""
        if text.strip() and (not self.sent or self.sent[-1] != text):
            self.sent.append(text)
        self._recalled = None

    def _recall(self, delta: int) -> bool:
        """Show the history entry ``delta`` away (-1 older, +1 newer); False when there is none."""
        if delta < 0:
            if not self.sent or self._recalled == 0:
                return False
            if self._recalled is None:
                self._typed = self.text
                self._recalled = len(self.sent) - 1
            else:
                self._recalled -= 1
            self.value = self.sent[self._recalled]
            return True
        if self._recalled is None:
            return False
        self._recalled += 1
        if self._recalled >= len(self.sent):
            self._recalled = None
            self.value = self._typed
        else:
            self.value = self.sent[self._recalled]
        return True

    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    async def action_submit(self) -> None:
        self.remember(self.text)
        self.post_message(self.Submitted(self, self.text))

    def action_newline(self) -> None:
        self._replace_via_keyboard("\n", *self.selection)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            await self.action_submit()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.action_newline()
            return
        row = self.cursor_location[0]
        if ((event.key == "up" and row == 0 and self._recall(-1))
                or (event.key == "down" and row == self.document.line_count - 1 and self._recall(+1))):
            event.stop()
            event.prevent_default()
        # anything else: TextArea's own handler runs next (Textual dispatches along the MRO)

    async def _on_paste(self, event: events.Paste) -> None:
        # terminals send a pasted line end as CR (or CRLF): every line becomes a line here
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        if self.read_only:
            return
        event.stop()
        event.prevent_default()
        if result := self._replace_via_keyboard(text, *self.selection):
            self.move_cursor(result.end_location)
            self.focus()
