"""userconfig, fileio and conversation: atomic writes, corrupt files, round trips."""

from __future__ import annotations

import json
import os

import pytest

from localspec.config import DraftParams, ModelSettings, SamplingParams, Settings
from localspec.app.conversation import Conversation, Message, code_blocks, from_markdown, load_conversation, save_conversation, to_markdown
from localspec.app.fileio import FileError, atomic_write_text, read_text_file, replace_with_backup
from localspec.app.settings_file import config_path, load_settings, save_settings


def test_config_path_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "a.json"))
    assert config_path() == tmp_path / "a.json"
    monkeypatch.delenv("LOCALSPEC_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "localspec" / "settings.json"


def test_settings_round_trip(tmp_path):
    s = Settings(target=ModelSettings(model="smollm2-135m", n_gpu_layers=-1),
                 sampling=SamplingParams(temperature=0.7, seed=3), drafting=DraftParams(mode="lookup", draft_max=16))
    p = save_settings(s, tmp_path / "cfg" / "settings.json")
    assert load_settings(p) == s
    assert [f.name for f in p.parent.iterdir()] == ["settings.json"]  # no temp file left


def test_missing_config_gives_defaults(tmp_path):
    assert load_settings(tmp_path / "none.json") == Settings()


@pytest.mark.parametrize("content", ["{not json", '"just a string"'])
def test_corrupt_config_set_aside(tmp_path, content):
    p = tmp_path / "settings.json"
    p.write_text(content)
    reports = []
    assert load_settings(p, report=reports.append) == Settings()
    assert not p.exists()
    aside = [f for f in tmp_path.iterdir() if f.name.startswith("settings.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_text() == content
    assert len(reports) == 1 and "corrupt-" in reports[0]


def test_atomic_write_keeps_mode(tmp_path):
    p = tmp_path / "x.sh"
    p.write_text("old")
    os.chmod(p, 0o755)
    atomic_write_text(p, "new")
    assert p.read_text() == "new" and (p.stat().st_mode & 0o777) == 0o755


def test_replace_with_backup(tmp_path):
    p = tmp_path / "a.py"
    p.write_text("one\n")
    b1 = replace_with_backup(p, "two\n")
    assert b1.name == "a.py.bak" and b1.read_text() == "one\n" and p.read_text() == "two\n"
    b2 = replace_with_backup(p, "three\n")
    assert b2 != b1 and b2.read_text() == "two\n" and b1.read_text() == "one\n"


def test_binary_and_undecodable_refused(tmp_path):
    b = tmp_path / "x.bin"
    b.write_bytes(b"\x7fELF\x00\x01")
    with pytest.raises(FileError, match="binary"):
        read_text_file(b)
    u = tmp_path / "latin1.txt"
    u.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(FileError, match="UTF-8"):
        read_text_file(u)
    with pytest.raises(FileError, match="no such file"):
        read_text_file(tmp_path / "missing.py")


def _conv():
    return Conversation(messages=[
        Message(role="user", content="hi\n## not a heading"),
        Message(role="assistant", content="hello there", segments=[("hello", "accepted"), (" there", "bonus")],
                stats={"tokens": 2}, rounds=[{"round": 0}]),
    ])


def test_conversation_json_round_trip(tmp_path):
    c = _conv()
    p = save_conversation(c, tmp_path / "c.json")
    assert load_conversation(p) == c
    json.loads(p.read_text())


def test_conversation_markdown_round_trip(tmp_path):
    c = _conv()
    p = save_conversation(c, tmp_path / "c.md")
    back = load_conversation(p)
    assert back.chat_messages() == c.chat_messages()
    plain = from_markdown("## User\n\nq\n\n## Assistant\n\na\n")
    assert plain.chat_messages() == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert "## User" in to_markdown(c)


def test_conversation_bad_file(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"messages": [{"role": "robot", "content": "x"}]}')
    with pytest.raises(FileError, match="not a localspec conversation"):
        load_conversation(p)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_files_follow_the_umask(tmp_path, umask):
    """Issue 23 item 6: a saved conversation or name.edited.py gets the mode open() would
    give it, not mkstemp's 0600; an existing file keeps its own mode."""
    from localspec.app.codeedit import apply_answer, save_new

    old = os.umask(umask)
    try:
        conv = save_conversation(Conversation(messages=[Message(role="user", content="hi")]), tmp_path / "c.json")
        src = tmp_path / "a.py"
        src.write_text("x = 1\n")
        src.chmod(0o640)
        edited = save_new(src, apply_answer("x = 1\n", "```python\nx = 2\n```", name="a.py"))
        atomic_write_text(src, "x = 3\n")
    finally:
        os.umask(old)
    assert conv.stat().st_mode & 0o777 == 0o666 & ~umask
    assert edited.stat().st_mode & 0o777 == 0o666 & ~umask
    assert src.stat().st_mode & 0o777 == 0o640


def test_edit_of_a_missing_file_fails_at_the_command_line(tmp_path, monkeypatch, capsys):
    """Issue 23 item 15: `localspec edit nope.py` prints error:/hint: and exits 2 (a file of the user's
    to fix, as docs/troubleshooting.md's table says and `generate --file` does); the UI is not opened."""
    from localspec.tui import app as tui_app
    from localspec.cli import main

    monkeypatch.chdir(tmp_path)
    opened = []
    monkeypatch.setattr(tui_app, "run_app", lambda *a, **k: opened.append(a))
    code = main(["edit", "nope.py"])
    err = capsys.readouterr().err
    assert code == 2 and not opened
    assert err.startswith("error: no such file: nope.py") and "\nhint: " in err
    (tmp_path / "bin.py").write_bytes(b"\x00\x01")
    assert main(["edit", "bin.py"]) == 2 and not opened
    assert "binary" in capsys.readouterr().err
    (tmp_path / "ok.py").write_text("x = 1\n")
    assert main(["edit", "ok.py"]) == 0 and len(opened) == 1


def test_new_undefined_names_reports_only_what_is_new():
    """Issue 23 item 8: pyflakes on the original and the result; names already undefined
    in the original are not reported."""
    from localspec.app.codeedit import new_undefined_names

    original = "import json\n\ndef f(s):\n    data = json.loads(s)\n    return data, helper\n"
    result = "def f(s):\n    return json.loads(s), helper, data\n"
    assert new_undefined_names(original, result, "m.py") == [("data", 2), ("json", 2)]
    assert new_undefined_names(original, original, "m.py") == []
    local = "def g():\n    y = 1\n    return y\n"
    assert new_undefined_names(local, "def g():\n    return y\n    y = 1\n", "m.py") == [("y", 2)]


def test_options_without_a_command_open_the_chat(monkeypatch):
    """`localspec --target X --mode lookup` opens the chat UI, as `localspec` alone does."""
    from localspec.tui import app as tui_app
    from localspec.cli import main

    opened = []
    monkeypatch.setattr(tui_app, "run_app", lambda settings, **k: opened.append((settings, k)))
    assert main(["--target", "smollm2-135m", "--mode", "lookup"]) == 0
    (settings, kw), = opened
    assert settings.target.model == "smollm2-135m" and settings.drafting.mode == "lookup"
    assert kw == {"edit_file": None, "race": False}


def test_code_blocks():
    assert code_blocks("Here:\n\n```python\ndef f():\n    pass\n```\nDone.") == ["def f():\n    pass\n"]
    assert code_blocks("a\n~~~\nx\n~~~\n\n```py\ny\n```") == ["x\n", "y\n"]
    assert code_blocks("no code `inline` here") == []
    assert code_blocks("```\nunclosed\n") == ["unclosed\n"]  # an answer cut short
