import pytest

from localspec.backend.llama import VocabInfo
from localspec.errors import TokenizerMismatchError
from localspec.core.tokenizer import check_compatible


def vocab(texts, attrs=None, vocab_type=2, bos=0, eos=1):
    texts = tuple(t.encode() for t in texts)
    return VocabInfo(vocab_type, len(texts), bos, eos, False, texts, tuple(attrs or [4] * len(texts)))


def test_identical_vocab_passes():
    v = vocab(["<s>", "</s>", "a", "b"])
    assert check_compatible(v, v) == 4


def test_padding_only_difference_passes_and_limits_proposals():
    t = vocab(["<s>", "</s>", "a", "b", "[PAD4]", "[PAD5]"])
    d = vocab(["<s>", "</s>", "a", "b"])
    assert check_compatible(t, d) == 4
    assert check_compatible(d, t) == 4


def test_unused_attribute_counts_as_padding():
    t = vocab(["<s>", "</s>", "a", "zz"], attrs=[4, 4, 4, 2])
    assert check_compatible(t, vocab(["<s>", "</s>", "a"])) == 3


def test_real_extra_token_refused():
    t = vocab(["<s>", "</s>", "a", "hello"])
    with pytest.raises(TokenizerMismatchError, match="token id 3.*'hello'"):
        check_compatible(t, vocab(["<s>", "</s>", "a"]))


def test_differing_token_text_refused_naming_id_and_texts():
    with pytest.raises(TokenizerMismatchError) as e:
        check_compatible(vocab(["<s>", "</s>", "a", "b"]), vocab(["<s>", "</s>", "a", "c"]))
    assert "token id 3" in e.value.message and "'b'" in e.value.message and "'c'" in e.value.message
    assert e.value.hint


def test_bos_and_type_mismatch_refused():
    with pytest.raises(TokenizerMismatchError, match="BOS"):
        check_compatible(vocab(["a", "b"]), vocab(["a", "b"], bos=1))
    with pytest.raises(TokenizerMismatchError, match="vocab type"):
        check_compatible(vocab(["a", "b"]), vocab(["a", "b"], vocab_type=1))
