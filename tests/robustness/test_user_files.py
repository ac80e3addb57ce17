"""Item 7: files the user owns. Code-edit never replaces a file without a backup (and the
TUI asks first: tests/tui/test_tui_files.py and test_tui_flows.py); conversation and config
files are written atomically; a corrupt config file is reported and set aside, not fatal.

These test the UI engineer's localspec/app/fileio.py, userconfig.py and conversation.py under faults.
"""

from __future__ import annotations

import os

import pytest

from localspec.app import fileio
from localspec.config import SamplingParams, Settings
from localspec.app.conversation import Conversation, Message, load_conversation, save_conversation
from localspec.app.fileio import FileError, atomic_write_text, replace_with_backup
from localspec.app.settings_file import load_settings, save_settings, take_reports

ORIGINAL = "def load(path):\n    return open(path).read()\n"


def listing(folder):
    return sorted(p.name for p in folder.iterdir())


def test_replace_keeps_every_backup(tmp_path):
    f = tmp_path / "app.py"
    f.write_text(ORIGINAL)
    b1 = replace_with_backup(f, "v2\n")
    b2 = replace_with_backup(f, "v3 🙂\n")
    assert b1 != b2
    assert b1.read_text() == ORIGINAL and b2.read_text() == "v2\n" and f.read_text() == "v3 🙂\n"
    assert not [n for n in listing(tmp_path) if n.endswith(".tmp")]


@pytest.mark.parametrize("fault", ["replace", "fsync", "write"])
def test_failed_replace_leaves_original_and_no_temp_files(tmp_path, monkeypatch, fault):
    f = tmp_path / "app.py"
    f.write_text(ORIGINAL)

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    if fault == "replace":
        monkeypatch.setattr(fileio.os, "replace", boom)
    elif fault == "fsync":
        monkeypatch.setattr(fileio.os, "fsync", boom)
    else:
        real_fdopen = os.fdopen

        class Full:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, s):
                self.f.write(s[: len(s) // 2])
                raise OSError(28, "No space left on device")

        monkeypatch.setattr(fileio.os, "fdopen", lambda *a, **k: Full(real_fdopen(*a, **k)))
    with pytest.raises(FileError) as e:
        replace_with_backup(f, "new text\n" * 100)
    assert e.value.hint
    assert f.read_text() == ORIGINAL, "the original is untouched"
    names = listing(tmp_path)
    assert names == ["app.py", "app.py.bak"], names  # a backup, and no half-written temp file
    assert (tmp_path / "app.py.bak").read_text() == ORIGINAL


def test_failed_backup_does_not_touch_original(tmp_path, monkeypatch):
    f = tmp_path / "app.py"
    f.write_text(ORIGINAL)

    def boom(*a, **k):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(fileio.shutil, "copy2", boom)
    with pytest.raises(FileError, match="cannot back up"):
        replace_with_backup(f, "new\n")
    assert f.read_text() == ORIGINAL and listing(tmp_path) == ["app.py"]


def test_replace_refuses_missing_file(tmp_path):
    with pytest.raises(FileError):
        replace_with_backup(tmp_path / "gone.py", "x")
    assert listing(tmp_path) == []


# -- conversations --------------------------------------------------------------------------------
TRICKY = [
    Message(role="system", content="Be terse."),
    Message(role="user", content="## User\nnot a new turn 你好 🙂\n\n```py\nx = 1\n```"),
    Message(role="assistant", content="## Assistant\nheadings inside an answer\n- 😀 안녕\n<!-- a comment -->",
            segments=[("## Assistant\n", "accepted"), ("headings inside an answer\n- 😀 안녕\n<!-- a comment -->",
                                                      "target")]),
]


@pytest.mark.parametrize("name", ["chat.json", "chat.md"])
def test_conversation_round_trip_with_tricky_content(tmp_path, name):
    conv = Conversation(messages=TRICKY)
    save_conversation(conv, tmp_path / name)
    back = load_conversation(tmp_path / name)
    assert [(m.role, m.content) for m in back.messages] == [(m.role, m.content) for m in TRICKY]


@pytest.mark.parametrize("name", ["chat.json", "chat.md"])
def test_failed_conversation_save_keeps_the_old_file(tmp_path, monkeypatch, name):
    p = tmp_path / name
    save_conversation(Conversation(messages=TRICKY[:2]), p)
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", boom)
    with pytest.raises(FileError):
        save_conversation(Conversation(messages=TRICKY), p)
    assert p.read_bytes() == before and listing(tmp_path) == [name]


@pytest.mark.parametrize("content", [b"", b"{", b"\xff\xfe garbage", b"[1, 2]", b'{"messages": [{"role": "robot"}]}'])
def test_corrupt_conversation_is_a_clear_error(tmp_path, content):
    p = tmp_path / "chat.json"
    p.write_bytes(content)
    with pytest.raises(FileError) as e:
        load_conversation(p)
    assert e.value.hint
    assert p.read_bytes() == content, "a file that cannot be read is left as it is"


# -- the config file ---------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [
    b"{not json",
    b"",
    b"\xff\xfe\x00binary",
    b"[1, 2, 3]",
])
def test_corrupt_config_reported_and_set_aside(tmp_path, content):
    """Not JSON (or not a JSON object): set aside. JSON with bad values keeps the good
    ones and stays in place (tests/robustness/test_real_inputs.py)."""
    p = tmp_path / "settings.json"
    p.write_bytes(content)
    reports = []
    s = load_settings(p, report=reports.append)
    assert s == Settings()
    assert len(reports) == 1 and str(p) in reports[0] and "default" in reports[0]
    assert not p.exists()
    aside = [q for q in tmp_path.iterdir() if q.name.startswith("settings.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == content, "the user's file is kept, byte for byte"
    # the next start is quiet, and saving writes a fresh valid file
    assert load_settings(p, report=reports.append) == Settings() and len(reports) == 1
    save_settings(Settings(sampling=SamplingParams(temperature=0.5)), p)
    assert load_settings(p, report=reports.append).sampling.temperature == 0.5


def test_corrupt_config_twice_keeps_both_copies(tmp_path):
    p = tmp_path / "settings.json"
    for content in (b"{bad one", b"{bad two"):
        p.write_bytes(content)
        load_settings(p, report=lambda m: None)
    kept = sorted(q.read_bytes() for q in tmp_path.iterdir() if q.name.startswith("settings.json.corrupt-"))
    assert kept == [b"{bad one", b"{bad two"]


def test_corrupt_config_reaches_the_tui_as_a_report(tmp_path, monkeypatch):
    """The CLI loads settings before the TUI is up; the problem waits for it as a notification."""
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "settings.json"))
    (tmp_path / "settings.json").write_text("{oops")
    take_reports()
    assert load_settings() == Settings()
    reports = take_reports()
    assert len(reports) == 1 and "settings.json" in reports[0]


def test_config_write_is_atomic(tmp_path, monkeypatch):
    p = tmp_path / "settings.json"
    save_settings(Settings(sampling=SamplingParams(temperature=0.3)), p)
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", boom)
    with pytest.raises(FileError):
        save_settings(Settings(sampling=SamplingParams(temperature=0.9)), p)
    assert p.read_bytes() == before and listing(tmp_path) == ["settings.json"]


def test_atomic_write_creates_folders_and_keeps_mode(tmp_path):
    p = tmp_path / "a" / "b" / "notes.md"
    atomic_write_text(p, "one")
    os.chmod(p, 0o600)
    atomic_write_text(p, "two ✓")
    assert p.read_text() == "two ✓" and (os.stat(p).st_mode & 0o777) == 0o600
