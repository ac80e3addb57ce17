"""The model picker (Ctrl+L): the presets and the GGUF files here, with their header's facts and
whether each pairs with the target; picking one reloads the engine and keeps the conversation."""

from __future__ import annotations

import pytest

from localspec.config import DraftParams, ModelSettings, Settings
from localspec.tui.model_picker import ModelPicker

from gguf_headers import write_gguf
from tui_fakes import DRAFT_P_MIN, REPLY, FakeEngine
from tui_helpers import build, idle, running, submit

pytestmark = pytest.mark.asyncio
VOCAB = [f"t{i}" for i in range(12)]


@pytest.fixture
def models(tmp_path, monkeypatch):
    """A target and a draft of one tokenizer and a model of another, in the weights folder; no cache."""
    for env, name in (("LOCALSPEC_MODELS_DIR", "weights"), ("LOCALSPEC_CACHE", "cache"), ("HF_HUB_CACHE", "hf")):
        monkeypatch.setenv(env, str(tmp_path / name))
    w = tmp_path / "weights"
    return {"target": write_gguf(w / "big-q4_k_m.gguf", tokens=VOCAB, n_ctx=32768),
            "draft": write_gguf(w / "small-q8_0.gguf", tokens=VOCAB, n_ctx=32768, file_type=7),
            "other": write_gguf(w / "other-f16.gguf", tokens=["x"] + VOCAB[1:], arch="llama", n_ctx=8192,
                                file_type=1)}


async def _picker(pilot) -> ModelPicker:
    await pilot.press("ctrl+l")
    await pilot.pause()
    picker = pilot.app.screen
    assert isinstance(picker, ModelPicker)
    for _ in range(200):
        if picker.choices:
            return picker
        await pilot.pause(0.02)
    raise AssertionError("the picker listed nothing")


def _settings(models) -> Settings:
    return Settings(target=ModelSettings(model=str(models["target"])), draft=ModelSettings(model="qwen2.5-coder-0.5b"),
                    drafting=DraftParams(mode="draft", draft_p_min=DRAFT_P_MIN))


async def test_picker_lists_facts_and_pairing(fake, models):
    app = build(fake, settings=_settings(models), remember=False)
    async with running(app) as pilot:
        picker = await _picker(pilot)
        table = picker.query_one("#models-table")
        rows = {c.name: [str(v) for v in table.get_row_at(i)] for i, c in enumerate(picker.choices)}
        assert rows["big-q4_k_m.gguf"][1:] == ["weights", "0 MB", "Q4_K_M", "32,768", "yes"]
        assert rows["big-q4_k_m.gguf"][0].startswith("T ")  # the target
        assert rows["small-q8_0.gguf"][1:] == ["weights", "0 MB", "Q8_0", "32,768", "yes"]
        assert rows["other-f16.gguf"][1:] == ["weights", "0 MB", "F16", "8,192", "no"]
        assert rows["qwen2.5-coder-0.5b"][0].startswith("D ") and rows["qwen2.5-coder-0.5b"][1] == "not here"


async def test_picking_a_draft_reloads_and_keeps_the_chat(clock, models):
    first, second = FakeEngine(clock), FakeEngine(clock)
    app = build(first, engines=(second,), settings=_settings(models), remember=True)
    async with running(app) as pilot:
        await submit(pilot, "reverse a string")
        picker = await _picker(pilot)
        row = next(i for i, c in enumerate(picker.choices) if c.name == "small-q8_0.gguf")
        picker.query_one("#models-table").move_cursor(row=row)
        await pilot.press("d")
        await idle(pilot)
        assert app.settings.draft.model == str(models["draft"])
        assert app.engine is second and first.closed
        assert [m["content"] for m in app.screen.messages] == ["reverse a string", REPLY]  # kept
        from localspec.app.settings_file import load_settings

        assert load_settings().draft.model == str(models["draft"])  # saved like a settings change
        await submit(pilot, "and again")
        assert second.calls[-1]["messages"][0]["content"] == "reverse a string"


async def test_picking_a_preset_target_brings_its_pair(fake, models):
    app = build(fake, engines=(FakeEngine(fake.clock),), settings=_settings(models), remember=False)
    async with running(app) as pilot:
        picker = await _picker(pilot)
        row = next(i for i, c in enumerate(picker.choices) if c.name == "smollm2-135m")
        picker.query_one("#models-table").move_cursor(row=row)
        await pilot.click("#models-target")
        await idle(pilot)
        assert (app.settings.target.model, app.settings.draft.model) == ("smollm2-135m", "smollm2-135m")
        picker = await _picker(pilot)
        await pilot.press("escape")
        await pilot.pause()
        assert app.settings.target.model == "smollm2-135m"


async def test_a_target_of_another_tokenizer_switches_to_prompt_lookup(fake, models):
    """The draft model cannot draft for it: rather than a failed load, prompt lookup, said so."""
    settings = _settings(models).model_copy(update={"draft": ModelSettings(model=str(models["draft"]))})
    app = build(fake, engines=(FakeEngine(fake.clock),), settings=settings, remember=False)
    async with running(app) as pilot:
        picker = await _picker(pilot)
        row = next(i for i, c in enumerate(picker.choices) if c.name == "other-f16.gguf")
        picker.query_one("#models-table").move_cursor(row=row)
        await pilot.press("t")
        await idle(pilot)
        assert app.settings.target.model == str(models["other"]) and app.settings.drafting.mode == "lookup"
        assert any("another tokenizer" in n.message for n in app._notifications)
        assert app.engine_state == "ready"
