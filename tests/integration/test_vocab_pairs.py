"""Pairs off the default one, made from the tiny model with the ``gguf`` package (tests/gguf_copies.py):
a target whose vocabulary is padded past its draft's (Qwen2.5 7B-32B over their 0.5B-3B siblings), the
same pair the other way round, and tokenizers that really differ (cases.md C3, C6).

The pair passes and tiny-vs-Qwen refused are in test_pair.py (``test_tokenizer_check_pair_passes_tiny_refused``,
``test_sampled_first_token_follows_target_c6``) and tests/robustness/test_model_files.py
(``test_tokenizers_differ_through_cli``).
"""

import json

import numpy as np
import pytest

from cli_runner import run_cli
from gguf_copies import rewrite_gguf
from helpers import assert_first_token_follows_target, assert_greedy_equal, run
from localspec.config import SamplingParams

pytestmark = pytest.mark.tiny

N_TINY = 49152  # SmolLM2's vocabulary; the padded copy has 128 more
#: no repacking probe (a child process per model and start; not what these tests are about)
FAST = ("--repack", "off", "--huge-pages", "off")
ANIMAL = [{"role": "user", "content": "Name one random animal. One word only."}]


@pytest.fixture(autouse=True)
def _own_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "settings.json"))
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "cache"))


def _models(tiny_path, tiny_padded_path, padded):
    """(target, draft): the padded copy as ``padded`` says."""
    return (tiny_padded_path, tiny_path) if padded == "target" else (tiny_path, tiny_padded_path)


@pytest.mark.parametrize("padded", ["target", "draft"])
def test_padded_vocabulary_samples_through_the_cli(capsys, tiny_path, tiny_padded_path, padded):
    """Draft mode at temperature 1 with the padded copy as target (its draft's rows 128 ids narrower than the
    target's; before ``as_target_width`` the first rejection was exit 70, "operands could not be broadcast
    together with shapes (49280,) (49152,)") and as draft (rows cut to the target's width): exit 0, with
    drafts rejected and resampled on the way."""
    target, draft = _models(tiny_path, tiny_padded_path, padded)
    code, out, err = run_cli(capsys, "generate", "--target", str(target), "--draft", str(draft), "--mode", "draft",
                             "--temperature", "1", "--seed", "7", "--max-tokens", "48", "--n-ctx", "512",
                             "--n-threads", "1", *FAST, "--json", "Tell me a short story about a fox.")
    assert code == 0, err
    stats = json.loads(out.splitlines()[-1])
    assert stats["type"] == "stats" and stats["tokens"] >= 8, stats
    assert stats["drafted"] > 0 and stats["kinds"].get("resampled", 0) > 0, stats


@pytest.mark.parametrize("padded", ["target", "draft"])
def test_padded_vocabulary_first_token_follows_target_c6(engines, tiny_path, tiny_padded_path, padded):
    """The default pair's chi-square test (test_pair.py) on the padded pair, both ways round: the first
    token's histogram over 240 seeds is the target's distribution, and the residual path was taken."""
    target, draft = _models(tiny_path, tiny_padded_path, padded)
    engine = engines.get(target, draft, n_ctx=512, n_batch=512, n_threads=1)
    assert (engine.target.n_vocab, engine.draft_model.n_vocab) == \
        ((N_TINY + 128, N_TINY) if padded == "target" else (N_TINY, N_TINY + 128))
    assert engine.drafter.n_propose == N_TINY  # the draft never proposes a padding id
    kinds = assert_first_token_follows_target(engine, engine.chat_tokens(ANIMAL),
                                              SamplingParams(temperature=1.0, top_k=8))
    assert kinds["resampled"] >= 10, kinds


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_padding_id_in_the_context_stops_drafting_not_the_generation(engines, tiny_path, tiny_padded_path,
                                                                       temperature):
    """A padded target may sample a padding id (its zero row has logit 0: rare, not impossible at
    temperature > 0); the draft model cannot evaluate it (llama_decode failed with status -1, reported as
    "raise n_ctx or lower n_batch"). Here one sits in the prompt: draft mode drafts nothing after it and
    the target generates alone, as in mode none."""
    engine = engines.get(tiny_padded_path, tiny_path, n_ctx=512, n_batch=512, n_threads=1)
    prompt = engine.chat_tokens(ANIMAL)
    prompt = [*prompt[:-4], N_TINY + 48, *prompt[-4:]]
    plain, _ = run(engine, prompt, "none", 16, temperature=temperature, seed=3)
    gen, _ = run(engine, prompt, "draft", 16, temperature=temperature, seed=3)
    assert gen.stats.tokens == 16 and gen.stats.drafted == 0
    if temperature == 0.0:
        assert_greedy_equal(engine, prompt, plain.token_ids, gen.token_ids, "draft after a padding id")


@pytest.fixture(scope="module")
def tiny_other_tokenizer(tiny_path, tmp_path_factory):
    """Copies of SmolLM2 whose tokenizer really differs: one where id 1000's text is another, one with 128
    ids past the vocabulary that are real tokens (type normal), not padding."""
    import gguf

    reader = gguf.GGUFReader(str(tiny_path), "r")
    tokens = list(reader.get_field(gguf.Keys.Tokenizer.LIST).contents())
    types = list(reader.get_field(gguf.Keys.Tokenizer.TOKEN_TYPE).contents())
    del reader
    folder = tmp_path_factory.mktemp("gguf")
    changed = rewrite_gguf(tiny_path, folder / "smollm2-id1000.gguf",
                           {gguf.Keys.Tokenizer.LIST: [*tokens[:1000], "Ġlocalspec", *tokens[1001:]]})
    extra = rewrite_gguf(tiny_path, folder / "smollm2-extra.gguf", {
        gguf.Keys.Tokenizer.LIST: [*tokens, *(f"extra{i}" for i in range(128))],
        gguf.Keys.Tokenizer.TOKEN_TYPE: [*types, *[1] * 128],  # LLAMA_TOKEN_TYPE_NORMAL
        "llama.vocab_size": N_TINY + 128,
    }, {"token_embd.weight": lambda rows: np.concatenate([rows, rows[:128]])})
    return {"id 1000": (changed, tokens[1000]), "extra ids": (extra, None)}


@pytest.mark.parametrize("which", ["id 1000", "extra ids"])
def test_unlike_tokenizers_are_refused_before_generating(capsys, tiny_path, tiny_other_tokenizer, which):
    """cases.md C3 on the tiny model alone: exit 4, naming the first differing id and both texts (or the id
    only the target has), with the hint; never a traceback."""
    other, old_text = tiny_other_tokenizer[which]
    code, out, err = run_cli(capsys, "generate", "--target", str(other), "--draft", str(tiny_path), "--mode",
                             "draft", "--max-tokens", "4", "--n-ctx", "256", "--n-threads", "1", *FAST, "hi")
    assert code == 4 and out == "", err
    if which == "id 1000":
        assert "tokenizers differ at token id 1000: target 'Ġlocalspec' vs draft " f"{old_text!r}" in err, err
    else:
        assert f"tokenizers differ at token id {N_TINY}: only the target has it ('extra0'), and it is not padding" \
            in err, err
    assert "hint: use a draft model from the target's family (same tokenizer), or --mode lookup" in err
