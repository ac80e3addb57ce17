"""The settings file and the flags, per command: every command that loads models (generate, serve,
calibrate, bench, and the UI's chat, edit and race) reads the file's ``target`` and ``draft`` sections
(``rpc``, ``rpc_timeout``, ``n_ctx`` among them); a flag overrides them for that run and is never written
back. Each command runs through ``localspec.cli.main`` up to the point where it would load the models
(``load_engine``, ``load_model``, ``run_app``), where the settings it resolved are taken."""

from __future__ import annotations

import json

import pytest

from localspec import cli
from localspec.errors import ConfigError

FILE = {"target": {"model": "smollm2-135m", "rpc": ["10.1.2.3:50052"], "rpc_timeout": 120, "n_ctx": 1024},
        "draft": {"model": "smollm2-135m", "n_ctx": 512}}
FLAGS = ["--rpc", "10.9.9.9:50052", "--rpc-timeout", "30", "--n-ctx", "2048"]


@pytest.fixture()
def settings_file(tmp_path, monkeypatch):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(FILE))
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(path))
    return path


@pytest.fixture()
def resolved(monkeypatch, tmp_path):
    """The settings each command would load its models with (the load itself is stopped)."""
    from localspec.app import loader
    from localspec.tui import app

    seen = []

    def stop(settings, *a, **k):
        seen.append(settings)
        raise ConfigError("stopped before loading (test)")

    def stop_model(ms, *a, **k):  # calibrate loads one model at a time
        seen.append(ms)
        raise ConfigError("stopped before loading (test)")

    monkeypatch.setattr(loader, "load_engine", stop)
    monkeypatch.setattr(loader, "load_model", stop_model)
    monkeypatch.setattr(app, "run_app", lambda settings, **k: seen.append(settings))
    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)

    def run(*argv):
        seen.clear()
        cli.main(list(argv))
        assert len(seen) == 1, f"localspec {' '.join(argv)} did not reach the load"
        return seen[0]

    return run


COMMANDS = {
    "generate": ["generate", "hi", "--raw"],
    "serve": ["serve", "--port", "1"],
    "calibrate": ["calibrate"],
    "bench": ["bench", "--out", "bench-out", "--quick", "--no-peers"],
    "chat": ["chat"],
    "plain localspec": ["--mode", "lookup"],
    "edit": ["edit", "a.py"],
    "race": ["race"],
}


def _models(resolved_settings):
    """(target, draft) ModelSettings of what a command resolved (calibrate hands over the target alone)."""
    if hasattr(resolved_settings, "target"):
        return resolved_settings.target, resolved_settings.draft
    return resolved_settings, None


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_reads_the_settings_files_models(settings_file, resolved, command):
    target, draft = _models(resolved(*COMMANDS[command]))
    assert target.model == "smollm2-135m" and target.rpc == ("10.1.2.3:50052",)
    assert target.rpc_timeout == 120 and target.n_ctx == 1024
    if draft is not None:
        assert draft.model == "smollm2-135m" and draft.n_ctx == 512


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_flag_wins_for_the_run_and_is_not_written_back(settings_file, resolved, command):
    before = settings_file.read_bytes()
    target, draft = _models(resolved(*COMMANDS[command], *FLAGS))
    assert target.rpc == ("10.9.9.9:50052",) and target.rpc_timeout == 30 and target.n_ctx == 2048
    assert target.model == "smollm2-135m"  # what no flag set still comes from the file
    if draft is not None:
        assert draft.n_ctx == 2048 and draft.model == "smollm2-135m"
    assert settings_file.read_bytes() == before


def test_bench_keeps_its_own_window_only_where_neither_flag_nor_file_sets_one(tmp_path, monkeypatch, resolved):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"target": {"model": "smollm2-135m"}, "draft": {"model": "smollm2-135m"}}))
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(path))
    settings = resolved(*COMMANDS["bench"])
    assert settings.target.n_ctx == settings.draft.n_ctx == 2048 and settings.target.model == "smollm2-135m"


def test_an_invalid_value_in_the_file_falls_back_and_the_command_runs(tmp_path, monkeypatch, resolved):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"target": {"rpc": ["no-port"], "n_ctx": 1024}}))
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(path))
    target, _ = _models(resolved(*COMMANDS["generate"]))
    assert target.rpc == () and target.n_ctx == 1024
