"""The same rename asked twice, mode auto without a prediction (issue 44, item 5): the second answer is drafted
from the draft memory, which holds the first, and almost every drafted token is accepted.

The file in the prompt agrees with the answer between two renamed sites; the remembered answer agrees since
the answer began. Where both agree over the whole span prompt lookup compares (``MAX_CONTEXT`` tokens), the
one agreeing further back is copied (:class:`~localspec.core.drafters.PromptLookupDrafter`); the file's copy
would break at the next renamed site, a rejected draft at every site. On the tiny model, greedy; the policy
prices rounds by the Zen 4 curve recorded for it (no calibration here: what is tested is which source is
copied, not a speed)."""

from pathlib import Path

import pytest

from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.costmodel import EngineCosts
from localspec.core.drafters import DraftMemory
from localspec.core.policy import AdaptivePolicy
from traces import load_curve

pytestmark = pytest.mark.tiny

FILE = (Path(__file__).resolve().parents[2] / "scripts" / "bench_files" / "fnmatch.py").read_text()
REQUEST = ("Rename the function `translate` to `glob_to_regex` everywhere in this file (its definition, its calls, "
           "__all__ and the comments). Change nothing else. Reply with the complete updated file only, no "
           f"explanation.\n\n```python\n{FILE}```")


@pytest.fixture(scope="module")
def engine(engines, tiny_path):
    """SmolLM2 drafting for itself in a context that holds the file and its answer (n_ctx 4096), one thread (as
    the recorded curve the policy prices rounds by)."""
    return engines.get(tiny_path, n_ctx=4096, n_batch=512, n_threads=1)


def test_the_same_rename_asked_again_is_drafted_from_memory_and_accepted(engine):
    prompt = engine.chat_tokens([{"role": "user", "content": REQUEST}])
    greedy, limit, auto = SamplingParams(temperature=0.0), GenerationParams(max_tokens=1600), DraftParams(mode="auto")
    curve = load_curve("amd-zen4-avx512_SmolLM2-135M-Instruct.Q4_1_ctx4096_t1.json")

    def policy():
        return AdaptivePolicy(EngineCosts(verify=list(curve.seconds), draft_token=None, target=curve, draft=None),
                              auto.cap, has_draft=False)

    memory = DraftMemory(100_000)
    first = engine.generate(prompt, greedy, auto, limit, policy=policy(), memory=memory).run()
    second = engine.generate(prompt, greedy, auto, limit, policy=policy(), memory=memory).run()
    assert second.token_ids == first.token_ids and len(first.token_ids) > 600
    old, new = FILE.count("translate"), first.text.count("glob_to_regex")
    remembered = [r for r in second.rounds if r.from_memory]
    drafted, accepted = sum(r.drafted for r in second.rounds), sum(r.accepted for r in second.rounds)
    why = (f"{len(second.rounds)} rounds, {len(remembered)} from memory; drafted {drafted}, accepted {accepted}; "
           f"'translate' {old}x in the file, 'glob_to_regex' {new}x in the answer")
    assert sum(r.accepted for r in remembered) >= 0.8 * len(second.token_ids), why
    assert accepted >= 0.95 * drafted, why  # no draft broken at a site where the answer differs from the file
