"""The draft memory (:class:`localspec.core.drafters.DraftMemory`): earlier texts that prompt lookup copies
from, bounded by a token budget, the oldest evicted first, ranked as prompt lookup ranks its matches."""

import numpy as np
import pytest

from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.drafters import DraftMemory, PromptLookupDrafter
from localspec.core.drafters.lookup import MAX_CONTEXT
from localspec.core.drafters.memory import TOKEN_BYTES


def test_an_empty_memory_and_short_inputs_find_nothing():
    m = DraftMemory(100)
    assert m.find([1, 2, 3], 3, 1, 5) == ([], 0, 0)
    m.add([1, 2, 3, 4])
    assert m.find([], 3, 1, 5) == ([], 0, 0)
    assert m.find([1, 2], 3, 1, 0) == ([], 0, 0)  # draft_max 0
    assert m.find([9], 3, 2, 5) == ([], 0, 0)  # the context is shorter than the shortest n-gram
    m.add([])  # ignored
    assert (m.texts, m.tokens) == (1, 4)


def test_copies_what_followed_the_longest_ngram_and_stops_where_that_text_ended():
    m = DraftMemory(100)
    m.add([7, 1, 2, 3, 4, 5])
    assert m.find([9, 1, 2, 3], 3, 1, 2) == ([4, 5], 3, 3)
    assert m.find([9, 1, 2, 3], 3, 1, 10) == ([4, 5], 3, 3)  # not past the end of the earlier text
    assert m.find([7, 1, 2, 3], 3, 1, 10) == ([4, 5], 3, 4)  # one more token agrees before the 3-gram
    assert m.find([8, 9, 5], 3, 1, 4) == ([], 1, 1)  # the match ends its text: nothing to copy


def test_no_ngram_matches_across_two_texts():
    m = DraftMemory(100)
    m.add([1, 2])
    m.add([3, 4])
    assert m.find([2, 3], 2, 2, 3) == ([], 0, 0)  # "2 3" is not in either text
    assert m.find([2, 3], 2, 1, 3) == ([4], 1, 1)


def test_ranks_by_the_longest_agreeing_earlier_context_then_the_newest():
    m = DraftMemory(100)
    m.add([1, 2, 3, 5, 6, 10])  # "5 6" after "2 3"
    m.add([8, 9, 5, 6, 20])  # "5 6" after "8 9"
    m.add([4, 4, 5, 6, 30])  # "5 6" after "4 4": the newest
    assert m.find([0, 2, 3, 5, 6], 2, 1, 1) == ([10], 2, 4)  # the oldest agrees longest
    assert m.find([0, 8, 9, 5, 6], 2, 1, 1) == ([20], 2, 4)
    assert m.find([0, 0, 0, 5, 6], 2, 1, 1) == ([30], 2, 2)  # none agrees before: the newest


def test_the_match_length_is_capped_as_prompt_lookups():
    text = list(range(1, MAX_CONTEXT + 20))
    m = DraftMemory(10_000)
    m.add(text)
    copied, n, length = m.find(text[:-5], 3, 1, 4)
    assert copied == text[-5:-1] and n == 3 and length == 3 + MAX_CONTEXT


def test_the_oldest_whole_texts_are_evicted_first_within_the_budget():
    m = DraftMemory(10)
    m.add([1, 2, 3, 4])
    m.add([5, 6, 7, 8])
    assert (m.texts, m.tokens) == (2, 8)
    m.add([9, 10, 11])  # 11 tokens > 10: the oldest text goes, whole
    assert (m.texts, m.tokens) == (2, 7)
    assert m.find([1, 2], 2, 1, 2) == ([], 0, 0)
    assert m.find([5, 6], 2, 1, 2) == ([7, 8], 2, 2)
    assert m.nbytes == TOKEN_BYTES * (7 + 2)  # tokens and one separator per text, and their index


def test_a_text_longer_than_the_budget_keeps_its_end_and_a_zero_budget_keeps_nothing():
    m = DraftMemory(5)
    m.add([1, 2, 3])
    m.add(list(range(10, 20)))
    assert (m.texts, m.tokens) == (1, 5)
    assert m.find([15, 16], 2, 1, 9) == ([17, 18, 19], 2, 2)
    assert m.find([11, 12], 2, 2, 9) == ([], 0, 0)
    zero = DraftMemory(0)
    zero.add([1, 2, 3])
    assert (zero.texts, zero.tokens, zero.find([1, 2], 2, 1, 3)) == (0, 0, ([], 0, 0))
    with pytest.raises(ValueError, match="max_tokens must be >= 0"):
        DraftMemory(-1)


def test_a_repeated_text_is_held_once_as_the_newest():
    m = DraftMemory(7)
    m.add([1, 2, 3])
    m.add([4, 5, 6])
    m.add([1, 2, 3])  # again: moved to the newest place, not held twice
    assert (m.texts, m.tokens) == (2, 6)
    m.add([7, 8])  # the oldest is now [4, 5, 6]
    assert m.find([4, 5], 2, 1, 1) == ([], 0, 0)
    assert m.find([1, 2], 2, 1, 1) == ([3], 2, 2)
    m.clear()
    assert (m.texts, m.tokens, m.nbytes) == (0, 0, 0)


def test_prompt_lookup_uses_the_memory_only_where_it_agrees_longer():
    drafting = DraftParams(mode="lookup", max_ngram=3, min_ngram=1)
    m = DraftMemory(100)
    m.add([20, 21, 22, 23, 24, 25, 26])
    lookup = PromptLookupDrafter(m)
    d = lookup.draft([1, 21, 22, 23], 3, drafting)  # the context has no match of its own
    assert (d.tokens, d.match_length, d.from_memory) == ((24, 25, 26), 3, True)
    own = [22, 23, 5, 6, 22, 23]  # its own "22 23" agrees over 2 tokens, the memory's too: the context's wins
    d = lookup.draft(own, 2, drafting)
    assert (d.tokens, d.from_memory) == ((5, 6), False)
    d = lookup.draft([5, 21, 22, 23, 7, 20, 21, 22, 23], 2, drafting)  # the memory agrees over 4, the context over 3
    assert (d.tokens, d.match_length, d.from_memory) == ((24, 25), 4, True)
    assert PromptLookupDrafter().draft([1, 21, 22, 23], 3, drafting).tokens == ()


def test_where_both_agree_past_the_compared_span_the_source_agreeing_further_back_wins():
    """The same rename asked again (issue 44, item 5): the file in the prompt and the first answer in the memory
    both agree with the answer so far over the whole compared span (``MAX_CONTEXT``), but the prompt's file only
    since the last renamed site; its copy would break at the next site (50 tokens on), the memory's would not."""
    drafting = DraftParams(mode="lookup", max_ngram=3, min_ngram=1)
    rng = np.random.default_rng(0)
    file = [int(t) for t in rng.permutation(np.arange(1000, 1000 + 800))]  # no n-gram occurs twice
    old, new = file[100], 7  # the token renamed at two sites: 100 and 500 tokens into the file
    file[500] = old
    answer = [new if t == old else t for t in file]
    prompt = [1, 2, 3, *file, 4, 5]
    memory = DraftMemory(10_000)
    memory.add(prompt + answer)  # the first time the edit was asked
    context = prompt + answer[:450]  # asked again: 350 tokens past the first site, 50 before the second
    d = PromptLookupDrafter(memory).draft(context, 64, drafting)
    assert d.match_length == 3 + MAX_CONTEXT and d.from_memory  # a tie at the cap, broken by the far agreement
    assert list(d.tokens) == answer[450:514] and d.tokens[50] == new
    # the context's own copy (no memory) breaks at the site
    own = PromptLookupDrafter().draft(context, 64, drafting)
    assert own.match_length == 3 + MAX_CONTEXT and own.tokens[50] == old
    # where the prompt's file agrees further back than the memory (an earlier, other version remembered),
    # the context's own copy still wins
    memory2 = DraftMemory(10_000)
    memory2.add([9, 9, *answer[40:]])
    ahead = prompt + file[:450]
    d = PromptLookupDrafter(memory2).draft(ahead, 64, drafting)
    assert d.match_length == 3 + MAX_CONTEXT and not d.from_memory and list(d.tokens) == file[450:514]


def test_agreement_counts_backwards_to_the_first_difference_up_to_the_limit():
    from localspec.core.drafters.lookup import agreement

    hay = np.array([5, 1, 2, 3, 9, 9])
    ctx = np.array([0, 1, 2, 3, 4, 4])  # its last n=2 tokens are the n-gram; before them: 0 1 2 3
    assert agreement(hay, 4, ctx, 2, 100) == 3  # 3 2 1 agree, then 5 != 0
    assert agreement(hay, 4, ctx, 2, 2) == 2  # the limit
    assert agreement(hay, 0, ctx, 2, 100) == 0  # nothing before the start
    assert agreement(np.array([-1, 1, 2, 3]), 4, ctx, 2, 100) == 3  # a separator agrees with nothing


def test_find_reads_a_consistent_snapshot_while_another_thread_adds():
    import threading

    m = DraftMemory(1000)
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            m.add(np.arange(i % 50, i % 50 + 60))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(300):
            copied, n, _ = m.find([10, 11, 12], 3, 1, 5)
            assert copied == [] or copied == list(range(13, 13 + len(copied)))
    finally:
        stop.set()
        t.join()


# -- the engine: a generation drafts from what earlier ones said -------------------------------------
def _generate(eng, prompt, memory, mode="lookup"):
    from localspec.config import GenerationParams, SamplingParams

    gen = eng.generate(prompt, SamplingParams(temperature=0.0), DraftParams(mode=mode, draft_max=8),
                       GenerationParams(max_tokens=30), memory=memory)
    return gen.run()


@pytest.mark.parametrize("mode", ["lookup", "auto"])
def test_a_text_seen_only_in_an_earlier_generation_is_drafted_from_memory_and_the_output_is_unchanged(mode):
    from fakes import FakeModel, greedy_reference
    from localspec.core.engine import SpeculativeEngine
    from cost_curves import FLAT_CURVE, costs_for

    # the fake model's next token depends on the last two: both prompts end "t5 t7", so both answers
    # are the same text, which the second prompt does not contain
    first, second = [3, 5, 7], [11, 13, 5, 7]
    memory = DraftMemory(1000)
    eng = SpeculativeEngine(FakeModel(), None, costs=costs_for(FLAT_CURVE))
    plain = _generate(eng, second, None, mode)
    _generate(eng, first, memory, mode)
    assert (memory.texts, memory.tokens) == (1, 3 + 30)  # fed the prompt and its answer
    remembered = _generate(eng, second, memory, mode)
    assert remembered.token_ids == plain.token_ids == greedy_reference(second, 30)
    used = [r for r in remembered.rounds if r.from_memory]
    assert used and sum(r.accepted for r in used) >= 20
    assert not any(r.from_memory for r in plain.rounds)
    assert remembered.stats.rounds < plain.stats.rounds  # longer accepted drafts: fewer target passes
    assert memory.texts == 2


def test_the_settings_help_states_the_memorys_size_per_token():
    """The help's bytes per token are what the memory's arrays take (100 tokens and a separator)."""
    from localspec.config import DRAFT_MEMORY_BYTES_PER_TOKEN

    m = DraftMemory(1000)
    m.add(range(100))
    assert m.nbytes == DRAFT_MEMORY_BYTES_PER_TOKEN * 101


def test_sampled_output_is_unchanged_by_drafts_from_memory():
    """Issue 31, item 8: at temperature > 0 the target samples each verified position with the same seeded
    generator whether or not a point-mass draft sits there, so drafts from the memory (an earlier answer)
    change nothing: the tokens equal mode none's with the same seed, and the remembered run is accepted."""
    from fakes import FakeModel
    from localspec.core.engine import SpeculativeEngine
    from cost_curves import FLAT_CURVE, costs_for

    prompt, memory = [11, 13, 5, 7], DraftMemory(1000)
    eng = SpeculativeEngine(FakeModel(), None, costs=costs_for(FLAT_CURVE))
    sampling = SamplingParams(temperature=0.8, seed=5)

    def sampled(mode, mem):
        return eng.generate(prompt, sampling, DraftParams(mode=mode, draft_max=8), GenerationParams(max_tokens=30),
                            memory=mem).run()

    reference = sampled("none", None)
    sampled("lookup", memory)  # the first answer goes into the memory
    again = sampled("lookup", memory)
    assert again.token_ids == reference.token_ids
    used = [r for r in again.rounds if r.from_memory]
    assert used and sum(r.accepted for r in used) > 0


def test_a_reader_never_sees_the_scopes_over_their_budget_while_another_thread_adds():
    """/metrics reads the store's gauges from another thread: an add and the balancing across scopes that follows it
    are one step under the store's lock (found by the load test: 1,079 tokens held under a budget of 1,000)."""
    import threading

    from localspec.core.drafters.memory import DraftMemories

    store, seen, done = DraftMemories(300), [], threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(store.tokens)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(600):
            store.scope(f"key{i % 3}").add(list(range(i, i + 90)))
    finally:
        done.set()
        reader.join()
    assert seen and max(seen) <= 300 and store.tokens <= 300
