"""The conversation store: kept as each message completes, private, searchable, exportable."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from localspec.app.conversation import Message, load_conversation, save_conversation
from localspec.app.store import ConversationStore, store_path, title_from
from localspec.config import SAMPLING_PRESETS, SamplingParams, Settings, preset_sampling

STATS = {"tokens": 7, "accepted": 3, "drafted": 4, "end_reason": "stop", "kinds": {"accepted": 3}}


@pytest.fixture
def store(tmp_path):
    with ConversationStore(tmp_path / "data" / "c.sqlite3") as s:
        yield s


def _answer(text: str) -> Message:
    return Message(role="assistant", content=text, segments=[(text, "accepted", 0)], stats=STATS,
                   rounds=[{"round": 0}])


def test_store_path_follows_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_DATA", str(tmp_path / "d"))
    assert store_path() == tmp_path / "d" / "conversations.sqlite3"
    monkeypatch.delenv("LOCALSPEC_DATA")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "x"))
    assert store_path() == tmp_path / "x" / "localspec" / "conversations.sqlite3"


def test_folder_and_file_are_private(tmp_path):
    with ConversationStore(tmp_path / "data" / "c.sqlite3") as s:
        s.add_message(s.create("t"), Message(role="user", content="hi"))
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    for f in (tmp_path / "data").iterdir():  # the database and its -wal/-shm files
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_round_trip_with_stats_and_models(store):
    cid = store.create("reverse", {"drafting": {"mode": "draft"}}, system="be brief", preset="greedy")
    store.add_message(cid, Message(role="user", content="reverse a string"))
    store.add_message(cid, _answer("s[::-1]"), models={"target": "t.gguf", "draft": "d.gguf"})
    conv = store.load(cid)
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    ans = conv.messages[1]
    assert ans.stats == STATS and ans.models == {"target": "t.gguf", "draft": "d.gguf"}
    assert [tuple(s) for s in ans.segments] == [("s[::-1]", "accepted", 0)]
    assert conv.settings == {"drafting": {"mode": "draft"}}
    assert store.load(cid, with_system=True).messages[0].content == "be brief"
    info = store.info(cid)
    assert (info.title, info.messages, info.system, info.preset) == ("reverse", 2, "be brief", "greedy")


def test_newest_first_search_rename_delete(store):
    a = store.create("first")
    store.add_message(a, Message(role="user", content="Tell me about Fibonacci numbers"))
    b = store.create("second")
    store.add_message(b, Message(role="user", content="sort a list"))
    assert [c.id for c in store.list()] == [b, a]
    store.add_message(a, _answer("ok"))  # a is updated later: it comes first
    assert [c.id for c in store.list()] == [a, b]
    hits = store.list("fibonacci")
    assert [c.id for c in hits] == [a] and "Fibonacci" in hits[0].match
    assert [c.id for c in store.list("SECOND")] == [b]  # titles too, any case
    assert store.list("100%_") == []  # no LIKE wildcards
    store.rename(b, "  sorting  ")
    assert store.info(b).title == "sorting"
    store.delete(a)
    assert [c.id for c in store.list()] == [b]
    with pytest.raises(KeyError):
        store.load(a)
    with pytest.raises(KeyError):
        store.add_message(a, Message(role="user", content="x"))


def test_truncate_replaces_the_last_turn(store):
    cid = store.create("t")
    for m in (Message(role="user", content="q1"), _answer("a1"), Message(role="user", content="q2"), _answer("a2")):
        store.add_message(cid, m)
    store.truncate(cid, 2)
    store.add_message(cid, Message(role="user", content="q2 again"))
    assert [m.content for m in store.load(cid).messages] == ["q1", "a1", "q2 again"]


def test_export_reuses_the_conversation_format(store, tmp_path):
    cid = store.create("t", system="sys")
    store.add_message(cid, Message(role="user", content="q"))
    store.add_message(cid, _answer("a"))
    conv = store.load(cid, with_system=True)
    back = load_conversation(save_conversation(conv, tmp_path / "out.json"))
    assert back.messages == conv.messages
    md = save_conversation(conv, tmp_path / "out.md").read_text()
    assert "## System" in md and "## User" in md and "## Assistant" in md
    # importing a file keeps it too: its system message becomes the conversation's system prompt
    new = store.import_conversation(back, "imported")
    assert store.info(new).system == "sys" and [m.content for m in store.load(new).messages] == ["q", "a"]


def test_a_kill_loses_nothing_written(tmp_path):
    """Each message is committed when added: a process killed right after keeps all of them."""
    path = tmp_path / "c.sqlite3"
    code = ("import os, sys; from localspec.app.store import ConversationStore; "
            "from localspec.app.conversation import Message; s = ConversationStore(sys.argv[1]); "
            "c = s.create('t'); s.add_message(c, Message(role='user', content='q')); "
            "s.add_message(c, Message(role='assistant', content='a')); os._exit(9)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert subprocess.run([sys.executable, "-c", code, str(path)], env=env).returncode == 9
    with ConversationStore(path) as s:
        (info,) = s.list()
        assert [m.content for m in s.load(info.id).messages] == ["q", "a"]


def test_not_a_store_is_a_clear_error(tmp_path):
    from localspec.app.fileio import FileError

    bad = tmp_path / "c.sqlite3"
    bad.write_text("not a database " * 100)
    with pytest.raises(FileError) as e:
        ConversationStore(bad)
    assert "LOCALSPEC_DATA" in e.value.hint


def test_title_from_first_line():
    assert title_from("\n  hello there \nmore") == "hello there"
    assert title_from("") == "untitled"
    long = title_from("x" * 200)
    assert len(long) == 60 and long.endswith("…")


def test_presets_keep_the_seed():
    base = SamplingParams(temperature=0.3, seed=5)
    assert preset_sampling("", base) is base
    assert preset_sampling("greedy", base).greedy and preset_sampling("greedy", base).seed == 5
    assert preset_sampling("creative", base).temperature == SAMPLING_PRESETS["creative"].temperature
    assert set(SAMPLING_PRESETS) == {"greedy", "balanced", "creative"}


def test_ui_section_survives_flags_and_file(tmp_path):
    from localspec.app.settings_file import load_settings, save_settings

    s = Settings().model_copy(update={"ui": Settings().ui.model_copy(update={"answer_view": "markdown"})})
    p = save_settings(s, tmp_path / "s.json")
    assert json.loads(p.read_text())["ui"] == {"answer_view": "markdown"}
    assert load_settings(p).ui.answer_view == "markdown"
    from localspec.app.flags import settings_from_args
    import argparse

    assert settings_from_args(argparse.Namespace(), s).ui.answer_view == "markdown"
