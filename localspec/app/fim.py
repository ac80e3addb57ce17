"""Fill-in-the-middle (FIM) prompts: a prefix, a suffix and optional extra files, in the model's own
FIM tokens, token for token as llama.cpp's server builds them for ``POST /infill``
(``format_prompt_infill`` in llama.cpp's ``tools/server/server-common.cpp``).

PSM order (prefix, suffix, middle). A model with the repo-level tokens (Qwen2.5-Coder's
``<|repo_name|>`` and ``<|file_sep|>``; Qwen2.5-Coder technical report, arXiv:2409.12186 §3) always
gets the repo-level form, with or without extra files (llama.cpp adds the repository header
whenever the vocabulary has ``<FIM_REP>``)::

    <FIM_REP>myproject\\n<FIM_SEP>{filename 0}\\n{text 0}...<FIM_SEP>filename\\n
    [BOS]<FIM_PRE>prefix typed<FIM_SUF>suffix<FIM_MID>

(one line, no newline between ``filename\\n`` and BOS). A model without them gets
``[BOS]<FIM_PRE>prefix typed<FIM_SUF>suffix<FIM_MID>``, extra chunks each after llama.cpp's
``\\n\\n--- snippet ---\\n\\n`` separator before it. The FIM tokens are read from the GGUF by llama.cpp
(``llama_vocab_fim_pre``, ...). The prefix, suffix and the extra files are tokenized as plain text,
so ``<|fim_middle|>`` written in code stays text; the typed middle (llama.cpp's ``prompt``) is
tokenized as llama.cpp's server tokenizes a prompt, special-token text read as the token.

Lengths, as llama.cpp's server cuts them with its defaults (logical batch ``-b`` 2048, ``-n`` -1):
the last ``3 * (n_batch // 4)`` tokens of the prefix (1,536), the first
``n_batch // 4 - 2 - len(typed)`` of the suffix (510 - typed), and the last
``n_ctx - n_batch - 2 * n_predict`` tokens of the extra context (the oldest cut first).
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
#: llama-server's default logical batch size (``-b``), from which its /infill sizes the prefix and suffix
LLAMA_SERVER_N_BATCH = 2048
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
    """The context before ``<FIM_PRE>`` (see the module docstring): the repository header and the
    current file's separator whenever the model has those tokens, extra files or not."""
    rep, sep = fim_tokens.get("rep", -1), fim_tokens.get("sep", -1)
    out: list[int] = [rep, *text(REPO_NAME + "\n")] if rep >= 0 else []
    for filename, chunk in extra:
        out += [sep, *text(filename + "\n")] if sep >= 0 else text(SNIPPET_SEPARATOR)
        out += text(chunk)
    if sep >= 0:
        out += [sep, *text(CURRENT_FILE + "\n")]
    return out


def fim_prompt(fim_tokens: Mapping[str, int], text: Callable[[str], list[int]], fim: FimInput,
               bos: int | None = None, n_ctx: int | None = None, n_predict: int = -1,
               n_batch: int = LLAMA_SERVER_N_BATCH, typed: Callable[[str], list[int]] | None = None,
               model: str = "this model") -> list[int]:
    """The FIM prompt's token ids, as llama.cpp's ``format_prompt_infill`` makes them (module docstring).

    Args:
        fim_tokens: role (:data:`FIM_ROLES`) -> token id, -1 when the model has none
            (:meth:`localspec.backend.llama.LlamaModel.fim_tokens`).
        text: plain-text tokenizer (no BOS, special-token text kept as text), for the prefix,
            suffix and extra files.
        fim: the prefix, suffix, extra files and typed middle.
        bos: a BOS token id (when the GGUF asks for one), placed after the extra context, or None.
        n_ctx: the context window in tokens, which with ``n_batch`` and ``n_predict`` sizes the
            extra context; None: all of it.
        n_predict: the server's default output length in tokens (llama-server's ``-n``; -1: none).
        n_batch: llama-server's logical batch size, which sizes the prefix and suffix kept.
        typed: tokenizer of the typed middle (no BOS, special-token text parsed as llama.cpp's
            server does for ``prompt``); None: ``text``.
        model: the model's name, for the error.

    Returns:
        list of int token ids; it may exceed ``n_ctx`` (the caller's 400).

    Raises:
        ConfigError: the model lacks the FIM prefix, suffix or middle token (:func:`check_fim`).
    """
    check_fim(fim_tokens, model)
    middle = (typed or text)(fim.middle) if fim.middle else []
    prefix, suffix = text(fim.prefix), text(fim.suffix)
    prefix = prefix[len(prefix) - min(len(prefix), 3 * (n_batch // 4)):]
    suffix = suffix[:max(0, n_batch // 4 - (2 + len(middle)))]
    extra = _extra_tokens(fim_tokens, text, fim.extra)
    if n_ctx is not None:
        extra = extra[len(extra) - min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra)):]
    head = [bos] if bos is not None and bos >= 0 else []
    return [*extra, *head, fim_tokens["pre"], *prefix, *middle, fim_tokens["suf"], *suffix, fim_tokens["mid"]]
