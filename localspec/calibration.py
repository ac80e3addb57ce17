"""Calibration: measure this machine's decode costs, cache them, and keep them current.

Measures, on the running machine with the loaded models and settings, the time of a
target decode of b tokens for b = 1..9 and a few longer batches up to draft_max+1
(:func:`~localspec.costmodel.calibration_points`: 12, 16, 24, 32, 48, 64, 65; joined by
:func:`~localspec.costmodel.interpolate_curve`, and refined per b from the real rounds by
:class:`EngineCosts`) at a short and a long context (64 and 1,024 cached tokens;
interpolated by the current position), the draft model's time per token and per
catch-up (prefill) token, with flash attention off and on (keeping the faster, unless
``--flash-attn`` says which), and caches it as JSON under ``$LOCALSPEC_CACHE/costs/``
(default ``~/.cache/localspec``), keyed by model file (path, size, mtime), context
settings (n_ctx, n_batch, n_ubatch, n_threads, n_gpu_layers, flash attention), the
llama.cpp build and the machine (hostname, CPU model and count, platform).

:class:`EngineCosts` is what an engine's adaptive policy reads every round: the
calibrated curves at the current position, corrected by observed times. The pure
functions that turn costs and acceptance into a choice are in :mod:`localspec.costmodel`.
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

from .costmodel import calibration_points, interpolate_curve, verify_cost
from .errors import LocalspecError
from .machine import BUSY_THRESHOLD, CpuMeter, load_average, machine_is_quiet

#: models.md: time of one decode of b tokens / time of one token, Qwen2.5-Coder-1.5B Q4_K_M,
#: 2 threads. Used only until a measurement exists (see :func:`default_curve`).
DEFAULT_TARGET_RATIOS = {1: 1.0, 2: 1.68, 3: 2.26, 4: 2.57, 5: 3.21, 8: 5.95, 16: 8.53}
COST_FORMAT = 2
#: (what is measured, steps done, steps in all) -> None: calibration progress for a front-end
StepFn = Callable[[str, int, int], None]
#: cache lengths (tokens) at which calibration times the verify curve (see calibration_contexts)
SHORT_CONTEXT = 64
LONG_CONTEXT = 1024


def cache_root() -> Path:
    return Path(os.environ.get("LOCALSPEC_CACHE") or Path.home() / ".cache" / "localspec")


def _flash_attn_mode(model) -> str:
    """The flash-attention setting asked for: ``auto`` (choose by measurement), ``on``, ``off``, or
    ``default`` (llama.cpp's own choice, a model built without one)."""
    mode = getattr(model, "flash_attn_mode", None)
    if mode:
        return str(mode)
    fa = getattr(model, "flash_attn", None)
    return "default" if fa is None else ("on" if fa else "off")


def _ticker(progress: "StepFn | None", what: str, total: int) -> Callable[[], None]:
    """``tick()`` for one measurement of ``total`` steps: reports ``progress(what, done, total)``
    (0 at once, then after each step)."""
    done = [0]
    if progress:
        progress(what, 0, total)

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(what, min(done[0], total), total)

    return tick


def _model_name(model) -> str:
    return Path(str(getattr(model, "path", "model"))).name


def model_cost_key(model) -> dict:
    """What a measurement depends on: model file, context settings, llama.cpp build, machine."""
    from .machine import file_key, machine_key

    return {
        "format": COST_FORMAT,
        **file_key(model.path),
        "n_ctx": int(getattr(model, "n_ctx", 0) or 0),
        "n_threads": int(getattr(model, "n_threads", 0) or 0),
        "n_batch": int(getattr(model, "n_batch", 0) or 0),
        "n_ubatch": int(getattr(model, "n_ubatch", 0) or getattr(model, "n_batch", 0) or 0),
        "n_gpu_layers": int(getattr(model, "n_gpu_layers", 0) or 0),
        "flash_attn": _flash_attn_mode(model),
        "huge_pages": bool(getattr(model, "huge_pages", False)),
        "repack": bool(getattr(model, "repack", False)),
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
        points: the batch sizes actually timed, ascending (the curves are interpolated between
            them, :func:`~localspec.costmodel.interpolate_curve`); empty = every b.
        point_seconds: ``point_seconds[i][j]`` = median seconds of a decode of ``points[j]``
            tokens at ``contexts[i]`` (what the curves were interpolated from).
        other_cpu: share of all CPUs other processes used while measuring (None unknown); over
            :data:`~localspec.machine.BUSY_THRESHOLD` the curve is :attr:`disturbed`.
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

    @property
    def disturbed(self) -> bool:
        """Measured while other processes used over BUSY_THRESHOLD of the CPUs: re-measured when quiet."""
        return self.other_cpu is not None and self.other_cpu > BUSY_THRESHOLD

    def __post_init__(self) -> None:
        if not self.curves:
            self.curves = [list(self.seconds)]
        if len(self.contexts) != len(self.curves):
            self.contexts = [SHORT_CONTEXT + i for i in range(len(self.curves))]
        if not self.points:
            self.points = list(range(1, len(self.seconds) + 1))
        if len(self.point_seconds) != len(self.curves):
            self.point_seconds = [[c[b - 1] for b in self.points] for c in self.curves]

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
                "other_cpu": self.other_cpu, "points": self.points, "point_seconds": self.point_seconds}

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
                   point_seconds=[[float(x) for x in c] for c in d.get("point_seconds", [])])


def _filler_tokens(model, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    hi = max(2, min(model.n_vocab, 30000))
    toks = [int(t) for t in rng.integers(1, hi, size=n)]
    return [t if not model.is_eog(t) else 1 for t in toks]


def _time_points(model, toks: Sequence[int], base: int, points: Sequence[int], repeats: int,
                 tick: Callable[[], None] | None = None) -> list[float]:
    """Median seconds of a decode of b tokens (logits for all) with ``base`` cached, for each b in
    ``points`` (each <= len(toks)); ``tick`` is called after each repetition."""
    samples: list[list[float]] = [[] for _ in points]
    model.decode(toks[:1], logits_for="all")  # warm up
    model.truncate(base)
    for r in range(max(1, repeats)):
        order = range(len(points)) if r % 2 == 0 else range(len(points) - 1, -1, -1)
        for j in order:
            t0 = time.perf_counter()
            model.decode(toks[: points[j]], logits_for="all")
            samples[j].append(time.perf_counter() - t0)
            model.truncate(base)
        if tick:
            tick()
    return [float(np.median(s)) for s in samples]


def _fill_to(model, c: int, seed: int) -> tuple[int, float]:
    """Make the model's cache hold exactly ``c`` tokens: cut a longer one, or decode filler tokens.

    Returns:
        (tokens decoded, seconds they took); (0, 0.0) when the cache was cut or already held ``c``.
    """
    base = model.n_cached
    if base >= c:
        model.truncate(c)
        return 0, 0.0
    t0 = time.perf_counter()
    model.decode(_filler_tokens(model, c - base, seed=seed), logits_for=())
    return c - base, time.perf_counter() - t0


def calibration_contexts(model, max_batch: int, long_context: int = LONG_CONTEXT) -> list[int]:
    """The cache lengths calibration measures at: :data:`SHORT_CONTEXT` and ``long_context``,
    the latter capped so ``long_context + max_batch`` fits the model's context window."""
    n_ctx = int(getattr(model, "n_ctx", 0) or (long_context + max_batch))
    long_ = min(long_context, n_ctx - max_batch)
    return [SHORT_CONTEXT] + ([long_] if long_ > 2 * SHORT_CONTEXT else [])


def measure_decode_costs(model, max_batch: int, repeats: int = 3, contexts: Sequence[int] | None = None,
                         progress: StepFn | None = None, label: str = "", points: Sequence[int] | None = None,
                         restore: bool = True) -> ModelCosts:
    """Time one decode of b tokens for the batch sizes ``points`` at each context length, and
    interpolate the curve for b = 1..max_batch.

    For each context length c (ascending; default :func:`calibration_contexts`: 64 and
    1,024 tokens) decodes filler tokens until c are cached, then for each repetition and
    each b in ``points`` (default :func:`~localspec.costmodel.calibration_points`: every b up
    to 9, then 12, 16, 24, 32, 48, 64, ... and max_batch; order alternating forwards and
    backwards) decodes b tokens with logits for all of them, as the engine's verification
    pass does, and truncates back. The curve between measured points is
    :func:`~localspec.costmodel.interpolate_curve`. The fill from the first context to the
    second is timed: a batched prefill, what a catch-up costs per token. A cache that held
    more than the first context is cut to it first (the engine decodes what is missing on
    its next call, :meth:`LlamaModel.sync`); with ``restore`` (the default) the model's KV
    cache is left as it was found, otherwise it keeps the filler of the longest context
    (:func:`extend_costs` then measures more points without filling again).

    ``progress(label, done, total)`` is called after each repetition at each context
    (``total`` = contexts x repetitions), so a front-end can show how far it is.

    Returns:
        :class:`ModelCosts` with the median seconds per measured b and context, and the
        interpolated curves (seconds, length max_batch).

    Raises:
        ContextOverflowError: the model's context cannot hold ``contexts[-1] + max_batch`` tokens.
    """
    t_start = time.perf_counter()
    meter = CpuMeter()
    load = (load_average() or [-1.0])[0]
    wanted = sorted(set(contexts if contexts is not None else calibration_contexts(model, max_batch)))
    pts = sorted({int(b) for b in (points if points is not None else calibration_points(max_batch))
                  if 1 <= int(b) <= max_batch} | {1, max_batch})
    n0 = min(model.n_cached, wanted[0])
    model.truncate(n0)
    toks = _filler_tokens(model, max_batch, seed=2)
    measured_at: list[int] = []
    medians: list[list[float]] = []
    prefill = None
    tick = _ticker(progress, label or f"measuring decode costs of {_model_name(model)}", len(wanted) * max(1, repeats))
    try:
        for c in wanted:
            base = model.n_cached
            if base < c:
                n, secs = _fill_to(model, c, seed=1 + len(medians))
                if medians and n >= 32:
                    prefill = secs / n
                base = c
            if measured_at and base <= measured_at[-1]:
                continue
            medians.append(_time_points(model, toks, base, pts, repeats, tick))
            measured_at.append(base)
    finally:
        if restore:
            model.truncate(n0)
    curves = [interpolate_curve(pts, m, max_batch) for m in medians]
    return ModelCosts(seconds=list(curves[0]), key=model_cost_key(model), repeats=max(1, repeats), measured=True,
                      created=time.time(), load=load, contexts=measured_at, curves=curves,
                      prefill_token_seconds=prefill, flash_attn=getattr(model, "flash_attn", None),
                      calibration_seconds=time.perf_counter() - t_start, other_cpu=meter.other_fraction(),
                      points=pts, point_seconds=medians)


def extend_costs(model, costs: ModelCosts, points: Sequence[int], repeats: int = 3,
                 progress: StepFn | None = None, label: str = "") -> ModelCosts:
    """``costs`` with the batch sizes in ``points`` it lacks measured too, at the same contexts.

    Measures the longest context first (a cache left filled by :func:`measure_decode_costs`
    with ``restore=False`` is reused, only cut), then the shorter ones; the model's KV cache is
    then empty (it held filler tokens). The curves are interpolated again from all measured
    points (:func:`~localspec.costmodel.interpolate_curve`).

    Returns:
        a new :class:`ModelCosts` (same key, contexts and curve length); ``costs`` itself when
        every point was measured already.
    """
    n_curve = len(costs.seconds)
    have = set(costs.points)
    new = sorted({int(b) for b in points if 1 <= int(b) <= n_curve} - have)
    if not new:
        model.truncate(0)
        return costs
    t_start = time.perf_counter()
    meter = CpuMeter()
    toks = _filler_tokens(model, max(new), seed=2)
    tick = _ticker(progress, label or f"measuring decode costs of {_model_name(model)}",
                   len(costs.contexts) * max(1, repeats))
    added: dict[int, list[float]] = {}
    for i in sorted(range(len(costs.contexts)), key=lambda k: -costs.contexts[k]):
        _fill_to(model, costs.contexts[i], seed=1 + i)
        added[i] = _time_points(model, toks, costs.contexts[i], new, repeats, tick)
    model.truncate(0)
    pts = sorted(have | set(new))
    point_seconds = []
    for i in range(len(costs.contexts)):
        by_b = dict(zip(costs.points, costs.point_seconds[i])) | dict(zip(new, added[i]))
        point_seconds.append([by_b[b] for b in pts])
    curves = [interpolate_curve(pts, m, n_curve) for m in point_seconds]
    other = meter.other_fraction()
    busy = [x for x in (costs.other_cpu, other) if x is not None]
    return ModelCosts(seconds=list(curves[0]), key=costs.key, repeats=costs.repeats, measured=True,
                      created=time.time(), load=costs.load, contexts=list(costs.contexts), curves=curves,
                      prefill_token_seconds=costs.prefill_token_seconds, flash_attn=costs.flash_attn,
                      flash_attn_scores=dict(costs.flash_attn_scores),
                      calibration_seconds=costs.calibration_seconds + time.perf_counter() - t_start,
                      other_cpu=max(busy) if busy else None, points=pts, point_seconds=point_seconds)


def flash_attn_scores(results: dict[str, ModelCosts]) -> dict[str, float]:
    """Per setting, the mean over the measured contexts of T(1) and T(max_batch), each relative to the
    faster setting there: 1.0 = fastest at both; a one-token decode (target-only decoding) and a full
    verification pass weigh the same."""
    keys = list(results)
    pts = [(i, j) for i in range(min(len(r.curves) for r in results.values())) for j in (0, -1)]
    best = {pt: min(results[k].curves[pt[0]][pt[1]] for k in keys) for pt in pts}
    return {k: sum(results[k].curves[i][j] / best[(i, j)] for i, j in pts) / len(pts) for k in keys}


def calibrate_model(model, max_batch: int, repeats: int = 3, contexts: Sequence[int] | None = None,
                    progress: StepFn | None = None) -> ModelCosts:
    """:func:`measure_decode_costs`; with flash attention ``auto``, for it off and on, keeping the faster.

    Asked ``auto`` (``model.flash_attn_mode``, see :mod:`localspec.loader`), it first times
    only b = 1 and b = ``max_batch`` with flash attention off (llama-cpp-python's ``Llama``
    default) and on, scores each by :func:`flash_attn_scores` (a one-token decode and a
    verification pass of ``max_batch`` tokens at each context, relative to the faster
    setting), leaves the model on the faster setting (off on a tie), and then measures the
    other batch sizes (:func:`~localspec.costmodel.calibration_points`) for that setting
    only (:func:`extend_costs`; the filled cache of the setting measured last is reused).
    Switching recreates the llama.cpp context, so the model's KV cache is then empty. A
    setting whose context cannot be created is skipped. ``progress`` as in
    :func:`measure_decode_costs`, once per setting and once for the rest of the curve.
    """
    model_name = _model_name(model)
    if _flash_attn_mode(model) != "auto" or not hasattr(model, "set_flash_attn"):
        return measure_decode_costs(model, max_batch, repeats, contexts, progress,
                                    f"measuring decode costs of {model_name}")
    t0 = time.perf_counter()
    ends = sorted({1, max_batch})
    results: dict[str, ModelCosts] = {}
    last = None
    for name, fa in (("off", False), ("on", True)):
        try:
            model.set_flash_attn(fa)
        except LocalspecError:
            continue
        results[name] = measure_decode_costs(model, max_batch, repeats, contexts, progress,
                                             f"measuring decode costs of {model_name}, flash attention {name}",
                                             points=ends, restore=False)
        last = name
    scores = flash_attn_scores(results)
    best = min(results, key=lambda k: (scores[k], k != "off"))
    if best != last:
        model.set_flash_attn(best == "on")
    costs = extend_costs(model, results[best], calibration_points(max_batch), repeats, progress,
                         f"measuring decode costs of {model_name} at more batch sizes")
    costs.flash_attn = best == "on"
    costs.flash_attn_scores = scores
    costs.key = model_cost_key(model)
    costs.calibration_seconds = time.perf_counter() - t0
    busy = [r.other_cpu for r in results.values() if r.other_cpu is not None] + \
        ([costs.other_cpu] if costs.other_cpu is not None else [])
    costs.other_cpu = max(busy) if busy else None  # the choice compares both: either disturbed taints it
    return costs


def load_costs(model, max_batch: int) -> ModelCosts | None:
    """The cached measurement for this model, settings and machine, if it covers max_batch."""
    key = model_cost_key(model)
    path = cost_cache_path(key)
    try:
        costs = ModelCosts.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if costs.key != key or len(costs.seconds) < max_batch or not costs.measured:
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


def get_costs(model, max_batch: int, remeasure: bool = False, repeats: int = 3,
              contexts: Sequence[int] | None = None, progress: StepFn | None = None) -> ModelCosts:
    """Cached costs (the model switched to their flash-attention setting), or a fresh calibration
    (:func:`calibrate_model`, saved to the cache).

    A cached calibration that was :attr:`~ModelCosts.disturbed` (other processes busy while it
    measured) is used only while the machine is still busy: once it is quiet (one second of
    :func:`~localspec.machine.machine_is_quiet`), the curve is measured again and replaces it.
    """
    if not remeasure:
        cached = load_costs(model, max_batch)
        if cached is not None and (not cached.disturbed or not machine_is_quiet()):
            if _flash_attn_mode(model) == "auto" and cached.flash_attn is not None and hasattr(model, "set_flash_attn"):
                model.set_flash_attn(bool(cached.flash_attn))
            return cached
    costs = calibrate_model(model, max_batch, repeats=repeats, contexts=contexts, progress=progress)
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


@dataclass
class EngineCosts:
    """The costs an engine's adaptive policy uses, shared by its generations.

    ``verify[b-1]`` is the predicted seconds of a verification pass over b tokens at the
    current position (:meth:`set_position`, the number of tokens in the target's cache):
    the calibrated curves interpolated by position (:meth:`ModelCosts.curve_at`) times a
    correction learned from observed verification times. A batch size observed at least
    ``min_obs`` times uses its own exponentially weighted ratio observed / calibrated;
    the others use the exponentially weighted ratio over all batch sizes (``scale``), so a
    machine that got busier or quieter since calibration moves the whole curve.
    ``draft_token`` (seconds per draft-model token at the current position) likewise
    follows the drafting rounds. ``draft_prefill_token_seconds`` is the draft model's
    calibrated catch-up (batched prefill) cost per token, None without a draft model.
    """

    verify: list[float]
    draft_token: float | None
    target: ModelCosts
    draft: ModelCosts | None
    weight: float = 0.1
    overhead: float = 0.0
    min_obs: int = 3
    scale: float = 1.0
    #: seconds per token of a draft-model catch-up (a prefill batch without logits): the
    #: calibrated figure; without one, the draft's one-token time scaled by the target
    #: curve's cost per token at its largest batch (an overestimate for long catch-ups);
    #: corrected by every observed catch-up (:meth:`observe_catchup`)
    draft_prefill_token_seconds: float | None = None
    position: int | None = None

    def __post_init__(self) -> None:
        self._len = len(self.verify)
        self._flat = list(self.verify)  # the curve given, used where the target has no curve for this length
        self._ratio = [1.0] * self._len
        self._n = [0] * self._len
        self._n_all = 0
        self._n_draft = 0
        self._draft_scale = 1.0
        self._draft_flat = self.draft_token
        if self.draft_prefill_token_seconds is None and self.draft is not None:
            self.draft_prefill_token_seconds = self.draft.prefill_token_seconds
        if self.draft_prefill_token_seconds is None and self.draft_token is not None and self.verify:
            b = len(self.verify)
            self.draft_prefill_token_seconds = self.draft_token * self.verify[-1] / (b * self.verify[0])
        self._n_catchup = 0
        self._refresh()

    def _w(self, n: int) -> float:
        # the first observations are averaged (weight 1/n), later ones weighted exponentially:
        # a calibration taken on a busy machine is corrected within a few rounds
        return max(self.weight, 1.0 / n)

    def _base(self, position: int | None) -> list[float]:
        curve = self.target.curve_at(position)
        if len(curve) < self._len or len(self.target.curves) == 1:
            return list(self._flat)
        return curve[: self._len]

    def _draft_base(self, position: int | None) -> float | None:
        if self._draft_flat is None:
            return None
        if self.draft is None or len(self.draft.curves) == 1:
            return self._draft_flat
        return self.draft.curve_at(position)[0]

    def _refresh(self) -> None:
        base = self._base(self.position)
        v = [base[j] * (self._ratio[j] if self._n[j] >= self.min_obs else self.scale) for j in range(self._len)]
        # a pass over more tokens never costs less
        self.verify[:] = np.maximum.accumulate(v).tolist()
        d = self._draft_base(self.position)
        self.draft_token = None if d is None else d * self._draft_scale

    def set_position(self, position: int | None) -> None:
        """Predict for a round whose verification pass starts with ``position`` tokens cached."""
        if position != self.position:
            self.position = position
            self._refresh()

    def observe_verify(self, b: int, seconds: float) -> None:
        """Learn from a verification pass of b tokens at the current position that took ``seconds``."""
        if not (1 <= b <= self._len) or seconds <= 0:
            return
        i = b - 1
        x = seconds / self._base(self.position)[i]
        self._n_all += 1
        self.scale += self._w(self._n_all + 1) * (x - self.scale)
        self._n[i] += 1
        self._ratio[i] += self._w(self._n[i]) * (x - self._ratio[i])
        self._refresh()

    def observe_draft(self, drafted: int, seconds: float) -> None:
        base = self._draft_base(self.position)
        if drafted > 0 and seconds > 0 and base:
            self._n_draft += 1
            self._draft_scale += self._w(self._n_draft) * (seconds / drafted / base - self._draft_scale)
            self._refresh()

    def observe_catchup(self, tokens: int, seconds: float) -> None:
        """Learn the draft model's per-token catch-up cost from one catch-up of ``tokens``."""
        if tokens > 0 and seconds > 0:
            self._n_catchup += 1
            prev = self.draft_prefill_token_seconds if self.draft_prefill_token_seconds is not None else seconds / tokens
            self.draft_prefill_token_seconds = prev + self._w(self._n_catchup) * (seconds / tokens - prev)

    def observe_overhead(self, seconds: float) -> None:
        if seconds >= 0:
            self.overhead += self.weight * (seconds - self.overhead)


def engine_costs(target, draft_model, draft_max: int, *, existing: EngineCosts | None = None,
                 remeasure: bool = False, repeats: int = 3, progress: StepFn | None = None) -> EngineCosts:
    """Calibrate (or load) the target's curves b = 1..draft_max+1 (measured at
    :func:`~localspec.costmodel.calibration_points`, interpolated between) at a short and a long context,
    and the draft model's per-token and catch-up costs (:func:`get_costs`).

    ``existing`` (the costs an engine already holds) is returned unchanged while it covers
    ``draft_max`` and the draft model, unless ``remeasure``.
    """
    if (isinstance(existing, EngineCosts) and not remeasure and len(existing.verify) >= draft_max + 1
            and (existing.draft is not None or draft_model is None)):
        return existing
    target_costs = get_costs(target, draft_max + 1, remeasure=remeasure, repeats=repeats, progress=progress)
    draft = None
    if draft_model is not None:
        draft = get_costs(draft_model, 2, remeasure=remeasure, repeats=max(repeats, 5), progress=progress)
    return _engine_costs(target_costs, draft, draft_max)


def _engine_costs(target: ModelCosts, draft: ModelCosts | None, draft_max: int) -> EngineCosts:
    return EngineCosts(verify=list(target.seconds[: draft_max + 1]), draft_token=draft.seconds[0] if draft else None,
                       target=target, draft=draft)


def cached_engine_costs(target, draft_model, draft_max: int) -> EngineCosts | None:
    """The engine costs from the cache alone (no measurement): None when this machine has not
    measured the target for ``draft_max`` (or the draft model) yet, or when a cached curve was
    :attr:`~ModelCosts.disturbed` and the machine is quiet now (the first generation in mode
    ``auto`` then measures again, :func:`get_costs`)."""
    target_costs = load_costs(target, draft_max + 1)
    if target_costs is None:
        return None
    draft = None
    if draft_model is not None:
        draft = load_costs(draft_model, 2)
        if draft is None:
            return None
    if any(c is not None and c.disturbed for c in (target_costs, draft)) and machine_is_quiet():
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
    return "\n".join(lines)


def describe_costs(costs: ModelCosts) -> str:
    """Flash attention chosen (and the scores), catch-up cost, calibration time, as one line."""
    parts = []
    if costs.flash_attn_scores:
        sc = ", ".join(f"{k} {v:.3f}" for k, v in sorted(costs.flash_attn_scores.items()))
        parts.append(f"flash attention {'on' if costs.flash_attn else 'off'} (measured faster: time of T(1) and "
                     f"T(max) at each context relative to the faster setting, mean: {sc})")
    elif costs.flash_attn is not None:
        parts.append(f"flash attention {'on' if costs.flash_attn else 'off'} (as asked)")
    if costs.prefill_token_seconds:
        parts.append(f"prefill (catch-up) {costs.prefill_token_seconds * 1e3:.2f} ms/token")
    if costs.calibration_seconds:
        parts.append(f"calibration took {costs.calibration_seconds:.1f} s")
    if costs.disturbed:
        parts.append(f"DISTURBED: other processes used {costs.other_cpu:.0%} of the CPUs while it measured; "
                     "it is measured again the next time this model loads on a quiet machine")
    elif costs.other_cpu is not None:
        parts.append(f"other processes used {costs.other_cpu:.0%} of the CPUs meanwhile")
    return "; ".join(parts)
