"""localspec.backend.grammar.LazyGrammar: free text until a trigger's match, the trigger's grammar from its
start on, on a fake vocabulary and a fake grammar (a finite language of whole strings, read
character by character as llama.cpp's grammar reads token pieces). Real grammars and vocabularies:
tests/integration/test_tool_call_forms.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from localspec.backend.grammar import LazyGrammar, Trigger

EOG = 0
VOCAB = ["", "Sure", " <", "tool", "_call", ">", ">\n", ">x", "<tool_call>", "{", "}", "x", " ", "a<to", "ol_call>",
         "hi", '{"', "n", '":1}', "\n", "<", "`", "```", "```\n"]
VOCAB += sorted(set("abcdefghijklmnopqrstuvwxyz_:1") - set(VOCAB))  # every text can be spelled
ID = {p: i for i, p in enumerate(VOCAB)}


class FakeGrammar:
    """Accepts exactly the prefixes of ``words`` (and the end of the output after a whole word)."""

    def __init__(self, words, text=""):
        self.words, self.text, self.closed = words, text, False

    def _ok(self, token):
        if token == EOG:
            return self.text in self.words
        return any(w.startswith(self.text + VOCAB[token]) for w in self.words)

    def allows(self, token):
        return self._ok(token)

    def mask(self, logits):
        return np.array([x if self._ok(t) else -np.inf for t, x in enumerate(logits)], dtype=np.float32)

    def accept(self, token):
        assert self._ok(token), "llama.cpp would abort"
        self.text += VOCAB[token]

    def clone(self):
        return FakeGrammar(self.words, self.text)

    def close(self):
        self.closed = True


def spell(text: bytes):
    """Greedy longest-match tokens of ``text`` (None when the vocabulary cannot spell it)."""
    s, out = text.decode(), []
    while s:
        best = max((p for p in VOCAB if p and s.startswith(p)), key=len, default=None)
        if best is None:
            return None
        out.append(ID[best])
        s = s[len(best):]
    return out


def lazy(*triggers, window=32, outside_code=False):
    finals = np.array([i for i, p in enumerate(VOCAB) if ">" in p or '"' in p])
    return LazyGrammar([Trigger(re.compile(p), FakeGrammar(words), at_start) for p, words, at_start in triggers],
                       lambda t: VOCAB[t].encode(), spell, lambda: finals, window, outside_code)


MARKER = (rb"<tool_call>", ["<tool_call>\n{}"], False)
BARE = (rb'\A\s*(\{"n)', ['{"n":1}'], True)


def walk(g, pieces):
    for p in pieces:
        assert g.allows(ID[p]), p
        g.accept(ID[p])


def test_free_text_then_a_marker_spelled_over_several_tokens_starts_the_grammar():
    g = lazy(MARKER)
    walk(g, ["Sure", "x", " <", "tool", "_call"])
    assert g.active is None
    assert not g.allows(ID[">x"])  # completes the marker with text the grammar rejects
    assert g.allows(ID[">\n"]) and g.allows(ID[">"])
    walk(g, [">\n"])
    assert g.active is not None and g.active.text == "<tool_call>\n"  # fed from the match's start
    assert g.fired == 0
    assert not g.allows(ID["x"]) and not g.allows(EOG)
    walk(g, ["{", "}"])
    assert g.allows(EOG) and not g.allows(ID["\n"])


@pytest.mark.parametrize("pieces", [["<tool_call>"], ["a<to", "ol_call>"], ["<", "tool", "_call", ">"]])
def test_the_marker_in_one_token_or_begun_inside_an_earlier_one(pieces):
    g = lazy(MARKER)
    walk(g, pieces)
    assert g.active is not None and g.active.text == "<tool_call>"
    assert g.allows(ID["\n"]) and not g.allows(ID["x"])


def test_a_trigger_token_the_grammar_rejects_cannot_be_accepted():
    g = lazy(MARKER)
    walk(g, [" <", "tool", "_call"])
    with pytest.raises(ValueError):
        g.accept(ID[">x"])


def test_mask_before_the_trigger_forbids_only_the_tokens_that_complete_it_badly():
    g = lazy(MARKER)
    walk(g, [" <", "tool", "_call"])
    masked = g.mask(np.zeros(len(VOCAB), dtype=np.float32))
    assert [VOCAB[t] for t in np.flatnonzero(~np.isfinite(masked))] == [">x"]
    walk(g, [">"])
    masked = g.mask(np.zeros(len(VOCAB), dtype=np.float32))
    assert [VOCAB[t] for t in np.flatnonzero(np.isfinite(masked))] == ["\n"]  # the grammar's own mask


def test_a_start_trigger_fires_only_at_the_start_of_the_output():
    g = lazy(MARKER, BARE)
    walk(g, [" ", '{"', "n"])
    assert g.active is not None and g.active.text == '{"n'  # the group's start: the whitespace stays free
    assert g.fired == 1
    assert g.allows(ID['":1}']) and not g.allows(ID["x"])
    later = lazy(MARKER, BARE)
    walk(later, ["hi", " ", '{"', "n", "x"])  # not at the start: free text
    assert later.active is None and later.fired is None


def test_the_window_slides_over_long_free_text():
    g = lazy(MARKER, window=12)
    walk(g, ["hi"] * 40 + ["a<to"])
    assert g.active is None
    walk(g, ["ol_call>"])
    assert g.active is not None


def test_close_frees_the_active_grammar_and_the_triggers():
    g = lazy(MARKER)
    base = g.triggers[0].grammar
    walk(g, ["<tool_call>"])
    active = g.active
    g.close()
    assert active.closed and base.closed and g.active is None


@pytest.mark.parametrize("code", [["```\n"], ["```", "x", "\n"], ["`"], ["hi", " ", "`", "`"]])
def test_outside_code_a_marker_inside_code_is_text(code):
    g = lazy(MARKER, outside_code=True)
    walk(g, code + ["<tool_call>", ">x"])  # inside code: the marker is free text, then anything
    assert g.active is None and g.fired is None
    plain = lazy(MARKER)  # without the option the same marker starts the grammar
    walk(plain, code + ["<tool_call>"])
    assert plain.active is not None


@pytest.mark.parametrize("pieces", [["```\n", "x", "\n", "```\n", "<tool_call>"], ["`", "x", "`", " <", "tool",
                                    "_call", ">"], ["`", "x", "\n", "<tool_call>"]])
def test_outside_code_a_marker_after_the_code_closes_fires(pieces):
    g = lazy(MARKER, outside_code=True)
    walk(g, pieces)
    assert g.active is not None and g.active.text == "<tool_call>"


def test_outside_code_an_example_in_the_window_does_not_hide_a_later_marker():
    g = lazy(MARKER, window=64, outside_code=True)
    walk(g, ["`", "<tool_call>", "`", " ", "hi"])  # the example stays in the window
    assert g.active is None
    masked = g.mask(np.zeros(len(VOCAB), dtype=np.float32))  # the example forbids nothing
    assert np.isfinite(masked).all()
    walk(g, [" <", "tool", "_call"])
    assert not g.allows(ID[">x"])  # a real marker, completed with text its grammar rejects
    walk(g, [">"])
    assert g.active is not None and g.active.text == "<tool_call>"


def test_outside_code_the_fence_is_followed_past_the_window():
    g = lazy(MARKER, window=12, outside_code=True)
    walk(g, ["```\n"] + ["hi"] * 40 + ["<tool_call>"])  # the fence left the window long ago
    assert g.active is None
    g = lazy(MARKER, window=12, outside_code=True)
    walk(g, ["```\n"] + ["hi"] * 20 + ["\n", "```\n"] + ["hi"] * 20 + ["<tool_call>"])
    assert g.active is not None
