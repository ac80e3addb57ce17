"""Calibration: measure this machine's decode costs, cache them, and keep them current.

Why these hold together: the measurement, its cache key and file, and the engine's costs made from
them are one contract on the numbers mode ``auto`` reads: what is measured, and how, decides what the
key must hold for a cached curve to be reused.

Measures, on the running machine with the loaded models and settings, the time of a
target decode of b tokens for b = 1..8 and a few longer batches up to draft_max+1
(:func:`~localspec.core.costmodel.calibration_points`: 12, 16, 32, 64, 65; joined by
:func:`~localspec.core.costmodel.interpolate_curve`, and refined per b from the real rounds by
:class:`EngineCosts`) at a short context (16 cached tokens), and at a long one (2,048) what
the context adds at six of them (:func:`~localspec.core.costmodel.context_points`; the curves
are interpolated by the current position, extrapolated linearly beyond 2,048), the draft
model's time per token and per catch-up (prefill) token, with flash attention off and on
compared first (keeping the faster, unless ``--flash-attn`` says which; the chosen
setting's samples count for its curve). Two samples per point, a third where they disagree
by over 20 %: the default pair's first calibration measures for under a minute on a
2-core CPU (cost format 4, the 2-vCPU AMX Xeon of 2026-12-06, family 6 model 167: 34 s for the
target and 12 s for the draft, most of it the fills to 2,048 tokens; 19 s in format 3, 512).
It caches the result as JSON under ``$LOCALSPEC_CACHE/costs/``
(default ``~/.cache/localspec``), keyed by model file (path, size, mtime), context
settings (n_ctx up to 4,096: :data:`COST_KEY_CONTEXT`; n_batch, n_ubatch, n_threads, n_gpu_layers,
flash attention), the
llama.cpp build and the machine (hostname, CPU model and count, platform).

:func:`engine_costs` and :func:`cached_engine_costs` make the
:class:`~localspec.core.costmodel.EngineCosts` an engine's adaptive policy reads every round
(the calibrated curves at the current position, corrected by observed times; it and the pure
functions that turn costs and acceptance into a choice are in :mod:`localspec.core.costmodel`).
:func:`localspec.app.loader.load_engine` calls them, never the engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from localspec.core.costmodel import (EngineCosts, calibration_points, context_points, interpolate_curve, shifted_curve,
                                      verify_cost)
from localspec.config import MIN_DEFAULT_CONTEXT, cache_root
from localspec.errors import BackendError, LocalspecError
from localspec.backend.calibration_timing import StepFn, cpu_meter, fill_to, filler_tokens, model_name, ticker, time_points
from localspec.backend.load import BUSY_THRESHOLD, load_average

#: models.md: time of one decode of b tokens / time of one token, Qwen2.5-Coder-1.5B Q4_K_M,
#: 2 threads. Used only until a measurement exists (see :func:`default_curve`).
DEFAULT_TARGET_RATIOS = {1: 1.0, 2: 1.68, 3: 2.26, 4: 2.57, 5: 3.21, 8: 5.95, 16: 8.53}
#: 3: the longer contexts timed at a few points (context_points); 4: b = 64 timed, the long context
#: 2,048 timed at 1, 8, 16, 32, 64, 65 (a curve of format 3 is measured again)
COST_FORMAT = 4
#: cache lengths (tokens) at which calibration times the verify curve (see calibration_contexts):
#: the long one's fill is a timed prefill (the catch-up cost) and the largest single cost of a first
#: calibration. 2,048, where copies and edits of a file run: extrapolated from 512, the AMX Xeon's curve
#: (family 6 model 167, 2026-12-06, the 1.5B) put T(32) at 3,072 cached at 815 ms (measured 859) and T(65)
#: at 1,700 ms (measured 1,296; T(64) 1,030): 26.2 ms a token against 25.5 at b = 32, so a sure copy
#: drafted 31 tokens a pass where 63 cost 40 % less per token
SHORT_CONTEXT = 16
LONG_CONTEXT = 2048


#: the context window in a cost key is capped here, tokens: the curves are timed at SHORT_CONTEXT and
#: LONG_CONTEXT cached tokens, so every window from LONG_CONTEXT + 65 up measures the same (llama.cpp's
#: attention reads the used cells, not the window); 4,096, the former default window, keeps the costs
#: cached before the default window became the model's training context
COST_KEY_CONTEXT = MIN_DEFAULT_CONTEXT


def _flash_attn_mode(model) -> str:
    """The flash-attention setting asked for: ``auto`` (choose by measurement), ``on``, ``off``, or
    ``default`` (llama.cpp's own choice, a model built without one)."""
    mode = getattr(model, "flash_attn_mode", None)
    if mode:
        return str(mode)
    fa = getattr(model, "flash_attn", None)
    return "default" if fa is None else ("on" if fa else "off")


def model_cost_key(model) -> dict:
    """What a measurement depends on: model file, context settings, llama.cpp build, machine."""
    from localspec.backend.cache_keys import file_key, machine_key

    return {
        "format": COST_FORMAT,
        **file_key(model.path),
        "n_ctx": min(int(getattr(model, "n_ctx", 0) or 0), COST_KEY_CONTEXT),
        "n_threads": int(getattr(model, "n_threads", 0) or 0),
        "n_batch": int(getattr(model, "n_batch", 0) or 0),
        "n_ubatch": int(getattr(model, "n_ubatch", 0) or getattr(model, "n_batch", 0) or 0),
        "n_gpu_layers": int(getattr(model, "n_gpu_layers", 0) or 0),
        "flash_attn": _flash_attn_mode(model),
        "huge_pages": bool(getattr(model, "huge_pages", False)),
        "repack": bool(getattr(model, "repack", False)),
        # layers on RPC workers: every pass pays the network, so the curve is the workers' own
        **({"rpc": list(model.rpc)} if getattr(model, "rpc", ()) else {}),
        **machine_key(),
    }


def cost_cache_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "costs" / f"{Path(key['path']).stem}-{digest}.json"


def _interp_curves(contexts: Sequence[int], curves: Sequence[Sequence[float]], position: int) -> list[float]:
    """The curve at ``position``: linear in the context length between the measured ones and beyond
    the longest (attention reads every cached position, so its cost grows linearly); the shortest
    context's curve below it. Kept non-decreasing in b."""
    if len(curves) == 1 or position <= contexts[0]:
        return list(curves[0])
    i = next((k for k in range(1, len(contexts)) if position <= contexts[k]), len(contexts) - 1)
    c0, c1 = contexts[i - 1], contexts[i]
    f = (position - c0) / (c1 - c0) if c1 > c0 else 0.0
    out = [max(a + f * (b - a), min(a, b)) for a, b in zip(curves[i - 1], curves[i])]
    return np.maximum.accumulate(out).tolist()


@dataclass
class ModelCosts:
    """Measured decode cost of one model.

    Attributes:
        seconds: ``seconds[b-1]`` = median wall time of one decode of b tokens at the
            shortest measured context, seconds (= ``curves[0]``).
        key: what the measurement depends on (:func:`model_cost_key`).
        measured: False when the curve is a default scaled by one measured token.
        contexts: cache lengths (tokens) at which the curves were measured, ascending.
        curves: ``curves[i][b-1]`` = seconds of a decode of b tokens with ``contexts[i]``
            tokens cached; :meth:`curve_at` interpolates by position.
        prefill_token_seconds: seconds per token of a batched prefill between the two
            contexts (what a catch-up costs, e.g. the draft model's), None if not measured.
        flash_attn: the flash-attention setting measured (chosen when asked ``auto``;
            None = llama.cpp's default).
        flash_attn_scores: with ``auto``, per setting (``"on"``/``"off"``) its mean time relative
            to the faster setting (:func:`flash_attn_scores`; 1.0 = fastest everywhere).
        calibration_seconds: wall time the measurement took, seconds.
        points: the batch sizes timed at the first context, ascending (its curve is interpolated
            between them, :func:`~localspec.core.costmodel.interpolate_curve`); empty = every b.
        context_points: the batch sizes timed at the other contexts (their curves are the first
            plus the difference measured there, :func:`~localspec.core.costmodel.shifted_curve`);
            empty = the same as ``points``.
        point_seconds: ``point_seconds[i][j]`` = median seconds of a decode of
            ``points_at(i)[j]`` tokens at ``contexts[i]`` (what the curves were made from).
        other_cpu: share of all CPUs other processes used while measuring (None unknown); over
            :data:`~localspec.backend.load.BUSY_THRESHOLD` the curve is :attr:`disturbed`.
    """

    seconds: list[float]
    key: dict = field(default_factory=dict)
    repeats: int = 0
    measured: bool = True
    created: float = 0.0
    load: float = -1.0  #: 1-minute load average when measured (-1 unknown)
    contexts: list[int] = field(default_factory=list)
    curves: list[list[float]] = field(default_factory=list)
    prefill_token_seconds: float | None = None
    flash_attn: bool | None = None
    flash_attn_scores: dict = field(default_factory=dict)
    calibration_seconds: float = 0.0
    other_cpu: float | None = None
    points: list[int] = field(default_factory=list)
    point_seconds: list[list[float]] = field(default_factory=list)
    context_points: list[int] = field(default_factory=list)

    @property
    def disturbed(self) -> bool:
        """Measured while other processes used over BUSY_THRESHOLD of the CPUs: used for its run, never saved."""
        return self.other_cpu is not None and self.other_cpu > BUSY_THRESHOLD

    def __post_init__(self) -> None:
        if not self.curves:
            self.curves = [list(self.seconds)]
        if len(self.contexts) != len(self.curves):
            self.contexts = [SHORT_CONTEXT + i for i in range(len(self.curves))]
        if not self.points:
            self.points = list(range(1, len(self.seconds) + 1))
        if len(self.point_seconds) != len(self.curves):
            self.point_seconds = [[c[b - 1] for b in self.points_at(i)] for i, c in enumerate(self.curves)]

    def points_at(self, i: int) -> list[int]:
        """The batch sizes timed at ``contexts[i]``."""
        return list(self.points if i == 0 or not self.context_points else self.context_points)

    def curve_at(self, position: int | None) -> list[float]:
        """``curve[b-1]`` = predicted seconds of a decode of b tokens with ``position`` tokens cached."""
        return _interp_curves(self.contexts, self.curves, self.contexts[0] if position is None else position)

    def t(self, b: int, position: int | None = None) -> float:
        return verify_cost(self.curve_at(position), b)

    @property
    def ratios(self) -> list[float]:
        return [s / self.seconds[0] for s in self.seconds]

    def to_json(self) -> dict:
        return {"key": self.key, "seconds": self.seconds, "repeats": self.repeats,
                "measured": self.measured, "created": self.created, "load": self.load,
                "contexts": self.contexts, "curves": self.curves,
                "prefill_token_seconds": self.prefill_token_seconds, "flash_attn": self.flash_attn,
                "flash_attn_scores": self.flash_attn_scores, "calibration_seconds": self.calibration_seconds,
                "other_cpu": self.other_cpu, "points": self.points, "point_seconds": self.point_seconds,
                "context_points": self.context_points}

    @classmethod
    def from_json(cls, d: dict) -> "ModelCosts":
        pts = d.get("prefill_token_seconds")
        return cls(seconds=[float(x) for x in d["seconds"]], key=d.get("key", {}), repeats=int(d.get("repeats", 0)),
                   measured=bool(d.get("measured", True)), created=float(d.get("created", 0.0)),
                   load=float(d.get("load", -1.0)), contexts=[int(c) for c in d.get("contexts", [])],
                   curves=[[float(x) for x in c] for c in d.get("curves", [])],
                   prefill_token_seconds=None if pts is None else float(pts), flash_attn=d.get("flash_attn"),
                   flash_attn_scores=dict(d.get("flash_attn_scores", {})),
                   calibration_seconds=float(d.get("calibration_seconds", 0.0)),
                   other_cpu=None if d.get("other_cpu") is None else float(d["other_cpu"]),
                   points=[int(b) for b in d.get("points", [])],
                   point_seconds=[[float(x) for x in c] for c in d.get("point_seconds", [])],
                   context_points=[int(b) for b in d.get("context_points", [])])


def calibration_contexts(model, max_batch: int, long_context: int = LONG_CONTEXT) -> list[int]:
    """The cache lengths calibration measures at: :data:`SHORT_CONTEXT` and ``long_context``,
    the latter capped so ``long_context + max_batch`` fits the model's context window."""
    n_ctx = int(getattr(model, "n_ctx", 0) or (long_context + max_batch))
    long_ = min(long_context, n_ctx - max_batch)
    return [SHORT_CONTEXT] + ([long_] if long_ > 2 * SHORT_CONTEXT else [])


def _batch_sizes(points: Sequence[int], max_batch: int) -> list[int]:
    return sorted({int(b) for b in points if 1 <= int(b) <= max_batch} | {1, max_batch})


def _sweep_contexts(model, toks: list[int], wanted: Sequence[int], pts: list[int], lpts: list[int], repeats: int,
                    tick: Callable[[], None], given: dict[int, list[float]] | None
                    ) -> tuple[list[list[float]], float | None]:
    """The timed sweep of :func:`measure_decode_costs`: for each context in ``wanted`` (ascending), fill
    the cache to it and time ``pts`` at the first context (``given`` counted there), ``lpts`` at the others.

    Returns:
        (per context, the median seconds per timed b; seconds per token of the last fill to a
        longer context of at least 32 tokens, or None).
    """
    medians: list[list[float]] = []
    prefill = None
    for c in wanted:
        n, secs = fill_to(model, c, seed=1 + len(medians))
        if medians:
            tick()
            if n >= 32:
                prefill = secs / n
        medians.append(time_points(model, toks, c, lpts if medians else pts, repeats, tick,
                                    None if medians else given))
    return medians, prefill


def measure_decode_costs(model, max_batch: int, repeats: int = 2, contexts: Sequence[int] | None = None,
                         progress: StepFn | None = None, label: str = "", points: Sequence[int] | None = None,
                         long_points: Sequence[int] | None = None,
                         given: dict[int, list[float]] | None = None) -> ModelCosts:
    """Time decodes of b tokens at a few batch sizes and contexts; interpolate the curve for b = 1..max_batch.

    Decodes filler tokens until the first (shortest) context c0 is cached (default
    :func:`calibration_contexts`: 16 and 2,048 tokens), times a decode of b tokens with logits
    for all of them (as the engine's verification pass does, truncating back after each) for
    each b in ``points`` (default :func:`~localspec.core.costmodel.calibration_points`: every b up
    to 8, then 12, 16, 32, 64, ... and max_batch), ``repeats`` times in alternating order
    (plus a third sample where two disagree, :func:`~localspec.backend.calibration_timing.time_points`), and joins the medians into a
    curve (:func:`~localspec.core.costmodel.interpolate_curve`). Then for each longer context it fills
    the cache to it (timed: a batched prefill, what a catch-up costs per token) and times only
    ``long_points`` (default :func:`~localspec.core.costmodel.context_points`: 1, 8 and its doublings,
    and max_batch); that context's curve is the first one plus the measured difference
    (:func:`~localspec.core.costmodel.shifted_curve`). ``given[b]``: samples of b timed at the first
    context with these settings (:func:`compare_flash_attn`'s), counted as repetitions. The KV
    cache is left cut to min(what it held, c0) tokens (the engine decodes what is missing on its
    next call, :meth:`LlamaModel.sync`).

    ``progress(label, done, total)`` is called after each repetition at each context and after
    each fill to a longer context (``total`` = contexts x repetitions + contexts - 1), so a
    front-end can show how far it is.

    Returns:
        :class:`ModelCosts` with the medians per timed b and context (seconds) and the
        curves (seconds, length max_batch).

    Raises:
        ContextOverflowError: the model's context cannot hold ``contexts[-1] + max_batch`` tokens.
    """
    t_start, meter = time.perf_counter(), cpu_meter(model)
    load = (load_average() or [-1.0])[0]
    wanted = sorted(set(contexts if contexts is not None else calibration_contexts(model, max_batch)))
    pts = _batch_sizes(calibration_points(max_batch) if points is None else points, max_batch)
    lpts = _batch_sizes(context_points(max_batch) if long_points is None else long_points, max_batch)
    n0 = min(model.n_cached, wanted[0])
    model.truncate(n0)
    toks = filler_tokens(model, max_batch, seed=2)
    steps = len(wanted) * max(1, repeats) + len(wanted) - 1  # the repetitions, and each fill to a longer context
    tick = ticker(progress, label or f"measuring decode costs of {model_name(model)}", steps)
    try:
        medians, prefill = _sweep_contexts(model, toks, wanted, pts, lpts, repeats, tick, given)
    finally:
        model.truncate(n0)
    curves = [interpolate_curve(pts, medians[0], max_batch)]
    curves += [shifted_curve(curves[0], lpts, m) for m in medians[1:]]
    return ModelCosts(seconds=list(curves[0]), key=model_cost_key(model), repeats=max(1, repeats), measured=True,
                      created=time.time(), load=load, contexts=list(wanted), curves=curves,
                      prefill_token_seconds=prefill, flash_attn=getattr(model, "flash_attn", None),
                      calibration_seconds=time.perf_counter() - t_start, other_cpu=meter.other_fraction(),
                      points=pts, context_points=lpts if len(wanted) > 1 else [], point_seconds=medians)


def flash_attn_scores(times: dict[str, Sequence[float]]) -> dict[str, float]:
    """Per setting, the mean over the timed passes of its time relative to the fastest setting's:
    1.0 = fastest at every pass.

    Args:
        times: setting (``"on"``/``"off"``) -> seconds of the same passes, in the same order
            (:func:`compare_flash_attn` times a one-token decode, target-only decoding, and a full
            verification pass, so both weigh the same).
    """
    n = min(len(t) for t in times.values())
    best = [min(t[j] for t in times.values()) for j in range(n)]
    return {k: sum(t[j] / best[j] for j in range(n)) / n for k, t in times.items()}


#: flash attention is switched on only when it scores faster than off by more than this fraction
FLASH_ATTN_MARGIN = 0.03


def compare_flash_attn(model, max_batch: int, repeats: int = 2, context: int = SHORT_CONTEXT,
                       progress: StepFn | None = None) -> tuple[dict[str, float], dict[int, list[float]]]:
    """Time a decode of 1 and of ``max_batch`` tokens with ``context`` tokens cached, with flash
    attention off and on, and leave the model on the faster setting.

    The settings take turns, ``repeats`` visits each (off, on, on, off, ...), and each keeps the
    fastest of its samples: another process can only add time, so a burst of it during one
    visit does not decide the choice (one visit each is not enough even on a quiet machine: on
    the 2-vCPU Xeon of 2026-12-02 consecutive one-token decodes varied by 15 %, and one visit each
    once scored off 25 % slower where taking turns found the two equal). The model is left on the
    chosen setting, its cache holding ``context`` filler tokens when that setting was timed last.
    Switching recreates the llama.cpp context (the KV cache is then empty), so the comparison is
    made at the short context, where refilling costs little. On
    stays chosen only when its score beats off's by more than :data:`FLASH_ATTN_MARGIN`
    (off is llama-cpp-python's default). A setting whose context cannot be created is skipped.

    Returns:
        (:func:`flash_attn_scores` of the settings timed, the chosen setting's samples: b -> seconds of
        each visit's decode of b tokens with ``context`` cached, which :func:`measure_decode_costs`
        counts as repetitions of those points instead of timing them again).

    Raises:
        BackendError: neither setting could be created.
    """
    toks = filler_tokens(model, max_batch, seed=2)
    pts = sorted({1, max_batch})
    samples: dict[str, dict[int, list[float]]] = {}  # setting -> b -> seconds, one per visit
    failed: set[str] = set()
    tick = ticker(progress, f"comparing flash attention off and on for {model_name(model)}", 2 * max(1, repeats))
    for r in range(max(1, repeats)):
        for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
            try:
                if name not in failed:
                    model.set_flash_attn(name == "on")
            except LocalspecError:
                failed.add(name)
            if name in failed:
                continue
            fill_to(model, context, seed=1)
            for b, sec in zip(pts, time_points(model, toks, context, pts, 1)):
                samples.setdefault(name, {}).setdefault(b, []).append(sec)
            tick()
    if not samples:
        raise BackendError(f"{model_name(model)}: no llama.cpp context could be created with flash attention off or on",
                           "check n_ctx and the free memory")
    scores = flash_attn_scores({name: [min(by_b[b]) for b in pts] for name, by_b in samples.items()})
    on = "on" in scores and ("off" not in scores or scores["on"] * (1.0 + FLASH_ATTN_MARGIN) < scores["off"])
    model.set_flash_attn(on)  # unchanged (the cache keeps the filled context) when it was timed last
    return scores, samples["on" if on else "off"]


def calibrate_model(model, max_batch: int, repeats: int = 2, contexts: Sequence[int] | None = None,
                    progress: StepFn | None = None) -> ModelCosts:
    """:func:`measure_decode_costs`; with flash attention ``auto``, first :func:`compare_flash_attn`
    (leaving the model on the faster setting), then the curves for that setting only.

    The model's KV cache is then empty when flash attention was compared (switching recreates the
    context), else cut as :func:`measure_decode_costs` says. ``progress`` as there.
    """
    name = model_name(model)
    if _flash_attn_mode(model) != "auto" or not hasattr(model, "set_flash_attn"):
        return measure_decode_costs(model, max_batch, repeats, contexts, progress,
                                    f"measuring decode costs of {name}")
    t0, meter = time.perf_counter(), cpu_meter(model)
    short = min(contexts) if contexts else SHORT_CONTEXT
    scores, timed = compare_flash_attn(model, max_batch, repeats, short, progress)
    setting = "on" if model.flash_attn else "off"
    costs = measure_decode_costs(model, max_batch, repeats, contexts, progress,
                                 f"measuring decode costs of {name}, flash attention {setting}", given=timed)
    model.truncate(0)  # filler, not a prefix of anything the engine will decode
    costs.flash_attn, costs.flash_attn_scores = bool(model.flash_attn), scores
    costs.key = model_cost_key(model)
    costs.calibration_seconds = time.perf_counter() - t0
    busy = [x for x in (meter.other_fraction(), costs.other_cpu) if x is not None]
    costs.other_cpu = max(busy) if busy else None  # the choice counts too: a disturbed comparison taints it
    return costs


def load_costs(model, max_batch: int) -> ModelCosts | None:
    """The cached measurement for this model, settings and machine, if it covers max_batch and was
    not :attr:`~ModelCosts.disturbed` (:func:`get_costs` does not save such a one; an older cache
    file may hold one)."""
    key = model_cost_key(model)
    path = cost_cache_path(key)
    try:
        costs = ModelCosts.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if costs.key != key or len(costs.seconds) < max_batch or not costs.measured or costs.disturbed:
        return None
    return costs


def apply_cached_flash_attn(model) -> bool | None:
    """Set the model's flash attention to the faster setting a cached calibration found.

    For a model asked ``auto``; returns the setting applied, or None when this machine has
    not measured it yet (the model keeps its setting: off, as llama-cpp-python's ``Llama``).
    """
    if _flash_attn_mode(model) != "auto":
        return None
    cached = load_costs(model, 1)
    if cached is None or cached.flash_attn is None:
        return None
    model.set_flash_attn(bool(cached.flash_attn))
    return bool(cached.flash_attn)


def save_costs(costs: ModelCosts) -> Path | None:
    """Write the measurement to the cache (atomically); None when the cache is not writable."""
    path = cost_cache_path(costs.key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(costs.to_json(), indent=1))
        tmp.replace(path)
        return path
    except OSError:
        return None


def get_costs(model, max_batch: int, remeasure: bool = False, repeats: int = 2,
              contexts: Sequence[int] | None = None, progress: StepFn | None = None,
              keep_longer: bool = False) -> ModelCosts:
    """Cached costs (the model switched to their flash-attention setting), or a fresh calibration
    (:func:`calibrate_model`, saved to the cache).

    A calibration measured while other processes used the CPUs (:attr:`~ModelCosts.disturbed`:
    on a 2-core machine a busy neighbour starves llama.cpp's threads, and every pass then costs
    about the same, a flat curve that makes the longest draft look free) is returned for this
    run, where the engine's observed times correct its scale (:class:`EngineCosts`), but never
    saved: the next load measures again, and a good measurement already cached stays.

    ``keep_longer`` (the draft model's two lengths): a good cached curve covering more lengths is
    not replaced. A target and a draft model that are one file with the same settings share a
    cache entry, and re-measuring the draft's b = 1, 2 used to drop the target's 65-point curve.
    """
    if not remeasure:
        cached = load_costs(model, max_batch)
        if cached is not None:
            if _flash_attn_mode(model) == "auto" and cached.flash_attn is not None and hasattr(model, "set_flash_attn"):
                model.set_flash_attn(bool(cached.flash_attn))
            return cached
    costs = calibrate_model(model, max_batch, repeats=repeats, contexts=contexts, progress=progress)
    if not costs.disturbed and not (keep_longer and load_costs(model, len(costs.seconds) + 1) is not None):
        save_costs(costs)
    return costs


def default_curve(t1: float, max_batch: int, ratios: dict[int, float] = DEFAULT_TARGET_RATIOS) -> list[float]:
    """A cost curve from one measured single-token time and the ratios of models.md (linear in between)."""
    xs = sorted(ratios)
    out = []
    for b in range(1, max_batch + 1):
        r = float(np.interp(b, xs, [ratios[x] for x in xs]))
        if b > xs[-1]:
            r = ratios[xs[-1]] * b / xs[-1]
        out.append(t1 * r)
    return out


def engine_costs(target, draft_model, draft_max: int, *, existing: EngineCosts | None = None,
                 remeasure: bool = False, repeats: int = 2, progress: StepFn | None = None) -> EngineCosts:
    """Calibrate (or load) the target's curves b = 1..draft_max+1 (measured at
    :func:`~localspec.core.costmodel.calibration_points`, interpolated between) at a short and a long context,
    and the draft model's per-token and catch-up costs (:func:`get_costs`).

    ``existing`` (the costs an engine already holds) is returned unchanged while it covers
    ``draft_max`` and the draft model, unless ``remeasure``.
    """
    if isinstance(existing, EngineCosts) and not remeasure and existing.covers(draft_max, draft_model is not None):
        return existing
    target_costs = get_costs(target, draft_max + 1, remeasure=remeasure, repeats=repeats, progress=progress)
    draft = None
    if draft_model is not None:
        draft = get_costs(draft_model, 2, remeasure=remeasure, repeats=repeats, progress=progress, keep_longer=True)
    return _engine_costs(target_costs, draft, draft_max)


def _engine_costs(target: ModelCosts, draft: ModelCosts | None, draft_max: int) -> EngineCosts:
    return EngineCosts(verify=list(target.seconds[: draft_max + 1]), draft_token=draft.seconds[0] if draft else None,
                       target=target, draft=draft)


def cached_engine_costs(target, draft_model, draft_max: int) -> EngineCosts | None:
    """The engine costs from the cache alone (no measurement): None when this machine has not
    measured the target for ``draft_max`` (or the draft model) yet (:func:`load_costs`)."""
    target_costs = load_costs(target, draft_max + 1)
    if target_costs is None:
        return None
    draft = None
    if draft_model is not None:
        draft = load_costs(draft_model, 2)
        if draft is None:
            return None
    return _engine_costs(target_costs, draft, draft_max)


# ---------------------------------------------------------------------------------------
# the calibrate command's report (the command itself is in localspec.cli)
# ---------------------------------------------------------------------------------------
def format_curve(costs: ModelCosts, title: str) -> str:
    """The curve per measured context at the measured batch sizes (:attr:`ModelCosts.points`; the
    engine interpolates between them): ms, ratio to one token at that context, ms per token."""
    head = f"{'b':>3}" + "".join(f"  {'ms @' + str(c):>9}  {'ratio':>6}  {'ms/tok':>6}" for c in costs.contexts)
    lines = [title, head]
    for b in costs.points:
        row = f"{b:>3}"
        for curve in costs.curves:
            s = curve[b - 1]
            row += f"  {s * 1e3:9.2f}  {s / curve[0]:6.2f}  {s * 1e3 / b:6.2f}"
        lines.append(row)
    if len(costs.points) < len(costs.seconds):
        lines.append(f"(measured at these {len(costs.points)} batch sizes; the other lengths up to "
                     f"{len(costs.seconds)} are interpolated linearly between them)")
    if len(costs.contexts) > 1 and costs.context_points and costs.context_points != costs.points:
        at = ", ".join(str(c) for c in costs.contexts[1:])
        lines.append(f"(at {at} tokens of context timed at b = {', '.join(map(str, costs.context_points))}: "
                     f"the curve there is the one at {costs.contexts[0]} plus the difference measured, "
                     "interpolated between them)")
    return "\n".join(lines)


def describe_costs(costs: ModelCosts) -> str:
    """Flash attention chosen (and the scores), catch-up cost, calibration time, as one line."""
    parts = []
    if costs.flash_attn_scores:
        sc = ", ".join(f"{k} {v:.3f}" for k, v in sorted(costs.flash_attn_scores.items()))
        parts.append(f"flash attention {'on' if costs.flash_attn else 'off'} (compared at {costs.contexts[0]} tokens "
                     f"of context: the fastest T(1) and T(max) of each, mean relative to the faster setting: {sc}; "
                     f"on is chosen only when over {FLASH_ATTN_MARGIN:.0%} faster)")
    elif costs.flash_attn is not None:
        parts.append(f"flash attention {'on' if costs.flash_attn else 'off'} (as asked)")
    if costs.prefill_token_seconds:
        parts.append(f"prefill (catch-up) {costs.prefill_token_seconds * 1e3:.2f} ms/token")
    if costs.calibration_seconds:
        parts.append(f"calibration took {costs.calibration_seconds:.1f} s")
    if costs.disturbed:
        parts.append(f"DISTURBED: other processes used {costs.other_cpu:.0%} of the CPUs while it measured; "
                     "not saved: it is measured again the next time this model loads")
    elif costs.other_cpu is not None:
        parts.append(f"other processes used {costs.other_cpu:.0%} of the CPUs meanwhile")
    return "; ".join(parts)
