"""localspec.app.codeedit: the outer fenced block, the file's form (line ends, BOM, final
newline), completeness checks, saving. Pure functions on the inputs of issue 9."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.app.codeedit import (BOM, IncompleteEditError, apply_answer, edit_max_tokens, edit_prompt, edited_path,
                                extract_block, file_form, replace_file, restore_form, save_new, split_lines,
                                unified_diff)
from localspec.app.fileio import FileError

# -- A1: a file that itself holds fenced blocks ------------------------------------------------
README = "# Title\n\nBuild it with:\n\n```sh\nmake all\n```\n\nThen run `./app`.\n"
README_NEW = README.replace("# Title", "# Project")


def test_markdown_with_inner_fence_answered_in_a_same_length_fence():
    """The answer of issue 9, A1: ```markdown around a file holding a ```sh block."""
    answer = "```markdown\n" + README_NEW + "```\n"
    r = apply_answer(README, answer, name="README.md", end_reason="eog")
    assert r.text == README_NEW
    assert r.complete and not r.warnings
    assert r.diff.count("\n-") == 1 and "-# Title" in r.diff and "+# Project" in r.diff


@pytest.mark.parametrize("answer", [
    "````markdown\n" + README_NEW + "````\n",  # a longer outer fence (what the prompt asks for)
    "Here it is:\n\n`````md\n" + README_NEW + "`````\n\nI changed the heading.",
    "```markdown\n" + README_NEW + "```\n\nRun it with:\n\n```sh\n./app\n```\n",  # a second block after
    "~~~markdown\n" + README_NEW + "~~~\n",
])
def test_outer_block_found_whatever_the_fence(answer):
    r = apply_answer(README, answer, name="README.md", end_reason="eog")
    assert r.text == README_NEW and r.complete


def test_long_fence_closed_by_a_shorter_one():
    """What Qwen2.5-Coder 1.5B answered to the prompt's ````markdown: closed with ```."""
    r = apply_answer(README, "````markdown\n" + README_NEW + "```\n", name="README.md", end_reason="eog")
    assert r.text == README_NEW and r.complete
    # but not when that would cut the file's own block in half
    r = apply_answer(README, "````markdown\n# Project\n\n```sh\nmake all\n```\n", name="README.md", end_reason="eog")
    assert not r.complete and "no closing fence (````)" in r.incomplete[0]


def test_bare_inner_fences_pair_up_like_the_original():
    original = "Intro\n\n```\ncode\n```\n\nOutro\n"
    new = original.replace("Outro", "The end")
    r = apply_answer(original, "```md\n" + new + "```", name="a.md", end_reason="eog")
    assert r.text == new


def test_python_docstring_with_fences():
    original = ('"""Module.\n\n```python\n>>> f()\n1\n```\n"""\n\n\ndef f():\n    """Example:\n\n    ```\n'
                '    f()\n    ```\n    """\n    return 1\n')
    new = original.replace("return 1", "return 2")
    r = apply_answer(original, "```python\n" + new + "```\nDone.", name="m.py", end_reason="eog")
    assert r.text == new and r.complete and not r.warnings


def test_prompt_fence_is_longer_than_any_in_the_file():
    p = edit_prompt(Path("README.md"), README, " Change the heading Title to Project. ")
    assert "\n````markdown\n" + README + "````" in p
    assert "Instruction: Change the heading Title to Project." in p
    p2 = edit_prompt(Path("a/b.py"), "x = 1\n", "rename x")
    assert "```python\nx = 1\n```" in p2 and "File `b.py`" in p2


def test_extract_block_variants():
    assert extract_block("Sure:\n```python\nx = 1\n```\nbye").body == "x = 1"
    b = extract_block("```\nx = 1\ny = 2\n")
    assert (b.body, b.closed, b.fenced) == ("x = 1\ny = 2", False, True)
    b = extract_block("x = 1")
    assert (b.body, b.fenced) == ("x = 1", False)
    # CommonMark: a closing fence has no info string, is as long as the opening, same character
    assert extract_block("````md\n```py\ninner\n```\n````\n").body == "```py\ninner\n```"
    assert extract_block("```\na\n~~~\nb\n```").body == "a\n~~~\nb"
    # four spaces of indentation make a code line, not a fence
    assert extract_block("```\na\n    ```\nb\n```").body == "a\n    ```\nb"


# -- A2: line ends -------------------------------------------------------------------------------
CRLF = "import os\r\n\r\ndef load(p):\r\n    return open(p).read()\r\n"
CRLF_NEW = CRLF.replace("def load(", "def load_config(")


@pytest.mark.parametrize("answer", [
    "```python\n" + CRLF_NEW.replace("\r\n", "\n") + "```",  # LF answer
    "```python\r\n" + CRLF_NEW + "```\r\n",  # CRLF answer: "```\r" closes the block
    "```python\r\n" + CRLF_NEW.replace("\r\n", "\n", 1) + "```",  # mixed
])
def test_crlf_file_keeps_crlf_on_every_line(answer):
    r = apply_answer(CRLF, answer, name="a.py", end_reason="eog")
    assert r.text == CRLF_NEW
    assert "```" not in r.text
    assert [ln for ln in r.diff.split("\n") if ln[:1] in ("+", "-") and ln[:3] not in ("+++", "---")] == [
        "-def load(p):\r", "+def load_config(p):\r"]


def test_mixed_line_ends_kept_per_line_and_no_final_newline():
    original = "a = 1\r\nb = 2\nc = 3\r\nd = 4"  # mixed, and no final newline
    r = apply_answer(original, "```\na = 1\nb = 2\nc = 30\nd = 4\ne = 5\n```", end_reason="eog")
    assert r.text == "a = 1\r\nb = 2\nc = 30\r\nd = 4\r\ne = 5"
    assert file_form(original).newline == "\r\n" and not file_form(original).final_newline


def test_final_newline_state_and_trailing_blank_lines():
    assert apply_answer("x = 1", "```\nx = 2\n```").text == "x = 2"
    assert apply_answer("x = 1\n\n", "```\nx = 2\n\n```").text == "x = 2\n\n"
    assert apply_answer("", "```\nx = 2\n```").text == "x = 2\n"


def test_split_lines_round_trips():
    for text in ("", "a", "a\n", "a\r\nb\rc\n", "\n\n", "a\r\n\r\n"):
        assert "".join(a + b for a, b in split_lines(text)) == text
    form = file_form("a\r\nb\rc")
    assert form.text == "a\nb\nc" and form.endings == ("\r\n", "\r", "")


# -- A3: BOM ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("answer", ["```\nx = 2\ny = 3\n```", "```\n" + BOM + "x = 2\ny = 3\n```"])
def test_bom_kept_whether_or_not_the_answer_repeats_it(answer):
    assert apply_answer(BOM + "x = 1\r\ny = 3\r\n", answer).text == BOM + "x = 2\r\ny = 3\r\n"
    assert apply_answer("x = 1\ny = 3\n", answer).text == "x = 2\ny = 3\n"  # and never added


def test_the_model_sees_no_bom_and_lf():
    p = edit_prompt("a.py", BOM + "x = 1\r\n", "rename")
    assert BOM not in p and "\r" not in p and "```python\nx = 1\n```" in p
    assert restore_form("x = 1", file_form(BOM + "x = 1\r\n")) == BOM + "x = 1\r\n"


# -- A4: answers that are not whole files ---------------------------------------------------------
BIG = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(20))


def test_cut_at_max_tokens_is_incomplete_and_continuable():
    r = apply_answer(BIG, "```python\n" + BIG[:300], name="m.py", end_reason="max_tokens", tokens=90)
    assert r.incomplete == ("the answer ended at max_tokens (90 tokens) before the file was complete",)
    assert r.can_continue and not r.complete


def test_cut_by_the_context_is_incomplete_not_continuable():
    r = apply_answer(BIG, "```python\n" + BIG[:300], name="m.py", end_reason="context", n_ctx=512)
    assert "filled the context window of 512 tokens" in r.incomplete[0] and not r.can_continue


def test_no_closing_fence_is_incomplete():
    r = apply_answer(BIG, "```python\n" + BIG, name="m.py", end_reason="eog")
    assert r.incomplete == ("the answer has no closing fence (```): the file may be cut",)


def test_a_closed_block_is_complete_whatever_ended_the_answer():
    r = apply_answer(BIG, "```python\n" + BIG + "```\nThis renames", name="m.py", end_reason="max_tokens")
    assert r.complete and not r.changed


def test_much_shorter_result_and_python_regression_are_warnings():
    r = apply_answer(BIG, "```python\ndef f0(x:\n    return x\n```", name="m.py", end_reason="eog")
    assert r.complete
    assert any("much shorter than the original" in w for w in r.warnings) and r.partial
    assert any("parses as Python but the result does not (line 1" in w for w in r.warnings)
    # a file that did not parse before is not held against the answer
    assert not any("Python" in w for w in apply_answer("def (:\n", "```\ndef (:\nx\n```", name="b.py").warnings)


def test_placeholder_for_left_out_code_is_partial():
    r = apply_answer(BIG, "```python\ndef g0(x):\n    return x + 0\n\n# ... rest of the file unchanged\n```",
                     name="m.py", end_reason="eog")
    assert r.complete and len(r.partial) == 2
    assert "placeholder instead of code ('# ... rest of the file unchanged')" in r.partial[1]
    # a placeholder the original already had is not the model's
    assert not apply_answer("x = 1  # ... rest unchanged\n", "```\nx = 2  # ... rest unchanged\n```").partial


def test_no_fence_is_taken_whole_with_a_warning():
    r = apply_answer("x = 1\n", "x = 2", end_reason="eog")
    assert r.text == "x = 2\n" and r.complete and "no fenced code block" in r.warnings[0]


def test_edit_max_tokens():
    assert edit_max_tokens(100, 512) == 512
    assert edit_max_tokens(1000, 512) == 2256


# -- saving ------------------------------------------------------------------------------------------
def test_save_new_and_replace_write_the_original_form(tmp_path):
    p = tmp_path / "app.py"
    p.write_bytes(CRLF.encode())
    original = p.read_bytes().decode()
    r = apply_answer(original, "```python\n" + CRLF_NEW.replace("\r\n", "\n") + "```", name="app.py")
    new = save_new(p, r)
    assert new.name == "app.edited.py" and new.read_bytes() == CRLF_NEW.encode()
    backup = replace_file(p, original, r)
    assert p.read_bytes() == CRLF_NEW.encode() and backup.read_bytes() == CRLF.encode()


def test_replace_refuses_incomplete_and_changed_files(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(BIG)
    cut = apply_answer(BIG, "```python\n" + BIG[:100], name="m.py", end_reason="max_tokens")
    with pytest.raises(IncompleteEditError, match="max_tokens"):
        replace_file(p, BIG, cut)
    whole = apply_answer(BIG, "```python\n" + BIG.replace("f0", "g0") + "```", name="m.py", end_reason="eog")
    p.write_text(BIG + "# edited meanwhile\n")
    with pytest.raises(FileError, match="changed on disk"):
        replace_file(p, BIG, whole)
    assert p.read_text() == BIG + "# edited meanwhile\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["m.py"]  # no backup, no temp file


def test_edited_path_and_diff(tmp_path):
    f = tmp_path / "m.py"
    assert edited_path(f).name == "m.edited.py"
    (tmp_path / "m.edited.py").write_text("")
    assert edited_path(f).name == "m.edited-2.py"
    d = unified_diff("a\nb\n", "a\nc\n", "m.py")
    assert "-b\n" in d and "+c\n" in d and d.startswith("--- a/m.py")
