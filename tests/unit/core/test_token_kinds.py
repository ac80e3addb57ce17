"""Token kinds' labels and colours are defined once (localspec.tui.kinds); the CLI and the TUI read them."""

from __future__ import annotations

import re

from localspec.cli import KIND_STYLES, TERMINAL_COLOURS
from localspec.core.events import TokenKind
from localspec.tui.kinds import LOOKS
from localspec.tui.widgets import KIND_LABELS, KINDS, token_css


def test_cli_and_tui_colour_every_kind_from_its_role():
    css = token_css()
    assert KINDS == tuple(k.value for k in TokenKind) == tuple(k.value for k in LOOKS)
    for k, look in LOOKS.items():
        rule = re.search(r"TokenStream > \.tok--" + k.value + r"\b[^{]*\{([^}]*)\}", css).group(1)
        style = KIND_STYLES[k.value].split()
        assert ("bold" in style) == look.bold == ("text-style: bold" in rule)
        if look.colour is None:
            assert "$foreground" in rule and not set(style) & set(TERMINAL_COLOURS.values())
        else:
            assert f"$text-{look.colour}" in rule and TERMINAL_COLOURS[look.colour] in style
        assert KIND_LABELS[k.value].startswith(look.label)
    # three kinds that the eye must tell apart get three different colours in both front-ends
    coloured = [look for look in LOOKS.values() if look.colour]
    assert len({look.colour for look in coloured}) == len(coloured) == 3
