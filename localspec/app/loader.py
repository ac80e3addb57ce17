"""Build a :class:`SpeculativeEngine` from :class:`Settings`: resolve, probe, load, check, measure.

Shared by the CLI, the TUI and the server. Everything that can take a while on a new
machine happens here, visibly (``stage`` and ``steps`` callbacks), never inside ``generate``:
the weight-repacking probe (:mod:`localspec.backend.repack`), the loads, and in mode ``auto`` the
calibration of this machine's decode costs (:mod:`localspec.backend.calibration`; cached). The engine
reads the cost cache and measures only through the :class:`MachineCosts` handed to it here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from localspec.backend import rpc
from localspec.backend.isolated import IsolatedModel
from localspec.backend.context import MIN_DEFAULT_CONTEXT, available_memory, second_copy_fits
from localspec.backend.llama import LlamaModel
from localspec.backend.calibration import StepFn, apply_cached_flash_attn, cached_engine_costs, engine_costs
from localspec.config import ModelSettings, Settings, needs_draft_model
from localspec.errors import BackendError, ModelError
from localspec.core.costmodel import EngineCosts
from localspec.core.engine import SpeculativeEngine
from localspec.app.catalog import ProgressFn, resolve_model
from localspec.backend.repack import PROBE_PREFILL, RepackVerdict, decide_repack

#: stage callback: (message) -> None, e.g. "loading target qwen2.5-coder-1.5b"
StageFn = Callable[[str], None]
#: told once when the calibration at load was disturbed (calibration.get_costs does not save it)
DISTURBED_NOTICE = ("other programs used the CPUs while this machine's decode costs were measured: the figures are "
                    "used for this run only (observed rounds correct them) and measured again at the next start "
                    "(a server: once it is idle and the machine quiet)")


class MachineCosts:
    """This machine's decode costs for a target and a draft model: the engine's
    :class:`~localspec.core.costmodel.CostSource`, over the cost cache and the calibration of
    :mod:`localspec.backend.calibration` (:func:`~localspec.backend.calibration.cached_engine_costs`,
    :func:`~localspec.backend.calibration.engine_costs`).

    Args:
        target: the loaded target model.
        draft_model: the loaded draft model, or None.
    """

    def __init__(self, target: LlamaModel, draft_model: LlamaModel | None = None) -> None:
        self.target = target
        self.draft_model = draft_model

    def cached(self, draft_max: int) -> EngineCosts | None:
        """The costs for drafts up to ``draft_max`` tokens from the cache alone; None when not measured yet."""
        return cached_engine_costs(self.target, self.draft_model, draft_max)

    def measure(self, draft_max: int, existing: EngineCosts | None = None, remeasure: bool = False,
                progress: StepFn | None = None) -> EngineCosts:
        """``existing`` while it covers ``draft_max`` (unless ``remeasure``), else cached, else measured now.

        Raises:
            BackendError: a decode failed while measuring.
        """
        return engine_costs(self.target, self.draft_model, draft_max, existing=existing, remeasure=remeasure,
                            progress=progress)


def make_engine(target: LlamaModel, draft_model: LlamaModel | None = None,
                costs: EngineCosts | None = None) -> SpeculativeEngine:
    """An engine over loaded models whose costs come from this machine (:class:`MachineCosts`).

    Raises:
        TokenizerMismatchError: the draft's tokenizer differs from the target's.
    """
    return SpeculativeEngine(target, draft_model, costs=costs, cost_source=MachineCosts(target, draft_model))


def load_model(ms: ModelSettings, progress: ProgressFn | None = None, stage: StageFn | None = None,
               notices: list[str] | None = None, n_ctx_max: int | None = None) -> LlamaModel:
    """Resolve, probe weight repacking (``ms.repack``) and load one model.

    ``ms.n_ctx`` None: the default window (:mod:`localspec.backend.context`: the training context where
    memory allows), at most ``n_ctx_max`` (a draft model: the target's window).

    A fresh probe verdict that turns repacking off in mode ``auto`` appends one sentence for
    the user (why, and what it costs) to ``notices``; a cached verdict adds nothing. With
    ``ms.rpc`` the model is loaded in a child process with its layers on the workers
    (:func:`_load_on_workers`), and ``stage`` names each worker with its layers.

    Raises:
        ModelError / ConfigError / BackendError / WorkerError.
    """
    path = resolve_model(ms.model, progress)
    threads = ms.n_threads or os.cpu_count() or 1
    if ms.rpc:
        return _load_on_workers(ms, path, stage, n_ctx_max)
    verdict = decide_repack(path, ms.repack, n_threads=threads, n_gpu_layers=ms.n_gpu_layers, stage=stage)
    if verdict is not None and verdict.fresh and not verdict.use and ms.repack == "auto" and notices is not None:
        notices.append(f"{path.name}: {verdict.reason} (--repack off skips the probe; localspec calibrate shows it)")
    model = LlamaModel(path, n_ctx=ms.n_ctx, n_batch=ms.n_batch, n_threads=ms.n_threads,
                       n_gpu_layers=ms.n_gpu_layers, flash_attn={"on": True}.get(ms.flash_attn, False),
                       huge_pages=ms.huge_pages, repack=bool(verdict and verdict.use), flash_attn_mode=ms.flash_attn,
                       n_ctx_max=n_ctx_max)
    model.repack_verdict = verdict
    _attach_prefill_copy(model, ms, verdict, stage, notices)
    if ms.flash_attn == "auto":
        apply_cached_flash_attn(model)  # the faster setting, if this machine has measured it (the copy follows)
    return model


def _attach_prefill_copy(model: LlamaModel, ms: ModelSettings, verdict: RepackVerdict | None,
                         stage: StageFn | None, notices: list[str] | None) -> bool:
    """Load ``model``'s weights a second time in the standard layout to read its prompts
    (:meth:`LlamaModel.attach_prefill_copy`) where ``ms.prefill_copy`` is auto, the weights were
    repacked, the probe found the standard layout reading prompts faster
    (:func:`~localspec.backend.repack.choose_prefill_copy`) and the copy fits in memory
    (:func:`~localspec.backend.context.second_copy_fits`; else a notice says it was skipped).
    Returns whether it attached one."""
    if (ms.prefill_copy != "auto" or verdict is None or not verdict.prefill_copy or not model.repack
            or ms.n_gpu_layers != 0):
        return False
    weights = model.path.stat().st_size
    if not second_copy_fits(weights, model.window_bytes(), available_memory()):
        if notices is not None:
            notices.append(f"{model.path.name}: no prefill copy (its weights and window, "
                           f"{(weights + model.window_bytes()) / 2**30:.1f} GiB, do not fit in half the memory "
                           "available); prompts are read in the repacked layout (--n-ctx smaller makes room)")
        return False
    if stage:
        stage(f"loading {model.path.name} again in the standard layout to read prompts "
              f"({verdict.prefill_ratio:.2f}x faster there in the probe)")
    try:
        copy = LlamaModel(model.path, n_ctx=model.n_ctx, n_batch=model.n_batch, n_threads=model.n_threads,
                          n_gpu_layers=0, flash_attn=model.flash_attn, huge_pages=model.huge_pages, repack=False,
                          flash_attn_mode=model.flash_attn_mode)
    except (BackendError, ModelError) as e:
        if notices is not None:
            notices.append(f"{model.path.name}: no prefill copy ({e.message}); prompts are read in the repacked layout")
        return False
    w, wo = verdict.with_repack, verdict.without_repack
    model.attach_prefill_copy(copy, w.tl, wo.tl, max(w.tc or 0.0, wo.tc or 0.0), PROBE_PREFILL)
    return True


def _load_on_workers(ms: ModelSettings, path, stage: StageFn | None, n_ctx_max: int | None = None) -> IsolatedModel:
    """A model whose layers go to RPC workers, loaded in a child process (:mod:`localspec.backend.isolated`:
    llama.cpp's RPC client aborts its process when a worker is lost). Every layer goes to the workers
    unless ``ms.n_gpu_layers`` says how many; no repack probe (the weights live on the workers); every wait
    on the child is bounded by ``ms.rpc_timeout`` (:mod:`localspec.backend.isolated`). Its
    default window is 4,096 tokens (at most ``n_ctx_max``): the KV cache lives on the workers, whose memory
    the default rule of :mod:`localspec.backend.context` cannot see."""
    rpc.require_support()
    if stage:
        stage(f"connecting to RPC workers {', '.join(ms.rpc)}")
    n_ctx = ms.n_ctx or min(MIN_DEFAULT_CONTEXT, n_ctx_max or MIN_DEFAULT_CONTEXT)
    model = IsolatedModel(path, rpc=ms.rpc, timeout=ms.rpc_timeout, n_ctx=n_ctx, n_batch=ms.n_batch,
                          n_threads=ms.n_threads, n_gpu_layers=ms.n_gpu_layers or -1, flash_attn={"on": True}.get(ms.flash_attn, False),
                          huge_pages=ms.huge_pages, repack=False, flash_attn_mode=ms.flash_attn)
    if stage:
        stage(f"{path.name} layers: {layer_placement(model.device_layers, model.device_endpoints)}")
    if ms.flash_attn == "auto":
        apply_cached_flash_attn(model)
    return model


def reload_lost_target(engine, stage: StageFn | None = None) -> bool:
    """Load ``engine``'s target again in a new child process when it lost its RPC workers
    (:attr:`IsolatedModel.lost <localspec.backend.isolated.IsolatedModel.lost>`: a worker died or stopped
    answering); ``stage`` names the workers, then the layers each holds. The KV cache starts empty
    (the engine reads the prompt again). Returns whether it loaded it (False: nothing was lost).

    Raises:
        WorkerError: a worker is still down or silent (named); the target stays lost.
    """
    target = getattr(engine, "target", None)
    if not getattr(target, "lost", False):
        return False
    if stage:
        stage(f"loading {Path(target.path).name} again on its RPC workers {', '.join(target.rpc)}")
    target.restart()
    if stage:
        stage(f"{Path(target.path).name} layers: {layer_placement(target.device_layers, target.device_endpoints)}")
    return True


def layer_placement(device_layers: dict[str, int], endpoints: dict[str, str]) -> str:
    """``{"RPC0": 14, "CPU": 1}``, ``{"RPC0": "h:50052"}`` -> ``"h:50052 14, this machine 1"``: each
    worker by its endpoint (a local GPU by its ggml name), in llama.cpp's order (the last "layer" is
    the output)."""
    parts = []
    for name, n in device_layers.items():
        where = endpoints.get(name) or ("this machine" if name == "CPU" else name)
        parts.append(f"{where} {n}")
    return ", ".join(parts) or "none reported"


def load_engine(settings: Settings, progress: ProgressFn | None = None, stage: StageFn | None = None,
                steps: StepFn | None = None, calibrate: bool = True) -> SpeculativeEngine:
    """Load the target and, for modes ``draft`` and ``auto``, the draft model.

    In mode ``auto`` a draft model that fails to load is an error too (pass
    ``--mode lookup`` to run without one), and this machine's decode costs are measured now
    when they are not cached (``calibrate``; ``steps(what, done, total)`` follows it), so the
    first answer does not wait for them. What the user should be told once (weight
    repacking turned off by the probe) is in :attr:`SpeculativeEngine.notices`.

    Raises:
        ModelError, ConfigError, BackendError, TokenizerMismatchError.
    """
    notices: list[str] = []
    if stage:
        stage(f"loading target {settings.target.model}")
    target = load_model(settings.target, progress, stage, notices)
    draft = None
    try:
        if needs_draft_model(settings):
            if stage:
                stage(f"loading draft {settings.draft.model}")
            draft = load_model(settings.draft, progress, stage, notices, n_ctx_max=target.n_ctx)
        if stage:
            stage("checking tokenizers")
        # mode auto: this machine's measured costs, when cached; else measured now (calibrate)
        source = MachineCosts(target, draft)
        costs = source.cached(settings.drafting.cap) if settings.drafting.mode == "auto" else None
        engine = SpeculativeEngine(target, draft, costs=costs, cost_source=source)
        engine.notices = notices
        if settings.drafting.mode == "auto" and costs is None and calibrate:
            if stage:
                stage("measuring this machine's decode costs (kept for later starts unless other programs disturb "
                      "it; localspec calibrate shows them)")
            if engine.calibrated_costs(settings.drafting.cap, progress=steps).disturbed:
                notices.append(DISTURBED_NOTICE)
        return engine
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
