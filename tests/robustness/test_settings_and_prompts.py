"""Items 2 and 3: bad settings are refused with the reason; bad prompts give a clear error
or are handled (1 token, n_batch tokens, very long lines, emoji and CJK)."""

from __future__ import annotations

import pytest

from fakes import FakeModel
from cli_runner import run_cli
from localspec import cli
from localspec.app.chat import ChatSession
from localspec.config import DraftParams, GenerationParams, SamplingParams, Settings
from localspec.core.engine import SpeculativeEngine
from localspec.errors import ConfigError, ContextOverflowError
from localspec.core.events import EndReason, TokenEvent
from localspec.app.fileio import FileError, read_text_file

TINY = ["--target", "smollm2-135m", "--draft", "smollm2-135m", "--n-threads", "1"]




# -- item 2: settings ------------------------------------------------------------------------
@pytest.mark.parametrize("args, field", [
    (["--temperature", "-0.1"], "temperature"),
    (["--temperature", "nan"], "temperature"),
    (["--temperature", "inf"], "temperature"),
    (["--top-p", "0"], "top_p"),
    (["--top-p", "1.5"], "top_p"),
    (["--top-p", "-1"], "top_p"),
    (["--top-k", "-1"], "top_k"),
    (["--min-p", "2"], "min_p"),
    (["--draft-max", "0"], "draft_max"),
    (["--draft-max", "100000"], "draft_max"),
    (["--draft-max", "2", "--draft-min", "3"], "draft_min"),
    (["--max-tokens", "0"], "max_tokens"),
    (["--max-tokens", "-5"], "max_tokens"),
    (["--n-ctx", "8"], "n_ctx"),
    (["--n-batch", "0"], "n_batch"),
    (["--n-threads", "0"], "n_threads"),
    (["--seed", "-1"], "seed"),
    (["--stop", ""], "stop"),
])
def test_bad_settings_refused_with_reason(capsys, isolated_env, args, field):
    code, _, err = run_cli(capsys, "generate", *args, "hi")
    assert code == 2
    flag = "--" + field.replace("_", "-")  # errors name the flag the user typed, not the settings field
    assert err.startswith("error: invalid settings") and flag in err and "hint:" in err


def test_unknown_preset(capsys, isolated_env):
    code, _, err = run_cli(capsys, "generate", "--target", "no-such-model", "hi")
    assert code == 2
    assert "unknown model 'no-such-model'" in err and "smollm2-135m" in err  # the presets are listed


def test_settings_edges_are_accepted():
    """The documented edges: top_p 1 and top_k 0 are 'off', draft length 1 and 64, max_tokens 1."""
    s = Settings(sampling=SamplingParams(top_p=1.0, top_k=0, temperature=0.0),
                 drafting=DraftParams(draft_max=1), generation=GenerationParams(max_tokens=1))
    assert (s.sampling.top_p, s.sampling.top_k, s.drafting.draft_max, s.generation.max_tokens) == (1.0, 0, 1, 1)
    assert DraftParams(draft_max=64).draft_max == 64


@pytest.mark.tiny
def test_n_ctx_smaller_than_the_prompt(capsys, isolated_env):
    code, _, err = run_cli(capsys, "generate", *TINY, "--mode", "none", "--n-ctx", "32", "--raw", "word " * 60)
    assert code == 5
    assert "context window holds 32" in err and "--n-ctx" in err


@pytest.mark.tiny
def test_chat_prompt_plus_max_tokens_over_n_ctx(capsys, isolated_env):
    code, _, err = run_cli(capsys, "generate", *TINY, "--mode", "none", "--n-ctx", "64", "--max-tokens", "60",
                        "Tell me about the sea.")
    assert code == 5
    assert "more than the context window of 64" in err and "lower max_tokens to at most" in err


# -- item 3: prompts -------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_empty_prompt(capsys, isolated_env, prompt):
    code, _, err = run_cli(capsys, "generate", "--mode", "none", prompt)
    assert code == 2 and "the prompt is empty" in err


def test_empty_prompt_engine_and_chat():
    eng = SpeculativeEngine(FakeModel())
    with pytest.raises(ConfigError, match="empty"):
        eng.generate([], drafting=DraftParams(mode="none")).run()
    with pytest.raises(ConfigError, match="empty"):
        ChatSession(eng).send("")


def test_prompt_longer_than_context_engine():
    eng = SpeculativeEngine(FakeModel(n_ctx=16), FakeModel(n_ctx=16))
    for n in (16, 17, 500):
        with pytest.raises(ContextOverflowError) as e:
            eng.generate([3] * n, drafting=DraftParams(mode="draft")).run()
        assert f"the prompt is {n} tokens" in e.value.message and e.value.hint
        assert eng.target.cached_tokens == []  # nothing was decoded
    # 15 tokens fit: exactly one token is generated, the context ends the reply
    gen = eng.generate([3] * 15, drafting=DraftParams(mode="draft"), generation=GenerationParams(max_tokens=50)).run()
    assert len(gen.token_ids) == 1 and gen.stats.end_reason == EndReason.CONTEXT


@pytest.mark.parametrize("content, words", [
    (b"print('hi')\n\x00\x01\x02binary", ["binary", "NUL"]),
    (b"caf\xe9 = 1\n", ["not valid UTF-8", "byte 3"]),
    (b"\xff\xfe\x00\x00", ["binary"]),
])
def test_bad_file_for_code_edit(capsys, isolated_env, content, words):
    p = isolated_env / "code.py"
    p.write_bytes(content)
    code, _, err = run_cli(capsys, "generate", "--mode", "lookup", "--file", str(p), "Rename x to y.")
    assert code == 2 and "hint:" in err
    for w in words:
        assert w in err
    # the code-edit screen reads files through fileio, which refuses them too
    with pytest.raises(FileError) as e:
        read_text_file(p)
    assert e.value.hint


def test_missing_file_for_code_edit(capsys, isolated_env):
    code, _, err = run_cli(capsys, "generate", "--file", str(isolated_env / "nope.py"), "Rename x.")
    assert code == 2 and "no such file" in err and "hint:" in err  # worded as code-edit mode's (one reader)


def test_very_long_line_round_trips_and_overflows_clearly(tiny_engine_ctx512):
    line = "x_" + "".join(f"v{i}=({i}*7)%13;" for i in range(3000))  # ~40k characters, no newline
    ids = tiny_engine_ctx512.tokenize(line)
    assert tiny_engine_ctx512.target.detokenize(ids) == line
    s = ChatSession(tiny_engine_ctx512, Settings(generation=GenerationParams(max_tokens=8)))
    with pytest.raises(ContextOverflowError, match="context window of 512"):
        s.send("Fix this:\n" + line)
    assert s.messages == []


def test_long_line_in_prompt_generates(tiny_engine_ctx512):
    line = "data = [" + ", ".join(f"'item{i}'" for i in range(60)) + "]"  # one long line
    prompt = tiny_engine_ctx512.tokenize(line + "\n# the same list again:\ndata2 = [")
    assert 128 < len(prompt) < 400  # more than one n_batch chunk
    for mode in ("none", "lookup"):
        gen = tiny_engine_ctx512.generate(prompt, SamplingParams(), DraftParams(mode=mode, draft_max=8),
                                   GenerationParams(max_tokens=12)).run()
        assert len(gen.token_ids) == 12 and "\ufffd" not in gen.text
        tiny_engine_ctx512.check_caches(prompt + gen.token_ids)


@pytest.mark.parametrize("n", [1, 127, 128, 129])
def test_prompt_lengths_around_n_batch(tiny_engine_ctx512, n):
    """cases.md C2 beyond test_tiny: n_batch - 1, n_batch and n_batch + 1 (n_batch = 128)."""
    base = tiny_engine_ctx512.tokenize("for i in range(10):\n    total += i * i\n" * 40)
    prompt = base[:n]
    ref = tiny_engine_ctx512.generate(prompt, drafting=DraftParams(mode="none"), generation=GenerationParams(max_tokens=10)).run()
    got = tiny_engine_ctx512.generate(prompt, drafting=DraftParams(mode="lookup", draft_max=6),
                               generation=GenerationParams(max_tokens=10)).run()
    assert got.token_ids == ref.token_ids and len(got.token_ids) == 10


# -- emoji and CJK: bytes split across tokens and rounds (fake backend) ------------------------
TEXT = "你好🙂世界😀안녕🚀"
DATA = TEXT.encode()  # 30 bytes: token i (0..29) is byte i


class ByteModel(FakeModel):
    """Greedy output: the bytes of TEXT, one token each, repeated (token 30 opens it)."""

    def logits_after(self, seq):
        import numpy as np

        logits = np.zeros(self.n_vocab, dtype=np.float32)
        last = seq[-1]
        tok = 0 if last >= len(DATA) - 1 else last + 1
        logits[tok] = 10.0
        return logits


BYTE_TEXTS = [bytes([b]) for b in DATA] + [b"> "] + [b"a"] * 8 + [b""]


@pytest.mark.parametrize("mode", ["none", "draft", "lookup"])
@pytest.mark.parametrize("stop, expected", [
    ((), TEXT * 2),
    (("🚀",), TEXT[:-1]),
    (("界😀",), TEXT[:4]),
    (("🚀你",), TEXT[:-1]),
])
def test_split_multibyte_characters_stream_without_replacement(mode, stop, expected):
    eng = SpeculativeEngine(ByteModel(texts=BYTE_TEXTS), ByteModel(texts=BYTE_TEXTS))
    gen = eng.generate([30], SamplingParams(), DraftParams(mode=mode, draft_max=5),
                       GenerationParams(max_tokens=60, stop=stop))
    pieces = [e.text for e in gen if isinstance(e, TokenEvent)]
    assert gen.text == expected
    assert "".join(pieces) == expected
    assert all("\ufffd" not in p for p in pieces)


def test_small_n_ctx_keeps_n_batch_within_it(tiny_path):
    """llama.cpp clamps n_batch to a small n_ctx; a longer decode call used to abort the process."""
    from localspec.backend.llama import LlamaModel

    with LlamaModel(tiny_path, n_ctx=48, n_batch=512, n_threads=1) as m:
        assert m.n_ctx == 48 and m.n_batch <= 48
        eng = SpeculativeEngine(m)
        prompt = m.tokenize("one two three four five six seven eight nine ten " * 3)[:40]
        gen = eng.generate(prompt, drafting=DraftParams(mode="lookup"), generation=GenerationParams(max_tokens=20)).run()
        assert len(prompt) + len(gen.token_ids) <= 48 and gen.stats.end_reason in (EndReason.CONTEXT, EndReason.EOG)


def test_unexpected_error_is_one_message_not_a_traceback(capsys, isolated_env, monkeypatch):
    """A bug (here: a loader that raises something unexpected) still gives error/hint lines and exit 70;
    LOCALSPEC_DEBUG=1 shows the traceback."""
    import localspec.app.loader

    def broken(*a, **k):
        raise RuntimeError("something nobody expected")

    monkeypatch.setattr(localspec.app.loader, "load_engine", broken)
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "hi")
    assert code == 70 and "error: unexpected RuntimeError: something nobody expected" in err
    assert "LOCALSPEC_DEBUG=1" in err
    monkeypatch.setenv("LOCALSPEC_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["generate", "--mode", "none", "hi"])


def test_serve_without_the_servers_dependencies_says_how_to_reinstall(capsys, isolated_env, monkeypatch):
    """An installed localspec (a wheel, pipx) has no checkout: the hint names the installers, not only
    ``pip install -e .``."""
    import sys

    monkeypatch.setitem(sys.modules, "localspec.server", None)  # its import fails as a missing dependency would
    code, _, err = run_cli(capsys, "serve", "--mode", "none")
    assert code != 0 and "error: the server's dependencies are missing" in err
    assert "pipx reinstall localspec" in err and "pip install --force-reinstall localspec" in err


def test_a_history_ending_with_assistant_text_is_continued_and_an_empty_one_is_filled(tiny_engine_ctx512):
    """``--messages`` (ChatSession.answer) takes an assistant prefill as the server does: the answer continues
    the final message (its tokens: those of a generation from the prompt that ends with the prefill), and
    that message grows by the answer instead of a new one being added. An assistant message without text
    continues nothing: the prompt leaves it out (a new turn, as the server does) and the answer takes its place."""
    prefill = "Sure, here are three colours:"
    msgs = [{"role": "user", "content": "Name three colours."}, {"role": "assistant", "content": prefill}]
    s = ChatSession(tiny_engine_ctx512, Settings(generation=GenerationParams(max_tokens=8),
                                                 drafting=DraftParams(mode="lookup")), messages=msgs)
    turn = s.answer().run()
    prompt = tiny_engine_ctx512.chat_tokens(msgs)
    assert turn.prompt.tokens == prompt and tiny_engine_ctx512.target.detokenize(prompt).endswith(prefill)
    ref = tiny_engine_ctx512.generate(prompt, SamplingParams(), DraftParams(mode="none"),
                                      GenerationParams(max_tokens=8)).run()
    assert turn.generation.token_ids == ref.token_ids and turn.text
    assert s.messages == [msgs[0], {"role": "assistant", "content": prefill + turn.text}]
    again = s.retry().run()  # takes back the answer only: the prefill is continued again, not dropped
    assert again.prompt.tokens == prompt and again.generation.token_ids == ref.token_ids
    assert s.messages == [msgs[0], {"role": "assistant", "content": prefill + again.text}]
    for blank in ("  ", "", None):  # an empty assistant turn at the end: the answer fills it, as a new turn
        s = ChatSession(tiny_engine_ctx512, Settings(generation=GenerationParams(max_tokens=8),
                                                     drafting=DraftParams(mode="lookup")),
                        messages=[msgs[0], {"role": "assistant", "content": blank}])
        turn = s.answer().run()
        assert turn.prompt.tokens == tiny_engine_ctx512.chat_tokens(msgs[:1])
        assert s.messages == [msgs[0], {"role": "assistant", "content": turn.text}]
    s = ChatSession(tiny_engine_ctx512, messages=[{"role": "system", "content": "Be brief."}])
    with pytest.raises(ConfigError, match="does not end with a user message") as e:
        s.answer()
    assert e.value.hint
