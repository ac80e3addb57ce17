"""Command-line options shared by every command that loads models or decodes.

Each flag is derived from its option's one declaration in the settings models
(:mod:`localspec.config`: name, type, range, default, help; as llama-cpp-python's server derives its flags from
its settings with ``add_args_from_model``), and one merge of the given options over the settings, so
``localspec generate``, ``chat``, ``serve``, ``calibrate`` and ``bench`` agree.
"""

from __future__ import annotations

import argparse
import re
from typing import Literal, get_args

from pydantic import ValidationError

from localspec.config import (TEMPERATURE_MAX, DraftParams, GenerationParams, ModelSettings, SamplingParams,
                              ServerSettings, Settings, constraints, invalid_values, option_info)
from localspec.app.catalog import load_catalog
from localspec.errors import ConfigError


def value_range(model: type, name: str, var: str = "x") -> str:
    """The allowed range of a numeric settings field, from its pydantic constraints:
    ``"1..64"``, ``"0 < x <= 1"``, ``"x >= 0"``."""
    c = constraints(model, name)
    lo = (c["ge"], "<=") if "ge" in c else (c["gt"], "<") if "gt" in c else None
    hi = (c["le"], "<=") if "le" in c else (c["lt"], "<") if "lt" in c else None
    if lo and hi and lo[1] == hi[1] == "<=" and all(isinstance(v[0], int) for v in (lo, hi)):
        return f"{lo[0]}..{hi[0]}"
    if lo and hi:
        return f"{lo[0]} {lo[1]} {var} {hi[1]} {hi[0]}"
    if lo:
        return f"{var} {'>=' if lo[1] == '<=' else '>'} {lo[0]}"
    if hi:
        return f"{var} {hi[1]} {hi[0]}"
    return "any"


#: the settings sections that have flags, and their models, in the order their values are checked
SECTIONS: dict[str, type] = {"target": ModelSettings, "draft": ModelSettings, "sampling": SamplingParams,
                             "drafting": DraftParams, "generation": GenerationParams}
#: (section, field) of the options without a flag (as llama-cpp-python's ``add_args_from_model``, every other
#: field of a section's model has one): prompt lookup's n-gram range, ``/infill``'s limits and the draft model's
#: RPC workers (its layers stay on this machine) are set in the settings file or a request; the server's default
#: max_tokens is ``--max-tokens``
NO_FLAG = {("drafting", "max_ngram"), ("drafting", "min_ngram"), ("generation", "min_indent"),
           ("generation", "newline_time_limit"), ("draft", "rpc"), ("draft", "rpc_timeout"),
           ("server", "default_max_tokens")}
#: a flag's command-line dest is its field's name (``--`` and dashes for underscores: ``top_k`` -> ``--top-k``),
#: except these: (section, field) -> dest. The target's and the draft's other flags are one flag setting both.
RENAMED = {("target", "model"): "target", ("draft", "model"): "draft", ("draft", "n_gpu_layers"): "draft_n_gpu_layers",
           ("server", "cors_origins"): "cors_origin"}


def _dests(section: str, model: type) -> dict[str, str]:
    """{command-line dest: field} of a section's flags, in the model's field order."""
    return {RENAMED.get((section, name), name): name for name in model.model_fields if (section, name) not in NO_FLAG}


#: settings section -> (model, {command-line dest: field}), derived from the models' fields (:data:`NO_FLAG`,
#: :data:`RENAMED`). What a flag accepts and its help come from the field's declaration
#: (:func:`localspec.config.option`).
SECTION_ARGS: dict[str, tuple[type, dict[str, str]]] = {s: (m, _dests(s, m)) for s, m in SECTIONS.items()}
#: ``localspec serve``'s flags: command-line dest -> :class:`~localspec.config.ServerSettings` field
SERVER_ARGS: dict[str, str] = _dests("server", ServerSettings)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _sections_of(dest: str) -> list[str]:
    return [section for section, (_, fields) in SECTION_ARGS.items() if dest in fields]


def _default_text(model: type, name: str) -> str:
    """The default as the help names it: the declared ``default_text``, else the value (``0``, not ``0.0``)."""
    text = option_info(model, name).get("default_text")
    if text is not None:
        return text
    value = model.model_fields[name].get_default(call_default_factory=True)
    return f"{value:g}" if isinstance(value, float) else str(value)


def add_option(g, dest: str, help: str | None = None, default_text: str | None = None) -> None:
    """Add flag ``--dest`` (dashes for underscores) for the settings field it sets (:data:`SECTION_ARGS`).

    Derived from the field's declaration: a number takes ``N`` (int) or ``X`` (float) and its
    help ends with the allowed range and the default; a ``Literal`` or a bool (``on``/``off``)
    offers its choices; a flag setting one model's field (``--draft-n-gpu-layers``) names the
    model. ``help`` and ``default_text`` replace the declared ones for a command whose flag
    means something narrower (``localspec bench --draft-max``).
    """
    section = _sections_of(dest)[0]
    model, fields = SECTION_ARGS[section]
    name = fields[dest]
    info = model.model_fields[name]
    what = help or info.description or ""
    if help is None and model is ModelSettings and len(_sections_of(dest)) == 1:
        what = f"{section} {what}"
    kind = info.annotation
    if kind is str:
        default = getattr(Settings(), section).model_dump()[name]
        note = Settings.model_fields[section].description  # what this model must be (the draft's tokenizer)
        g.add_argument(_flag(dest), default=None, help=f"{what} (default {default})" + (f"; {note}" if note else ""))
    else:
        _add_field(g, dest, model, name, what, default_text)


def _add_field(g, dest: str, model: type, name: str, what: str, default_text: str | None = None) -> None:
    """Add flag ``--dest`` for field ``name`` of ``model``, as its declaration says (see :func:`add_option`)."""
    kind = model.model_fields[name].annotation
    if getattr(kind, "__origin__", None) is tuple:  # repeatable: --stop, --cors-origin
        g.add_argument(_flag(dest), action="append", default=None, metavar=dest.split("_")[-1].upper(), help=what)
    elif kind is bool:
        g.add_argument(_flag(dest), choices=["on", "off"], default=None, help=what)
    elif getattr(kind, "__origin__", None) is Literal:
        g.add_argument(_flag(dest), choices=list(get_args(kind)), default=None, help=what)
    elif str in (kind, *get_args(kind)):
        default = default_text if default_text is not None else _default_text(model, name)
        g.add_argument(_flag(dest), default=None, metavar=dest.split("_")[-1].upper(), help=f"{what} (default {default})")
    else:
        number = int if int in (kind, *get_args(kind)) else float
        var = "N" if number is int else "SECONDS" if option_info(model, name).get("unit") == "seconds" else "X"
        rng = value_range(model, name, var)
        default = default_text if default_text is not None else _default_text(model, name)
        g.add_argument(_flag(dest), type=number, default=None, metavar=var,
                       help=f"{what} ({rng}" + (f"; default {default}" if default else "") + ")")


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """``localspec serve``'s own flags, from :class:`~localspec.config.ServerSettings`."""
    g = p.add_argument_group("server")
    for dest, name in SERVER_ARGS.items():
        _add_field(g, dest, ServerSettings, name, ServerSettings.model_fields[name].description or "")


def server_settings_from_args(ns: argparse.Namespace, api_key_env: str | None = None) -> ServerSettings:
    """The server's settings from ``localspec serve``'s flags (``api_key_env``: the keys, comma-separated, when
    ``--api-key`` is not given; ``--max-tokens``: the default max_tokens of a chat request).

    Raises:
        ConfigError: with one line per invalid value, each naming its flag.
    """
    data = _pick(ns, SERVER_ARGS)
    data["cors_origins"] = tuple(data.get("cors_origins") or ())
    data["api_key"] = data.get("api_key") or api_key_env or ()
    data["default_max_tokens"] = getattr(ns, "max_tokens", None)
    try:
        return ServerSettings(**data)
    except ValidationError as e:
        flags = {field: _flag(dest) for dest, field in SERVER_ARGS.items()} | {"default_max_tokens": _flag("max_tokens")}
        # an API key is a secret: the value given is never repeated (the other keys beside the empty one)
        lines = [f"{flags.get(v.path, v.path)}: {v.reason}{'' if v.path.startswith('api_key') else v.got}"
                 for v in invalid_values(e)]
        raise ConfigError("invalid settings:\n" + "\n".join(lines), "see localspec serve --help for the allowed "
                          "values") from None


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Model and hardware options shared by every subcommand that loads models."""
    g = p.add_argument_group("models")
    draft = {field: dest for dest, field in SECTION_ARGS["draft"][1].items()}
    for dest, field in SECTION_ARGS["target"][1].items():  # each target flag, then the draft's own beside it
        add_option(g, dest)
        if draft.get(field, dest) != dest:
            add_option(g, draft[field])


def add_generation_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    for section in ("drafting", "sampling", "generation"):
        for dest in SECTION_ARGS[section][1]:
            add_option(g, dest)


def _pick(ns: argparse.Namespace, mapping: dict[str, str]) -> dict:
    return {field: getattr(ns, arg) for arg, field in mapping.items() if getattr(ns, arg, None) is not None}


def _cli_errors(section: str, err: ValidationError, given: dict[str, str]) -> list[str]:
    """One line per invalid value, naming the flag that set it (``--top-p: ...``), else
    the settings field (``sampling.top_p: ...``, a value from the settings file)."""
    flags = {field: _flag(dest) for dest, field in given.items()}
    lines = []
    for v in invalid_values(err):
        if v.path in flags:
            lines.append(f"{flags[v.path]}: {v.reason}{v.got}")
        elif v.path in SECTION_ARGS[section][0].model_fields:
            lines.append(f"{section}.{v.line()}")
        else:  # a rule between fields (draft_min <= draft_max): name them by their flags
            line = f"{v.path}: {v.reason}{v.got}" if v.path else v.reason + v.got
            named = line
            for field, flag in flags.items():
                if "_" in field:
                    named = re.sub(rf"\b{field}\b", flag, named)
            if named == line and flags:
                named = f"{', '.join(flags.values())}: {line}"
            lines.append(named)
    return lines


def settings_from_args(ns: argparse.Namespace, base: Settings | None = None, command: str = "generate") -> Settings:
    """Merge command-line options over ``base`` and validate.

    Raises:
        ConfigError: with one line per invalid setting, each naming its flag.
    """
    base = base or Settings()
    sections: dict[str, object] = dict(base)  # sections with no flags (ui) stay the base's
    errors: list[str] = []
    for section, (model, mapping) in SECTION_ARGS.items():
        mapping = {d: f for d, f in mapping.items() if d != "stop"}
        given = {d: f for d, f in mapping.items() if getattr(ns, d, None) is not None}
        data = getattr(base, section).model_dump() | _pick(ns, mapping)
        if section == "generation" and getattr(ns, "stop", None):
            data["stop"] = tuple(ns.stop)
            given["stop"] = "stop"
        try:
            sections[section] = model(**data)
        except ValidationError as e:
            errors += _cli_errors(section, e, given)
    if errors:
        hint = f"see localspec {command} --help for the allowed values"
        if any(e.startswith(("--temperature:", "sampling.temperature:")) and "less than" in e for e in errors):
            hint = (f"the temperature is 0..{TEMPERATURE_MAX:g} as in OpenAI's API (1 = the model's own "
                    f"distribution; the command line and the TUI accepted up to 100 before); {hint}")
        raise ConfigError("invalid settings:\n" + "\n".join(dict.fromkeys(errors)), hint)
    settings = Settings(**sections)
    if getattr(ns, "target", None) is not None and getattr(ns, "draft", None) is None \
            and base.draft.model == Settings().draft.model:
        settings = settings.model_copy(update={"draft": settings.draft.model_copy(
            update={"model": paired_draft(settings.target.model, settings.draft.model)})})
    return settings


#: the settings file's sections every command that loads models reads (the UI reads every section)
MODEL_SECTIONS = ("target", "draft")


def command_settings(ns: argparse.Namespace, command: str, saved: Settings,
                     sections: tuple[str, ...] = MODEL_SECTIONS) -> Settings:
    """The settings a command runs with: ``sections`` of the settings file's ``saved`` settings
    (:func:`localspec.app.settings_file.load_settings`; the models, their windows, ``rpc`` and ``rpc_timeout``),
    the defaults for the rest, and the command line's flags over both (:func:`settings_from_args`). Flags
    hold for this run only: nothing here writes the file.

    Raises:
        ConfigError: an invalid flag, named (an invalid value in the file falls back to its default, reported).
    """
    base = Settings().model_copy(update={s: getattr(saved, s) for s in sections})
    return settings_from_args(ns, base=base, command=command)


def paired_draft(target: str, draft: str) -> str:
    """The draft model for a ``--target`` given without ``--draft``: the draft of the catalog pair whose
    target it is (``--target smollm2-135m`` drafts with smollm2-135m, not the default pair's Qwen draft,
    whose tokenizer differs), else ``draft`` unchanged."""
    pair = next((p for p in load_catalog().pairs.values() if p.target == target), None)
    return pair.draft if pair else draft
