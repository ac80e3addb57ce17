"""The user's remembered settings: a JSON file of :class:`localspec.config.Settings`.

Location: ``$LOCALSPEC_CONFIG``, else ``$XDG_CONFIG_HOME/localspec/settings.json``, else
``~/.config/localspec/settings.json``. Written atomically. Reading never fails: a file
that is not valid JSON or not valid settings is renamed aside to
``settings.json.corrupt-<timestamp>``, reported through ``report``, and defaults are used.
Only values that differ from the defaults are written, so new defaults reach old users.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from .config import Settings, format_validation_error
from .fileio import atomic_write_text

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
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
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


def load_settings(path: str | os.PathLike | None = None, report: ReportFn | None = None) -> Settings:
    """Read the user's settings; defaults when the file is missing or corrupt (never raises)."""
    report = report or _default_report
    p = Path(path).expanduser() if path is not None else config_path()
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return Settings()
    except OSError as e:
        report(f"cannot read {p}: {e.strerror or e}; using default settings")
        return Settings()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        _set_aside(p, f"not JSON: {e}", report)
        return Settings()
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        _set_aside(p, "invalid settings: " + format_validation_error(e).replace("\n", "; "), report)
        return Settings()


def settings_to_json(settings: Settings) -> str:
    """The JSON written to the config file: only the values that differ from the defaults."""
    data = settings.model_dump(mode="json", exclude_defaults=True)
    data.get("target", {}).setdefault("model", settings.target.model)
    data.get("draft", {}).setdefault("model", settings.draft.model)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def save_settings(settings: Settings, path: str | os.PathLike | None = None) -> Path:
    """Write the settings atomically. Raises localspec.fileio.FileError."""
    p = Path(path).expanduser() if path is not None else config_path()
    return atomic_write_text(p, settings_to_json(settings))


#: the name the CLI imports
load_user_settings = load_settings
