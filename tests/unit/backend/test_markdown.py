"""localspec.backend.markdown.CodeState: whether a position of a growing Markdown answer is inside code
(CommonMark's fenced blocks and code spans), the same however the text is cut into pieces."""

from __future__ import annotations

import random

import pytest

from localspec.backend.markdown import CodeState

#: (text up to the position asked about, inside code there)
CASES = [
    ("", False),
    ("Call it like this: ", False),
    # fenced blocks: from the opening run on, to the end of the closing line
    ("```", True),
    ("```\n", True),
    ("```xml\n<tool_call>", True),
    ("   ```\nx", True),
    ("    ``` x ```\ny", False),  # four spaces: not a fence but a code span (indented code is not followed)
    ("```\ncode\n```\n", False),
    ("```\ncode\n```", True),  # the closing line is not over yet: it may not be one
    ("```\ncode\n```  \n", False),
    ("````\n```\n", True),  # a shorter run does not close a longer fence
    ("````\n```\n`````\n", False),
    ("~~~\n```\n", True),  # nor does the other character
    ("~~~\ncode\n~~~\nafter ", False),
    ("```\n``` x\n", True),  # a closing run is followed by spaces only
    ("```py\nx\n```\r\n", False),
    ("``` a`b", True),  # not a fence (backtick in its info string): an open code span
    # code spans
    ("Use `", True),
    ("Use `x` and ", False),
    ("Use ``a ` b", True),  # a run of one does not close a span of two
    ("Use ``a ` b`` then ", False),
    ("a\\`b ", False),  # an escaped backtick is text
    ("a\\``b` ", False),  # an escaped backtick, then a run of one that opens and closes a span
    ("Use `x", True),
    ("Use `x\ny", False),  # a span open at the line's end is taken as a stray backtick
    ("```\ncode\n```\nthen `", True),
    ("x ```", True),  # three backticks inside a line: a code span, not a fence
    ("x ```\ny ", False),
]


@pytest.mark.parametrize("text, inside", CASES)
def test_inside_code(text, inside):
    assert CodeState().feed(text).inside() is inside
    assert CodeState().inside_after(text) is inside  # the same without feeding


@pytest.mark.parametrize("text, inside", CASES)
def test_the_same_in_any_pieces(text, inside):
    rng = random.Random(len(text))
    for _ in range(20):
        state, i = CodeState(), 0
        while i < len(text):
            j = i + rng.randint(1, 4)
            state.feed(text[i:j].encode())
            i = j
        assert state.inside() is inside, text


def test_a_copy_and_inside_after_leave_the_state_as_it_was():
    state = CodeState().feed("Use ")
    assert state.inside_after("`x") and not state.inside()
    copy = state.copy().feed("\n```\n")
    assert copy.inside() and not state.inside()
