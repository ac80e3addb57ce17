"""Issue 23 item 12: the statistics panel says what its figures are, whole, at any width."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.widgets import Sparkline, Static

from localspec.core.events import EndReason
from localspec.tui.stats import LiveStats
from localspec.tui.widgets import STAT_LABELS, StatsPanel
from tui_helpers import build, running, submit

pytestmark = pytest.mark.asyncio


def printed(static: Static) -> list[str]:
    """The Static's content as its own width draws it, plain text, line by line."""
    console = Console(file=io.StringIO(), width=static.content_region.width, color_system=None)
    console.print(static.content)
    return console.file.getvalue().rstrip("\n").split("\n")


def rows(panel: StatsPanel) -> dict[str, str]:
    """label -> value, a wrapped value joined again."""
    out: dict[str, str] = {}
    last = None
    for line in printed(panel.query_one("#stats-table", Static)):
        if line.startswith(" ") and last is not None:  # a value's next line
            out[last] += " " + line.strip()
            continue
        last = max((k for k in STAT_LABELS if line.startswith(k + " ")), key=len, default=line)
        out.setdefault(last, line[len(last):].strip())
    return out


async def test_a_row_that_wraps_is_not_cut(fake):
    """A value that wraps adds a line; the panel grows with it (the `cancelled` was lost)."""
    app = build(fake, remember=False)
    async with running(app) as pilot:
        panel = app.screen.query_one(StatsPanel)
        table = panel.query_one("#stats-table", Static)
        panel.show(LiveStats(tokens=3, rounds=2, end_reason=EndReason.EOG, final=True))
        await pilot.pause()
        short = len(printed(table))
        panel.show(LiveStats(tokens=123456789, rounds=987654321, end_reason=EndReason.CANCELLED, final=True))
        await pilot.pause()
        lines = printed(table)
        assert len(lines) > short and any("cancelled" in ln for ln in lines)  # it wrapped
        assert table.size.height == len(lines)  # and every line is on screen


async def test_rows_say_what_the_figures_are(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        panel = app.screen.query_one(StatsPanel)
        # a prompt mostly in the KV cache; a target-only answer; a lookup round that found nothing
        panel.show(LiveStats(prompt_tokens=129, cached_prompt_tokens=128, tokens=1, rounds=1, target_passes=1,
                             elapsed_seconds=0.1, draft_len=16, drafter="none", draft_reason="fixed", final=True))
        await pilot.pause()
        r = rows(panel)
        assert r["prefill"].endswith("(1 new, 128 cached)")
        assert r["tokens/target pass"] == "n/a (nothing drafted)"
        assert r["draft length"] == "0 (this round drafted nothing)"
        assert r["tokens"] == "1 token in 1 round"
        text = " ".join(ln.strip() for ln in printed(panel.query_one("#stats-table", Static)))
        assert "why draft length fixed by the settings (F4); mode auto adapts it" in text
        panel.show(LiveStats(tokens=2, rounds=2, draft_len=0, drafter="none", final=True))
        await pilot.pause()
        assert rows(panel)["draft length"] == "0 (this round drafted nothing)"  # the same case, the same words


async def test_mode_row_belongs_to_the_figures_after_a_mode_change(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        await submit(pilot, "hi")
        panel = app.screen.query_one(StatsPanel)
        assert rows(panel)["mode"] == "draft, draft length 8" and "next answer" not in rows(panel)
        await pilot.press("f5")  # draft -> lookup
        await pilot.pause()
        r = rows(panel)
        assert r["mode"] == "draft, draft length 8" and r["next answer"] == "lookup, draft length 8"
        await submit(pilot, "again")
        r = rows(panel)
        assert r["mode"] == "lookup, draft length 8" and "next answer" not in r


async def test_sparkline_of_equal_rounds_is_not_flat_at_the_bottom(fake):
    app = build(fake, remember=False)
    async with running(app) as pilot:
        panel = app.screen.query_one(StatsPanel)
        panel.show(LiveStats(tokens=12, rounds=3, drafted=9, accepted=9, accepted_lengths=[3, 3, 3], final=True))
        await pilot.pause()
        spark = panel.query_one(Sparkline)
        assert spark.display and list(spark.data) == [3]  # one value: Sparkline draws full bars
        assert str(panel.query_one(".spark-title", Static).render()) == "accepted length per round: 3 every round"
        panel.show(LiveStats(tokens=12, rounds=3, drafted=9, accepted=5, accepted_lengths=[1, 3, 1], final=True))
        await pilot.pause()
        assert list(spark.data) == [1, 3, 1]
        assert str(panel.query_one(".spark-title", Static).render()) == "accepted length per round: 1 to 3"
