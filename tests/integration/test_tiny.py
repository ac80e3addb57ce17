"""Fast real-model tests on SmolLM2-135M drafting for itself."""

import pytest

from helpers import NEAR_TIE, PROMPTS, assert_greedy_equal, run, top2_gap
from localspec.core.drafters import Draft, DraftModelDrafter
from localspec.core.events import EndReason, TokenKind


class PlantingDrafter(DraftModelDrafter):
    """The real draft model, but every third proposed token is replaced by a wrong one."""

    def __init__(self, model):
        super().__init__(model)
        self.count = 0

    def draft(self, context, draft_len, drafting):
        d = super().draft(context, draft_len, drafting)
        toks = list(d.tokens)
        for i in range(len(toks)):
            self.count += 1
            if self.count % 3 == 0:
                toks[i] = (toks[i] + 17) % 49152
        return Draft(tuple(toks), d.probs, d.source)


@pytest.fixture(scope="module")
def prompts(tiny_engine):
    return [tiny_engine.chat_tokens([{"role": "user", "content": p}]) for p in PROMPTS]


@pytest.fixture(scope="module")
def references(tiny_engine, prompts):
    return [run(tiny_engine, p, "none", 160)[0].token_ids for p in prompts]


@pytest.mark.parametrize("mode", ["draft", "lookup"])
def test_greedy_exact(tiny_engine, prompts, references, mode):
    for i, (prompt, ref) in enumerate(zip(prompts, references)):
        assert len(ref) >= 128
        gen, _ = run(tiny_engine, prompt, mode, 160)
        assert_greedy_equal(tiny_engine, prompt, ref, gen.token_ids, f"{mode} prompt {i}")


def test_greedy_exact_with_planted_wrong_tokens(tiny_engine, prompts, references):
    real = tiny_engine.drafter
    tiny_engine.drafter = PlantingDrafter(tiny_engine.draft_model)
    try:
        gen, events = run(tiny_engine, prompts[0], "draft", 160)
    finally:
        tiny_engine.drafter = real
    assert_greedy_equal(tiny_engine, prompts[0], references[0], gen.token_ids, "planted")
    assert gen.stats.kinds.get(TokenKind.RESAMPLED.value, 0) > 0
    assert 0.0 < gen.stats.acceptance_rate < 1.0


def test_draft_equal_to_target_accepts_everything(tiny_engine, prompts):
    """cases.md C7: a draft equal to the target shows 1 in greedy mode, except where batched
    verification flips a near-tie (C1): every rejection must sit at one."""
    from localspec.core.events import RoundStats

    gen, events = run(tiny_engine, prompts[0], "draft", 64)
    assert 0.85 <= gen.stats.acceptance_rate <= 1.0
    prompt = prompts[0]
    done = 0
    for rs in (e for e in events if isinstance(e, RoundStats)):
        if rs.accepted < rs.drafted:
            prefix = list(prompt) + gen.token_ids[: done + rs.accepted]
            assert top2_gap(tiny_engine.target, prefix) < NEAR_TIE
        done += rs.committed


@pytest.mark.parametrize("n", [1, 2, 32])
def test_short_and_batch_sized_prompts(tiny_path, n):
    """cases.md C2: 1 token, 2 tokens, exactly n_batch tokens."""
    from localspec.backend.llama import LlamaModel
    from localspec.core.engine import SpeculativeEngine

    target = LlamaModel(tiny_path, n_ctx=256, n_batch=32)
    draft = LlamaModel(tiny_path, n_ctx=256, n_batch=32)
    eng = SpeculativeEngine(target, draft)
    try:
        base = eng.tokenize("def fibonacci(n):\n    " * 20)
        prompt = base[:n]
        assert len(prompt) == n
        ref, _ = run(eng, prompt, "none", 40)
        for mode in ("draft", "lookup"):
            gen, _ = run(eng, prompt, mode, 40, draft_max=5)
            assert_greedy_equal(eng, prompt, ref.token_ids, gen.token_ids, f"{mode} n={n}")
    finally:
        eng.close()


def test_special_tokens_parse_to_single_ids_and_one_bos(tiny_engine):
    """cases.md C4."""
    t = tiny_engine.target
    ids = t.tokenize("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == t.tokenize("<|im_start|>")[0] and len(t.tokenize("<|im_start|>")) == 1
    # a text that already starts with the BOS token gets exactly one BOS
    bos_text = t.token_bytes(t.bos, special=True).decode()
    forced = t.tokenize(bos_text + "hello", add_special=True)
    assert forced[0] == t.bos and forced[1] != t.bos
    # draft and target see identical ids (same call)
    msgs = [{"role": "user", "content": "hello"}]
    assert tiny_engine.chat_tokens(msgs) == tiny_engine.draft_model.tokenize(tiny_engine.draft_model.render_chat(msgs))


def test_emoji_and_cjk_stream_without_replacement_chars(tiny_engine):
    prompt = tiny_engine.chat_tokens([{"role": "user", "content": "Repeat exactly: 你好世界 🙂🚀 こんにちは 😀 안녕하세요"}])
    for mode in ("none", "lookup", "draft"):
        gen, events = run(tiny_engine, prompt, mode, 60)
        assert "\ufffd" not in gen.text
        assert all("\ufffd" not in e.text for e in events if hasattr(e, "text"))


@pytest.mark.parametrize("max_tokens", [1, 2, 3])
@pytest.mark.parametrize("mode", ["draft", "lookup"])
def test_max_tokens_small_with_long_drafts(tiny_engine, prompts, max_tokens, mode):
    gen, _ = run(tiny_engine, prompts[1], mode, max_tokens, draft_max=8)
    assert len(gen.token_ids) == max_tokens and gen.stats.end_reason == EndReason.MAX_TOKENS


def test_draft_catchup_measured_on_the_real_model(tiny_engine, prompts):
    """issue 8: a cold draft cache is caught up in one batch, timed apart from drafting."""
    tiny_engine.draft_model.reset()
    gen, events = run(tiny_engine, prompts[2], "draft", 24)
    rounds = [e for e in events if not hasattr(e, "token_id")]
    assert rounds[0].catchup_tokens == len(prompts[2]) - 1 and rounds[0].catchup_seconds > 0
    assert sum(r.catchup_tokens for r in rounds[1:]) == 0
    s = gen.stats
    assert s.catchup_seconds == rounds[0].catchup_seconds
    assert s.tokens_per_second == s.tokens / (s.elapsed_seconds - s.prefill_seconds - s.catchup_seconds)


def test_huge_pages_change_where_the_weights_sit_not_the_logits(tiny_path):
    """Weights read into huge pages (the default) and mapped from the file give the same logits, bit for bit."""
    import numpy as np

    from localspec.backend import hugepages
    from localspec.backend.llama import LlamaModel

    if not hugepages.available():  # both loads would map the file: nothing to compare
        mode = hugepages.thp_mode() or "none on this system"
        pytest.skip(f"no huge pages here (transparent huge pages: {mode}; needs Linux with THP 'always' or 'madvise')")
    with LlamaModel(tiny_path, n_ctx=256, n_batch=64, n_threads=1, huge_pages=True) as huge, \
            LlamaModel(tiny_path, n_ctx=256, n_batch=64, n_threads=1, huge_pages=False) as mapped:
        assert mapped.huge_pages is False and mapped.huge_page_bytes == 0
        assert huge.huge_pages is True
        if huge.huge_page_bytes == 0:
            pytest.skip("the kernel did not collapse (Linux < 6.1 has no MADV_COLLAPSE)")
        assert huge.huge_page_bytes >= 0.5 * tiny_path.stat().st_size  # most of the 98 MB file
        prompt = huge.tokenize("def fibonacci(n):\n    ")
        a, b = huge.decode(prompt, "all"), mapped.decode(prompt, "all")
        assert np.array_equal(a, b)
        toks_a, toks_b = [], []
        for toks, m, row in ((toks_a, huge, a[-1]), (toks_b, mapped, b[-1])):
            for _ in range(24):
                toks.append(int(np.argmax(row)))
                row = m.decode([toks[-1]])[-1]
        assert toks_a == toks_b


def test_the_repack_probe_runs_in_a_child_and_the_load_follows_it(tiny_path, tmp_path, monkeypatch):
    """The real probe on SmolLM2: child processes (with and without llama.cpp's weight
    repacking, twice where both decode), a verdict both can trust, and a load that follows it. On a CPU where repacking
    crashes (virtualized AMX Xeons) this process survives and loads without it."""
    import os

    from localspec.backend import repack as rp
    from localspec.config import ModelSettings
    from localspec.app.loader import load_model

    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    pids = []
    real_run = rp.run_probe_child

    def spy(command, timeout):
        pids.append(command)
        return real_run(command, timeout)

    v = rp.decide_repack(tiny_path, "auto", n_threads=2, run=spy)
    # each ran as its own process; where both layouts decode, a second pair (alternating) follows
    assert len(pids) in (2, 4) and all("localspec.backend.repack" in c for c in pids)
    assert [c[c.index("--repack") + 1] for c in pids] == ["on", "off", "on", "off"][:len(pids)]
    assert (len(pids) == 4) == (v.with_repack.ok and v.without_repack.ok)
    assert v.without_repack.ok, v.without_repack  # the standard layout decodes everywhere we run
    # the child measured the CPU share other processes took during its timings (a /proc machine)
    assert v.without_repack.other_cpu is not None and 0.0 <= v.without_repack.other_cpu <= 1.0, v.without_repack
    assert v.with_repack.outcome in ("ok", "crashed", "timeout", "failed")
    assert v.use == (v.with_repack.ok and v.speed_ratio is not None and v.speed_ratio <= 1.0)
    # kept, also when measured beside other work (a busy machine): then until a start finds the machine quiet,
    # which the load that follows does not (so it must use the kept verdict)
    assert rp.verdict_path(v.key).exists()
    monkeypatch.setattr("localspec.backend.load.machine_is_quiet", lambda *a, **k: False)
    monkeypatch.setattr(rp, "run_probe_child", lambda *a: pytest.fail("a cached verdict must not probe again"))
    model = load_model(ModelSettings(model=str(tiny_path), n_ctx=256, n_threads=2, huge_pages=False,
                                     flash_attn="off"))
    try:
        assert model.repack == v.use and model.repack_verdict.reason == v.reason
        # a batched decode, the one that crashes AMX kernels where they are unsafe
        rows = model.decode(model.tokenize("The quick brown fox jumps over the lazy dog"), logits_for="all")
        assert rows.shape[0] >= 8
    finally:
        model.close()
    assert os.getpid()  # still here


def test_cancel_stops_a_long_prefill_within_a_pass(tiny_engine):
    """Esc during a long prompt's prefill: the decode stops at once (llama.cpp's abort callback),
    the generation ends cancelled with nothing generated, and the next generation is exact."""
    import threading
    import time

    from localspec.config import DraftParams, GenerationParams, SamplingParams

    words = " ".join(f"word{i}" for i in range(1500))
    prompt = tiny_engine.tokenize(words)[:1800]
    tiny_engine.target.reset()
    seen = []
    gen = tiny_engine.generate(prompt, SamplingParams(), DraftParams(mode="none"), GenerationParams(max_tokens=8))
    gen.on_prefill = lambda done, total: seen.append((done, total))
    timer = threading.Timer(0.05, gen.cancel)
    t0 = time.perf_counter()
    timer.start()
    gen.run()
    stopped_after = time.perf_counter() - t0
    assert gen.stats.end_reason is EndReason.CANCELLED and gen.token_ids == []
    assert seen and seen[0] == (0, len(prompt) - 1)
    # the cache holds a prefix of the prompt (whole chunks), never a half-written chunk
    cached = tiny_engine.target.cached_tokens
    assert cached == prompt[: len(cached)] and len(cached) < len(prompt) - 1
    full = tiny_engine.generate(prompt, SamplingParams(), DraftParams(mode="none"), GenerationParams(max_tokens=8))
    t1 = time.perf_counter()
    full.run()
    uncut = time.perf_counter() - t1
    assert stopped_after < uncut  # the cancelled one did not read the whole prompt
    assert not tiny_engine.target.abort_requested
    ref = run(tiny_engine, prompt, "lookup", 8)[0]
    assert full.token_ids == ref.token_ids and len(ref.token_ids) == 8


def test_a_call_grammar_makes_the_tiny_model_write_a_valid_call_in_every_mode(tiny_engine):
    """tool_choice required, at the engine: SmolLM2 knows nothing of tools, yet under the grammar every
    answer is one call to the tool with schema-valid arguments; greedy is the same in every mode
    (the constraint acts on the target's rows inside the acceptance rule, drafts unconstrained)."""
    import json

    from localspec.server.tools import FORMATS, GRAMMAR_ROOT, ToolRequest, call_grammar, parse_all, new_parser

    schema = {"type": "object", "required": ["hour", "half"],
              "properties": {"hour": {"type": "integer"}, "half": {"enum": ["am", "pm"]}}}
    tools = [{"type": "function", "function": {"name": "set_alarm", "parameters": schema}}]
    treq = ToolRequest(tools=tools, names=("set_alarm",), choice="required", parallel=False,
                       format=FORMATS["hermes"])
    grammar = call_grammar(treq)
    prompt = tiny_engine.chat_tokens([{"role": "user", "content": "Wake me at seven in the morning."}])

    def one_call(gen):
        content, calls = parse_all(new_parser(treq), gen.text)
        assert gen.stats.end_reason == EndReason.EOG and content is None and len(calls) == 1, gen.text
        args = json.loads(calls[0].arguments)
        assert calls[0].name == "set_alarm" and isinstance(args["hour"], int) and args["half"] in ("am", "pm")
        return gen.token_ids

    greedy = {mode: one_call(run(tiny_engine, prompt, mode, 80, draft_max=8,
                                 constraint=tiny_engine.grammar(grammar, GRAMMAR_ROOT))[0])
              for mode in ("none", "lookup", "draft")}
    assert greedy["lookup"] == greedy["none"] and greedy["draft"] == greedy["none"]
    for seed in range(3):  # sampled, draft model: the ratio rule on masked rows
        # room for a long sampled integer (the schema bounds none): seen on an AMD EPYC, seed 0 wrote a
        # 16-digit hour and closed the call at token 80, one short of its end-of-generation token
        one_call(run(tiny_engine, prompt, "draft", 240, temperature=1.0, seed=seed,
                     constraint=tiny_engine.grammar(grammar, GRAMMAR_ROOT))[0])


def _asked_again(engine):
    """(target-only's greedy answer, a mode-auto generation not started yet of the same question asked a second
    time with the draft memory holding the first answer: its whole answer is a sure copy)."""
    from localspec.config import DraftParams, GenerationParams, SamplingParams
    from localspec.core.drafters import DraftMemory

    prompt = engine.chat_tokens([{"role": "user", "content": "List the planets of the solar system, one a line."}])
    greedy, gen = SamplingParams(temperature=0.0), GenerationParams(max_tokens=64)
    reference = engine.generate(prompt, greedy, DraftParams(mode="none"), gen).run()
    engine.calibrated_costs(16)
    memory = DraftMemory(4096)
    engine.generate(prompt, greedy, DraftParams(mode="auto", draft_max=16), gen, memory=memory).run()
    return reference, engine.generate(prompt, greedy, DraftParams(mode="auto", draft_max=16), gen, memory=memory)


def test_auto_streams_the_first_token_before_any_draft_even_with_a_sure_copy_in_memory(tiny_engine):
    """Issue 45 (time to first token): the same question asked again finds its whole answer in the draft memory,
    a copy auto drafts long; but the first round drafts nothing, so the first token is streamed after one
    one-token pass, and the copy is drafted from the second round on. Output token-identical to target-only."""
    from localspec.core.policy import FIRST_TOKEN_REASON

    reference, again = _asked_again(tiny_engine)
    again.run()
    assert again.token_ids == reference.token_ids
    first, second = again.rounds[0], again.rounds[1]
    assert (first.drafted, first.reason) == (0, FIRST_TOKEN_REASON)
    assert second.drafted > 0 and second.from_memory and second.accepted == second.drafted
    assert again.stats.time_to_first_token is not None


def test_auto_drafts_nothing_while_the_consumer_holds_the_whole_answer_then_drafts_the_copy(tiny_engine):
    """Issue 45 (time to first token): a consumer that holds back the start of an answer (the server's tool-call
    parser, at a possible call marker) says so through ``holds_output``; while it holds all the text so far the
    rounds draft nothing, even with the whole answer in the draft memory, so the client's first text waits for
    one-token passes only; then the copy is drafted. Output token-identical to target-only."""
    from localspec.core.policy import FIRST_TOKEN_REASON, HELD_OUTPUT_REASON

    engine = tiny_engine
    reference, again = _asked_again(engine)
    seen = []
    again.holds_output = lambda text: seen.append(text) or len(text) < 12  # "held" for the first 12 characters
    again.run()
    assert again.token_ids == reference.token_ids
    text_before = [engine.target.detokenize(reference.token_ids[:r]) for r in range(len(reference.token_ids))]
    held = [r.round for r in again.rounds if r.reason == HELD_OUTPUT_REASON]
    # one token a round until the text reaches 12 characters: round r starts after r tokens
    assert held and held == [r for r in range(1, held[-1] + 1) if len(text_before[r]) < 12]
    assert again.rounds[0].reason == FIRST_TOKEN_REASON
    for r in again.rounds[:held[-1] + 1]:
        assert r.drafted == 0 and r.committed == 1
    after = again.rounds[held[-1] + 1]
    assert len(text_before[held[-1] + 1]) >= 12
    assert after.drafted > 0 and after.from_memory and after.accepted == after.drafted
    assert seen[0] == text_before[1]  # asked with the committed output's text, from the second round on
    assert len(seen) == len(held) + 1 and again.holds_output is None  # not asked again once it said no
