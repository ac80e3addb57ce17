"""The conversation's own settings (F9 in chat): a system prompt and a sampling preset.

They are kept with the conversation in the store (never in the settings file): a new chat starts
without them; reopening a conversation brings them back.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Select, Static, TextArea

from localspec.config import SAMPLING_PRESETS, SamplingParams


def describe(sampling: SamplingParams) -> str:
    """``temperature 0.7, top-k 40, top-p 0.9, min-p 0.05`` (the filters that are on)."""
    if sampling.greedy:
        return "temperature 0 (greedy)"
    parts = [f"temperature {sampling.temperature:g}"]
    parts += [f"top-k {sampling.top_k}"] if sampling.top_k else []
    parts += [f"top-p {sampling.top_p:g}"] if sampling.top_p < 1 else []
    parts += [f"min-p {sampling.min_p:g}"] if sampling.min_p else []
    return ", ".join(parts)


def preset_choices(settings_sampling: SamplingParams) -> list[tuple[str, str]]:
    """The preset Select's (label, value): the settings' own sampling ("") and each preset."""
    return [(f"settings (F4): {describe(settings_sampling)}", "")] + [
        (f"{name}: {describe(p)}", name) for name, p in SAMPLING_PRESETS.items()]


class ChatOptions(ModalScreen[tuple[str, str] | None]):
    """Edit a conversation's system prompt and sampling preset; dismissed with ``(system, preset)``
    (preset "" = the settings' sampling) or None (Esc)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "apply", "Apply", priority=True)]

    def __init__(self, system: str, preset: str, settings_sampling: SamplingParams) -> None:
        super().__init__()
        self.system = system
        self.preset = preset
        self.settings_sampling = settings_sampling

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog options-dialog"):
            yield Static("This conversation  (Ctrl+S applies, Esc cancels)", classes="dialog-title")
            yield Label("system prompt (sent first with every question; blank: none)")
            yield TextArea(self.system, id="options-system", soft_wrap=True, show_line_numbers=False,
                           tab_behavior="focus")
            yield Label("sampling")
            yield Select(preset_choices(self.settings_sampling), value=self.preset, allow_blank=False,
                         id="options-preset", compact=True)
            yield Static("kept with this conversation only; the seed stays the settings' own", classes="hint")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply", variant="primary", id="options-apply")
                yield Button("Cancel", id="options-cancel")

    def on_mount(self) -> None:
        self.query_one("#options-system", TextArea).focus()

    @on(Button.Pressed, "#options-apply")
    def action_apply(self) -> None:
        system = self.query_one("#options-system", TextArea).text.strip()
        preset = self.query_one("#options-preset", Select).value
        self.dismiss((system, preset if isinstance(preset, str) else ""))

    @on(Button.Pressed, "#options-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
