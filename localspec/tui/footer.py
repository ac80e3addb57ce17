"""KeyFooter: Textual's Footer, leaving out the keys a narrow screen has no room for."""

from __future__ import annotations

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

#: below this many columns the side panel folds away and the footer keeps its main keys
NARROW_COLUMNS = 120
#: actions left out of the footer on a narrow screen (their keys still work; the Keys
#: panel and the command palette, Ctrl+P, list them)
NARROW_HIDDEN = frozenset({"switch_mode('chat')", "switch_mode('edit')", "switch_mode('race')",
                           "cycle_mode", "app.cycle_mode", "retry", "race_again"})


class KeyFooter(Footer):
    """A compact Footer whose keys fit the width: under :data:`NARROW_COLUMNS` columns it
    leaves out the actions in the screen's ``NARROW_HIDDEN`` (default :data:`NARROW_HIDDEN`;
    a cut label such as ``^p palettet`` reads as a bug)."""

    def __init__(self, **kw) -> None:
        super().__init__(compact=True, **kw)

    def compose(self):
        narrow = self.app.size.width < NARROW_COLUMNS
        hidden = getattr(self.screen, "NARROW_HIDDEN", NARROW_HIDDEN)
        for widget in super().compose():
            if narrow and isinstance(widget, FooterKey) and widget.action in hidden:
                continue
            yield widget

    def on_resize(self) -> None:
        narrow = self.app.size.width < NARROW_COLUMNS
        if narrow != getattr(self, "_narrow", None):
            self._narrow = narrow
            self.call_after_refresh(self.recompose)
