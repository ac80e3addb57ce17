"""Logprobs on the tiny model (issue 32, item 3): in every mode, the logprob of each committed
token is the log-softmax of the target's raw logits at its position, whichever pass computed it.

Tolerance: a speculative round reads a token's row from a batched verification pass over g + 1
positions, mode none from a one-token pass. llama.cpp does not promise that a batch computes a row
as a one-token pass does: its kernels change with the batch size, summing in another order; the
log-softmax adds no error of its own (float64). Measured on SmolLM2-135M, 2 CPU cores (AMD EPYC,
no AVX-512), drafts up to 32 tokens:

- flash attention on (llama.cpp's default, which ``tiny_engine`` keeps): 0.0, bit-identical;
  held to 1e-3 absolute (:data:`TOL`), room for machines whose small batches sum differently.
- flash attention off (localspec's loader until ``localspec calibrate`` has measured the faster
  setting, so ``localspec serve`` out of the box): the attention's batched path differs from the
  one-token one by up to 0.12 in a committed token's logprob here (5.5e-2 on the server test's
  prompt) and up to 0.8 in the unlikely alternatives of ``top_logprobs`` (logprobs near -7); 1e-3
  cannot be held: the committed tokens' logprobs are held to :data:`TOL_FLASH_OFF`, the alternatives
  not compared. Mode none itself still equals a one-token evaluation within 1e-3.
- a prefill-sized batch (~100 tokens): up to 1.5e-2 (:func:`test_a_prefill_sized_pass_differs_more`).
 Positions after the first token where two modes differ are not
compared (a near-tie of the target may change the token there and everything after it, cases.md C1).
"""

from __future__ import annotations

import numpy as np
import pytest

from cost_curves import FLAT_CURVE, T1, costs_for
from helpers import PROMPTS, TOL_FLASH_OFF, run
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.events import TokenEvent
from localspec.core.policy import AdaptivePolicy
from localspec.core.sampling import log_softmax

pytestmark = pytest.mark.tiny

TOL = 1e-3
#: a prefill-sized batch against the one-token pass (:func:`test_a_prefill_sized_pass_differs_more`)
PREFILL_TOL = 5e-2
N_TOP = 5
MAX_TOKENS = 48


def generate(engine, prompt, mode):
    """(token ids, logprobs, top-N logprob values by rank) of a greedy generation in ``mode``;
    mode auto runs on fixed costs (a flat verification curve), so it needs no calibration."""
    policy = AdaptivePolicy(costs_for(FLAT_CURVE, draft_token=T1 / 4), 6, has_draft=True) if mode == "auto" else None
    gen = engine.generate(prompt, SamplingParams(temperature=0.0), DraftParams(mode=mode, draft_max=6),
                          GenerationParams(max_tokens=MAX_TOKENS), policy=policy, logprobs=N_TOP)
    events = [e for e in gen if isinstance(e, TokenEvent)]
    assert [e.token_id for e in events] == gen.token_ids
    return ([e.token_id for e in events], np.array([e.logprob for e in events]),
            np.array([[v for _, v in e.top_logprobs] for e in events]), gen)


@pytest.fixture(scope="module", params=["flash-default", "flash-off"])
def setup(request, engines, tiny_path):
    """(engine, tolerance): SmolLM2 drafting for itself, flash attention as llama.cpp chooses (on,
    ``tiny_engine``) or off (as the loader leaves it until calibrated)."""
    if request.param == "flash-default":
        return engines.get(tiny_path, n_ctx=2048, n_batch=512), TOL
    return engines.get(tiny_path, n_ctx=2048, n_batch=512, flash_attn=False), TOL_FLASH_OFF


@pytest.fixture(scope="module")
def prompt(setup):
    return setup[0].chat_tokens([{"role": "user", "content": PROMPTS[1]}])


@pytest.fixture(scope="module")
def reference(setup, prompt):
    return generate(setup[0], prompt, "none")


def common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("mode", ["lookup", "draft", "auto"])
def test_every_mode_equals_mode_none_on_the_common_prefix(setup, prompt, reference, mode):
    (engine, tol), ref_ids = setup, reference[0]
    ids, lps, tops, gen = generate(engine, prompt, mode)
    _, ref_lps, ref_tops, _ = reference
    n = common_prefix(ids, ref_ids)
    assert n >= 16, f"{mode}: only {n} tokens in common with mode none"
    assert gen.stats.drafted > 0 and gen.stats.accepted > 0, f"{mode} never speculated: nothing tested"
    assert np.max(np.abs(lps[:n] - ref_lps[:n])) <= tol
    if tol == TOL:  # the k-th largest logprob, rank by rank (flash attention off: the tail moves up to 0.8)
        assert np.max(np.abs(tops[:n] - ref_tops[:n])) <= tol
    assert np.all(lps[:n] <= tops[:n, 0] + 1e-12) and np.all(np.diff(tops, axis=1) <= 0)


def test_mode_none_equals_a_direct_llama_cpp_evaluation(setup, prompt, reference):
    """From an empty KV cache: the prompt but its last token in one pass, then one-token passes
    (LlamaModel.decode of the newest token, the log-softmax of its row) over each prefix."""
    ids, lps, tops, _ = reference
    target, seq = setup[0].target, list(prompt)
    target.reset()  # no K/V left by the other modes' batched passes
    target.decode(seq[:-1], logits_for=())
    diffs = []
    for i, tok in enumerate(ids):
        row = log_softmax(target.decode(seq[len(seq) - 1:], "last")[0])
        diffs.append(max(abs(row[tok] - lps[i]), np.max(np.abs(np.sort(row)[::-1][:N_TOP] - tops[i]))))
        seq.append(tok)
    assert max(diffs) <= TOL
    target.reset()


def test_a_prefill_sized_pass_differs_more(setup, prompt, reference):
    """Why the tolerance is about small batches: the last row of one pass over the whole prefix
    (~100 tokens, llama.cpp's batched matrix kernels) differs from the one-token pass by up to
    1.5e-2 on SmolLM2-135M (measured: 1.1e-2, 1.4e-4, 1.5e-2 at the three cuts), more than TOL; verification passes (g + 1 <= 7 tokens) stay
    within TOL (the tests above). Bounded here at :data:`PREFILL_TOL` so that a change shows."""
    ids, lps, _, _ = reference
    target, worst = setup[0].target, 0.0
    for cut in (0, len(ids) // 2, len(ids) - 1):
        target.reset()
        row = log_softmax(target.decode(list(prompt) + ids[:cut], "last")[0])
        worst = max(worst, abs(row[ids[cut]] - lps[cut]))
    target.reset()
    assert worst <= PREFILL_TOL


def test_speculation_changes_nothing_when_not_asked(setup, prompt):
    gen, events = run(setup[0], prompt, "lookup", 12)
    assert all(e.logprob is None and e.top_logprobs is None for e in events if isinstance(e, TokenEvent))
