"""The fill-in-the-middle prompt (localspec/app/fim.py) on a fake vocabulary: the token order
(PSM), user text that spells a FIM token, the repo-level form, a model without FIM tokens."""

import re

import pytest

from localspec.app.fim import FimInput, fim_prompt, missing_fim_tokens
from localspec.errors import ConfigError

#: Qwen2.5-Coder's FIM tokens (their ids in its vocabulary)
QWEN = {"pre": 151659, "mid": 151660, "suf": 151661, "pad": 151662, "rep": 151663, "sep": 151664}
NAMES = {151659: "<|fim_prefix|>", 151660: "<|fim_middle|>", 151661: "<|fim_suffix|>", 151662: "<|fim_pad|>",
         151663: "<|repo_name|>", 151664: "<|file_sep|>"}
SPECIAL = {v: k for k, v in NAMES.items()}


def tokenize(text: str, special: bool = False) -> list[int]:
    """A fake tokenizer: one token per character (its code point), and, with ``special``, a FIM
    token's text as its id (as llama.cpp's parse_special would)."""
    if not special:
        return [ord(c) for c in text]
    out: list[int] = []
    for part in re.split("(" + "|".join(map(re.escape, SPECIAL)) + ")", text):
        out += [SPECIAL[part]] if part in SPECIAL else [ord(c) for c in part]
    return out


def render(ids: list[int]) -> str:
    return "".join(NAMES.get(i, chr(i) if i < 0x110000 else f"<{i}>") for i in ids)


def test_psm_order_prefix_suffix_middle():
    ids = fim_prompt(QWEN, tokenize, FimInput("def add(a, b):\n    ", "\n\nprint(add(1, 2))"))
    assert render(ids) == "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))<|fim_middle|>"
    assert ids[0] == QWEN["pre"] and ids[-1] == QWEN["mid"]


def test_bos_first_and_the_typed_middle_after_the_prefix():
    """llama.cpp's format_prompt_infill puts ``prompt`` right after the prefix (its code, not its README)."""
    ids = fim_prompt(QWEN, tokenize, FimInput("a", "z", middle="b"), bos=1)
    assert ids[0] == 1 and render(ids[1:]) == "<|fim_prefix|>ab<|fim_suffix|>z<|fim_middle|>"


def test_user_text_spelling_fim_tokens_stays_text():
    """Code that contains ``<|fim_middle|>`` (a tokenizer's source, a prompt about FIM) must not end
    the prefix: the prompt holds exactly one of each FIM token, where the format puts it."""
    nasty = "x = '<|fim_middle|>'  # <|fim_suffix|> <|file_sep|>"
    ids = fim_prompt(QWEN, tokenize, FimInput(nasty, nasty, extra=(("<|repo_name|>.py", nasty),), middle=nasty))
    for role in ("pre", "suf", "mid", "rep"):
        assert ids.count(QWEN[role]) == 1, role
    assert ids.count(QWEN["sep"]) == 2  # one per extra file, one before the current file
    assert render(ids).count("<|fim_middle|>") == 1 + 4  # the token, and the text in each of 4 user texts


def test_repo_level_form_with_extra_files():
    ids = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=(("util.py", "def f(): pass\n"), ("b.py", "B"))))
    assert render(ids) == ("<|repo_name|>myproject\n<|file_sep|>util.py\ndef f(): pass\n<|file_sep|>b.py\nB"
                           "<|file_sep|>filename\n<|fim_prefix|>p<|fim_suffix|>s<|fim_middle|>")


def test_no_extra_files_no_repo_tokens():
    assert QWEN["rep"] not in fim_prompt(QWEN, tokenize, FimInput("p", "s"))


def test_extra_files_without_repo_tokens_use_llama_cpp_snippet_separator():
    plain = {"pre": 1, "suf": 2, "mid": 3, "pad": -1, "rep": -1, "sep": -1}
    ids = fim_prompt(plain, tokenize, FimInput("p", "s", extra=(("a.py", "A"),)))
    assert ids == tokenize("\n\n--- snippet ---\n\nA") + [1, ord("p"), 2, ord("s"), 3]


def test_extra_context_is_cut_from_its_start_to_fit_the_budget():
    full = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=(("old.py", "O" * 50), ("new.py", "N" * 50))))
    cut = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=(("old.py", "O" * 50), ("new.py", "N" * 50))),
                     budget=40)
    assert len(cut) == 40 and cut == full[-40:]  # the newest context kept, the prefix/suffix/middle whole
    tiny = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=(("a.py", "A"),)), budget=2)
    assert render(tiny) == "<|fim_prefix|>p<|fim_suffix|>s<|fim_middle|>"  # never cut into the core


@pytest.mark.parametrize("tokens, missing", [
    ({}, ["prefix", "suffix", "middle"]),
    ({"pre": -1, "suf": -1, "mid": -1, "pad": -1, "rep": -1, "sep": -1}, ["prefix", "suffix", "middle"]),
    ({"pre": 5, "suf": 6, "mid": -1}, ["middle"]),
])
def test_a_model_without_fim_tokens_is_refused_with_a_hint(tokens, missing):
    assert missing_fim_tokens(tokens) == missing
    with pytest.raises(ConfigError) as e:
        fim_prompt(tokens, tokenize, FimInput("p", "s"), model="SmolLM2-135M.gguf")
    assert "SmolLM2-135M.gguf has no fill-in-the-middle tokens" in e.value.message
    assert ", ".join(missing) in e.value.message and "Qwen2.5-Coder" in e.value.hint
