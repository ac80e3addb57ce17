"""The prompt cache's default budget follows the memory left once the models are loaded:
min(2,048 MiB, a quarter of MemAvailable), said at start; a given --prompt-cache-mb is kept as it is."""

from __future__ import annotations

import pytest

from localspec.backend.context import default_prompt_cache_mb, with_prompt_cache_default
from localspec.config import PROMPT_CACHE_MB, ServerSettings

from cli_runner import run_cli

GiB = 1 << 30


@pytest.mark.parametrize("available, mib", [(64 * GiB, 2048), (8 * GiB, 2048), (6 * GiB, 1536), (2 * GiB, 512),
                                            (GiB // 2, 128), (3 << 20, 0), (0, PROMPT_CACHE_MB),
                                            (-1, PROMPT_CACHE_MB)])
def test_the_rule(available, mib):
    assert default_prompt_cache_mb(available) == mib


def test_a_given_budget_is_kept_and_the_default_is_resolved_once_loaded():
    assert ServerSettings().prompt_cache_mb is None  # not decided before the models are in
    assert with_prompt_cache_default(ServerSettings(prompt_cache_mb=100), 2 * GiB).prompt_cache_mb == 100
    assert with_prompt_cache_default(ServerSettings(prompt_cache_mb=0), 64 * GiB).prompt_cache_mb == 0
    assert with_prompt_cache_default(ServerSettings(), 2 * GiB).prompt_cache_mb == 512


def test_serve_says_the_budget_and_its_rule_at_start(capsys, monkeypatch):
    from localspec import cli, server
    from localspec.app import loader
    from localspec.backend import context

    class Engine:
        def close(self):
            pass

    got = []
    monkeypatch.setattr(loader, "load_engine", lambda *a, **k: Engine())
    monkeypatch.setattr(cli, "print_notices", lambda *a: None)
    monkeypatch.setattr(context, "available_memory", lambda: 2 * GiB)  # after loading
    monkeypatch.setattr(server, "serve", lambda engine, settings, srv: got.append(srv))
    code, _, err = run_cli(capsys, "serve", "--port", "1")
    assert code == 0 and got[0].prompt_cache_mb == 512
    assert "prompt cache 512 MiB: min(2048 MiB, a quarter of the 2.0 GiB available after loading)" in err
    code, _, err = run_cli(capsys, "serve", "--port", "1", "--prompt-cache-mb", "64")
    assert got[1].prompt_cache_mb == 64 and "a quarter" not in err


def test_a_disk_tier_asked_for_with_the_memory_tier_off_is_refused_by_its_flag(capsys, monkeypatch):
    """The disk keeps the snapshots the memory tier makes: ``--prompt-cache-mb 0 --prompt-cache-disk-mb 10`` would
    keep nothing, silently; it is refused before any model loads, naming both flags. Off together, or the disk
    tier left to its default, is fine."""
    from localspec.app import loader

    def load_engine(*a, **k):
        raise AssertionError("the models load although the flags contradict each other")

    monkeypatch.setattr(loader, "load_engine", load_engine)
    code, _, err = run_cli(capsys, "serve", "--port", "1", "--prompt-cache-mb", "0", "--prompt-cache-disk-mb", "10")
    assert code != 0 and "--prompt-cache-disk-mb: 10 MiB on disk keeps nothing with --prompt-cache-mb 0" in err
    assert "leave --prompt-cache-disk-mb out" in err
    assert "Traceback" not in err
    assert ServerSettings(prompt_cache_mb=0, prompt_cache_disk_mb=0).prompt_cache_disk_mb == 0
    assert ServerSettings(prompt_cache_mb=0).prompt_cache_disk_mb is None
