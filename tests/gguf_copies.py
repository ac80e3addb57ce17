"""Altered copies of a real GGUF file, written with the ``gguf`` package (a test dependency): new metadata,
new tensor data, or both. The real-model tests use them to reach models the project cannot download: a
chat template that refuses a system message, a vocabulary padded as Qwen2.5 7B-32B pad theirs, a tokenizer
that differs in one id."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

#: llama.cpp's token type for an unused (padding) entry (``gguf.TokenType.UNUSED``, LLAMA_TOKEN_TYPE_UNUSED)
TOKEN_TYPE_UNUSED = 5


def rewrite_gguf(src: Path, dest: Path, metadata: dict | None = None,
                 tensors: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None) -> Path:
    """Copy the GGUF ``src`` to ``dest`` with some metadata and tensors replaced.

    Args:
        src, dest: file paths (``dest``'s folder must exist).
        metadata: key -> new value: a ``gguf.scripts.gguf_new_metadata.MetadataDetails`` (type and value;
            ``None`` as value removes the key) or a bare value of the key's present type. The chat template
            is set with key ``gguf.Keys.Tokenizer.CHAT_TEMPLATE``.
        tensors: tensor name -> function of the tensor's stored data (a numpy array as
            ``gguf.GGUFReader`` gives it: quantized types as uint8 of shape (rows, bytes per row), float
            types as their dtype, outermost dimension first) returning the new data, same dtype and
            row width, any row count. The tensor keeps its type.

    Returns:
        ``dest``.

    Raises:
        KeyError: a tensor name that is not in the file.
    """
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = gguf.GGUFReader(str(src), "r")
    new = {}
    for key, value in (metadata or {}).items():
        if not isinstance(value, MetadataDetails):
            field = reader.get_field(key)
            value = MetadataDetails(field.types[0], value, sub_type=field.types[-1] if len(field.types) > 1 else None)
        new[key] = value
    replace = dict(tensors or {})
    missing = set(replace) - {t.name for t in reader.tensors}
    if missing:
        raise KeyError(f"no tensor {sorted(missing)[0]} in {src}")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(str(dest), arch=arch, endianess=reader.endianess)
    if replace:
        reader.tensors = [_Replaced(t, replace[t.name](np.asarray(t.data))) if t.name in replace else t
                          for t in reader.tensors]
    copy_with_new_metadata(reader, writer, new, [])
    return Path(dest)


class _Replaced:
    """A tensor of a ``gguf.GGUFReader`` with other data (what ``copy_with_new_metadata`` reads of it)."""

    def __init__(self, tensor, data: np.ndarray):
        self.name, self.tensor_type, self.data, self.n_bytes = tensor.name, tensor.tensor_type, data, data.nbytes


def pad_vocab(src: Path, dest: Path, n_pad: int, zero_tensor: str | None = None) -> Path:
    """A copy of ``src`` with ``n_pad`` padding ids after its vocabulary, as llama.cpp's converter writes a
    model whose embedding table has more rows than its tokenizer (Qwen2.5 7B-32B: 152,064 rows, 151,646
    tokens): texts ``[PAD<id>]`` of type unused, zero rows appended to ``token_embd.weight`` and, where the
    model has one, ``output.weight`` (a zero row gives the padding ids logit 0 whatever the hidden state),
    and ``<arch>.vocab_size`` raised to match.

    Args:
        n_pad: ids to add (Qwen2.5's largest pad the vocabulary by 128 past their 0.5B-3B siblings).
        zero_tensor: a tensor set to zero as well (e.g. one layer's ``blk.N.ffn_down.weight``), so that the
            copy computes something else than ``src`` and a draft from ``src`` is often rejected.

    Returns:
        ``dest``.
    """
    import gguf

    reader = gguf.GGUFReader(str(src), "r")
    tokens = list(reader.get_field(gguf.Keys.Tokenizer.LIST).contents())
    types = list(reader.get_field(gguf.Keys.Tokenizer.TOKEN_TYPE).contents())
    n = len(tokens)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    names = {t.name for t in reader.tensors}

    def add_rows(data: np.ndarray) -> np.ndarray:
        assert data.shape[0] == n, (data.shape, n)  # one row per token id
        return np.concatenate([data, np.zeros((n_pad, *data.shape[1:]), dtype=data.dtype)])

    tensors = {name: add_rows for name in ("token_embd.weight", "output.weight") if name in names}
    if zero_tensor is not None:
        tensors[zero_tensor] = np.zeros_like
    metadata = {gguf.Keys.Tokenizer.LIST: [*tokens, *(f"[PAD{i}]" for i in range(n, n + n_pad))],
                gguf.Keys.Tokenizer.TOKEN_TYPE: [*types, *[TOKEN_TYPE_UNUSED] * n_pad]}
    vocab_size = gguf.Keys.LLM.VOCAB_SIZE.format(arch=arch)
    if reader.get_field(vocab_size) is not None:
        metadata[vocab_size] = n + n_pad
    del reader
    return rewrite_gguf(src, dest, metadata, tensors)
