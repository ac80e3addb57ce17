"""Write GGUF files that hold only a header (key/value pairs, no tensors): for tests of what is read
from a model's header without loading it (localspec.app.models_list)."""

from __future__ import annotations

import struct
from pathlib import Path


def _string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def write_gguf(path: Path, *, arch: str = "qwen2", n_ctx: int = 32768, file_type: int = 15,
               tokens: list[str] = ("a", "b", "c"), token_types: list[int] | None = None, bos: int = 0, eos: int = 1,
               tokenizer: str = "gpt2") -> Path:
    """A header-only GGUF (version 3) with the architecture, context length, file type and tokenizer."""
    kv = [
        ("general.architecture", 8, _string(arch)),
        (f"{arch}.context_length", 4, struct.pack("<I", n_ctx)),
        ("general.file_type", 4, struct.pack("<I", file_type)),
        ("tokenizer.ggml.model", 8, _string(tokenizer)),
        ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(tokens)) + b"".join(_string(t) for t in tokens)),
        ("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(tokens))
         + b"".join(struct.pack("<i", t) for t in (token_types or [1] * len(tokens)))),
        ("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", bos)),
        ("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", eos)),
    ]
    body = b"".join(_string(k) + struct.pack("<I", t) + v for k, t, v in kv)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + body)
    return path
