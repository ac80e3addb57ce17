"""Code edit end to end on real models (issue 9, A1-A4): prompt -> engine -> localspec.codeedit.

The pair does the edit of the issue; the tiny model is cut at max_tokens and continued."""

from __future__ import annotations

import pytest

from localspec.codeedit import BOM, apply_answer, continuation_prefix, edit_max_tokens, edit_prompt, replace_file
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.events import EndReason, TokenEvent

README = "# Title\n\nBuild it with:\n\n```sh\nmake all\n```\n\nThen run `./app`.\n"
README_NEW = README.replace("# Title", "# Project")
INSTRUCTION = "Change the heading Title to Project."


def edit(engine, name, original, instruction, max_tokens=None, prefix=()):
    """Run a code edit; returns (generation, its token events)."""
    chat = [{"role": "user", "content": edit_prompt(name, original, instruction)}]
    prompt = engine.chat_tokens(chat)
    budget = max_tokens or edit_max_tokens(len(prompt), 512)
    gen = engine.generate(prompt + list(prefix), SamplingParams(), DraftParams(mode="lookup", draft_max=16),
                          GenerationParams(max_tokens=budget))
    events = [e for e in gen if isinstance(e, TokenEvent)]
    return gen, events


@pytest.mark.pair
def test_markdown_with_inner_fence_edited_whole_in_every_form(pair_engine, tmp_path):
    """A1-A3 with the default target: the answer holds the inner ```sh block; the saved file
    is the original with only the heading changed, in the original's line ends and BOM."""
    gen, _ = edit(pair_engine, "README.md", README, INSTRUCTION)
    assert "```sh" in gen.text
    for form in (README, README.replace("\n", "\r\n"), BOM + README.replace("\n", "\r\n")):
        expected = form.replace("# Title", "# Project")
        r = apply_answer(form, gen.text, name="README.md", end_reason=gen.stats.end_reason)
        assert r.complete and not r.warnings
        assert r.text == expected
        p = tmp_path / "README.md"
        p.write_bytes(form.encode())
        replace_file(p, form, r)
        assert p.read_bytes() == expected.encode()


@pytest.mark.tiny
def test_cut_at_max_tokens_then_continued(tiny_engine):
    """A4: an answer cut by max_tokens is incomplete (and says so); continuing the same token
    sequence gives the answer an uncut run gives."""
    original = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(8))
    whole, _ = edit(tiny_engine, "m.py", original, "Rename f0 to g0.", max_tokens=200)
    cut, events = edit(tiny_engine, "m.py", original, "Rename f0 to g0.", max_tokens=40)
    assert cut.stats.end_reason is EndReason.MAX_TOKENS and len(cut.token_ids) == 40
    r = apply_answer(original, cut.text, name="m.py", end_reason=cut.stats.end_reason, tokens=40)
    assert r.incomplete == ("the answer ended at max_tokens (40 tokens) before the file was complete",)
    assert r.can_continue
    keep = continuation_prefix(events)
    more, _ = edit(tiny_engine, "m.py", original, "Rename f0 to g0.", max_tokens=200 - len(keep), prefix=keep)
    assert keep + more.token_ids == whole.token_ids
    assert cut.text + more.text == whole.text
