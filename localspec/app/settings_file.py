"""The user's remembered settings: a JSON file of :class:`localspec.config.Settings`.

Location: ``$LOCALSPEC_CONFIG``, else ``$XDG_CONFIG_HOME/localspec/settings.json``, else
``~/.config/localspec/settings.json``. Written atomically. Reading never fails: a file
that is not JSON is renamed aside to ``settings.json.corrupt-<timestamp>``, reported
through ``report``, and defaults are used; in a JSON file every valid value is kept
(unknown keys are reported and left in the file, invalid values fall back one by one).
Only values that differ from the defaults are written, so new defaults reach old users.

What goes in: what the user set in the UI's settings screen (:func:`remember_changes`), nothing else.
Command-line flags hold for one run: every command that loads models reads the file's ``target`` and
``draft`` sections under its flags (:func:`localspec.app.flags.command_settings`) and never writes them back.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from localspec.config import Settings, invalid_values
from localspec.app.fileio import atomic_write_text, expand_path

log = logging.getLogger(__name__)

ReportFn = Callable[[str], None]

#: problems found by :func:`load_settings` calls without a ``report`` callback, kept for
#: the TUI to show as notifications once it is up (see :func:`take_reports`)
_pending_reports: list[str] = []


def _default_report(message: str) -> None:
    log.warning("%s", message)
    _pending_reports.append(message)


def take_reports() -> list[str]:
    """Return and forget the problems reported by earlier :func:`load_settings` calls."""
    out = list(_pending_reports)
    _pending_reports.clear()
    return out


def config_path() -> Path:
    """Where the user's settings live (the file may not exist)."""
    explicit = os.environ.get("LOCALSPEC_CONFIG")
    if explicit:
        return expand_path(explicit)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = expand_path(xdg) if xdg else Path.home() / ".config"
    return base / "localspec" / "settings.json"


def _set_aside(path: Path, why: str, report: ReportFn) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    try:
        os.replace(path, aside)
        report(f"{path} is unreadable ({why}); moved it to {aside.name} and using default settings")
    except OSError as e:
        report(f"{path} is unreadable ({why}) and could not be moved aside ({e}); using default settings")


def _lenient(data: dict, where: Path, report: ReportFn) -> Settings:
    """Settings from a JSON object, keeping every valid value: unknown keys are reported
    (once, together) and ignored; each invalid value falls back to its default alone,
    with its reason."""
    unknown: list[str] = []
    invalid: list[str] = []
    sections: dict[str, object] = {}
    defaults = Settings()
    for key, value in data.items():
        if key not in Settings.model_fields:
            unknown.append(key)
            continue
        default = getattr(defaults, key)
        model = type(default)
        if not isinstance(value, dict):
            invalid.append(f"{key}: expected an object (got {value!r})")
            continue
        for k in value:
            if k not in model.model_fields:
                unknown.append(f"{key}.{k}")
        known = {k: v for k, v in value.items() if k in model.model_fields}
        try:
            sections[key] = model.model_validate(default.model_dump() | known)
            continue
        except ValidationError:
            pass
        kept = default.model_dump()
        for k, v in known.items():  # one field at a time: a bad one does not take the others down
            try:
                model.model_validate(kept | {k: v})
                kept[k] = v
            except ValidationError as e:
                first = invalid_values(e)[0]
                invalid.append(f"{key}.{k}: {first.reason}{first.got}; using {kept.get(k)!r}")
        sections[key] = model.model_validate(kept)
    if unknown:
        report(f"{where}: ignored unknown settings {', '.join(unknown)} (left in the file as they are; "
               "written by another version of localspec?)")
    for line in invalid:
        report(f"{where}: invalid setting {line}")
    return Settings(**sections)


def load_settings(path: str | os.PathLike | None = None, report: ReportFn | None = None) -> Settings:
    """Read the user's settings (never raises).

    UTF-8 with or without a BOM. A missing file gives the defaults. A file that is not
    JSON (or not a JSON object) is renamed aside (``settings.json.corrupt-<time>``) and
    the defaults are used. Otherwise every valid value is kept: unknown keys are
    reported and ignored (and stay in the file, :func:`save_settings` keeps them), and
    each invalid value falls back to its default on its own, reported with its reason.
    """
    report = report or _default_report
    p = expand_path(path) if path is not None else config_path()
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return Settings()
    except OSError as e:
        report(f"cannot read {p}: {e.strerror or e}; using default settings")
        return Settings()
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        _set_aside(p, f"not JSON: {e}", report)
        return Settings()
    if not isinstance(data, dict):
        _set_aside(p, f"not a JSON object of settings but a {type(data).__name__}", report)
        return Settings()
    return _lenient(data, p, report)


def _unknown_keys(path: Path) -> dict:
    """The keys of the file at ``path`` that :class:`Settings` does not know, by section
    (``{}`` when the file is missing or not a JSON object)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict = {}
    for key, value in data.items():
        model = Settings.model_fields.get(key)
        if model is None:
            out[key] = value
        elif isinstance(value, dict):
            extra = {k: v for k, v in value.items() if k not in model.annotation.model_fields}
            if extra:
                out[key] = extra
    return out


def settings_to_json(settings: Settings, keep: dict | None = None) -> str:
    """The JSON written to the config file: only the values that differ from the
    defaults, plus ``keep`` (unknown keys of the existing file, by section)."""
    data = settings.model_dump(mode="json", exclude_defaults=True)
    data.get("target", {}).setdefault("model", settings.target.model)
    data.get("draft", {}).setdefault("model", settings.draft.model)
    for key, value in (keep or {}).items():
        if key in Settings.model_fields:
            data[key] = {**value, **data.get(key, {})}
        else:
            data[key] = value
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def save_settings(settings: Settings, path: str | os.PathLike | None = None) -> Path:
    """Write the settings atomically, keeping the file's unknown keys. Raises
    localspec.app.fileio.FileError."""
    p = expand_path(path) if path is not None else config_path()
    return atomic_write_text(p, settings_to_json(settings, _unknown_keys(p)))



def changed_values(old: Settings, new: Settings) -> dict[str, dict]:
    """The fields that differ between ``old`` and ``new``, by section: ``{"drafting": {"draft_max": 5}}``."""
    out: dict[str, dict] = {}
    for section in Settings.model_fields:
        a, b = getattr(old, section), getattr(new, section)
        diff = {k: getattr(b, k) for k in type(b).model_fields if getattr(a, k) != getattr(b, k)}
        if diff:
            out[section] = diff
    return out


def remember_changes(old: Settings, new: Settings, path: str | os.PathLike | None = None) -> Path | None:
    """Write the user's change from ``old`` to ``new`` (the UI's settings before and after its settings
    screen) over what the settings file holds now, and nothing else: a value the command line set for
    this run (``--rpc HOST:PORT``) that the user left alone stays out of the file.

    A section whose changed values do not validate against the file's others (``draft_min`` above the
    file's ``draft_max``) is written as ``new`` has it. Returns the path written, or None when nothing
    changed. Raises localspec.app.fileio.FileError.
    """
    changes = changed_values(old, new)
    if not changes:
        return None
    saved = load_settings(path, report=lambda message: None)  # its problems were reported when it was read
    sections = {}
    for section in Settings.model_fields:
        current = getattr(saved, section)
        if section in changes:
            try:
                current = type(current).model_validate(current.model_dump() | changes[section])
            except ValidationError:
                current = getattr(new, section)
        sections[section] = current
    return save_settings(Settings(**sections), path)
