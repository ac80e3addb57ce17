"""How each token kind is drawn: its legend label, its colour role and its weight.

The one definition both front-ends read: the CLI maps a colour role to a terminal colour
(``localspec.cli.TERMINAL_COLOURS``), the TUI to its theme's variables
(:func:`localspec.tui.widgets.token_css`). The core names the kinds
(:class:`localspec.core.events.TokenKind`) and knows nothing of how they look. Imports no
Textual, so the CLI reads it without loading the UI.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.core.events import TokenKind


@dataclass(frozen=True)
class KindLook:
    """How one token kind is drawn.

    Attributes:
        label: the legend's name of the kind: "accepted draft", "resampled", "bonus", "target-only".
        detail: what the kind means, where the legend has room for it ("" when the label says it).
        colour: a colour role both front-ends map to their palette: "success" (accepted),
            "error" (resampled), "warning" (bonus); None: the normal text colour (target-only).
        bold: drawn bold (the target's own tokens in a speculative round).
    """

    label: str
    detail: str
    colour: str | None
    bold: bool


#: every TokenKind, in its order -> how it is drawn
LOOKS: dict[TokenKind, KindLook] = {
    TokenKind.ACCEPTED: KindLook("accepted draft", "", "success", False),
    TokenKind.RESAMPLED: KindLook("resampled", "target corrected", "error", True),
    TokenKind.BONUS: KindLook("bonus", "", "warning", True),
    TokenKind.TARGET: KindLook("target-only", "", None, False),
}
