"""Command-line options shared by every command that loads models or decodes.

One definition of each option (its flag, its help with the allowed range taken from the
settings models) and one merge of the given options over the settings, so
``localspec generate``, ``chat``, ``serve``, ``calibrate`` and ``bench`` agree.
"""

from __future__ import annotations

import argparse
import re

from pydantic import ValidationError

from .config import DraftParams, GenerationParams, ModelSettings, SamplingParams, Settings, format_validation_error
from .errors import ConfigError


def value_range(model: type, name: str, var: str = "x") -> str:
    """The allowed range of a numeric settings field, from its pydantic constraints:
    ``"1..64"``, ``"0 < x <= 1"``, ``"x >= 0"``."""
    lo = hi = None
    for m in model.model_fields[name].metadata:
        for attr, op in (("ge", "<="), ("gt", "<")):
            if getattr(m, attr, None) is not None:
                lo = (getattr(m, attr), op)
        for attr, op in (("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                hi = (getattr(m, attr), op)
    if lo and hi and lo[1] == hi[1] == "<=" and all(isinstance(v[0], int) for v in (lo, hi)):
        return f"{lo[0]}..{hi[0]}"
    if lo and hi:
        return f"{lo[0]} {lo[1]} {var} {hi[1]} {hi[0]}"
    if lo:
        return f"{var} {'>=' if lo[1] == '<=' else '>'} {lo[0]}"
    if hi:
        return f"{var} {hi[1]} {hi[0]}"
    return "any"


#: settings section -> (model, {command-line dest: field}); the flag is ``--`` + dest with dashes
SECTION_ARGS: dict[str, tuple[type, dict[str, str]]] = {
    "target": (ModelSettings, {"target": "model", "n_ctx": "n_ctx", "n_batch": "n_batch", "n_threads": "n_threads",
                               "n_gpu_layers": "n_gpu_layers", "flash_attn": "flash_attn",
                               "huge_pages": "huge_pages", "repack": "repack"}),
    "draft": (ModelSettings, {"draft": "model", "n_ctx": "n_ctx", "n_batch": "n_batch", "n_threads": "n_threads",
                              "draft_n_gpu_layers": "n_gpu_layers", "flash_attn": "flash_attn",
                              "huge_pages": "huge_pages", "repack": "repack"}),
    "sampling": (SamplingParams, {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                                  "seed": "seed"}),
    "drafting": (DraftParams, {"mode": "mode", "draft_max": "draft_max", "draft_min": "draft_min",
                               "draft_p_min": "draft_p_min"}),
    "generation": (GenerationParams, {"max_tokens": "max_tokens", "stop": "stop"}),
}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_numeric(g, dest: str, kind: type, section: str, what: str, default: str = "") -> None:
    """A numeric option whose help ends with its allowed range (from the settings model)."""
    model, fields = SECTION_ARGS[section]
    rng = value_range(model, fields[dest], "N" if kind is int else "X")
    g.add_argument(_flag(dest), type=kind, default=None, metavar="N" if kind is int else "X",
                   help=f"{what} ({rng}" + (f"; default {default}" if default else "") + ")")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Model and hardware options shared by every subcommand that loads models."""
    g = p.add_argument_group("models")
    g.add_argument("--target", default=None, help="target model: preset name, .gguf path or hf:OWNER/REPO/FILE "
                   "(default qwen2.5-coder-1.5b)")
    g.add_argument("--draft", default=None, help="draft model (default qwen2.5-coder-0.5b); same tokenizer as the target")
    add_numeric(g, "n_ctx", int, "target", "context window, tokens", "4096")
    add_numeric(g, "n_batch", int, "target", "most tokens per llama_decode", "512")
    add_numeric(g, "n_threads", int, "target", "CPU threads", "all cores")
    add_numeric(g, "n_gpu_layers", int, "target",
             "target layers on the GPU, -1 = all; needs a CUDA/Metal build of llama-cpp-python", "0")
    add_numeric(g, "draft_n_gpu_layers", int, "draft", "draft layers on the GPU, -1 = all", "0")
    g.add_argument("--flash-attn", choices=["auto", "on", "off"], default=None,
                   help="llama.cpp flash attention: auto (default) = the faster one as measured by "
                        "localspec calibrate (off until measured)")
    g.add_argument("--huge-pages", choices=["on", "off"], default=None,
                   help="on (default): weights read into memory and kept in 2 MiB transparent huge pages where "
                        "the kernel allows (Linux), faster decoding; off: the file is mapped (llama.cpp's default)")
    g.add_argument("--repack", choices=["auto", "on", "off"], default=None,
                   help="llama.cpp's weight repacking (AMX, interleaved Q4_0): auto (default) = only where a test "
                        "decode in a child process did not crash and was not slower (it crashes on some virtualized "
                        "AMX Xeons); on; off (llama-server's --no-repack)")


def add_generation_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--mode", choices=["auto", "draft", "lookup", "none"], default=None,
                   help="auto: measured choice per round; draft: draft model; lookup: prompt lookup; none: target only")
    add_numeric(g, "draft_max", int, "drafting", "most tokens drafted per round (gamma)",
                "64 in mode auto, which chooses each round's length up to it by the measured costs; "
                "8 in draft and lookup")
    add_numeric(g, "draft_min", int, "drafting", "drafts shorter than this are not verified; at most --draft-max", "0")
    add_numeric(g, "draft_p_min", float, "drafting", "the draft model stops below this top-1 probability", "0")
    add_numeric(g, "temperature", float, "sampling", "0 = greedy", "0")
    add_numeric(g, "top_k", int, "sampling", "keep the k most probable tokens, 0 = off", "0")
    add_numeric(g, "top_p", float, "sampling", "nucleus sampling, 1 = off", "1")
    add_numeric(g, "min_p", float, "sampling", "drop tokens below min-p x the top probability, 0 = off", "0")
    add_numeric(g, "seed", int, "sampling", "random seed", "fresh entropy")
    add_numeric(g, "max_tokens", int, "generation", "most tokens generated", "512")
    g.add_argument("--stop", action="append", default=None, help="stop string, not empty (repeatable)")


def _pick(ns: argparse.Namespace, mapping: dict[str, str]) -> dict:
    return {field: getattr(ns, arg) for arg, field in mapping.items() if getattr(ns, arg, None) is not None}


def _cli_errors(section: str, err: ValidationError, given: dict[str, str]) -> list[str]:
    """One line per invalid value, naming the flag that set it (``--top-p: ...``), else
    the settings field (``sampling.top_p: ...``, a value from the settings file)."""
    flags = {field: _flag(dest) for dest, field in given.items()}
    lines = []
    for line in format_validation_error(err).splitlines():
        name, sep, rest = line.partition(": ")
        if sep and name in flags:
            lines.append(f"{flags[name]}: {rest}")
        elif sep and name in SECTION_ARGS[section][0].model_fields:
            lines.append(f"{section}.{name}: {rest}")
        else:  # a rule between fields (draft_min <= draft_max): name them by their flags
            line = line.removeprefix("settings: ").replace("Value error, ", "")
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
    sections: dict[str, object] = {}
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
        raise ConfigError("invalid settings:\n" + "\n".join(dict.fromkeys(errors)),
                          f"see localspec {command} --help for the allowed values")
    return Settings(**sections)
