"""The model list and the facts read from a GGUF header: size, quantisation, context, pairing."""

from __future__ import annotations

import pytest

from localspec.app.models_list import gguf_facts, list_models, pairs_with, quant_from_name
from localspec.errors import LocalspecError

from gguf_headers import write_gguf

QWEN = [f"t{i}" for i in range(10)]


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """Empty weights folder, localspec cache and Hugging Face cache (the catalog's presets are not here)."""
    for env, name in (("LOCALSPEC_MODELS_DIR", "weights"), ("LOCALSPEC_CACHE", "cache"), ("HF_HUB_CACHE", "hf")):
        monkeypatch.setenv(env, str(tmp_path / name))
    return tmp_path


@pytest.mark.parametrize("name, quant", [("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
                                         ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"), ("x-IQ3_XXS.gguf", "IQ3_XXS"),
                                         ("model-f16.gguf", "F16"), ("model-BF16.gguf", "BF16"), ("model.gguf", "")])
def test_quant_from_name(name, quant):
    assert quant_from_name(name) == quant


def test_facts_from_the_header(tmp_path):
    p = write_gguf(tmp_path / "m.gguf", arch="llama", n_ctx=8192, file_type=3, tokens=QWEN, bos=2, eos=3)
    f = gguf_facts(p)
    assert (f.arch, f.n_ctx_train, f.quant) == ("llama", 8192, "Q4_1")
    assert f.vocab.n_tokens == 10 and f.vocab.texts[3] == b"t3" and (f.vocab.bos, f.vocab.eos) == (2, 3)
    # an unknown file type: the name says it
    assert gguf_facts(write_gguf(tmp_path / "n-q8_0.gguf", file_type=999)).quant == "Q8_0"


def test_not_a_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 40)
    with pytest.raises(LocalspecError, match="not a GGUF file"):
        gguf_facts(bad)
    cut = write_gguf(tmp_path / "cut.gguf", tokens=QWEN)
    cut.write_bytes(cut.read_bytes()[:60])
    with pytest.raises(LocalspecError, match="damaged"):
        gguf_facts(cut)


def test_pairing_is_the_tokenizer_check(tmp_path):
    target = gguf_facts(write_gguf(tmp_path / "t.gguf", tokens=QWEN[:8] + ["[PAD8]", "[PAD9]"]))
    same = gguf_facts(write_gguf(tmp_path / "d.gguf", tokens=QWEN[:8], n_ctx=4096))
    other = gguf_facts(write_gguf(tmp_path / "o.gguf", tokens=["x"] + QWEN[1:]))
    assert pairs_with(target, same) is True  # the same tokens, the target's padding aside
    assert pairs_with(target, other) is False
    assert pairs_with(None, same) is None


def test_list_models_presets_then_files(folders):
    a = write_gguf(folders / "weights" / "sub" / "mine-q5_k_m.gguf")
    b = write_gguf(folders / "hf" / "models--o--r" / "snapshots" / "abc" / "r-q8_0.gguf")
    choices = list_models()
    presets = [c for c in choices if c.where == "catalog"]
    assert presets and all(c.path is None and c.size > 0 for c in presets)  # not on this machine
    files = [(c.where, c.path, c.ref) for c in choices if c.where != "catalog"]
    assert files == [("weights", a, str(a)), ("hf cache", b, str(b))]


@pytest.mark.tiny
def test_facts_of_the_real_tiny_model(tiny_path):
    f = gguf_facts(tiny_path)
    assert (f.arch, f.n_ctx_train, f.quant, f.vocab.n_tokens) == ("llama", 8192, "Q4_1", 49152)
    assert pairs_with(f, f) is True
