"""Settings, validated at the edge with pydantic (unknown keys rejected).

The CLI and the TUI build the same models; a ``pydantic.ValidationError`` becomes a
readable message only there (see :func:`format_validation_error`).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DraftMode = Literal["auto", "draft", "lookup", "none"]
FlashAttn = Literal["auto", "on", "off"]
Repack = Literal["auto", "on", "off"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class SamplingParams(_Strict):
    """How logits become the distribution sampled from. Shapes target and draft alike.

    Temperature 0 means greedy decoding (argmax); top_k 0, top_p 1 and min_p 0 disable
    those filters.
    """

    temperature: float = Field(0.0, ge=0.0, le=100.0, description="0 = greedy; >0 divides the logits")
    top_k: int = Field(0, ge=0, description="keep the k most probable tokens; 0 = off")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus: smallest set with mass >= top_p; 1 = off")
    min_p: float = Field(0.0, ge=0.0, le=1.0, description="drop tokens below min_p x the top probability; 0 = off")
    seed: int | None = Field(None, ge=0, description="random seed; None = fresh entropy")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


#: most tokens a round drafts in mode ``auto`` when the user sets no ``draft_max``: the policy drafts
#: as long as the evidence and the measured verify curve make pay, up to this (llama-server's
#: ngram-mod drafts up to 64 too); calibration measures the verify cost up to it + 1
AUTO_DRAFT_MAX = 64
#: the largest ``draft_max`` a user (or a request) may set
DRAFT_MAX_LIMIT = 64
#: tokens a round drafts in the fixed modes (``draft``, ``lookup``) when the user sets no ``draft_max``
FIXED_DRAFT_MAX = 8


class DraftParams(_Strict):
    """How tokens are drafted each round.

    ``draft_max`` is the user's cap; None (the default) means the mode's own: :data:`AUTO_DRAFT_MAX`
    in mode ``auto`` (which chooses each round's length by the measured costs, so a long cap
    costs nothing where long drafts do not pay), :data:`FIXED_DRAFT_MAX` in the fixed modes
    (which always draft that many). Read the effective value as :attr:`cap`.
    """

    mode: DraftMode = Field("auto", description="auto (measured choice per round) | draft (draft model) | lookup (prompt lookup) | none")
    draft_max: int | None = Field(None, ge=1, le=DRAFT_MAX_LIMIT, description="most tokens drafted per round (gamma); "
                                  f"None = the mode's default ({AUTO_DRAFT_MAX} in auto, {FIXED_DRAFT_MAX} otherwise)")
    draft_min: int = Field(0, ge=0, le=64, description="fewest tokens worth verifying; shorter drafts are dropped")
    draft_p_min: float = Field(0.0, ge=0.0, le=1.0, description="draft model stops when its top-1 probability is below this")
    max_ngram: int = Field(3, ge=1, le=16, description="prompt lookup: longest n-gram matched")
    min_ngram: int = Field(1, ge=1, le=16, description="prompt lookup: shortest n-gram matched")

    @model_validator(mode="after")
    def _ngram_order(self) -> "DraftParams":
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({self.min_ngram}) must not exceed max_ngram ({self.max_ngram})")
        if self.draft_min > self.cap:
            raise ValueError(f"draft_min ({self.draft_min}) must not exceed draft_max ({self.cap})")
        return self

    @property
    def cap(self) -> int:
        """Most tokens drafted per round: ``draft_max``, or the mode's default when it is None."""
        if self.draft_max is not None:
            return self.draft_max
        return AUTO_DRAFT_MAX if self.mode == "auto" else FIXED_DRAFT_MAX


class ModelSettings(_Strict):
    """One GGUF model to load: a catalog preset name or a path, and llama.cpp context settings."""

    model: str = Field(..., min_length=1, description="catalog preset name, path to a .gguf, or hf:REPO/FILE")
    n_ctx: int = Field(4096, ge=16, le=1 << 20, description="context window, tokens")
    n_batch: int = Field(512, ge=1, le=1 << 16, description="most tokens per llama_decode call")
    n_threads: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=1024)
    n_gpu_layers: int = Field(0, ge=-1, description="layers offloaded to the GPU; -1 = all; 0 = CPU only")
    flash_attn: FlashAttn = Field("auto", description="llama.cpp flash attention: auto = the faster one as measured "
                                  "by the calibration (off until measured), on, off")
    huge_pages: bool = Field(True, description="read the weights into memory and move them into 2 MiB transparent "
                             "huge pages (Linux; faster one-token decoding, about 2 s more to load the 1.5B model); "
                             "false = map the file (llama.cpp's default)")
    repack: Repack = Field("auto", description="llama.cpp's weight repacking into its extra CPU buffer types (AMX, "
                           "interleaved Q4_0): auto = where a probe in a child process decoded safely and no slower "
                           "(localspec.repack), on, off (llama-server's --no-repack)")


class GenerationParams(_Strict):
    """Per-request limits."""

    max_tokens: int = Field(512, ge=1, le=1 << 20, description="most tokens generated")
    stop: tuple[str, ...] = Field((), description="stop strings; output ends before the first one")

    @model_validator(mode="after")
    def _no_empty_stop(self) -> "GenerationParams":
        if any(s == "" for s in self.stop):
            raise ValueError("stop strings must not be empty")
        return self


class Settings(_Strict):
    """Everything needed to load models and generate: what the CLI and TUI share."""

    target: ModelSettings = ModelSettings(model="qwen2.5-coder-1.5b")
    draft: ModelSettings = ModelSettings(model="qwen2.5-coder-0.5b")
    sampling: SamplingParams = SamplingParams()
    drafting: DraftParams = DraftParams()
    generation: GenerationParams = GenerationParams()


def format_validation_error(err: ValidationError) -> str:
    """One line per invalid field: ``field.path: reason (got value)``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e.get("loc", ())) or "settings"
        msg = e.get("msg", "invalid")
        if "input" in e and not isinstance(e["input"], dict):
            lines.append(f"{loc}: {msg} (got {e['input']!r})")
        else:
            lines.append(f"{loc}: {msg}")
    return "\n".join(lines)
