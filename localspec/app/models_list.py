"""The models a user can pick (the TUI's model picker): the catalog's presets, the GGUF files in the
weights folder and in the Hugging Face cache, each with its size, quantisation, training context
length and whether it pairs with a target (the same tokenizer: :func:`localspec.core.tokenizer.check_compatible`).

The facts come from the GGUF header alone (:func:`gguf_facts`, a few hundred ms for a 150,000-token
vocabulary; nothing is loaded into llama.cpp), kept per (path, size, mtime) for the process.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from localspec.app.catalog import (Catalog, checkout_weights_dir, hub_cache_root, load_catalog, locate,
                                   weights_dir)
from localspec.core.tokenizer import TOKEN_ATTR_UNUSED, check_compatible
from localspec.errors import LocalspecError

_QUANT = re.compile(r"(?i)(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32)(?=[-_.]|$)")
#: llama.cpp's ``general.file_type`` values (enum llama_ftype) -> the quantisation's usual name
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
              12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
              19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
              26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16"}
#: GGUF value types: id -> struct format (8 string, 9 array: read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_TOKEN_TYPE_UNUSED = 5  #: llama.cpp's LLAMA_TOKEN_TYPE_UNUSED in tokenizer.ggml.token_type
_VOCAB_TYPES = {"llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5}


@dataclass(frozen=True)
class Vocab:
    """A GGUF's tokenizer as :func:`~localspec.core.tokenizer.check_compatible` reads it (the fields of
    :class:`localspec.backend.llama.VocabInfo` it uses)."""

    vocab_type: int
    n_tokens: int
    bos: int
    eos: int
    texts: tuple[bytes, ...]
    attrs: tuple[int, ...]


@dataclass(frozen=True)
class GGUFFacts:
    """What a GGUF's header says: architecture, training context length (tokens), quantisation name
    (``"Q4_K_M"``; "" unknown) and its tokenizer (None when it has none)."""

    arch: str
    n_ctx_train: int | None
    quant: str
    vocab: Vocab | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> bytes:
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s

    def value(self, vtype: int):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, n = self.take("<I"), self.take("<Q")
            if itype in _SCALARS:
                fmt = _SCALARS[itype]
                size = struct.calcsize(fmt)
                out = struct.unpack_from(f"<{n}{fmt[1]}", self.data, self.pos)
                self.pos += size * n
                return out
            return tuple(self.value(itype) for _ in range(n))
        return self.take(_SCALARS[vtype])


def _header(path: Path) -> dict:
    """The key/value pairs of a GGUF file's header (strings as bytes).

    Raises:
        ValueError: not a GGUF file, or a header cut short.
    """
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24 or head[:4] != b"GGUF":
            raise ValueError("not a GGUF file")
        n_kv = struct.unpack_from("<Q", head, 16)[0]
        data = head + f.read(64 << 20)  # the header (a 256k-token vocabulary is ~10 MB)
    r = _Reader(data)
    r.pos = 24
    out = {}
    try:
        for _ in range(n_kv):
            key = r.string().decode("utf-8", "replace")
            out[key] = r.value(r.take("<I"))
    except (struct.error, KeyError) as e:
        raise ValueError(f"the GGUF header is damaged or too large: {e}") from e
    return out


_facts_cache: dict[tuple[str, int, int], GGUFFacts] = {}


def gguf_facts(path: str | Path) -> GGUFFacts:
    """The facts of a GGUF file's header (cached per path, size and mtime).

    Raises:
        LocalspecError: the file cannot be read or is not a GGUF file.
    """
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
        if key in _facts_cache:
            return _facts_cache[key]
        kv = _header(p)
    except (OSError, ValueError) as e:
        raise LocalspecError(f"cannot read the GGUF header of {p}: {e}", "choose a .gguf model file") from e
    arch = kv.get("general.architecture", b"").decode()
    ctx = kv.get(f"{arch}.context_length")
    ftype = kv.get("general.file_type")
    quant = FILE_TYPES.get(ftype, "") if isinstance(ftype, int) else ""
    vocab = None
    tokens = kv.get("tokenizer.ggml.tokens")
    if tokens:
        types = kv.get("tokenizer.ggml.token_type") or ()
        attrs = tuple(TOKEN_ATTR_UNUSED if t == _TOKEN_TYPE_UNUSED else 0 for t in types) or (0,) * len(tokens)
        model = kv.get("tokenizer.ggml.model", b"").decode()
        vocab = Vocab(_VOCAB_TYPES.get(model, hash(model)), len(tokens), int(kv.get("tokenizer.ggml.bos_token_id", -1)),
                      int(kv.get("tokenizer.ggml.eos_token_id", -1)), tuple(tokens), attrs)
    facts = _facts_cache[key] = GGUFFacts(arch, int(ctx) if ctx is not None else None,
                                          quant or quant_from_name(p.name), vocab)
    return facts


def quant_from_name(name: str) -> str:
    """The quantisation a GGUF file's name says (``"model-q4_k_m.gguf"`` -> ``"Q4_K_M"``), "" if none."""
    m = _QUANT.search(Path(name).stem)
    return m.group(1).upper() if m else ""


def pairs_with(target: GGUFFacts | None, draft: GGUFFacts | None) -> bool | None:
    """Whether ``draft`` may draft for ``target`` (same tokenizer, padding aside); None when unknown."""
    if target is None or draft is None or target.vocab is None or draft.vocab is None:
        return None
    try:
        check_compatible(target.vocab, draft.vocab)
    except LocalspecError:
        return False
    return True


@dataclass(frozen=True)
class ModelChoice:
    """One row of the picker.

    Attributes:
        ref: what goes into the settings' ``model`` (a preset name, or a file's path).
        name: the preset name or the file name.
        where: ``catalog`` (a preset: ``path`` set when it is on this machine), ``weights`` or ``hf cache``.
        path: the local file (None: a preset not on this machine yet).
        size: bytes (a preset not here: the catalog's size).
    """

    ref: str
    name: str
    where: str
    path: Path | None
    size: int


def _gguf_files(folder: Path | None) -> list[Path]:
    if folder is None or not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*.gguf") if p.is_file() and not p.name.startswith("."))


def list_models(catalog: Catalog | None = None) -> list[ModelChoice]:
    """The catalog's presets, then the GGUF files of the weights folder(s) and of the Hugging Face
    cache that are not a preset's file. No network."""
    catalog = catalog or load_catalog()
    out: list[ModelChoice] = []
    seen: set[Path] = set()
    for name, preset in catalog.models.items():
        path = locate(name, catalog).path
        if path is not None:
            seen.add(path.resolve())
        out.append(ModelChoice(name, name, "catalog", path, path.stat().st_size if path else preset.size))
    from localspec.app.catalog import cache_dir

    for folder, where in ((weights_dir(), "weights"), (checkout_weights_dir(), "weights"), (cache_dir(), "cache"),
                          (_hub_root(), "hf cache")):
        for p in _gguf_files(folder):
            if p.resolve() in seen:
                continue
            seen.add(p.resolve())
            out.append(ModelChoice(str(p), p.name, where, p, p.stat().st_size))
    return out


def _hub_root() -> Path | None:
    try:
        return hub_cache_root()
    except ImportError:  # pragma: no cover - huggingface-hub is a dependency
        return None
