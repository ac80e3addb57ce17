"""Integration tests on the default pair: Qwen2.5-Coder 1.5B target, 0.5B draft."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import PROMPTS, assert_first_token_follows_target, assert_greedy_equal, run
from localspec.backend.llama import LlamaModel
from localspec.config import SamplingParams
from localspec.core.engine import SpeculativeEngine
from localspec.errors import TokenizerMismatchError
from localspec.core.events import EndReason

pytestmark = pytest.mark.pair


@pytest.fixture(scope="module")
def prompts(pair_engine):
    return [pair_engine.chat_tokens([{"role": "user", "content": p}]) for p in PROMPTS]


@pytest.fixture(scope="module")
def references(pair_engine, prompts):
    return [run(pair_engine, p, "none", 256)[0].token_ids for p in prompts]


@pytest.mark.parametrize("mode", ["draft", "lookup"])
def test_greedy_exact_c1(pair_engine, prompts, references, mode):
    """cases.md C1: 3 prompts x 256 tokens; identical, or first difference at a near-tie."""
    diffs = []
    for i, (prompt, ref) in enumerate(zip(prompts, references)):
        gen, _ = run(pair_engine, prompt, mode, 256)
        d = assert_greedy_equal(pair_engine, prompt, ref, gen.token_ids, f"{mode} prompt {i}")
        if d:
            diffs.append((i, *d))
        if mode == "draft":
            assert gen.stats.drafted > 0 and 0.0 <= gen.stats.acceptance_rate <= 1.0
    print(f"near-tie differences ({mode}):", diffs)


def test_tokenizer_check_pair_passes_tiny_refused(pair_engine, tiny_path):
    """cases.md C3."""
    assert pair_engine.drafter is not None and pair_engine.drafter.n_propose == pair_engine.target.n_vocab
    tiny = LlamaModel(tiny_path, n_ctx=256)
    try:
        with pytest.raises(TokenizerMismatchError) as e:
            SpeculativeEngine(pair_engine.target, tiny)
        msg = e.value.message
        assert "token id 0" in msg and "'!'" in msg and "'<|endoftext|>'" in msg
    finally:
        tiny.close()


def test_stop_string_inside_accepted_block_c5(pair_engine):
    """cases.md C5: the pair repeats "ha"; stop on " ha ha ha", lookup mode with 8 drafted tokens.

    The stop completes in the middle of a block of accepted tokens (first case) and in a
    later round, after text was held back (second case).
    """
    for text, stop in (('The crowd kept laughing: "ha ha ha ha ha ha ha ha', " ha ha ha"),
                       ('The crowd kept laughing: "ha ha ha ha ha ha ha ha', " ha ha ha ha ha ha ha ha ha ha ha ha ha")):
        prompt = pair_engine.tokenize(text)
        free, _ = run(pair_engine, prompt, "lookup", 48, draft_max=8)
        assert stop in free.text, free.text
        gen, events = run(pair_engine, prompt, "lookup", 48, draft_max=8, stop=[stop])
        cut = free.text.index(stop)
        assert gen.stats.end_reason == EndReason.STOP
        assert gen.text == free.text[:cut]
        # token ids: exactly those that start before the stop string
        ends = np.cumsum([len(pair_engine.target.token_bytes(t).decode("utf-8", "replace")) for t in free.token_ids])
        starts = np.concatenate([[0], ends[:-1]])
        n_keep = int((starts < cut).sum())
        assert gen.token_ids == free.token_ids[:n_keep]
        assert gen.stats.tokens == n_keep == sum(gen.stats.kinds.values())
        pair_engine.check_caches(list(prompt) + gen.token_ids)
        rounds = [r for r in events if hasattr(r, "accepted")]
        assert rounds[-1].accepted >= 2, "the stop should fall inside an accepted block"


@pytest.mark.parametrize("mode", ["none", "draft", "lookup"])
def test_chat_turn_ends_on_eog_c8(pair_engine, mode):
    """cases.md C8: every end-of-generation token of the GGUF ends the turn, in every mode."""
    t = pair_engine.target
    im_end = t.tokenize("<|im_end|>")[0]
    eot = t.tokenize("<|endoftext|>")[0]
    assert {im_end, eot} <= t.eog_tokens
    prompt = pair_engine.chat_tokens([{"role": "user", "content": "What is 2 + 2? Answer with one number."}])
    gen, _ = run(pair_engine, prompt, mode, 64)
    assert gen.stats.end_reason == EndReason.EOG
    assert "im_start" not in gen.text and "<|" not in gen.text
    assert not (set(gen.token_ids) & t.eog_tokens)


def test_sampled_first_token_follows_target_c6(pair_engine):
    """cases.md C6: with the real draft and target at temperature > 0, the first sampled token's
    histogram over many seeds matches the target distribution (chi-square goodness of fit)."""
    prompt = pair_engine.chat_tokens([{"role": "user", "content": "Name one random animal. One word only."}])
    assert_first_token_follows_target(pair_engine, prompt, SamplingParams(temperature=1.0, top_k=8))


def test_cli_end_to_end_default_pair(tmp_path):
    env = dict(os.environ, LOCALSPEC_CONFIG=str(tmp_path / "settings.json"))
    cmd = [sys.executable, "-m", "localspec.cli", "generate", "--max-tokens", "40", "--n-ctx", "1024",
           "Write a Python one-liner that reverses a string."]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 10
    assert "acceptance" in r.stderr and "tokens/s" in r.stderr
    r = subprocess.run(cmd + ["--json", "--mode", "lookup"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    kinds = {line["type"] for line in lines}
    assert {"token", "round", "stats"} <= kinds
    stats = lines[-1]
    assert stats["type"] == "stats" and stats["tokens"] == sum(1 for line in lines if line["type"] == "token")
    assert stats["text"] == "".join(line["text"] for line in lines if line["type"] == "token")


def test_cli_bad_input_is_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "localspec.cli", "generate", "--temperature", "-1", "hi"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "temperature" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "localspec.cli", "generate", "--target", str(tmp_path / "nope.gguf"),
                        "hi"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "not found" in r.stderr and "Traceback" not in r.stderr
