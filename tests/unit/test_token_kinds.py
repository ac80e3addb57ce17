"""Token kinds, their labels and colours are defined once (TokenKind); the CLI and the TUI read them."""

from __future__ import annotations

import re

from localspec.cli import KIND_STYLES, TERMINAL_COLOURS
from localspec.core.events import TokenKind
from localspec.tui.widgets import KIND_LABELS, KINDS, token_css


def test_cli_and_tui_colour_every_kind_from_its_role():
    css = token_css()
    assert KINDS == tuple(k.value for k in TokenKind)
    for k in TokenKind:
        rule = re.search(r"TokenStream > \.tok--" + k.value + r"\b[^{]*\{([^}]*)\}", css).group(1)
        style = KIND_STYLES[k.value].split()
        assert ("bold" in style) == k.bold == ("text-style: bold" in rule)
        if k.colour is None:
            assert "$foreground" in rule and not set(style) & set(TERMINAL_COLOURS.values())
        else:
            assert f"$text-{k.colour}" in rule and TERMINAL_COLOURS[k.colour] in style
        assert KIND_LABELS[k.value].startswith(k.label)
    # three kinds that the eye must tell apart get three different colours in both front-ends
    coloured = [k for k in TokenKind if k.colour]
    assert len({k.colour for k in coloured}) == len(coloured) == 3
