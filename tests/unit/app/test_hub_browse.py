"""The hub side of the model picker's Hugging Face browser (localspec.app.catalog): the download
progress through huggingface-hub's own progress-bar code (its installed version), and the space check."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from localspec.app import catalog
from localspec.errors import ConfigError, ModelError


def _seen():
    seen = []
    return seen, catalog._progress_bars(lambda stage, done, total: seen.append((stage, done, total)))


def test_http_download_progress_through_huggingface_hubs_bar():
    from huggingface_hub.utils.tqdm import _get_progress_bar_context

    seen, cls = _seen()
    with _get_progress_bar_context(desc="x.gguf", log_level=logging.INFO, total=100, initial=10, tqdm_class=cls,
                                   name="huggingface_hub.http_get") as bar:
        bar.update(40)
        bar.update(50)
    assert seen == [("download", 50, 100), ("download", 100, 100)]


def test_xet_download_progress_counts_the_bytes_written_against_the_file_size():
    """Two bars: bytes received (fewer: compressed; its total grows) and bytes written."""
    from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter

    seen, cls = _seen()

    def report(written, received):
        return SimpleNamespace(total_bytes_completed=written, total_transfer_bytes_completed=received, total_bytes=100,
                               total_bytes_completion_rate=None, total_transfer_bytes_completion_rate=None)

    with XetDownloadProgressReporter(reconstruction_desc="r", transfer_desc="t", total=100, log_level=logging.INFO,
                                     tqdm_class=cls) as reporter:
        reporter.update_progress(report(0, 30))
        reporter.update_progress(report(60, 40))
        reporter.update_progress(report(100, 70))
    assert seen[-1] == ("download", 100, 100)
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen) and all(t == 100 for _, _, t in seen)


def test_a_file_larger_than_the_free_space_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "free_space", lambda folder: 2_000_000_000)
    assert catalog.check_fits("a.gguf", 1_999_000_000, tmp_path) == 2_000_000_000
    with pytest.raises(ModelError) as e:
        catalog.check_fits("big.gguf", 3_000_000_000, tmp_path)
    assert e.value.message == f"big.gguf needs 3.0 GB but only 2.0 GB is free in {tmp_path}"


def test_free_space_of_a_folder_not_made_yet(tmp_path):
    assert catalog.free_space(tmp_path / "not" / "yet") == catalog.free_space(tmp_path) > 0


def test_a_bad_repo_id_is_refused_before_the_network():
    with pytest.raises(ConfigError) as e:
        catalog.hub_gguf_files("just-a-name")
    assert "OWNER/REPO" in e.value.hint
