"""Modal screens: settings, a path prompt, a file picker, a yes/no confirmation."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args, get_origin

from pydantic import ValidationError
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, DirectoryTree, Input, Label, Select, Static

from localspec.config import FIXED_DRAFT_MODES, ModelSettings, Settings, invalid_values, option_info

#: the settings the form edits, in order (dotted paths into Settings); each field's label, kind
#: and blank meaning come from the option's declaration (:func:`localspec.config.option`)
FORM_PATHS = ("drafting.mode", "drafting.draft_max", "drafting.draft_p_min", "sampling.temperature", "sampling.top_k",
              "sampling.top_p", "sampling.seed", "generation.max_tokens", "target.model", "target.n_gpu_layers",
              "target.n_threads", "draft.model", "draft.n_gpu_layers", "draft.n_threads", "ui.answer_view")
#: the drafting modes in the UI's order (the form's list; the key that switches the mode goes round it):
#: each fixed mode, then auto
MODE_CYCLE = (*FIXED_DRAFT_MODES, "auto")
#: a mode's label in the form (the mode's own name where none is given)
MODE_LABELS = {"draft": "draft model", "lookup": "prompt lookup", "none": "none (target only)"}
MODES = [(MODE_LABELS.get(mode, mode), mode) for mode in MODE_CYCLE]


def _declaration(path: str) -> tuple[type, str]:
    """(settings model, field name) of a dotted path such as ``"sampling.top_k"``."""
    section, name = path.split(".")
    return Settings.model_fields[section].annotation, name


def form_field(path: str) -> tuple[str, str]:
    """(label, kind) of a form field: kind ``mode``, ``model``, ``seed`` (blank allowed), ``choice`` (one of
    a Literal's values), ``int``, ``float``. A model's field is labelled with the model ("target GPU layers")."""
    model, name = _declaration(path)
    label = option_info(model, name).get("label", name)
    if model is ModelSettings:
        label = f"{path.split('.')[0]} {label}"
    kind = model.model_fields[name].annotation
    if name in ("mode", "model", "seed"):
        return label, name
    if get_origin(kind) is Literal:
        return label, "choice"
    return label, "int" if int in (kind, *get_args(kind)) else "float"


#: (dotted path into Settings, label, kind), derived from the declarations
SETTINGS_FIELDS: list[tuple[str, str, str]] = [(path, *form_field(path)) for path in FORM_PATHS]


def field_id(path: str) -> str:
    return "f-" + path.replace(".", "-")


def get_path(settings: Settings, path: str):
    obj = settings
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


#: what an empty field means (it becomes None), shown in it as a placeholder: the declared ``blank``
BLANK_MEANS = {path: blank for path in FORM_PATHS if (blank := option_info(*_declaration(path)).get("blank"))}


def build_settings(base: Settings, values: dict[str, object]) -> tuple[Settings | None, dict[str, str]]:
    """Apply ``values`` (dotted path -> raw value) to ``base`` and validate with pydantic.

    Returns (settings, {}) or (None, {dotted path or "": reason}).
    """
    data = base.model_dump()
    for path, raw in values.items():
        section, key = path.split(".")
        if path in BLANK_MEANS and (raw is None or str(raw).strip() == ""):
            raw = None
        elif isinstance(raw, str):
            raw = raw.strip()
        data[section][key] = raw
    try:
        return Settings.model_validate(data), {}
    except ValidationError as e:
        errors: dict[str, str] = {}
        for err, invalid in zip(e.errors(), invalid_values(e)):
            loc = [str(p) for p in err.get("loc", ())]
            path = ".".join(loc[:2]) if len(loc) >= 2 and ".".join(loc[:2]) in values else ""
            msg = invalid.reason
            if path == "" and loc:
                msg = f"{'.'.join(loc)}: {msg}"
            errors.setdefault(path, msg)
        return None, errors


def _presets() -> list[str]:
    try:
        from localspec.app.catalog import load_catalog

        return list(load_catalog().models)
    except Exception:  # the catalog is optional here: paths work without it
        return []


class SettingsScreen(ModalScreen[Settings | None]):
    """Edit the settings; invalid values are refused in place with pydantic's reason."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "apply", "Apply", priority=True)]

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.base = settings

    def compose(self) -> ComposeResult:
        presets = _presets()
        with Vertical(id="settings-dialog", classes="dialog"):
            yield Static("Settings  (Enter or Ctrl+S apply, Esc cancel)", classes="dialog-title")
            with VerticalScroll(id="settings-form"):
                for path, label, kind in SETTINGS_FIELDS:
                    value = get_path(self.base, path)
                    with Horizontal(classes="field-row"):
                        yield Label(label, classes="field-label")
                        if kind == "mode":
                            yield Select(MODES, value=value, allow_blank=False, id=field_id(path), compact=True)
                        elif kind == "choice":
                            choices = get_args(_declaration(path)[0].model_fields[path.split(".")[1]].annotation)
                            yield Select([(c, c) for c in choices], value=value, allow_blank=False,
                                         id=field_id(path), compact=True)
                        else:
                            text = "" if value is None else str(value)
                            sugg = SuggestFromList(presets, case_sensitive=False) if kind == "model" else None
                            hint = BLANK_MEANS.get(path, "")
                            yield Input(text, id=field_id(path), suggester=sugg, compact=True, placeholder=hint)
                    yield Static("", id=field_id(path) + "-error", classes="field-error", markup=False)
            yield Static("", id="settings-error", classes="field-error", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")

    def values(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for path, _label, _kind in SETTINGS_FIELDS:
            w = self.query_one("#" + field_id(path))
            out[path] = w.value
        return out

    def validate_form(self) -> Settings | None:
        settings, errors = build_settings(self.base, self.values())
        for path, _label, _kind in SETTINGS_FIELDS:
            msg = errors.get(path, "")
            err = self.query_one("#" + field_id(path) + "-error", Static)
            err.update(msg)
            err.display = bool(msg)  # a line only where there is a reason to show
            self.query_one("#" + field_id(path)).set_class(bool(msg), "invalid")
        general = self.query_one("#settings-error", Static)
        general.update(errors.get("", ""))
        general.display = "" in errors
        return settings

    def on_resize(self, event) -> None:
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        # the form scrolls; the title, the reasons and the buttons always stay on screen
        # (the dialog is at most 90% of the screen: border 2, title 2, error 1, buttons 3)
        self.query_one("#settings-form").styles.max_height = max(3, min(30, int(height * 0.9) - 8))

    def on_mount(self) -> None:
        self._fit(self.app.size.height)
        self.query_one("#settings-form").can_focus = False
        self.query_one("#" + field_id(SETTINGS_FIELDS[0][0])).focus()
        self.validate_form()

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self) -> None:
        self.validate_form()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_apply()

    @on(Button.Pressed, "#apply")
    def action_apply(self) -> None:
        settings = self.validate_form()
        if settings is None:
            self.app.bell()
            self.notify("some settings are invalid; see the reasons beside them", severity="error")
            return
        self.dismiss(settings)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class PathPrompt(ModalScreen[str | None]):
    """Ask for a file path."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, default: str = "", hint: str = "Enter to confirm, Esc to cancel") -> None:
        super().__init__()
        self.title_text = title
        self.default = default
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog small-dialog"):
            yield Static(self.title_text, classes="dialog-title", markup=False)
            yield Input(self.default, id="path-input")
            yield Static(self.hint, classes="hint", markup=False)

    @on(Input.Submitted)
    def _ok(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class FilePicker(ModalScreen[str | None]):
    """Pick a file to edit: type a path or choose one in the tree."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, root: str | Path = ".") -> None:
        super().__init__()
        self.root = Path(root)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog picker-dialog"):
            yield Static("Open a file to edit (type a path + Enter, or pick one below; Esc cancels)",
                         classes="dialog-title")
            yield Input(placeholder="path/to/file.py", id="picker-input")
            yield DirectoryTree(self.root, id="picker-tree")

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(event.value.strip())

    @on(DirectoryTree.FileSelected)
    def _picked(self, event: DirectoryTree.FileSelected) -> None:
        self.dismiss(str(event.path))

    def action_cancel(self) -> None:
        self.dismiss(None)


class Confirm(ModalScreen[bool]):
    BINDINGS = [Binding("escape", "no", "No"), Binding("y", "yes", "Yes"), Binding("n", "no", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog small-dialog"):
            yield Static(self.question, classes="dialog-title", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", variant="warning", id="yes")
                yield Button("No (n)", id="no")

    @on(Button.Pressed, "#yes")
    def action_yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def action_no(self) -> None:
        self.dismiss(False)


class Choose(ModalScreen[str | None]):
    """A question with a few answers: one button and one key each; dismissed with the
    chosen answer's id (None on Esc).

    Args:
        question: the text shown.
        choices: (id, button label, key) per answer; the key "escape" marks the one Esc picks.
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, choices: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.question = question
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog small-dialog"):
            yield Static(self.question, classes="dialog-title", id="choose-question", markup=False)
            with Horizontal(classes="dialog-buttons"):
                for i, (cid, label, _key) in enumerate(self.choices):
                    yield Button(label, variant="primary" if i == 0 else "default", id=f"choose-{cid}")

    def on_key(self, event) -> None:
        for cid, _label, key in self.choices:
            if key != "escape" and event.key == key:
                event.stop()
                self.dismiss(cid)
                return

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        cid = (event.button.id or "").removeprefix("choose-")
        self.dismiss(None if any(c == cid and k == "escape" for c, _l, k in self.choices) else cid)

    def action_cancel(self) -> None:
        self.dismiss(None)
