"""Weight repacking: the decision from a probe's verdicts, the cache and its invalidation, the
setting reaching both models and the bench's peers. The children here are real processes that
behave like a probe (print timings, die by a signal, hang, fail); the real probe on the tiny
model is tested in tests/integration/test_tiny.py."""

from __future__ import annotations

import json
import signal
import sys

import pytest

from localspec.backend import repack as rp
from localspec.errors import ConfigError, ModelError


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


OK_FAST = 'print(\'{"t1": 0.010, "tb": 0.030}\')'
OK_SLOW = 'print(\'{"t1": 0.012, "tb": 0.036}\')'
SEGV = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
HANG = "import time; time.sleep(60)"
FAIL = "import sys; sys.stderr.write('llama_model_load: error loading model\\n'); sys.exit(1)"


@pytest.fixture()
def gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "cache"))
    p = tmp_path / "m.gguf"
    p.write_bytes(b"GGUF" + b"\0" * 2000)
    return p


def _commands(with_repack: str, without: str):
    """A ``command`` for decide_repack whose children run the given code, and a log of the calls."""
    calls = []

    def command(path, repack, n_threads, n_gpu_layers, repeats=rp.PROBE_REPEATS):
        calls.append(repack)
        command.repeats.append(repeats)
        return _child(with_repack if repack else without)

    command.repeats = []
    return command, calls


def test_a_child_killed_by_a_signal_is_a_crash_and_the_parent_lives():
    r = rp.run_probe_child(_child(SEGV), timeout=30)
    assert r.outcome == "crashed" and "SIGSEGV" in r.detail and not r.ok


def test_a_hanging_child_is_a_timeout():
    r = rp.run_probe_child(_child(HANG), timeout=1)
    assert r.outcome == "timeout" and not r.ok


def test_a_child_that_fails_says_why():
    r = rp.run_probe_child(_child(FAIL), timeout=30)
    assert r.outcome == "failed" and "error loading model" in r.detail


def test_a_child_that_prints_timings_is_ok():
    r = rp.run_probe_child(_child(OK_FAST), timeout=30)
    assert r.ok and r.t1 == pytest.approx(0.010) and r.tb == pytest.approx(0.030)


def test_crash_with_repacking_turns_it_off_and_says_why(gguf):
    command, calls = _commands(SEGV, OK_FAST)
    stages = []
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, stage=stages.append)
    assert v.use is False and v.unsafe and v.fresh
    assert v.with_repack.outcome == "crashed" and v.without_repack.ok
    assert "SIGSEGV" in v.reason and "not repacked" in v.reason
    assert calls == [True, False] and len(stages) == 1 and "child process" in stages[0]
    # the standard layout, alone in the race, is only checked: one timing instead of PROBE_REPEATS
    assert command.repeats == [rp.PROBE_REPEATS, 1]


def test_a_hang_with_repacking_turns_it_off(gguf):
    command, _ = _commands(HANG, OK_FAST)
    old = rp.probe_timeout
    rp.probe_timeout = lambda: 1.0
    try:
        v = rp.decide_repack(gguf, "auto", n_threads=2, command=command)
    finally:
        rp.probe_timeout = old
    assert v.use is False and v.with_repack.outcome == "timeout"


def test_safe_and_faster_keeps_repacking_safe_and_slower_drops_it(gguf, tmp_path, monkeypatch):
    command, _ = _commands(OK_FAST, OK_SLOW)
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert v.use is True and v.speed_ratio == pytest.approx(10 / 12)
    # both layouts decode: both timed in full, twice, alternating
    assert command.repeats == [rp.PROBE_REPEATS] * 4
    command, _ = _commands(OK_SLOW, OK_FAST)
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert v.use is False and v.speed_ratio == pytest.approx(1.2) and "slower" in v.reason


def test_the_verdict_is_cached_and_measured_again_when_the_key_changes(gguf):
    command, calls = _commands(SEGV, OK_FAST)
    first = rp.decide_repack(gguf, "auto", n_threads=2, command=command)
    again = rp.decide_repack(gguf, "auto", n_threads=2, command=command)
    assert calls == [True, False]  # the second call read the cache
    assert again.fresh is False and again.use is False and again.reason == first.reason
    path = rp.verdict_path(first.key)
    assert path.exists() and json.loads(path.read_text())["with_repack"]["outcome"] == "crashed"
    rp.decide_repack(gguf, "auto", n_threads=1, command=command)  # other settings: another key
    assert calls == [True, False, True, False]
    gguf.write_bytes(b"GGUF" + b"\1" * 3000)  # the model file changed
    rp.decide_repack(gguf, "auto", n_threads=2, command=command)
    assert len(calls) == 6


def test_the_key_names_the_machine_and_the_llama_cpp_build(gguf):
    key = rp.probe_key(gguf, 2, 0)
    for field in ("cpu", "cpu_flags", "hostname", "llama_cpp_python", "size", "mtime", "n_threads"):
        assert field in key
    other = dict(key, llama_cpp_python="0.0.1 (another build)")
    assert rp.verdict_path(other) != rp.verdict_path(key)


def test_off_runs_no_probe(gguf):
    command, calls = _commands(SEGV, SEGV)
    assert rp.decide_repack(gguf, "off", n_threads=2, command=command) is None
    assert calls == []


def test_on_is_refused_where_the_probe_crashed_and_kept_where_safe(gguf):
    command, _ = _commands(SEGV, OK_FAST)
    with pytest.raises(ConfigError) as e:
        rp.decide_repack(gguf, "on", n_threads=2, command=command, use_cache=False)
    assert "--repack on" in e.value.message and "auto" in e.value.hint
    command, _ = _commands(OK_SLOW, OK_FAST)
    assert rp.decide_repack(gguf, "on", n_threads=2, command=command, use_cache=False).use is True


def test_nothing_decodes_is_a_model_error_not_a_signal(gguf):
    command, _ = _commands(SEGV, SEGV)
    with pytest.raises(ModelError) as e:
        rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert ModelError.exit_code == 3
    assert "cannot decode" in e.value.message and "SIGSEGV" in e.value.message and e.value.hint


def test_a_load_failure_in_both_children_is_left_to_the_real_load(gguf):
    """A file llama.cpp cannot load is not a crash: the in-process load says what is wrong with it."""
    command, _ = _commands(FAIL, FAIL)
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert v.use is False and v.with_repack.outcome == v.without_repack.outcome == "failed"
    assert not rp.verdict_path(v.key).exists()  # not cached: measured again next time


def test_the_setting_reaches_both_models(monkeypatch, tmp_path):
    """--repack on the command line reaches the target's and the draft's settings, and the loader
    passes the verdict's choice to the backend."""
    import argparse

    from localspec.app import loader
    from localspec.config import ModelSettings
    from localspec.app.flags import add_generation_arguments, add_model_arguments, settings_from_args

    p = argparse.ArgumentParser()
    add_model_arguments(p)
    add_generation_arguments(p)
    s = settings_from_args(p.parse_args(["--repack", "off"]))
    assert s.target.repack == "off" and s.draft.repack == "off"
    assert settings_from_args(p.parse_args([])).target.repack == "auto"
    with pytest.raises(SystemExit):
        p.parse_args(["--repack", "maybe"])

    seen = {}

    class FakeModel:
        def __init__(self, path, **kw):
            seen.update(kw)

    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 2000)
    monkeypatch.setattr(loader, "resolve_model", lambda name, progress=None: gguf)
    monkeypatch.setattr(loader, "LlamaModel", FakeModel)
    verdict = rp.RepackVerdict(use=False, with_repack=rp.ProbeResult("crashed", "killed by SIGSEGV"),
                               without_repack=rp.ProbeResult("ok", "", 0.01, 0.03), reason="why", fresh=True)
    monkeypatch.setattr(loader, "decide_repack", lambda *a, **k: verdict)
    notices: list[str] = []
    m = loader.load_model(ModelSettings(model="x", repack="auto", flash_attn="off"), notices=notices)
    assert seen["repack"] is False and m.repack_verdict is verdict
    assert notices and "why" in notices[0]
    verdict.use = True
    loader.load_model(ModelSettings(model="x", repack="auto", flash_attn="off"), notices=notices)
    assert seen["repack"] is True and len(notices) == 1  # told once, only when it was turned off


def test_the_bench_peer_loads_with_the_same_choice(monkeypatch):
    """run_llama_cpp_peer sets use_extra_bufts on the Llama's model params while it loads."""
    import llama_cpp

    from localspec.bench import peer

    seen = []

    class FakeLlama:
        def __init__(self, **kw):
            seen.append(bool(llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts))
            raise RuntimeError("stop here")

    monkeypatch.setattr(llama_cpp, "Llama", FakeLlama)
    for on in (False, True):
        with pytest.raises(RuntimeError):
            peer.run_llama_cpp_peer("/nonexistent.gguf", [1, 2], 1, repack=on)
    assert seen == [False, True]
    # and the patch is undone afterwards
    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True


def test_signal_names():
    assert rp._signal_name(int(signal.SIGILL)) == "SIGILL"
    assert rp.run_probe_child(["/nonexistent/binary"], 5).outcome == "failed"


# -- the prefill copy: the standard layout reads prompts where the repacked one decodes --------------
DECODES_FAST_READS_SLOW = 'print(\'{"t1": 0.010, "tb": 0.030, "tl": 0.90, "tc": 0.00001}\')'
DECODES_SLOW_READS_FAST = 'print(\'{"t1": 0.012, "tb": 0.036, "tl": 0.60, "tc": 0.00001}\')'
READS_ALIKE = 'print(\'{"t1": 0.012, "tb": 0.036, "tl": 0.85, "tc": 0.00001}\')'


def test_a_prefill_copy_where_repacking_decodes_faster_but_reads_prompts_slower(gguf):
    command, _ = _commands(DECODES_FAST_READS_SLOW, DECODES_SLOW_READS_FAST)
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert v.use is True and v.prefill_copy is True and v.prefill_ratio == pytest.approx(1.5)
    assert "1.50x faster" in v.reason and "--prefill-copy" in v.reason
    assert v.with_repack.tl == pytest.approx(0.90) and v.without_repack.tc == pytest.approx(0.00001)


def test_no_prefill_copy_below_the_speedup_or_where_the_standard_layout_is_kept(gguf):
    command, _ = _commands(DECODES_FAST_READS_SLOW, READS_ALIKE)  # 0.90 / 0.85 = 1.06x < 1.10x
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert v.use is True and v.prefill_copy is False and v.prefill_ratio == pytest.approx(0.90 / 0.85)
    command, _ = _commands(DECODES_SLOW_READS_FAST.replace("0.60", "0.95"), DECODES_FAST_READS_SLOW.replace("0.90", "0.5"))
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert v.use is False and v.prefill_copy is False  # the weights are not repacked: one layout does both
    command, _ = _commands(OK_FAST, OK_SLOW)  # a child of the old format: no prompt pass timed
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    assert v.use is True and v.prefill_copy is False and v.prefill_ratio is None


def test_the_prefill_verdict_survives_the_cache(gguf):
    command, _ = _commands(DECODES_FAST_READS_SLOW, DECODES_SLOW_READS_FAST)
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command)
    again = rp.decide_repack(gguf, "auto", n_threads=2, command=lambda *a, **k: pytest.fail("probed again"))
    assert again.prefill_copy is True and again.prefill_ratio == pytest.approx(v.prefill_ratio)
    assert again.with_repack.tl == pytest.approx(0.90) and not again.fresh


def test_a_prefill_copy_pays_only_where_the_time_saved_exceeds_the_copies():
    from localspec.backend.llama import PrefillCopy

    pc = PrefillCopy(model=None, gain_per_token=0.002, copy_per_token=0.00002, min_tokens=64)
    assert not pc.pays(0, 63)  # too short: a verification-sized pass stays where it is
    assert pc.pays(0, 64) and pc.pays(1000, 240)  # 0.48 s saved against 0.045 s of copies
    # a 64-token read after 20,000 cached tokens: 0.128 s saved, 0.80 s of copying
    assert not pc.pays(20000, 64) and pc.pays(20000, 1000)


def test_a_second_copy_fits_in_half_the_memory_left_beside_the_first_window():
    from localspec.backend.context import second_copy_fits

    gib = 1 << 30
    assert second_copy_fits(1 * gib, 2 * gib, 10 * gib)  # 3 <= (10 - 2) / 2
    assert not second_copy_fits(1 * gib, 2 * gib, 7 * gib)  # 3 > 2.5
    assert not second_copy_fits(1, 1, 0)


def test_the_header_line_says_when_a_copy_reads_prompts(gguf):
    command, _ = _commands(DECODES_FAST_READS_SLOW, DECODES_SLOW_READS_FAST)
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, use_cache=False)
    line = rp.describe_choice(True, v, prefill_copy=True)
    assert "900 ms per 64-token prompt pass" in line and "read by a second copy in the standard layout (1.50x" in line
    assert "second copy" not in rp.describe_choice(True, v)  # the probe allowed one, memory did not
    assert rp.choice_json(True, v, True)["prefill_copy"] is True and rp.choice_json(True, v)["prefill_copy"] is False


BUSY = 'print(\'{"t1": 0.010, "tb": 0.030, "other_cpu": 0.60}\')'
ALONE = 'print(\'{"t1": 0.012, "tb": 0.036, "other_cpu": 0.02}\')'


def test_a_verdict_measured_beside_other_work_is_kept_until_a_start_on_a_quiet_machine(gguf):
    """A probe child during whose timings other processes used 60 % of the CPUs: the verdict says so and is
    kept; a later start on a still busy machine uses it as it is (no child runs: the layout, and so the prompt
    snapshots and cost curves keyed by it, stays the same across restarts, where a verdict measured again each
    time flipped on noisy timings), and the first start on a quiet machine measures again and keeps that one."""
    command, calls = _commands(BUSY, ALONE)
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, quiet=lambda: False)
    assert v.busy and v.use is True and v.with_repack.other_cpu == pytest.approx(0.60)
    assert "other processes used 60%" in v.reason and "measured again" in v.reason
    assert rp.verdict_path(v.key).exists() and calls == [True, False, True, False]
    asked = []
    again = rp.decide_repack(gguf, "auto", n_threads=2, command=command, quiet=lambda: asked.append(1) or False)
    assert asked == [1] and calls == [True, False, True, False]  # busy still: kept, nothing measured
    assert again.use is v.use and again.busy
    faster_alone = 'print(\'{"t1": 0.010, "tb": 0.030, "other_cpu": 0.02}\')'
    command, calls = _commands(ALONE, faster_alone)  # quiet now, and the standard layout is faster this time
    v = rp.decide_repack(gguf, "auto", n_threads=2, command=command, quiet=lambda: True)
    assert calls == [True, False, True, False] and not v.busy and v.use is False
    assert not rp.load_verdict(v.key).busy and rp.load_verdict(v.key).use is False
    asked = []
    rp.decide_repack(gguf, "auto", n_threads=2, command=command, quiet=lambda: asked.append(1) or True)
    assert asked == [] and calls == [True, False, True, False]  # a verdict measured alone: not asked, not measured


def test_each_time_is_the_faster_of_two_children():
    """One slow child (its whole run) does not decide: the second pair's faster times count."""
    a = rp.ProbeResult("ok", "", 0.040, 0.343, 0.88, 1e-5, 0.01)
    b = rp.ProbeResult("ok", "", 0.031, 0.233, 0.64, 2e-5, 0.05)
    best = rp._fastest(a, b)
    assert (best.t1, best.tb, best.tl, best.tc, best.other_cpu) == (0.031, 0.233, 0.64, 1e-5, 0.05)
    assert rp._fastest(a, rp.ProbeResult("crashed", "killed by SIGSEGV")) == a
