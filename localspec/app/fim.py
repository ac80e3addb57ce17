"""Fill-in-the-middle (FIM) prompts: a prefix, a suffix and optional extra files, in the model's own
FIM tokens, as llama.cpp's server builds them for ``POST /infill`` (``format_prompt_infill`` in
llama.cpp's ``tools/server/server-common.cpp``).

PSM order (prefix, suffix, middle)::

    [BOS]<FIM_PRE>prefix middle<FIM_SUF>suffix<FIM_MID>

With extra context (other files) and a model that has the repo-level tokens (Qwen2.5-Coder's
``<|repo_name|>`` and ``<|file_sep|>``; Qwen2.5-Coder technical report, arXiv:2409.12186 §3)::

    [BOS]<FIM_REP>myproject\\n<FIM_SEP>{filename 0}\\n{text 0}...<FIM_SEP>filename\\n<FIM_PRE>prefix...

and without them the chunks are joined with llama.cpp's ``\\n\\n--- snippet ---\\n\\n`` separator
before ``<FIM_PRE>``. The FIM tokens are read from the GGUF by llama.cpp (``llama_vocab_fim_pre``,
...); every text from the user (prefix, suffix, file names and texts, middle) is tokenized as
plain text, so ``<|fim_middle|>`` written in code stays text and cannot end the prefix early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from localspec.errors import ConfigError

#: the roles of llama.cpp's FIM tokens (``llama_vocab_fim_<role>``); -1 (LLAMA_TOKEN_NULL): absent
FIM_ROLES = ("pre", "suf", "mid", "pad", "rep", "sep")
#: the three a FIM prompt cannot do without, as llama.cpp's server names them
REQUIRED = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
#: llama.cpp's project name and current file name in the repo-level form (its server has no input for them)
REPO_NAME = "myproject"
CURRENT_FILE = "filename"
#: llama.cpp's separator of extra chunks for a model without ``<FIM_SEP>``
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"
FIM_HINT = ("use a code model trained for fill-in-the-middle, such as the default Qwen2.5-Coder pair "
            "(localspec serve with no --target)")


@dataclass(frozen=True)
class FimInput:
    """What to fill in.

    Attributes:
        prefix: the text before the cursor.
        suffix: the text after it.
        extra: other files as ``(filename, text)`` pairs, most relevant last (llama.cpp's ``input_extra``).
        middle: the start of the middle already typed (llama.cpp's ``prompt``: llama.vim sends the
            current line up to the cursor), placed right after the prefix as llama.cpp's
            ``format_prompt_infill`` does (its README says after ``<FIM_MID>``; the code wins).
    """

    prefix: str
    suffix: str
    extra: tuple[tuple[str, str], ...] = ()
    middle: str = ""


def missing_fim_tokens(fim_tokens: Mapping[str, int]) -> list[str]:
    """The names (``"prefix"``, ``"suffix"``, ``"middle"``) of the required FIM tokens a model lacks."""
    return [name for role, name in REQUIRED.items() if fim_tokens.get(role, -1) < 0]


def check_fim(fim_tokens: Mapping[str, int], model: str) -> None:
    """Raises ConfigError (with :data:`FIM_HINT`) when ``model`` lacks a FIM prefix, suffix or middle token."""
    missing = missing_fim_tokens(fim_tokens)
    if missing:
        raise ConfigError(f"{model} has no fill-in-the-middle tokens (its GGUF lacks the FIM "
                          f"{', '.join(missing)} token{'s' if len(missing) > 1 else ''}), so it cannot fill in "
                          "between a prefix and a suffix", FIM_HINT)


def _extra_tokens(fim_tokens: Mapping[str, int], text: Callable[[str], list[int]],
                  extra: Sequence[tuple[str, str]]) -> list[int]:
    """The extra context before ``<FIM_PRE>`` (see the module docstring); empty without extra files."""
    if not extra:
        return []
    rep, sep = fim_tokens.get("rep", -1), fim_tokens.get("sep", -1)
    out: list[int] = [rep, *text(REPO_NAME + "\n")] if rep >= 0 else []
    for filename, chunk in extra:
        out += [sep, *text(filename + "\n")] if sep >= 0 else text(SNIPPET_SEPARATOR)
        out += text(chunk)
    if sep >= 0:
        out += [sep, *text(CURRENT_FILE + "\n")]
    return out


def fim_prompt(fim_tokens: Mapping[str, int], text: Callable[[str], list[int]], fim: FimInput,
               bos: int | None = None, budget: int | None = None, model: str = "this model") -> list[int]:
    """The FIM prompt's token ids (PSM order; the repo-level form when ``fim.extra`` is given).

    Args:
        fim_tokens: role (:data:`FIM_ROLES`) -> token id, -1 when the model has none
            (:meth:`localspec.backend.llama.LlamaModel.fim_tokens`).
        text: plain-text tokenizer (no BOS, special-token text kept as text): user text never
            becomes a special token.
        fim: the prefix, suffix, extra files and middle.
        bos: a BOS token id to start with (when the GGUF asks for one), or None.
        budget: the most tokens the prompt may have; the extra context is cut from its start
            (oldest first, as llama.cpp does) to fit. None: no limit. Prefix and suffix are never cut
            (a prompt too long without extra context is the caller's 400).
        model: the model's name, for the error.

    Returns:
        list of int token ids.

    Raises:
        ConfigError: the model lacks the FIM prefix, suffix or middle token (:func:`check_fim`).
    """
    check_fim(fim_tokens, model)
    head = [bos] if bos is not None and bos >= 0 else []
    core = [fim_tokens["pre"], *text(fim.prefix), *(text(fim.middle) if fim.middle else []),
            fim_tokens["suf"], *text(fim.suffix), fim_tokens["mid"]]
    extra = _extra_tokens(fim_tokens, text, fim.extra)
    if budget is not None:
        room = max(0, budget - len(head) - len(core))
        extra = extra[len(extra) - min(room, len(extra)):]
    return [*head, *extra, *core]
