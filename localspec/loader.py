"""Build a :class:`SpeculativeEngine` from :class:`Settings`: resolve, load, check.

Shared by the CLI and the TUI.
"""

from __future__ import annotations

from typing import Callable

from .backend import LlamaModel
from .calibration import apply_cached_flash_attn, cached_engine_costs
from .config import ModelSettings, Settings
from .engine import SpeculativeEngine
from .models import ProgressFn, resolve_model

#: stage callback: (message) -> None, e.g. "loading target qwen2.5-coder-1.5b"
StageFn = Callable[[str], None]


def load_model(ms: ModelSettings, progress: ProgressFn | None = None) -> LlamaModel:
    """Resolve and load one model. Raises ModelError / ConfigError / BackendError."""
    path = resolve_model(ms.model, progress)
    model = LlamaModel(path, n_ctx=ms.n_ctx, n_batch=ms.n_batch, n_threads=ms.n_threads,
                       n_gpu_layers=ms.n_gpu_layers, flash_attn={"on": True}.get(ms.flash_attn, False),
                       huge_pages=ms.huge_pages)
    model.flash_attn_mode = ms.flash_attn
    if ms.flash_attn == "auto":
        apply_cached_flash_attn(model)  # the faster setting, if this machine has measured it
    return model


def needs_draft_model(settings: Settings) -> bool:
    return settings.drafting.mode in ("draft", "auto")


def load_engine(settings: Settings, progress: ProgressFn | None = None, stage: StageFn | None = None) -> SpeculativeEngine:
    """Load the target and, for modes ``draft`` and ``auto``, the draft model.

    In mode ``auto`` a draft model that fails to load is an error too (pass
    ``--mode lookup`` to run without one).

    Raises:
        ModelError, ConfigError, BackendError, TokenizerMismatchError.
    """
    if stage:
        stage(f"loading target {settings.target.model}")
    target = load_model(settings.target, progress)
    draft = None
    try:
        if needs_draft_model(settings):
            if stage:
                stage(f"loading draft {settings.draft.model}")
            draft = load_model(settings.draft, progress)
        if stage:
            stage("checking tokenizers")
        # mode auto: this machine's measured costs, when cached (else measured on the first generation)
        costs = cached_engine_costs(target, draft, settings.drafting.draft_max) if settings.drafting.mode == "auto" \
            else None
        return SpeculativeEngine(target, draft, costs=costs)
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
