"""Browsing a Hugging Face repo from the model picker (Ctrl+L, h) and fetching one of its GGUF files.

This machine cannot reach the hub: huggingface-hub's two calls (``HfApi().model_info`` and
``hf_hub_download``) are replaced at the boundary by :class:`FakeHub`, whose download reports its
bytes through the ``tqdm_class`` it is given (as huggingface-hub does) and writes a small real GGUF
into the cache (a header only: tests/gguf_headers.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from textual.widgets import ProgressBar

from localspec.app import catalog
from localspec.config import DraftParams, ModelSettings, Settings
from localspec.tui.dialogs import Confirm
from localspec.tui.hub_browser import HubBrowser
from localspec.tui.model_picker import ModelPicker

from gguf_headers import write_gguf
from tui_fakes import DRAFT_P_MIN, FakeEngine
from tui_helpers import build, idle, running

pytestmark = pytest.mark.asyncio
REPO = "someone/Tiny-GGUF"
#: name -> size in bytes, as the hub's listing says (the file written is a header only)
FILES = {"tiny-q4_k_m.gguf": 400_000_000, "tiny-q8_0.gguf": 700_000_000, "tiny-f16.gguf": 3_000_000_000}
FREE = 2_000_000_000  #: the disk's free bytes, as the tests' free_space says


class FakeHub:
    """``HfApi`` and ``hf_hub_download`` of a hub that has :data:`REPO`. ``gate``: the download waits
    for it halfway (so a test can look at the bar)."""

    def __init__(self, files=FILES, gate: threading.Event | None = None, error: Exception | None = None):
        self.files, self.gate, self.error = files, gate, error
        self.downloads: list[str] = []
        hub = self

        class Api:
            def model_info(self, repo_id, *, files_metadata=False, **kw):
                if hub.error is not None:
                    raise hub.error
                assert files_metadata  # the sizes come with the listing
                siblings = [SimpleNamespace(rfilename=n, size=s) for n, s in hub.files.items()]
                return SimpleNamespace(id=repo_id, siblings=siblings + [SimpleNamespace(rfilename="README.md", size=9)])

        self.Api = Api

    def download(self, repo_id, filename, *, cache_dir=None, tqdm_class=None, **kw):
        self.downloads.append(filename)
        size = self.files[filename]
        bar = tqdm_class(total=size, initial=0, desc=filename, unit="B", unit_scale=True, name="huggingface_hub.http_get")
        bar.update(size // 2)
        if self.gate is not None:
            assert self.gate.wait(10)
        bar.update(size - size // 2)
        bar.close()
        owner, name = repo_id.split("/")
        path = Path(cache_dir) / f"models--{owner}--{name}" / "snapshots" / ("0" * 40) / filename
        return str(write_gguf(path, tokens=[f"t{i}" for i in range(12)], file_type=15))


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty weights folder and caches, online (HF_HUB_OFFLINE unset), FREE bytes free, the hub faked."""
    import huggingface_hub

    for env, name in (("LOCALSPEC_MODELS_DIR", "weights"), ("LOCALSPEC_CACHE", "cache"), ("HF_HUB_CACHE", "hf")):
        monkeypatch.setenv(env, str(tmp_path / name))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(catalog, "free_space", lambda folder: FREE)
    fake = FakeHub(gate=threading.Event())
    monkeypatch.setattr(huggingface_hub, "HfApi", fake.Api)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake.download)
    return fake


async def _wait(pilot, cond, what):
    for _ in range(300):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"never: {what}")


async def _browse(pilot, repo=REPO) -> HubBrowser:
    """Ctrl+L, h, type ``repo``, Enter."""
    await pilot.press("ctrl+l")
    picker = pilot.app.screen
    await _wait(pilot, lambda: picker.choices, "the picker listed")
    await pilot.press("h")
    await pilot.pause()
    browser = pilot.app.screen
    assert isinstance(browser, HubBrowser)
    browser.query_one("#hub-repo").value = repo
    await pilot.press("enter")
    return browser


def _detail(browser) -> str:
    return str(browser.query_one("#hub-detail").render())


def _settings() -> Settings:
    return Settings(target=ModelSettings(model="qwen2.5-coder-1.5b"), draft=ModelSettings(model="qwen2.5-coder-0.5b"),
                    drafting=DraftParams(mode="draft", draft_p_min=DRAFT_P_MIN))


async def test_a_repo_lists_its_gguf_files_with_size_and_free_space(fake, hub, tmp_path):
    app = build(fake, settings=_settings(), remember=False)
    async with running(app) as pilot:
        browser = await _browse(pilot)
        await _wait(pilot, lambda: browser.files, "the repo listed")
        table = browser.query_one("#hub-table")
        rows = [[str(v) for v in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows == [["tiny-f16.gguf", "3.0 GB", "F16", "no"], ["tiny-q4_k_m.gguf", "400 MB", "Q4_K_M", "yes"],
                        ["tiny-q8_0.gguf", "700 MB", "Q8_0", "yes"]]  # README.md left out
        assert _detail(browser).startswith(f"tiny-f16.gguf: 3.0 GB; 2.0 GB free in {tmp_path / 'hf'}")
        assert "does not fit" in _detail(browser)


async def test_a_file_that_does_not_fit_is_refused(fake, hub):
    app = build(fake, settings=_settings(), remember=False)
    async with running(app) as pilot:
        browser = await _browse(pilot)
        await _wait(pilot, lambda: browser.files, "the repo listed")
        await pilot.press("enter")  # on tiny-f16.gguf, 3.0 GB: 2.0 GB free
        await pilot.pause()
        assert app.screen is browser  # no confirmation asked
        assert "tiny-f16.gguf needs 3.0 GB but only 2.0 GB is free" in _detail(browser)
        assert "HF_HUB_CACHE" in _detail(browser)  # the hint
        assert hub.downloads == []


async def test_fetching_confirms_shows_progress_and_lists_the_file(clock, hub, tmp_path):
    app = build(FakeEngine(clock), engines=(FakeEngine(clock),), settings=_settings(), remember=False)
    async with running(app) as pilot:
        browser = await _browse(pilot)
        await _wait(pilot, lambda: browser.files, "the repo listed")
        await pilot.press("down", "enter")  # tiny-q4_k_m.gguf
        await pilot.pause()
        assert isinstance(app.screen, Confirm)
        assert "tiny-q4_k_m.gguf (400 MB)" in app.screen.question and "2.0 GB free" in app.screen.question
        await pilot.press("y")
        bar = browser.query_one("#hub-progress", ProgressBar)
        await _wait(pilot, lambda: bar.percentage == 0.5, "halfway")  # the download waits at the gate
        assert "200 / 400 MB" in _detail(browser)
        hub.gate.set()
        picker = app.screen
        await _wait(pilot, lambda: isinstance(app.screen, ModelPicker), "back in the picker")
        assert bar.percentage == 1.0
        assert hub.downloads == ["tiny-q4_k_m.gguf"]
        picker = app.screen
        await _wait(pilot, lambda: any(c.name == "tiny-q4_k_m.gguf" for c in picker.choices), "listed")
        chosen = picker.selected()  # highlighted
        assert chosen.name == "tiny-q4_k_m.gguf" and chosen.where == "hf cache"
        assert chosen.path.is_relative_to(tmp_path / "hf")
        row = [str(v) for v in picker.query_one("#models-table").get_row_at(picker.choices.index(chosen))]
        assert row[3:5] == ["Q4_K_M", "32,768"]  # its header was read, like any file's
        await pilot.press("d")
        await idle(pilot)
        assert app.settings.draft.model == str(chosen.path)


def _http_error(cls_name: str):
    import httpx2 as httpx  # the HTTP client huggingface-hub 2.x uses
    from huggingface_hub import errors

    resp = httpx.Response(404, request=httpx.Request("GET", "https://huggingface.co/x"))
    return getattr(errors, cls_name)("404 Client Error", response=resp)


def _connect_error():
    import httpx2 as httpx

    return httpx.ConnectError("[Errno -2] Name or service not known")


@pytest.mark.parametrize("offline, error, files, words", [
    ("1", None, FILES, ["cannot list someone/Tiny-GGUF: HF_HUB_OFFLINE is set", "unset HF_HUB_OFFLINE"]),
    (None, _connect_error, FILES, ["cannot reach the Hugging Face hub for someone/Tiny-GGUF", "check your network"]),
    (None, lambda: _http_error("RepositoryNotFoundError"), FILES, ["the hub has no repo 'someone/Tiny-GGUF'"]),
    (None, None, {}, ["the hub repo someone/Tiny-GGUF has no .gguf files", "-GGUF"]),
], ids=["HF_HUB_OFFLINE", "no-network", "no-such-repo", "no-gguf"])
async def test_failures_are_one_clear_line(fake, hub, monkeypatch, offline, error, files, words):
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    hub.error = error() if error else None
    hub.files = files
    app = build(fake, settings=_settings(), remember=False)
    async with running(app) as pilot:
        browser = await _browse(pilot)
        await _wait(pilot, lambda: "listing" not in _detail(browser), "an answer")
        for w in words:
            assert w in _detail(browser)
        assert "Traceback" not in _detail(browser) and browser.files == []
        assert any(words[0] in n.message for n in app._notifications)
        await pilot.press("escape")
        assert isinstance(app.screen, ModelPicker)  # back, nothing broken
