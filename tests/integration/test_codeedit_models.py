"""Code edit end to end with the default pair (issue 9, A1-A3): prompt -> engine ->
localspec.app.codeedit. (A4 with the tiny model: tests/robustness/test_real_inputs.py.)"""

from __future__ import annotations

import pytest

from localspec.app.codeedit import BOM, apply_answer, edit_max_tokens, edit_prompt, replace_file
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.events import TokenEvent

README = "# Title\n\nBuild it with:\n\n```sh\nmake all\n```\n\nThen run `./app`.\n"
README_NEW = README.replace("# Title", "# Project")
INSTRUCTION = "Change the heading Title to Project."


def edit(engine, name, original, instruction, max_tokens=None, prefix=(), mode="lookup"):
    """Run a code edit; returns (generation, its token events)."""
    chat = [{"role": "user", "content": edit_prompt(name, original, instruction)}]
    prompt = engine.chat_tokens(chat)
    budget = max_tokens or edit_max_tokens(len(prompt), 512)
    gen = engine.generate(prompt + list(prefix), SamplingParams(), DraftParams(mode=mode, draft_max=16),
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
