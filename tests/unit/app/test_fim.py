"""The fill-in-the-middle prompt (localspec/app/fim.py) on a fake vocabulary, against llama.cpp's
``format_prompt_infill`` (tools/server/server-common.cpp): the token order (PSM), the repo-level
header whenever the model has its tokens, BOS after the extra context, user text that spells a FIM
token, the lengths kept of the prefix, suffix and extra context, a model without FIM tokens."""

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


#: llama.cpp's repo-level header and current-file separator, before every FIM prompt of a model with them
HEADER = "<|repo_name|>myproject\n<|file_sep|>filename\n"
#: a model with the three FIM tokens only
PLAIN = {"pre": 1, "suf": 2, "mid": 3, "pad": -1, "rep": -1, "sep": -1}


def test_psm_order_after_the_repo_header_even_without_extra_files():
    """llama.cpp adds ``<|repo_name|>myproject`` and ``<|file_sep|>filename`` whenever the vocabulary has
    the tokens: without them Qwen2.5-Coder saw another prompt than llama-server's (issue 32: more empty answers)."""
    ids = fim_prompt(QWEN, tokenize, FimInput("def add(a, b):\n    ", "\n\nprint(add(1, 2))"))
    assert render(ids) == HEADER + "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))<|fim_middle|>"
    assert ids[0] == QWEN["rep"] and ids[-1] == QWEN["mid"]


def test_a_model_without_repo_tokens_starts_with_bos_and_the_prefix_token():
    """llama.cpp puts ``prompt`` (the typed middle) right after the prefix (its code, not its README)."""
    ids = fim_prompt(PLAIN, tokenize, FimInput("a", "z", middle="b"), bos=9)
    assert ids == [9, 1, ord("a"), ord("b"), 2, ord("z"), 3]


def test_bos_goes_after_the_extra_context():
    ids = fim_prompt(QWEN, tokenize, FimInput("a", "z", extra=(("u.py", "U"),)), bos=9)
    assert render(ids) == ("<|repo_name|>myproject\n<|file_sep|>u.py\nU<|file_sep|>filename\n" + chr(9)
                           + "<|fim_prefix|>a<|fim_suffix|>z<|fim_middle|>")


def test_user_text_spelling_fim_tokens_stays_text_but_the_typed_middle_is_a_prompt():
    """Code that contains ``<|fim_middle|>`` (a tokenizer's source, a prompt about FIM) must not end
    the prefix: prefix, suffix and extra files are plain text. The typed middle (``prompt``) is
    tokenized as llama.cpp's server tokenizes a prompt, special-token text parsed."""
    nasty = "x = '<|fim_middle|>'  # <|fim_suffix|> <|file_sep|>"
    ids = fim_prompt(QWEN, tokenize, FimInput(nasty, nasty, extra=(("<|repo_name|>.py", nasty),), middle=nasty),
                     typed=lambda t: tokenize(t, special=True))
    for role in ("pre", "rep"):
        assert ids.count(QWEN[role]) == 1, role
    assert ids.count(QWEN["mid"]) == 2 and ids.count(QWEN["suf"]) == 2  # the format's, and the typed middle's
    assert ids.count(QWEN["sep"]) == 3  # one per extra file, one before the current file, one typed
    assert render(ids).count("<|fim_middle|>") == 2 + 3  # the two tokens, and the text in 3 plain user texts
    assert fim_prompt(QWEN, tokenize, FimInput("p", "s", middle=nasty)).count(QWEN["mid"]) == 1  # typed=None: text


def test_repo_level_form_with_extra_files():
    ids = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=(("util.py", "def f(): pass\n"), ("b.py", "B"))))
    assert render(ids) == ("<|repo_name|>myproject\n<|file_sep|>util.py\ndef f(): pass\n<|file_sep|>b.py\nB"
                           "<|file_sep|>filename\n<|fim_prefix|>p<|fim_suffix|>s<|fim_middle|>")


def test_extra_files_without_repo_tokens_use_llama_cpp_snippet_separator():
    ids = fim_prompt(PLAIN, tokenize, FimInput("p", "s", extra=(("a.py", "A"),)))
    assert ids == tokenize("\n\n--- snippet ---\n\nA") + [1, ord("p"), 2, ord("s"), 3]
    assert fim_prompt(PLAIN, tokenize, FimInput("p", "s")) == [1, ord("p"), 2, ord("s"), 3]


def test_prefix_and_suffix_are_cut_to_llama_cpp_batch_shares():
    """llama.cpp keeps the last ``3 * (n_batch // 4)`` prefix tokens and the first
    ``n_batch // 4 - 2 - len(typed)`` suffix tokens (1,536 and 510 with its default ``-b`` 2048)."""
    ids = fim_prompt(PLAIN, tokenize, FimInput("a" * 1000 + "b" * 1536, "c" * 510 + "d" * 100))
    assert ids == [1, *tokenize("b" * 1536), 2, *tokenize("c" * 510), 3]
    ids = fim_prompt(PLAIN, tokenize, FimInput("ab", "cdef", middle="xy"), n_batch=24)  # 18 of prefix, 6-2-2 of suffix
    assert ids == [1, *tokenize("abxy"), 2, *tokenize("cd"), 3]


def test_extra_context_keeps_its_newest_n_ctx_minus_n_batch_minus_2_n_predict_tokens():
    extra = (("old.py", "O" * 50), ("new.py", "N" * 50))
    full = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=extra))
    cut = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=extra), n_ctx=2048 + 40)  # n_predict -1: 42 kept
    assert cut == full[len(full) - 5 - 42:]  # the newest 42 extra tokens, then <pre>p<suf>s<mid> whole
    assert fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=extra), n_ctx=2048 + 40, n_predict=10) == \
        full[len(full) - 5 - 20:]
    tiny = fim_prompt(QWEN, tokenize, FimInput("p", "s", extra=extra), n_ctx=2048)
    assert render(tiny) == "e\n<|fim_prefix|>p<|fim_suffix|>s<|fim_middle|>"  # n_ctx = -b: 2 tokens of "filename\n"


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
