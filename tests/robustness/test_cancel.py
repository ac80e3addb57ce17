"""Item 5: stopping in the middle of a round (Ctrl-C in the CLI, close()/cancel() from a UI)
leaves both KV caches consistent, and the next answer with the same seed equals a fresh start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from fakes import FakeModel
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.engine import SpeculativeEngine
from localspec.core.events import EndReason, RoundStats, TokenEvent

PROMPT = [3, 5, 7, 3, 5]


def assert_consistent(eng, prompt, gen):
    committed = list(prompt) + gen.token_ids
    assert eng.target.cached_tokens == committed[:-1]
    d = eng.draft_model
    if d is not None and d is not eng.target:
        assert d.cached_tokens == committed[: d.n_cached] and d.n_cached <= len(committed)


def sampled(mode="draft", seed=7, max_tokens=40, draft_max=5, temperature=0.8):
    return (SamplingParams(temperature=temperature, seed=seed), DraftParams(mode=mode, draft_max=draft_max),
            GenerationParams(max_tokens=max_tokens))


class InterruptingModel(FakeModel):
    """Raises KeyboardInterrupt from inside decode call number ``at`` (after the tokens
    reached the cache, as when Ctrl-C arrives while llama_decode runs)."""

    def __init__(self, at, **kw):
        super().__init__(**kw)
        self.at = at
        self.calls = 0

    def decode(self, tokens, logits_for="last", progress=None):
        out = super().decode(tokens, logits_for)
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return out


@pytest.mark.parametrize("at", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("where, mode", [("target", "draft"), ("target", "lookup"), ("target", "none"),
                                         ("draft", "draft")])
def test_interrupt_inside_a_decode_fake(where, at, mode):
    target = InterruptingModel(at) if where == "target" else FakeModel()
    draft = InterruptingModel(at) if where == "draft" else FakeModel()
    eng = SpeculativeEngine(target, draft)
    gen = eng.generate(PROMPT, *sampled(mode))
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for ev in gen:
            if isinstance(ev, TokenEvent):
                seen.append(ev.token_id)
    assert gen.stats.end_reason == EndReason.CANCELLED
    assert gen.token_ids == seen, "the output is exactly what was shown"
    assert_consistent(eng, PROMPT, gen)
    (target if where == "target" else draft).at = -1
    again = eng.generate(PROMPT, *sampled(mode)).run()
    fresh = SpeculativeEngine(FakeModel(), FakeModel()).generate(PROMPT, *sampled(mode)).run()
    assert again.token_ids == fresh.token_ids


@pytest.mark.parametrize("mode", ["draft", "lookup"])
def test_close_mid_round_fake(mode):
    """Stop after the first token of a round that accepted several: the rest of the round's
    tokens are dropped from the output and from both caches."""
    eng = SpeculativeEngine(FakeModel(), FakeModel())
    gen = eng.generate(PROMPT, *sampled(mode, temperature=0.0, max_tokens=60))
    seen, in_round = [], 0
    for ev in gen:
        if isinstance(ev, TokenEvent):
            seen.append(ev.token_id)
            in_round += 1
            if len(seen) > 8 and in_round == 1:
                break
        else:
            in_round = 0
    gen.close()
    assert gen.token_ids == seen and len(gen.committed) == len(PROMPT) + len(seen)
    assert_consistent(eng, PROMPT, gen)


# -- the real tiny model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chat_prompt(tiny_engine_ctx512):
    return tiny_engine_ctx512.chat_tokens([{"role": "user", "content": "Write a short poem about the sea and a lighthouse."}])


def test_close_mid_round_real_then_same_seed_equals_fresh(tiny_engine_ctx512, tiny_path, chat_prompt):
    from localspec.backend.llama import LlamaModel

    args = sampled("draft", seed=11, max_tokens=40, draft_max=6, temperature=0.7)
    gen = tiny_engine_ctx512.generate(chat_prompt, *args)
    seen, rounds, mid = [], 0, False
    for ev in gen:
        if isinstance(ev, RoundStats):
            rounds += 1
        elif len(seen) >= 1 and rounds >= 1 and ev.position > 0 and not mid:
            seen.append(ev.token_id)
            # the next event of this round is a token too: we stop inside the round
            mid = True
            break
        else:
            seen.append(ev.token_id)
    gen.close()
    assert mid and gen.token_ids == seen and gen.stats.end_reason == EndReason.CANCELLED
    assert_consistent(tiny_engine_ctx512, chat_prompt, gen)
    again = tiny_engine_ctx512.generate(chat_prompt, *args).run()
    with LlamaModel(tiny_path, n_ctx=512, n_batch=128, n_threads=1) as t, \
            LlamaModel(tiny_path, n_ctx=512, n_batch=128, n_threads=1) as d:
        fresh = SpeculativeEngine(t, d).generate(chat_prompt, *args).run()
    assert again.token_ids == fresh.token_ids and again.text == fresh.text


@pytest.mark.parametrize("which", ["target", "draft"])
def test_interrupt_inside_real_decode(tiny_engine_ctx512, chat_prompt, which):
    """KeyboardInterrupt right after a real llama_decode of the third verification (or draft) pass."""
    model = tiny_engine_ctx512.target if which == "target" else tiny_engine_ctx512.draft_model
    real = model.decode
    calls = {"n": 0}

    def decode(tokens, logits_for="last"):
        out = real(tokens, logits_for)
        if len(tokens) > 1 or which == "draft":
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
        return out

    args = sampled("draft", seed=3, max_tokens=30, draft_max=4, temperature=0.6)
    model.decode = decode
    try:
        gen = tiny_engine_ctx512.generate(chat_prompt, *args)
        with pytest.raises(KeyboardInterrupt):
            gen.run()
    finally:
        del model.decode
    assert gen.stats.end_reason == EndReason.CANCELLED
    assert_consistent(tiny_engine_ctx512, chat_prompt, gen)
    again = tiny_engine_ctx512.generate(chat_prompt, *args).run()
    tiny_engine_ctx512.target.reset()
    tiny_engine_ctx512.draft_model.reset()
    fresh = tiny_engine_ctx512.generate(chat_prompt, *args).run()
    assert again.token_ids == fresh.token_ids


def test_cli_ctrl_c_mid_stream(tmp_path):
    """SIGINT to ``localspec generate`` while it streams: exit 130, no traceback, statistics printed."""
    env = dict(os.environ, LOCALSPEC_CONFIG=str(tmp_path / "settings.json"), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "localspec.cli", "generate", "--target", "smollm2-135m", "--draft", "smollm2-135m",
           "--n-threads", "1", "--n-ctx", "1024", "--max-tokens", "600", "--temperature", "0.8", "--seed", "1",
           "--no-color", "Write a long story about a dragon who learns to code, in many chapters."]
    # Ctrl-C in a terminal reaches a process whose SIGINT has the default disposition; a test
    # run started in the background by a non-interactive shell inherits SIGINT *ignored*
    # (POSIX), and Python then never raises KeyboardInterrupt: give the child the default back
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out = bytearray()

    def reader():
        while chunk := p.stdout.read1(64):
            out.extend(chunk)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    deadline = time.time() + 240
    while len(out) < 40 and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert p.poll() is None, "finished before it could be interrupted"
    assert len(out) >= 40, "nothing streamed"
    p.send_signal(signal.SIGINT)
    try:
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    t.join(5)
    err = p.stderr.read().decode()
    assert rc == 130, err
    assert "Traceback" not in err
    assert "tokens:" in err and "end: cancelled" in err and "acceptance" in err
