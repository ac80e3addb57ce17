"""Snapshots at a fixed terminal size, driven by the real engine over scripted fake models
(tui_fakes: every token kind, fixed timings on a fake clock). Mode auto's rounds are scripted too
(:data:`AUTO_ROUNDS`): a snapshot shows the TUI, not the policy's current tuning (its tests are
tests/unit/core/test_policy*.py and the replays in tests/unit/bench)."""

from __future__ import annotations

from localspec.config import DraftParams, ModelSettings, Settings
from tui_fakes import DRAFT_P_MIN, FakeClock, FakeEngine
from tui_helpers import SIZE, build, edit_app, idle, submit

ASK = ("#prompt", "reverse a string in python")
RACE = ("#race-prompt", "reverse a string in python")
EDIT = ("#edit-instruction", "add type hints")
GREET = "def greet(name):\n    print('hello ' + name)\n\n\ngreet('world')\n"
GREET_TYPED = "```python\ndef greet(name: str) -> None:\n    print('hello ' + name)\n\n\ngreet('world')\n```"
#: thread counts default to this machine's CPU count: pinned so that the settings snapshots are portable
PINNED = Settings(target=ModelSettings(model="qwen2.5-coder-1.5b", n_threads=4),
                  draft=ModelSettings(model="qwen2.5-coder-0.5b", n_threads=4), drafting=DraftParams(mode="draft"))
#: mode auto: the adaptive policy chooses every round and says why in the panel
AUTO = Settings(drafting=DraftParams(mode="auto", draft_p_min=DRAFT_P_MIN))
#: the rounds of the mode-auto snapshot (drafter, draft length, the reason the panel shows), scripted so that
#: tuning the policy cannot change the snapshot: what the policy chose on this fake at commit 141d7af
AUTO_ROUNDS = (
    *[("draft", 2, "g=2 draft")] * 3, ("lookup", 10, "g=10 lookup"), *[("draft", 2, "g=2 draft")] * 3,
    *[("draft", 3, "g=3 draft")] * 4, *[("draft", 2, "g=2 draft")] * 4, ("lookup", 4, "g=4 lookup"),
    *[("draft", 2, "g=2 draft")] * 3, ("draft", 2, "g=2 draft: est 2.66 tok/pass, 1.73x"),
)


async def _quiet(pilot):
    pilot.app.clear_notifications()
    await pilot.pause()


def _snap(snap_compare, app, size=SIZE, *, first=None, send=None, keys=(), then=None) -> bool:
    """Snapshot ``app`` once loaded, after: ``first(pilot)``; sending ``send`` (box, text) and
    waiting for the answer; pressing ``keys``; ``then(pilot)``. Notifications are cleared."""

    async def run_before(pilot):
        await idle(pilot)
        await _quiet(pilot)
        if first:
            await first(pilot)
        if send:
            await submit(pilot, send[1], send[0])
            await _quiet(pilot)
        for key in keys:
            await pilot.press(key)
        if then:
            await then(pilot)
        await _quiet(pilot)

    return snap_compare(app, run_before=run_before, terminal_size=size)


def _chat(settings=None, **kw):
    return build(FakeEngine(FakeClock(), **kw), settings=settings, remember=False)


def _race_app():
    clock = FakeClock()
    return build(FakeEngine(clock), engines=(FakeEngine(clock),), race=True, remember=False)


def test_chat_stream_stats_legend(snap_compare):
    """All four token kinds in the stream, the legend, the statistics panel, the inspector."""
    assert _snap(snap_compare, _chat(), send=ASK)


def test_round_inspector_rejection(snap_compare):
    """Stepping back to a round with a rejection: draft row, target row, verdicts; its tokens highlighted."""
    assert _snap(snap_compare, _chat(), send=ASK, keys=("f7",) * 4)


def test_race_mode(snap_compare):
    """Target-only and speculative side by side, decode rates and the measured speedup."""
    assert _snap(snap_compare, _race_app(), send=RACE)


def test_settings_invalid_value(snap_compare):
    """The settings dialog refusing an invalid draft length in place, with pydantic's reason."""

    async def type_100(pilot):
        await pilot.pause()
        pilot.app.screen.query_one("#f-drafting-draft_max").value = "100"

    assert _snap(snap_compare, _chat(PINNED), keys=("f4",), then=type_100)


def _edit_snap(snap_compare, tmp_path, monkeypatch, size) -> bool:
    app, _ = edit_app(tmp_path, monkeypatch, "greet.py", GREET, GREET_TYPED)
    return _snap(snap_compare, app, size, send=EDIT)


def test_code_edit_diff(snap_compare, tmp_path, monkeypatch):
    """Code-edit mode after a rewrite: the diff of the extracted code block."""
    assert _edit_snap(snap_compare, tmp_path, monkeypatch, SIZE)


def test_chat_stream_light_theme(snap_compare):
    """The token colours on a light theme (they are theme-relative CSS, not fixed colours)."""

    async def light(pilot):
        pilot.app.theme = "textual-light"

    assert _snap(snap_compare, _chat(), first=light, send=ASK)


async def _first_round(pilot):
    inspector = pilot.app.screen.query_one("#inspector")
    while inspector.index > 0:
        await pilot.press("f7")


def test_stats_panel_80_columns(snap_compare):
    """issue 8: at the narrowest supported width every label is whole, the policy's reason (mode
    auto) is on its own line, catch-up and prefill are shown beside the decode rate (issue 23:
    at 80 columns the panel is folded away; F10 shows it)."""
    assert _snap(snap_compare, _chat(AUTO, catchup_seconds=0.61, rounds=AUTO_ROUNDS), (80, 34), send=ASK,
                 keys=("f10",))


def test_stats_panel_150_columns(snap_compare):
    """The reason wraps in the side panel; round 1 in the inspector, with its catch-up line."""
    assert _snap(snap_compare, _chat(catchup_seconds=0.61), (150, 40), send=ASK, then=_first_round)


def test_stats_panel_before_first_answer_150_columns(snap_compare):
    """Before the first answer the sparkline draws nothing."""
    assert _snap(snap_compare, _chat(), (150, 40))


def test_race_mode_80_columns(snap_compare):
    """Race at 80 columns: decode rates, untimed prefill, the verdict and the repeat control."""
    assert _snap(snap_compare, _race_app(), (80, 34), send=RACE)


# -- issue 23: the layouts at 80x24 and 160x45 ------------------------------------------
SMALL, LARGE = (80, 24), (160, 45)
TYPED = ("#prompt", "reverse a string in python:\nkeep [bold] and list[int] as typed")


def test_chat_80x24(snap_compare):
    """The side panel folded away, one line of figures, a multi-line message shown as typed, the footer whole."""
    assert _snap(snap_compare, _chat(), SMALL, send=TYPED)


def test_chat_80x24_panel_open(snap_compare):
    """F10 on a narrow screen: the statistics panel and the inspector in place of the chat."""
    assert _snap(snap_compare, _chat(), SMALL, send=TYPED, keys=("f10",))


def test_chat_160x45(snap_compare):
    assert _snap(snap_compare, _chat(), LARGE, send=TYPED)


def test_code_edit_80x24(snap_compare, tmp_path, monkeypatch):
    assert _edit_snap(snap_compare, tmp_path, monkeypatch, SMALL)


def test_code_edit_160x45(snap_compare, tmp_path, monkeypatch):
    assert _edit_snap(snap_compare, tmp_path, monkeypatch, LARGE)


def test_race_80x24(snap_compare):
    assert _snap(snap_compare, _race_app(), SMALL, send=RACE)


def test_race_160x45(snap_compare):
    assert _snap(snap_compare, _race_app(), LARGE, send=RACE)


def test_settings_80x24(snap_compare):
    """The settings dialog on a 24-row screen: the form scrolls, the buttons are on screen."""
    assert _snap(snap_compare, _chat(PINNED), SMALL, keys=("f4",))


# -- issue 47: conversations kept, the browser ------------------------------------------------
def _fixed_times(monkeypatch):
    """Stored times 2026-01-02 10:00, 10:01, ... in UTC, shown in UTC."""
    import itertools
    import time

    import localspec.app.store as store

    minutes = itertools.count()
    monkeypatch.setattr(store, "_now", lambda: f"2026-01-02T10:{next(minutes):02d}:00+00:00")
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def test_conversation_browser_80x24(snap_compare, monkeypatch):
    """Ctrl+O after two chats: newest first, the one shown marked, the buttons whole at 80 columns."""
    _fixed_times(monkeypatch)

    async def two_chats(pilot):
        await submit(pilot, "tell me about [bold]Fibonacci[/bold] numbers")
        await pilot.press("ctrl+n")
        await submit(pilot, "reverse a string in python")

    assert _snap(snap_compare, _chat(), SMALL, first=two_chats, keys=("ctrl+o",))


def test_answer_as_markdown_80x24(snap_compare):
    """Ctrl+T: the answer rendered as Markdown (the code block without its fences, highlighted)."""
    assert _snap(snap_compare, _chat(), SMALL, send=ASK, keys=("ctrl+t",))


def test_chat_options_80x24(snap_compare):
    """F9: the conversation's system prompt and its sampling preset, each preset's parameters said."""

    async def fill(pilot):
        await pilot.pause()
        pilot.app.screen.query_one("#options-system").text = "You are a terse [b]Python[/b] reviewer."
        pilot.app.screen.query_one("#options-preset").value = "balanced"

    assert _snap(snap_compare, _chat(), SMALL, keys=("f9",), then=fill)


def test_model_picker_80x24(snap_compare, tmp_path, monkeypatch):
    """Ctrl+L: the presets (not on this machine) and three GGUF files with size, quantisation,
    context and whether they pair with the target (T), the draft marked D."""
    from gguf_headers import write_gguf

    for env, name in (("LOCALSPEC_MODELS_DIR", "weights"), ("LOCALSPEC_CACHE", "cache"), ("HF_HUB_CACHE", "hf")):
        monkeypatch.setenv(env, str(tmp_path / name))
    vocab = [f"t{i}" for i in range(12)]
    target = write_gguf(tmp_path / "weights" / "big-q4_k_m.gguf", tokens=vocab)
    write_gguf(tmp_path / "weights" / "small-q8_0.gguf", tokens=vocab, file_type=7)
    write_gguf(tmp_path / "weights" / "other-f16.gguf", tokens=["x"] + vocab[1:], arch="llama", n_ctx=8192, file_type=1)
    settings = PINNED.model_copy(update={"target": PINNED.target.model_copy(update={"model": str(target)})})

    async def listed(pilot):
        for _ in range(200):
            if pilot.app.screen.choices:
                break
            await pilot.pause(0.02)

    assert _snap(snap_compare, _chat(settings), SMALL, keys=("ctrl+l",), then=listed)


def test_hub_repo_listing_80x24(snap_compare, tmp_path, monkeypatch):
    """Ctrl+L, h: a Hugging Face repo's GGUF files with size, quantisation and whether each fits the
    free space of the hub cache (the hub and the disk faked: tests/tui/test_tui_hub.py)."""
    import huggingface_hub

    from localspec.app import catalog
    from test_tui_hub import FakeHub

    for env, name in (("LOCALSPEC_MODELS_DIR", "weights"), ("LOCALSPEC_CACHE", "cache")):
        monkeypatch.setenv(env, str(tmp_path / name))
    monkeypatch.setenv("HF_HUB_CACHE", "/models/hf")  # said in the snapshot: not the test's tmp path
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(catalog, "free_space", lambda folder: 2_000_000_000)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub().Api)

    async def listed(pilot):
        for _ in range(200):
            if getattr(pilot.app.screen, "choices", None):
                break
            await pilot.pause(0.02)
        await pilot.press("h")
        await pilot.pause()
        browser = pilot.app.screen
        browser.query_one("#hub-repo").value = "someone/Tiny-GGUF"
        await pilot.press("enter")
        for _ in range(200):
            if browser.files:
                break
            await pilot.pause(0.02)
        await pilot.press("down")

    assert _snap(snap_compare, _chat(PINNED), SMALL, keys=("ctrl+l",), then=listed)
