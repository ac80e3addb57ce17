"""Weight repacking: whether llama.cpp may use its extra CPU buffer types, decided by a probe in a child.

Why these hold together: one decision, from the probe's child process (its command line and its
``__main__``) through the verdict and its cache to the choice the loader follows; the child runs this
module, so the parent's and the child's halves of the protocol stay in one file.

llama.cpp can repack a model's weights at load time into "extra" CPU buffer types
(``use_extra_bufts``; llama-server's ``--no-repack`` turns it off): AMX tiles on Intel
Sapphire/Granite Rapids, interleaved Q4_0/IQ4_NL blocks on AVX2 and ARM. On virtualized
AMX CPUs (AWS m7i, GCP C4, VMware; llama.cpp issue 20824, Ollama issues 17205/17249/17006)
the AMX matrix kernel kills the process with SIGSEGV on the first decode of more than one
token, while the same CPU flags work on other hosts: the flags cannot tell. So the answer is
measured, never guessed:

1. **Probe.** A child process (``python -m localspec.backend.repack``) loads the model with the
   extra buffer types, decodes a batch of :data:`PROBE_BATCH` tokens (where the AMX kernel
   crashes) and then times one-token decodes and :data:`PROBE_BATCH`-token decodes
   (target-only decoding and a verification pass). A second child does the same without
   them; where both decode, a second pair follows and each time is the faster of two children.
   A signal, a non-zero exit or :func:`probe_timeout` seconds without an answer means "not
   safe"; the parent never dies with a child.
2. **Choice** (``--repack auto``, the default): repacked weights where they decoded safely
   and were not slower (the mean of the one-token and the batch time ratios, the rule
   :func:`localspec.backend.calibration.flash_attn_scores` uses for flash attention), else the
   standard layout. ``--repack on`` refuses (:class:`~localspec.errors.ConfigError`) where the
   probe crashed; ``--repack off`` runs no probe.
3. **Cache.** The verdict is kept as JSON under ``$LOCALSPEC_CACHE/repack/``, keyed like the
   calibration (:func:`probe_key`: model file, threads, GPU layers, llama.cpp build, machine),
   so it is measured again when any of these changes. A verdict measured while other work took
   the CPU (:attr:`RepackVerdict.busy`: each child reports the share of the CPUs other processes used
   during its timed decodes, :attr:`ProbeResult.other_cpu`, judged as the calibration judges its
   curves, :data:`localspec.backend.load.BUSY_THRESHOLD`) is kept too, and measured again at the
   first start that finds the machine quiet (:func:`localspec.backend.load.machine_is_quiet`). Until
   then every start keeps its layout: the prompt snapshots on disk and the cost curves are keyed by
   the layout, so a verdict measured again at each busy start, which can flip on noisy timings,
   made a restarted server unable to read the snapshots the last one wrote (seen on a 2-core AMD
   EPYC, Zen 3, where both layouts decode and the repacked one is 1.13x faster on SmolLM2).

If neither configuration can decode, :func:`decide_repack` raises
:class:`~localspec.errors.ModelError` (exit code 3) instead of letting llama.cpp kill the process.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

from localspec.errors import ConfigError, ModelError

RepackMode = Literal["auto", "on", "off"]
#: tokens in the probe's batched decode (the engine's verification pass is 1..draft_max+1 tokens)
PROBE_BATCH = 8
#: tokens in the probe's prompt-read pass (no logits), and the fewest a decode call must have to go to
#: the prefill copy (:meth:`localspec.backend.llama.LlamaModel.attach_prefill_copy`)
PROBE_PREFILL = 64
#: the standard layout must read prompts at least this many times faster than the repacked one for a
#: prefill copy (its memory buys at least a tenth of the prompt-read time)
PREFILL_COPY_MIN_SPEEDUP = 1.10
#: timed repetitions of each decode in a probe child
PROBE_REPEATS = 5
VERDICT_FORMAT = 3  # 2: the prompt-read pass (tl) and the KV copy (tc) measured too; 3: other_cpu
#: (message) -> None: what the probe is doing, for the CLI, the serve log and the TUI
StageFn = Callable[[str], None]


def probe_timeout() -> float:
    """Seconds a probe child may take (``$LOCALSPEC_PROBE_TIMEOUT``, default 180)."""
    try:
        return max(1.0, float(os.environ.get("LOCALSPEC_PROBE_TIMEOUT", "180")))
    except ValueError:
        return 180.0


@dataclass(frozen=True)
class ProbeResult:
    """What one probe child reported.

    Attributes:
        outcome: ``"ok"``, ``"crashed"`` (killed by a signal), ``"timeout"`` or ``"failed"``
            (a non-zero exit, e.g. the model did not load).
        detail: the signal's name, the exit status or the last line the child wrote to stderr.
        t1, tb: median seconds of one decode of 1 and of :data:`PROBE_BATCH` tokens (``ok`` only).
        tl: median seconds of a :data:`PROBE_PREFILL`-token decode without logits (a prompt read).
        tc: seconds per cached token to copy the KV cache out and back in (``llama_state_seq_get_data``
            and ``_set_data``: what a prefill copy costs per token of context).
        other_cpu: the share of all CPUs other processes used during the timed decodes
            (:class:`localspec.backend.load.CpuMeter`); None where not measured (no ``/proc``).
    """

    outcome: str
    detail: str = ""
    t1: float | None = None
    tb: float | None = None
    tl: float | None = None
    tc: float | None = None
    other_cpu: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def describe(self) -> str:
        if self.ok:
            long = f", {self.tl * 1e3:.0f} ms per {PROBE_PREFILL}-token prompt pass" if self.tl else ""
            return (f"decoded safely ({self.t1 * 1e3:.1f} ms per token, {self.tb * 1e3:.1f} ms per {PROBE_BATCH}-token "
                    f"pass{long})")
        return {"crashed": "crashed", "timeout": "hung", "failed": "failed"}.get(self.outcome, self.outcome) + \
            (f" ({self.detail})" if self.detail else "")


@dataclass
class RepackVerdict:
    """The probe's verdict for one model on this machine.

    Attributes:
        use: whether ``--repack auto`` loads the weights repacked.
        with_repack, without_repack: what each probe child reported.
        reason: one or two sentences for the user: what was decided, why, what it costs.
        speed_ratio: time with repacking / time without (mean of the one-token and the batch
            ratio; < 1 = repacking is faster), None where either did not decode.
        key: what the verdict depends on (:func:`probe_key`).
        probe_seconds: wall time of both children.
        prefill_copy: whether ``--prefill-copy auto`` may load a second copy of the weights in the
            standard layout to read prompts (:func:`choose_prefill_copy`): repacked weights that
            decode faster but read prompts slower.
        prefill_ratio: time of a :data:`PROBE_PREFILL`-token prompt pass repacked / standard, None
            where not measured.
        fresh: True when measured in this process (not read from the cache): the user is told then.
    """

    use: bool
    with_repack: ProbeResult
    without_repack: ProbeResult
    reason: str
    speed_ratio: float | None = None
    key: dict = field(default_factory=dict)
    created: float = 0.0
    probe_seconds: float = 0.0
    prefill_copy: bool = False
    prefill_ratio: float | None = None
    fresh: bool = False

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("fresh")
        return d

    @classmethod
    def from_json(cls, d: dict) -> "RepackVerdict":
        return cls(use=bool(d["use"]), with_repack=ProbeResult(**d["with_repack"]),
                   without_repack=ProbeResult(**d["without_repack"]), reason=str(d["reason"]),
                   speed_ratio=d.get("speed_ratio"), key=dict(d.get("key", {})), created=float(d.get("created", 0)),
                   probe_seconds=float(d.get("probe_seconds", 0)), prefill_copy=bool(d.get("prefill_copy", False)),
                   prefill_ratio=d.get("prefill_ratio"))

    @property
    def busy(self) -> bool:
        """Measured beside other work (a child's :attr:`ProbeResult.other_cpu` over
        :data:`~localspec.backend.load.BUSY_THRESHOLD`, as a disturbed calibration): kept, and measured
        again at the first start on a quiet machine."""
        from localspec.backend.load import BUSY_THRESHOLD

        return any(r.ok and r.other_cpu is not None and r.other_cpu > BUSY_THRESHOLD
                   for r in (self.with_repack, self.without_repack))

    @property
    def unsafe(self) -> bool:
        """The repacked weights crashed, hung or failed where the standard layout decoded."""
        return not self.with_repack.ok and self.without_repack.ok


def probe_key(path: str | os.PathLike, n_threads: int, n_gpu_layers: int) -> dict:
    """What a verdict depends on: the model file, threads, GPU layers, llama.cpp build and machine."""
    from localspec.backend.cache_keys import file_key, machine_key
    from localspec.backend.machine import vector_extensions

    return {"format": VERDICT_FORMAT, **file_key(path), "n_threads": int(n_threads), "n_gpu_layers": int(n_gpu_layers),
            **machine_key(), "cpu_flags": " ".join(vector_extensions())}


def verdict_path(key: dict) -> Path:
    from localspec.config import cache_root

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "repack" / f"{Path(key['path']).stem}-{digest}.json"


def load_verdict(key: dict) -> RepackVerdict | None:
    """The cached verdict for ``key``, or None (none yet, or unreadable)."""
    try:
        d = json.loads(verdict_path(key).read_text(encoding="utf-8"))
        v = RepackVerdict.from_json(d)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return v if v.key == key else None


def save_verdict(verdict: RepackVerdict) -> None:
    """Write the verdict atomically (a temporary file renamed over); a read-only cache is skipped."""
    path = verdict_path(verdict.key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(verdict.to_json(), indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # pragma: no cover - read-only home: the probe runs again next time
        pass


def describe_choice(loaded_with_repack: bool, verdict: RepackVerdict | None, prefill_copy: bool = False) -> str:
    """One line for headers (calibrate, bench): the choice, the probe's findings, and whether a prefill
    copy reads prompts (:meth:`localspec.backend.llama.LlamaModel.attach_prefill_copy`)."""
    state = "on" if loaded_with_repack else "off"
    if verdict is None:
        return f"weight repacking: {state} (--repack off: no probe)"
    ratio = "" if verdict.speed_ratio is None else f"; time with/without {verdict.speed_ratio:.2f}"
    copy = (f"; prompts of {PROBE_PREFILL}+ tokens read by a second copy in the standard layout "
            f"({verdict.prefill_ratio:.2f}x faster there)") if prefill_copy and verdict.prefill_ratio else ""
    return (f"weight repacking: {state} (probe in a child process: with repacking {verdict.with_repack.describe()}, "
            f"without {verdict.without_repack.describe()}{ratio}){copy}")


def choice_json(loaded_with_repack: bool, verdict: RepackVerdict | None, prefill_copy: bool = False) -> dict:
    """The choice for JSON reports: ``{"repack": bool, "prefill_copy": bool, "probe": {...} | None}``."""
    return {"repack": bool(loaded_with_repack), "prefill_copy": bool(prefill_copy),
            "probe": None if verdict is None else verdict.to_json()}


# -- the child --------------------------------------------------------------------------
def probe_command(path: str | os.PathLike, repack: bool, n_threads: int, n_gpu_layers: int,
                  repeats: int = PROBE_REPEATS) -> list[str]:
    """The command line of one probe child (this module's ``main``), timing ``repeats`` decodes of each size."""
    return [sys.executable, "-m", "localspec.backend.repack", str(path), "--repack", "on" if repack else "off",
            "--n-threads", str(int(n_threads)), "--n-gpu-layers", str(int(n_gpu_layers)), "--repeats", str(int(repeats))]


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def run_probe_child(command: Sequence[str], timeout: float) -> ProbeResult:
    """Run one probe child and read its verdict; never raises for what the child does.

    The child writes one JSON line ``{"t1": s, "tb": s, "tl": s, "tc": s}`` to stdout when it decoded safely.
    """
    try:
        proc = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONFAULTHANDLER": ""})
    except subprocess.TimeoutExpired:
        return ProbeResult("timeout", f"no answer within {timeout:.0f} s")
    except OSError as e:
        return ProbeResult("failed", f"could not start: {e}")
    if proc.returncode < 0:
        return ProbeResult("crashed", f"killed by {_signal_name(-proc.returncode)}")
    last_err = next((ln.strip() for ln in reversed(proc.stderr.splitlines()) if ln.strip()), "")
    if proc.returncode != 0:
        # a shell or Python that re-raises the signal as 128 + n
        if proc.returncode > 128 and proc.returncode - 128 < 65:
            return ProbeResult("crashed", f"killed by {_signal_name(proc.returncode - 128)}")
        return ProbeResult("failed", f"exit status {proc.returncode}" + (f": {last_err[-200:]}" if last_err else ""))
    try:
        line = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1]
        d = json.loads(line)
        extra = {k: float(d[k]) for k in ("tl", "tc", "other_cpu") if d.get(k) is not None}
        return ProbeResult("ok", "", float(d["t1"]), float(d["tb"]), **extra)
    except (IndexError, ValueError, KeyError, TypeError):
        return ProbeResult("failed", "the child printed no timings" + (f": {last_err[-200:]}" if last_err else ""))


def _child_main(argv: Sequence[str] | None = None) -> int:
    """Load with or without repacking, decode a batch, time decodes, print the medians as JSON."""
    import argparse

    from localspec.backend.llama import LlamaModel

    ap = argparse.ArgumentParser(prog="python -m localspec.backend.repack", description="one weight-repacking probe")
    ap.add_argument("model")
    ap.add_argument("--repack", choices=["on", "off"], required=True)
    ap.add_argument("--n-threads", type=int, default=0)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=PROBE_REPEATS)
    a = ap.parse_args(argv)
    model = LlamaModel(a.model, n_ctx=256, n_batch=PROBE_PREFILL, n_threads=a.n_threads or None,
                       n_gpu_layers=a.n_gpu_layers, huge_pages=False, repack=a.repack == "on")
    try:
        print(json.dumps(_time_decodes(model, max(1, a.repeats))), flush=True)
    finally:
        model.close()
    return 0


def _time_decodes(model, repeats: int) -> dict:
    """Median seconds of a 1-token, a :data:`PROBE_BATCH`-token and (fewer repeats: it is long) a
    :data:`PROBE_PREFILL`-token decode after a short context, the KV copy's seconds per token, and the
    share of the CPUs other processes used meanwhile (``other_cpu``)."""
    import statistics

    from localspec.backend.load import CpuMeter

    n = PROBE_BATCH
    filler = [t if not model.is_eog(t) else 1 for t in range(100, 100 + 2 * n + PROBE_PREFILL)]
    model.decode(filler[: 2 * n], logits_for="all")  # the batched decode that crashes AMX kernels
    base = model.n_cached

    def timed(tokens, logits_for) -> float:
        t0 = time.perf_counter()
        model.decode(tokens, logits_for=logits_for)
        dt = time.perf_counter() - t0
        model.truncate(base)
        return dt

    meter = CpuMeter()

    t1s = [timed(filler[2 * n: 2 * n + 1], "last") for _ in range(repeats)]
    tbs = [timed(filler[2 * n: 3 * n], "all") for _ in range(repeats)]
    prompt = filler[2 * n: 2 * n + PROBE_PREFILL]
    tls = [timed(prompt, ()) for _ in range(max(1, (repeats + 1) // 2))]
    other_cpu = meter.other_fraction()
    model.decode(prompt, logits_for=())
    t0 = time.perf_counter()
    state = model.save_state()
    model.load_state(state)
    tc = (time.perf_counter() - t0) / max(1, model.n_cached)
    return {"t1": statistics.median(t1s), "tb": statistics.median(tbs), "tl": statistics.median(tls), "tc": tc,
            "other_cpu": other_cpu}


# -- the decision -------------------------------------------------------------------------
def choose(with_repack: ProbeResult, without_repack: ProbeResult, cpu: str = "") -> tuple[bool, float | None, str]:
    """(use repacking, speed ratio, the reason in words) from the two probe results."""
    where = f" on this CPU ({cpu})" if cpu else " on this CPU"
    if with_repack.ok and without_repack.ok:
        ratio = (with_repack.t1 / without_repack.t1 + with_repack.tb / without_repack.tb) / 2
        if ratio <= 1.0:
            return True, ratio, (f"weights repacked for this CPU's kernels: measured {1 / ratio:.2f}x the speed of "
                                 "the standard layout")
        return False, ratio, (f"weights not repacked: the repacked layout decoded safely but {ratio:.2f}x slower "
                              f"than the standard layout{where}")
    if with_repack.ok:
        return True, None, (f"weights repacked: without repacking the test decode {without_repack.describe()}"
                            f"{where}")
    if without_repack.ok:
        return False, None, (f"weights not repacked: llama.cpp's repacked weights (its extra CPU buffer types, AMX "
                             f"where the CPU has it) {with_repack.describe()} in a test decode{where}, a known "
                             "llama.cpp fault on virtualized Xeons; the standard layout decodes correctly and costs "
                             "only the repacked kernels' speed-up, which cannot run here")
    return False, None, "neither layout decoded"


def choose_prefill_copy(with_repack: ProbeResult, without_repack: ProbeResult) -> tuple[bool, float | None]:
    """(whether a prefill copy pays, prompt-pass time repacked / standard) from the two probe results.

    It pays where the repacked layout is the one kept for decoding (:func:`choose`) and the standard
    layout read the :data:`PROBE_PREFILL`-token prompt pass at least :data:`PREFILL_COPY_MIN_SPEEDUP`
    times faster (on an AMD EPYC Zen 4 class CPU, AVX-512, with Qwen2.5-Coder-1.5B Q4_K_M: 1.18x in the
    probe at 64 tokens, 1.43x at 240; llama.cpp's repacked Q4_K kernels win below ~16 tokens a pass
    and lose above).
    """
    if not (with_repack.ok and without_repack.ok and with_repack.tl and without_repack.tl):
        return False, None
    use = choose(with_repack, without_repack)[0]
    ratio = with_repack.tl / without_repack.tl
    return use and ratio >= PREFILL_COPY_MIN_SPEEDUP, ratio


def _fastest(a: ProbeResult, b: ProbeResult) -> ProbeResult:
    """Two children's results for one layout as one: each time the faster of the two (a child's whole run
    can be slow: on a 2-core AMD EPYC, Zen 4 class, the repacked 1.5B's 8-token pass took 225-251 ms in
    five children and 343 ms in a sixth, which alone turned the verdict), the larger share of other
    processes' CPU; ``a`` where ``b`` did not decode."""
    if not b.ok:
        return a

    def low(x: float | None, y: float | None) -> float | None:
        return y if x is None else x if y is None else min(x, y)

    other = None if a.other_cpu is None and b.other_cpu is None else max(a.other_cpu or 0.0, b.other_cpu or 0.0)
    return ProbeResult("ok", "", low(a.t1, b.t1), low(a.tb, b.tb), low(a.tl, b.tl), low(a.tc, b.tc), other)


def _measure(path, key: dict, n_threads: int, n_gpu_layers: int, stage: StageFn | None,
             run: Callable[[Sequence[str], float], ProbeResult], command: Callable[..., list[str]]) -> RepackVerdict:
    """Run both probe children and decide (:func:`choose`, :func:`choose_prefill_copy`)."""
    from localspec.backend.machine import cpu_model

    t0 = time.perf_counter()
    if stage:
        stage(f"checking llama.cpp's weight repacking for {Path(path).name} on this CPU (a test decode in a child "
              "process; once per machine and model)")
    with_r = run(command(path, True, n_threads, n_gpu_layers), probe_timeout())
    # with the repacked layout out of the race, the standard one needs only to decode safely: one timing
    without_r = run(command(path, False, n_threads, n_gpu_layers, repeats=PROBE_REPEATS if with_r.ok else 1),
                    probe_timeout())
    if with_r.ok and without_r.ok:  # a second pair, alternating: a child's own outlier does not decide
        with_r = _fastest(with_r, run(command(path, True, n_threads, n_gpu_layers), probe_timeout()))
        without_r = _fastest(without_r, run(command(path, False, n_threads, n_gpu_layers), probe_timeout()))
    use, ratio, reason = choose(with_r, without_r, cpu_model())
    copy, read_ratio = choose_prefill_copy(with_r, without_r)
    if copy:
        reason += (f"; the standard layout read a {PROBE_PREFILL}-token prompt pass {read_ratio:.2f}x faster, "
                   "so a second copy of the weights in it reads prompts (--prefill-copy)")
    verdict = RepackVerdict(use=use, with_repack=with_r, without_repack=without_r, reason=reason, speed_ratio=ratio,
                            key=key, created=time.time(), probe_seconds=time.perf_counter() - t0, prefill_copy=copy,
                            prefill_ratio=read_ratio, fresh=True)
    if verdict.busy:
        other = max(r.other_cpu for r in (with_r, without_r) if r.ok and r.other_cpu is not None)
        verdict.reason += (f" (measured while other processes used {other:.0%} of the CPUs: kept until a start "
                           "finds the machine quiet, then measured again)")
    return verdict


def decide_repack(path: str | os.PathLike, mode: RepackMode, *, n_threads: int, n_gpu_layers: int = 0,
                  stage: StageFn | None = None, run: Callable[[Sequence[str], float], ProbeResult] = run_probe_child,
                  command: Callable[..., list[str]] = probe_command, use_cache: bool = True,
                  quiet: Callable[[], bool] | None = None) -> RepackVerdict | None:
    """Whether to load ``path`` with llama.cpp's weight repacking, by a probe in child processes.

    Args:
        path: GGUF file.
        mode: ``auto`` (the probe's verdict, and only where not slower), ``on`` (repack; refused
            where the probe saw it crash), ``off`` (no probe; returns None).
        n_threads, n_gpu_layers: the settings the model will load with (part of the cache key).
        stage: told what is being measured while a probe runs (a fresh probe takes a few seconds).
        run, command: how a child runs and its command line (tests pass fakes).
        use_cache: read and write the verdict cache (``$LOCALSPEC_CACHE/repack``).
        quiet: whether the machine is quiet now, asked only when the cached verdict was measured beside
            other work (default :func:`localspec.backend.load.machine_is_quiet`, one second); True: it is
            measured again, False: it is used as it is, so the layout does not change on a busy machine.

    Returns:
        The verdict (``use`` says whether to repack), or None for ``off``.

    Raises:
        ModelError: neither layout decodes (both children crashed or hung): llama.cpp cannot
            run this model on this machine; the message says what each child did.
        ConfigError: ``mode`` is ``on`` and the repacked weights crashed or hung in the probe.
    """
    if mode == "off":
        return None
    key = probe_key(path, n_threads, n_gpu_layers)
    verdict = load_verdict(key) if use_cache else None
    if verdict is not None and verdict.busy:
        if quiet is None:
            from localspec.backend.load import machine_is_quiet as quiet
        if quiet():  # measured beside other work, and the machine is quiet now: measured again
            verdict = None
    if verdict is None:
        verdict = _measure(path, key, n_threads, n_gpu_layers, stage, run, command)
        results = (verdict.with_repack, verdict.without_repack)
        if use_cache and (any(r.ok for r in results) or all(r.outcome == "crashed" for r in results)):
            save_verdict(verdict)  # a timeout or a failed load: measured again; a busy verdict is kept (see above)
    if not verdict.with_repack.ok and not verdict.without_repack.ok:
        if all(r.outcome == "failed" for r in (verdict.with_repack, verdict.without_repack)):
            return verdict  # not a crash: the in-process load reports the model's own error
        raise ModelError(
            f"llama.cpp cannot decode {Path(path).name} on this machine: with repacked weights the test decode "
            f"{verdict.with_repack.describe()}, without them it {verdict.without_repack.describe()}",
            "try another llama-cpp-python build (pip install --force-reinstall --no-binary llama-cpp-python "
            "llama-cpp-python) or fewer --n-threads; the probe runs again when the build changes")
    if mode == "on" and not verdict.with_repack.ok:
        raise ConfigError(
            f"--repack on: llama.cpp's repacked weights {verdict.with_repack.describe()} in a test decode of "
            f"{Path(path).name} on this CPU; loading them would crash this process",
            "use --repack auto (the default) or --repack off")
    if mode == "on":
        verdict.use = True
    return verdict


if __name__ == "__main__":  # pragma: no cover - the probe child; tested through decide_repack
    sys.exit(_child_main())
