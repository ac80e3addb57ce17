"""Item 6: 50 chat turns in one process with the tiny model, in each mode: memory stays
flat, and the context-overflow policy of :mod:`localspec.app.chat` keeps every prompt plus
max_tokens within n_ctx (dropping the oldest turns, keeping the system message).

Every turn is also checked for cases.md C8 (the reply ends on an end-of-generation token
or at max_tokens, never continues into an invented turn) and for consistent caches.

Memory bound: the KV caches and llama.cpp's compute buffers are allocated once, when the
contexts are created (before the measurement starts). A turn allocates only Python objects
(the history grows by two short messages, well under 1 KB) and per-round numpy logits rows
(g + 1 rows of 49152 float32 = 192 KiB each) that are freed after the round. Keeping one
logits row per round would add 192 KiB x 8 rounds x 40 turns = 63 MB in mode none, so growth
after the warm-up turns is bounded by 24 MB: well below that, with room for the allocator's
noise (measured: under 2 MB).
"""

from __future__ import annotations

import os

import pytest

from localspec.backend.llama import LlamaModel
from localspec.app.chat import ChatSession
from localspec.config import DraftParams, GenerationParams, SamplingParams, Settings
from localspec.core.engine import SpeculativeEngine
from localspec.core.events import EndReason

N_TURNS = 50
WARMUP = 10
N_CTX = 128
MAX_TOKENS = 8
BOUND_MB = 24.0
PEAKS: dict[str, float] = {}


def rss_mb() -> float:
    """Resident set size of this process, MB, from /proc/self/statm (no psutil)."""
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.fixture(scope="module")
def engine(tiny_path):
    t = LlamaModel(tiny_path, n_ctx=N_CTX, n_batch=N_CTX, n_threads=1)
    d = LlamaModel(tiny_path, n_ctx=N_CTX, n_batch=N_CTX, n_threads=1)
    eng = SpeculativeEngine(t, d)
    yield eng
    eng.close()


@pytest.mark.parametrize("mode", ["none", "lookup", "draft"])
def test_fifty_turns_flat_memory_and_overflow_policy(engine, mode):
    settings = Settings(sampling=SamplingParams(temperature=0.0), drafting=DraftParams(mode=mode, draft_max=6),
                        generation=GenerationParams(max_tokens=MAX_TOKENS))
    session = ChatSession(engine, settings, system="Be terse.")
    eog = engine.target.eog_tokens
    rss = []
    dropped = []
    for i in range(N_TURNS):
        turn = session.send(f"What is {i} plus {i + 1}?")
        p = turn.prompt
        assert len(p.tokens) + MAX_TOKENS <= engine.n_ctx
        turn.run()
        g = turn.generation
        assert g.stats.end_reason in (EndReason.EOG, EndReason.MAX_TOKENS)
        assert not set(g.token_ids) & eog
        assert "<|im_start|>" not in g.text and "<|im_end|>" not in g.text and "<|endoftext|>" not in g.text
        engine.check_caches(list(p.tokens) + g.token_ids)
        dropped.append(p.dropped)
        rss.append(rss_mb())
    assert session.messages[0]["role"] == "system" and len(session.messages) == 1 + 2 * N_TURNS
    assert max(dropped) > 0, "the session should reach the context limit"
    assert dropped == sorted(dropped)
    base = rss[WARMUP - 1]
    growth = max(rss[WARMUP:]) - base
    PEAKS[mode] = max(rss)
    print(f"\nmode {mode}: RSS after turn {WARMUP} {base:.1f} MB, peak {max(rss):.1f} MB, "
          f"growth {growth:+.1f} MB over turns {WARMUP + 1}-{N_TURNS}; oldest messages dropped at the end: {dropped[-1]}")
    assert growth < BOUND_MB, rss


@pytest.mark.tiny
def test_cli_messages_file_drops_oldest_turns(tmp_path, capsys, monkeypatch):
    """``generate --messages`` applies the same policy and says how many messages it left out."""
    import json

    from localspec import cli

    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "settings.json"))
    msgs = [{"role": "system", "content": "Be terse."}]
    for i in range(12):
        msgs += [{"role": "user", "content": f"What is {i} plus {i + 1}?"},
                 {"role": "assistant", "content": f"{2 * i + 1}."}]
    msgs.append({"role": "user", "content": "And 2 plus 2?"})
    f = tmp_path / "chat.json"
    f.write_text(json.dumps(msgs))
    code = cli.main(["generate", "--target", "smollm2-135m", "--mode", "lookup", "--n-threads", "1", "--n-ctx", "128",
                     "--max-tokens", "8", "--no-color", "--messages", str(f)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "note: left out the" in err and "oldest messages" in err and "end:" in err
