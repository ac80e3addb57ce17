"""The prefill copy on the real tiny model: a second copy of the weights reads long prompts and its KV
cache is moved into the model's (:meth:`LlamaModel.attach_prefill_copy`). Both copies here use the same
layout, so every logit must equal a plain model's exactly: whatever differs is the copying, not the
kernels. The loader's choice (``--prefill-copy``) is tested with a verdict that asks for a copy."""

from __future__ import annotations

import numpy as np
import pytest

import localspec.backend.repack as rp
from localspec.backend.llama import LlamaModel
from localspec.errors import DecodeAborted

from generation import run

CTX = 512


def _model(path, n_ctx=CTX):
    return LlamaModel(path, n_ctx=n_ctx, n_batch=256, n_threads=2, huge_pages=False)


@pytest.fixture()
def models(tiny_path):
    """(model with a prefill copy that always pays from 16 tokens, the copy, a plain reference model)."""
    main, copy, ref = _model(tiny_path), _model(tiny_path), _model(tiny_path)
    main.attach_prefill_copy(copy, tl_repacked=1.0, tl_standard=0.0, copy_seconds_per_token=0.0, min_tokens=16)
    yield main, copy, ref
    main.close()  # closes the copy too
    ref.close()


def _tokens(model, n, salt=""):
    text = "".join(f"def f{salt}{i}(x):\n    return x * {i} + {salt or 0}\n\n" for i in range(200))
    toks = model.tokenize(text, add_special=False)
    assert len(toks) >= n
    return toks[:n]


def _same_next_logits(main, ref, probe_token):
    """Both caches hold the same tokens and give the same logits for one more token."""
    assert main.cached_tokens == ref.cached_tokens
    a = main.decode([probe_token], "last")
    b = ref.decode([probe_token], "last")
    main.truncate(main.n_cached - 1)
    ref.truncate(ref.n_cached - 1)
    np.testing.assert_array_equal(a, b)


def test_a_long_read_goes_to_the_copy_and_the_cache_comes_back_whole(models):
    main, copy, ref = models
    toks = _tokens(main, 120)
    assert len(main.decode(toks[:100], ())) == 0
    ref.decode(toks[:100], ())
    assert main.prefill_copy.tokens == 100 and copy.cached_tokens == toks[:100]
    _same_next_logits(main, ref, toks[100])
    rows = main.decode(toks[100:117], "last")  # the last row only: still a prompt read
    assert rows.shape == (1, main.n_vocab) and main.prefill_copy.tokens == 117
    np.testing.assert_array_equal(rows, ref.decode(toks[100:117], "last"))


def test_short_passes_and_passes_wanting_every_row_stay_here(models):
    main, copy, ref = models
    toks = _tokens(main, 60)
    main.decode(toks[:15], ())  # under min_tokens
    main.decode(toks[15:40], "all")  # a verification pass: logits for every position
    assert main.prefill_copy.tokens == 0 and copy.n_cached == 0 and main.n_cached == 40


def test_every_way_the_copy_catches_up_gives_the_same_cache(models):
    """The copy holds more than the model (truncated), something else (the model's cache copied
    there), or nothing while the model holds nothing (reset); each time the model ends as a plain one."""
    main, copy, ref = models
    a, b = _tokens(main, 200), _tokens(main, 200, salt="z")
    for m in (main, ref):
        m.decode(a[:150], ())
        m.truncate(60)  # the copy still holds 150: it agrees with the model's 60
        m.decode(a[60:120], ())
    assert copy.cached_tokens == a[:120]
    _same_next_logits(main, ref, a[120])
    for m in (main, ref):
        m.decode(a[120:125], ())  # short: read here, so the copy lacks these five
        m.decode(a[125:190], ())  # the model's cache goes to the copy first
    assert copy.cached_tokens == a[:190] and main.prefill_copy.tokens == 150 + 60 + 65
    _same_next_logits(main, ref, a[190])
    for m in (main, ref):
        m.reset()
        m.decode(b[:80], ())
    _same_next_logits(main, ref, b[80])


@pytest.mark.parametrize("mode", ["none", "lookup"])
def test_greedy_generation_is_token_identical_with_and_without_the_copy(models, mode):
    from localspec.core.engine import SpeculativeEngine

    main, copy, ref = models
    prompt = [main.bos, *_tokens(main, 150)]
    gens = []
    for m in (main, ref):
        gen, _ = run(SpeculativeEngine(m), prompt, mode, max_tokens=40)
        gens.append(gen.token_ids)
    assert main.prefill_copy.tokens >= len(prompt) - 1  # the prompt was read by the copy
    assert len(gens[0]) == 40 and gens[0] == gens[1]


def test_a_refused_cache_is_read_again_where_it_is_missing(models, monkeypatch):
    """The copy refuses the model's cache: it reads those tokens itself. The model refuses the copy's:
    the copy is dropped and the model reads everything itself. The logits stay a plain model's."""
    main, copy, ref = models
    toks = _tokens(main, 200)
    for m in (main, ref):
        m.decode(toks[:10], ())
    monkeypatch.setattr(copy, "load_state", lambda state: False)
    main.decode(toks[10:90], ())
    ref.decode(toks[10:90], ())
    assert copy.cached_tokens == toks[:90] and main.prefill_copy.tokens == 80
    np.testing.assert_allclose(main.decode([toks[90]], "last"), ref.decode([toks[90]], "last"), atol=1e-3)
    refusals = []

    def refuse(state):
        refusals.append(len(state.tokens))
        main.reset()  # as load_state leaves a cache llama.cpp refused: empty
        return False

    monkeypatch.setattr(main, "load_state", refuse)
    rows = main.decode(toks[91:170], "last")
    assert refusals == [170] and main.prefill_copy is None and copy._model is None  # dropped and closed
    assert main.cached_tokens == toks[:170] and rows.shape == (1, main.n_vocab)
    ref.reset()
    np.testing.assert_array_equal(rows, ref.decode(toks[:170], "last"))


def test_abort_reaches_the_copy_and_leaves_the_cache_as_it_was(models):
    main, copy, ref = models
    toks = _tokens(main, 120)
    main.decode(toks[:10], ())
    main.abort()
    assert copy.abort_requested
    with pytest.raises(DecodeAborted):
        main.decode(toks[10:110], ())
    assert main.cached_tokens == toks[:10]
    main.clear_abort()
    assert not copy.abort_requested
    main.decode(toks[10:110], ())
    ref.decode(toks[:10], ())
    ref.decode(toks[10:110], ())
    _same_next_logits(main, ref, toks[110])


def test_an_abort_in_the_middle_of_a_read_on_the_copy_keeps_its_batches_here(models):
    """Issue 45: a cancel after the copy read one 256-token batch of a long prompt; that batch is copied into
    the model's cache (as a read here keeps its batches) and reading on from there equals one uncut read."""
    main, copy, ref = models
    toks = _tokens(main, 480)
    main.decode(toks[:10], ())

    def abort_after_the_first_batch(done, total):
        if done == 256:
            main.abort()

    with pytest.raises(DecodeAborted):
        main.decode(toks[10:470], (), progress=abort_after_the_first_batch)
    assert main.prefill_copy.model is copy and copy.cached_tokens == toks[:266]
    assert main.cached_tokens == toks[:266]
    main.clear_abort()
    main.decode(toks[266:470], ())
    ref.decode(toks[:10], ())
    ref.decode(toks[10:470], ())
    _same_next_logits(main, ref, toks[470])


def test_a_copy_of_another_window_is_refused(tiny_path):
    main, other = _model(tiny_path), _model(tiny_path, n_ctx=256)
    try:
        with pytest.raises(ValueError, match="window"):
            main.attach_prefill_copy(other, 1.0, 0.0, 0.0, 16)
        assert main.prefill_copy is None
    finally:
        main.close()
        other.close()


def _verdict(path):
    from localspec.backend.repack import ProbeResult, RepackVerdict

    fast_decode = ProbeResult("ok", t1=0.01, tb=0.03, tl=0.9, tc=1e-5)
    fast_read = ProbeResult("ok", t1=0.012, tb=0.036, tl=0.6, tc=1e-5)
    return RepackVerdict(use=True, with_repack=fast_decode, without_repack=fast_read, reason="test",
                         prefill_copy=True, prefill_ratio=1.5)


def test_the_loader_attaches_a_copy_where_asked_and_memory_allows(tiny_path, monkeypatch):
    from localspec.app import loader
    from localspec.config import ModelSettings

    model = _model(tiny_path)
    model.repack = True  # as loaded with repacked weights; the verdict below asks for a copy
    stages, notes = [], []
    try:
        ms = ModelSettings(model=str(tiny_path), n_ctx=CTX)
        assert loader._attach_prefill_copy(model, ms, _verdict(tiny_path), stages.append, notes)
        pc = model.prefill_copy
        assert pc.model.repack is False and pc.model.n_ctx == model.n_ctx and pc.min_tokens == 64
        assert pc.gain_per_token == pytest.approx(0.3 / 64) and "1.50x faster" in stages[0] and notes == []
        assert not loader._attach_prefill_copy(model, ms.model_copy(update={"prefill_copy": "off"}), _verdict(tiny_path),
                                               None, notes)
        monkeypatch.setattr(loader, "available_memory", lambda: 0)
        other = _model(tiny_path)
        other.repack = True
        try:
            assert not loader._attach_prefill_copy(other, ms, _verdict(tiny_path), None, notes)
            assert other.prefill_copy is None and "no prefill copy" in notes[0] and "--n-ctx" in notes[0]
        finally:
            other.close()
    finally:
        model.close()
    assert pc.model._model is None  # closed with the model


@pytest.mark.parametrize("why", ["no state", "refused, cache kept", "refused, cache emptied"])
def test_no_state_from_the_copy_reads_only_the_new_tokens_here(models, monkeypatch, why):
    """The copy read the tokens but its cache does not come back: it gives no state (``save_state`` None),
    or this model refuses it without touching its cache (another flash-attention setting) or after
    emptying it (llama.cpp refused it). The model then holds each token once: ``held`` and the new
    tokens, not ``held`` twice; the logits are a plain model's."""
    main, copy, ref = models
    toks = _tokens(main, 200)
    for m in (main, ref):
        m.decode(toks[:30], ())
    if why == "no state":
        monkeypatch.setattr(copy, "save_state", lambda: None)
    else:
        def refuse(state):
            if why == "refused, cache emptied":
                main.reset()
            return False

        monkeypatch.setattr(main, "load_state", refuse)
    rows = main.decode(toks[30:120], "last")
    assert main.prefill_copy is None and copy._model is None  # dropped and closed
    assert main.n_cached == 120 and main.cached_tokens == toks[:120]
    if why == "refused, cache emptied":  # read here in one pass: so is the reference
        ref.reset()
        np.testing.assert_array_equal(rows, ref.decode(toks[:120], "last"))
    else:
        np.testing.assert_array_equal(rows, ref.decode(toks[30:120], "last"))
    _same_next_logits(main, ref, toks[120])


@pytest.fixture(scope="module")
def q4_0_path(tiny_path, tmp_path_factory):
    """The tiny model requantized to Q4_0, a type llama.cpp repacks on x86 and ARM CPUs (SmolLM2's Q4_1 is
    not repacked: ``repack=True`` would load the standard layout twice)."""
    import llama_cpp

    out = tmp_path_factory.mktemp("q4_0") / "smollm2-135m-q4_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, True, 2
    assert llama_cpp.llama_model_quantize(str(tiny_path).encode(), str(out).encode(), params) == 0
    return out


@pytest.mark.parametrize("copy_state", ["kept", "none"])
def test_a_repacked_model_beside_a_standard_layout_copy(q4_0_path, monkeypatch, copy_state):
    """The real case: repacked weights (their kernels round differently) read prompts through a copy in
    llama.cpp's standard layout. The KV cache that comes back is the copy's, byte for byte, and the model
    goes on from it in its own layout; where the copy gives no state, the model reads only the new tokens.
    Repacked weights crash llama.cpp on some CPUs (SIGSEGV or SIGILL with AMX): the repack probe's child decodes
    them first, and the test is skipped where it crashed (a crash here would end the whole pytest run)."""
    probe = rp.run_probe_child(rp.probe_command(q4_0_path, True, 2, 0, repeats=1), rp.probe_timeout())
    if probe.outcome == "crashed":
        pytest.skip(f"repacked weights crash llama.cpp on this CPU ({probe.detail}; the loader's probe avoids them)")
    main = LlamaModel(q4_0_path, n_ctx=CTX, n_batch=256, n_threads=2, huge_pages=False, repack=True)
    copy, ref = _model(q4_0_path), LlamaModel(q4_0_path, n_ctx=CTX, n_batch=256, n_threads=2, huge_pages=False,
                                              repack=True)
    main.attach_prefill_copy(copy, tl_repacked=1.0, tl_standard=0.0, copy_seconds_per_token=0.0, min_tokens=16)
    try:
        probe = _tokens(main, 20)
        layouts_differ = np.abs(ref.decode(probe, "last") - copy.decode(probe, "last")).max() > 0
        ref.reset()
        copy.reset()
        if not layouts_differ:
            pytest.skip("llama.cpp does not repack Q4_0 on this CPU: both copies share one layout")
        toks = _tokens(main, 200)
        main.decode(toks[:40], ())  # read by the copy
        assert main.prefill_copy.tokens == 40 and main.cached_tokens == toks[:40]
        state = main.save_state()
        assert bytes(state.data)[: state.nbytes] == bytes(copy.save_state().data)[: state.nbytes]
        assert ref.load_state(state)  # the reference: the same cache, then the repacked layout
        if copy_state == "none":
            monkeypatch.setattr(copy, "save_state", lambda: None)
        rows = main.decode(toks[40:130], "last")
        assert main.n_cached == 130 and main.cached_tokens == toks[:130]
        assert (main.prefill_copy is None) == (copy_state == "none")
        if copy_state == "none":  # read here, in this layout, on top of the 40 it held
            np.testing.assert_array_equal(rows, ref.decode(toks[40:130], "last"))
            _same_next_logits(main, ref, toks[130])
        else:
            assert main.prefill_copy.tokens == 130
            expected = ref.decode(toks[40:130], "last")  # computed in the other layout: close, same choice
            assert rows.argmax() == expected.argmax() and np.abs(rows - expected).max() < 2.0
    finally:
        main.close()
        ref.close()
