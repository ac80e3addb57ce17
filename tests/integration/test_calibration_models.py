"""Calibration on the real tiny model: two contexts, flash attention chosen by measurement, the cache."""

import re

import numpy as np
import pytest
from helpers import assert_greedy_equal

from localspec import cli

from localspec.backend import calibration
from localspec.backend.llama import LlamaModel
from localspec.config import DraftParams, GenerationParams, ModelSettings, SamplingParams
from localspec.errors import ConfigError
from localspec.app.loader import load_model, make_engine

pytestmark = pytest.mark.tiny


def _log_softmax(x):
    x = x.astype(np.float64) - x.max()
    return x - np.log(np.exp(x).sum())


def test_flash_attn_switch_recreates_the_context(tiny_path):
    with LlamaModel(tiny_path, n_ctx=512, n_batch=128, flash_attn=False) as m:
        prompt = m.tokenize("The capital of France is")
        off = m.decode(prompt, "last")[0]
        m.set_flash_attn(True)
        assert m.flash_attn is True and m.cached_tokens == []  # a new context: the cache starts empty
        on = m.decode(prompt, "last")[0]
        assert m.cached_tokens == prompt
        # the same model either way: the same next token; log-probabilities of the 20 most likely
        # tokens equal up to rounding (flash attention accumulates in f16: about 0.3 on this model)
        assert int(np.argmax(on)) == int(np.argmax(off))
        top = np.argsort(off)[-20:]
        assert np.max(np.abs(_log_softmax(on)[top] - _log_softmax(off)[top])) < 0.5
        m.set_flash_attn(True)  # unchanged: the cache is kept
        assert m.cached_tokens == prompt


def test_calibration_measures_both_settings_and_the_choice_is_cached(tiny_path, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    # on a shared machine this calibration may be disturbed, and a disturbed one is not saved (tested in
    # tests/unit/backend/test_calibration.py); here the cache itself is under test, so any measurement counts as quiet
    monkeypatch.setattr(calibration, "BUSY_THRESHOLD", 1.01)
    # repack fixed: with "auto" a verdict measured on a busy machine is measured again at a quiet start, so the
    # second load below could decide otherwise and read another cache entry (the layout is in the key)
    ms = ModelSettings(model=str(tiny_path), n_ctx=1024, n_batch=256, n_threads=2, flash_attn="auto", repack="off")
    m = load_model(ms)
    try:
        assert m.flash_attn is False  # not measured on this machine yet: off, as llama-cpp-python's Llama
        costs = calibration.get_costs(m, 5, repeats=1, contexts=(64, 256))
        assert set(costs.flash_attn_scores) == {"on", "off"}
        sc = costs.flash_attn_scores
        chosen = sc["on"] * (1 + calibration.FLASH_ATTN_MARGIN) < sc["off"]  # on only when clearly faster
        assert costs.flash_attn is chosen and m.flash_attn is chosen
        assert costs.contexts == [64, 256]
        assert all(len(c) == 5 and list(c) == sorted(c) for c in costs.curves)
        assert costs.prefill_token_seconds is not None and costs.prefill_token_seconds > 0
        assert costs.calibration_seconds > 0
        key = costs.key
        assert (key["flash_attn"], key["n_ctx"], key["n_batch"], key["n_ubatch"]) == ("auto", 1024, 256, 256)
        assert "llama.cpp" in key["llama_cpp_python"] and key["cpu"]
        assert m.cached_tokens == []
    finally:
        m.close()
    m2 = load_model(ms)  # a fresh load applies the cached choice without measuring
    try:
        assert m2.flash_attn is chosen
        assert calibration.get_costs(m2, 5).created == costs.created
    finally:
        m2.close()
    forced = load_model(ms.model_copy(update={"flash_attn": "on"}))
    try:
        assert forced.flash_attn is True and calibration.load_costs(forced, 5) is None  # its own cache entry
    finally:
        forced.close()


def test_auto_on_tiny_calibrates_the_draft_catch_up_and_stays_exact(tiny_path, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    target = LlamaModel(tiny_path, n_ctx=512, n_batch=256)
    draft = LlamaModel(tiny_path, n_ctx=512, n_batch=128)  # another cache entry than the target
    engine = make_engine(target, draft)  # its costs from this machine: the cache, or measured
    try:
        text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
        prompt = engine.chat_tokens([{"role": "user", "content": "Repeat this code exactly:\n" + text}])
        greedy, gen = SamplingParams(temperature=0.0), GenerationParams(max_tokens=40)
        ref = engine.generate(prompt, greedy, DraftParams(mode="none"), gen).run()
        with pytest.raises(ConfigError, match="not measured yet"):  # generate never measures
            engine.generate(prompt, greedy, DraftParams(mode="auto", draft_max=8), gen)
        engine.calibrated_costs(8)
        auto = engine.generate(prompt, greedy, DraftParams(mode="auto", draft_max=8), gen).run()
        assert auto.token_ids == ref.token_ids
        ec = engine.cost_model
        # the long context as long as the window allows; the short one exactly, although the cache held the prompt
        assert ec.target.contexts == [calibration.SHORT_CONTEXT, 512 - 9]
        assert ec.draft.contexts == [calibration.SHORT_CONTEXT, 512 - 2]
        assert ec.draft.prefill_token_seconds > 0
        if not any(r.catchup_tokens for r in auto.rounds):
            # no catch-up observed (auto did not switch to the draft model): still the calibrated value
            assert ec.draft_prefill_token_seconds == ec.draft.prefill_token_seconds
        else:  # observed catch-ups correct it (EngineCosts.observe_catchup), e.g. on a busy machine
            assert ec.draft_prefill_token_seconds > 0
        assert ec.position is not None and ec.position >= len(prompt)  # the policy predicted where it ran
    finally:
        engine.close()


def test_calibrate_command_prints_both_contexts_and_the_ceiling(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    args = ["--target", "smollm2-135m", "--draft", "smollm2-135m", "--draft-max", "3", "--repeats", "1",
            "--n-ctx", "256", "--long-context", "192", "--flash-attn", "off"]
    assert cli.main(["calibrate", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU ")
    assert "ms @16" in out and "ms @192" in out
    assert "flash attention off (as asked)" in out and "prefill (catch-up)" in out
    hp = next(line for line in out.splitlines() if line.startswith("weights in 2 MiB huge pages: target "))
    mib = [int(x) for _, x in re.findall(r"(target|draft) (\d+) MiB", hp)]
    assert len(mib) == 2 and (max(mib) == 0) == ("not available" in hp)
    assert "calibrated ceiling at 16 tokens of context" in out and "calibrated ceiling at 192 tokens" in out
    assert cli.main(["calibrate", *args[:-6], "--long-context", "0"]) != 0
    assert "error: --repeats and --long-context must be >= 1" in capsys.readouterr().err


def test_auto_drafts_past_the_old_cap_of_8_with_a_long_prediction_and_stays_exact(tiny_path, tmp_path, monkeypatch):
    """Mode auto's default cap is 64: a prediction the answer follows is drafted in rounds longer than
    the old default of 8, the calibration covers b = 1..65 (measured at a few points), and the
    greedy answer is token-identical to target-only decoding."""
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    target = LlamaModel(tiny_path, n_ctx=1024, n_batch=256)
    engine = make_engine(target)
    try:
        text = "".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n\n\n" for i in range(12))
        prompt = engine.chat_tokens([{"role": "user", "content": "Repeat this code exactly:\n" + text}])
        greedy, gen = SamplingParams(temperature=0.0), GenerationParams(max_tokens=200)
        ref = engine.generate(prompt, greedy, DraftParams(mode="none"), gen).run()
        pred = engine.tokenize(ref.text, special=False)
        engine.calibrated_costs(DraftParams(mode="auto").cap)
        auto = engine.generate(prompt, greedy, DraftParams(mode="auto"), gen, prediction=pred).run()
        # token-identical, or the first difference at a near-tie of the target (C1: a batched pass rounds
        # differently from a one-token pass; seen at token 150 on an AMD EPYC without AVX-512)
        differs = assert_greedy_equal(engine, prompt, ref.token_ids, auto.token_ids, "auto with a prediction")
        rounds, done = [], 0
        for r in auto.rounds:  # the rounds up to the first difference (after it the prediction no longer fits)
            if differs and done >= differs[0]:
                break
            rounds.append(r)
            done += r.committed
        ec = engine.cost_model
        assert len(ec.verify) == 65 and ec.target.points == calibration.calibration_points(65)
        assert max(r.draft_len_chosen for r in rounds) > 8
        assert max(r.accepted for r in rounds) > 8
    finally:
        engine.close()


def test_a_disturbed_calibration_at_load_is_said_once_and_not_saved(tiny_path, tmp_path, monkeypatch):
    """The front-ends' load (server, TUI) said "once (cached)" even when other programs disturbed the
    measurement, which is then used for this run only; now the engine carries one notice saying so."""
    from localspec.config import Settings
    from localspec.app.loader import DISTURBED_NOTICE, load_engine

    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    ms = ModelSettings(model=str(tiny_path), n_ctx=512, n_batch=128, n_threads=1, flash_attn="off", repack="off")
    settings = Settings(target=ms, draft=ms, drafting=DraftParams(mode="auto", draft_max=4))
    stages = []
    monkeypatch.setattr(calibration, "BUSY_THRESHOLD", -1.0)  # any share of the CPUs by others counts as disturbed
    eng = load_engine(settings, stage=stages.append)
    try:
        assert eng.notices.count(DISTURBED_NOTICE) == 1 and eng.cost_model.disturbed
        assert "unless other programs disturb it" in stages[-1]
        assert not list(tmp_path.glob("costs/*.json"))  # used for this run, not saved
    finally:
        eng.close()
    monkeypatch.setattr(calibration, "BUSY_THRESHOLD", 1.01)  # quiet
    eng = load_engine(settings)
    try:
        assert DISTURBED_NOTICE not in eng.notices and not eng.cost_model.disturbed
        assert list(tmp_path.glob("costs/*.json"))
    finally:
        eng.close()
