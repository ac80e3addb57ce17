"""Item 8: property-based tests (hypothesis) of prompt lookup, the acceptance rule and UTF-8
streaming on random inputs. Derandomized (a fixed example sequence) so CI is stable."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localspec.config import SamplingParams
from localspec.core.drafters.lookup import MAX_CONTEXT, find_candidate
from localspec.core.events import TokenKind
from localspec.core.sampling import logits_to_probs
from localspec.core.streaming import TextAssembler
from localspec.core.acceptance import verify

FUZZ = settings(derandomize=True, max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- prompt lookup ------------------------------------------------------------------------------
def lookup_reference(tokens, max_ngram, min_ngram, draft_max):
    """Brute force: longest n first; the match with the longest agreeing earlier context
    (capped at MAX_CONTEXT), the most recent of those; copy continuing the sequence."""
    t = list(tokens)
    L = len(t)
    if draft_max <= 0:
        return [], 0
    for n in range(max_ngram, min_ngram - 1, -1):
        if L < n + 1:
            continue
        starts = [s for s in range(L - n) if t[s : s + n] == t[L - n :]]
        if not starts:
            continue
        def context(s):
            k = 0
            while k < MAX_CONTEXT and s - k - 1 >= 0 and t[s - k - 1] == t[L - n - k - 1]:
                k += 1
            return k

        best = max(context(s) for s in starts)
        s = [s for s in starts if context(s) == best][-1]
        seq = list(t)
        for j in range(draft_max):
            seq.append(seq[s + n + j])
        return seq[L:], n
    return [], 0


@FUZZ
@given(tokens=st.lists(st.integers(0, 5), max_size=40), max_ngram=st.integers(1, 5), min_ngram=st.integers(1, 5),
       draft_max=st.integers(0, 12), as_array=st.booleans())
def test_lookup_matches_brute_force(tokens, max_ngram, min_ngram, draft_max, as_array):
    if min_ngram > max_ngram:
        min_ngram, max_ngram = max_ngram, min_ngram
    arg = np.array(tokens, dtype=np.int32) if as_array else tokens
    got, n = find_candidate(arg, max_ngram, min_ngram, draft_max)
    assert (list(got), n) == lookup_reference(tokens, max_ngram, min_ngram, draft_max)
    if got:
        assert len(got) == draft_max and min_ngram <= n <= max_ngram
        assert all(isinstance(x, int) and x in tokens for x in got)  # only ids seen before
    else:
        assert n == 0


# -- the acceptance rule ------------------------------------------------------------------------
@st.composite
def verify_inputs(draw):
    V = draw(st.integers(2, 12))
    g = draw(st.integers(0, 6))
    finite = st.floats(-30, 30, allow_nan=False, allow_infinity=False)
    logits = np.array(draw(st.lists(finite, min_size=(g + 1) * V, max_size=(g + 1) * V)), dtype=np.float32)
    logits = logits.reshape(g + 1, V)
    # saturated rows (one huge logit) and -inf entries (masked tokens) occur in real models
    if g + 1 and draw(st.booleans()):
        logits[draw(st.integers(0, g)), draw(st.integers(0, V - 1))] = 1e4
    if draw(st.booleans()):
        logits[:, draw(st.integers(0, V - 1))] = -np.inf
    draft = draw(st.lists(st.integers(0, V - 1), min_size=g, max_size=g))
    temperature = draw(st.sampled_from([0.0, 0.3, 1.0, 2.0]))
    params = SamplingParams(temperature=temperature, top_k=draw(st.integers(0, V)),
                            top_p=draw(st.sampled_from([1.0, 0.9, 0.5, 0.05])),
                            min_p=draw(st.sampled_from([0.0, 0.1])), seed=draw(st.integers(0, 2**16)))
    probs = None
    if temperature > 0 and draw(st.booleans()):  # a model drafter (else a point-mass draft)
        # the draft vocabulary may be wider (padding) or narrower (a target padded past it, as
        # Qwen2.5 7B-32B's 152,064 ids over the 0.5B's 151,936): both widths are drawn
        width = V + draw(st.integers(-3, 3))
        width = max(width, max(draft, default=0) + 1, 1)
        raw = np.array(draw(st.lists(st.floats(0, 1), min_size=g * width, max_size=g * width)))
        raw = raw.reshape(g, width)
        raw[:, V:] = 0.0
        for i, x in enumerate(draft):
            if draw(st.booleans()):
                raw[i, x] += 0.5  # the sampled token usually has mass; sometimes not
        sums = raw.sum(axis=1, keepdims=True)
        probs = np.where(sums > 0, raw / np.where(sums > 0, sums, 1), 1.0 / width)
    return V, draft, probs, logits, params


@FUZZ
@given(verify_inputs())
def test_acceptance_rule_properties(inp):
    V, draft, probs, logits, params = inp
    rng = np.random.default_rng(params.seed)
    v = verify(draft, probs, logits, params, rng)
    g = len(draft)
    assert 0 <= v.accepted <= g, "the accepted prefix is never longer than the draft"
    assert isinstance(v.token, int) and 0 <= v.token < V, "always a valid token"
    assert len(v.target_tokens) == v.accepted + 1 and v.target_tokens[-1] == v.token
    assert list(v.target_tokens[: v.accepted]) == list(draft[: v.accepted])
    expected_kind = TokenKind.TARGET if g == 0 else TokenKind.BONUS if v.accepted == g else TokenKind.RESAMPLED
    assert v.kind == expected_kind
    # the committed token is one the target could produce at that position
    target_probs = logits_to_probs(logits[v.accepted], params)
    assert target_probs[v.token] > 0
    # every accepted draft token too
    for i in range(v.accepted):
        assert logits_to_probs(logits[i], params)[draft[i]] > 0
    if params.greedy:
        am = np.argmax(logits, axis=1)
        assert v.token == int(am[v.accepted]) and all(draft[i] == am[i] for i in range(v.accepted))
    # a seed reproduces the verdict
    again = verify(draft, probs, logits, params, np.random.default_rng(params.seed))
    assert again == v


# -- UTF-8 streaming -----------------------------------------------------------------------------
TEXT_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",))
SAMPLE_CHARS = "ab 你好世界🙂🚀😀안녕こんにちは\n\té"


@st.composite
def streamed(draw):
    text = draw(st.one_of(st.text(TEXT_CHARS, max_size=40), st.text(st.sampled_from(SAMPLE_CHARS), max_size=40)))
    data = text.encode()
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=12))))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    stops = draw(st.lists(st.one_of(
        st.text(st.sampled_from(SAMPLE_CHARS), min_size=1, max_size=4),
        # a substring of the text, so stops are found often
        st.integers(0, max(len(text) - 1, 0)).flatmap(
            lambda i: st.integers(1, 4).map(lambda k: text[i : i + k] or "x"))), max_size=3))
    return text, pieces, tuple(s for s in stops if s)


@FUZZ
@given(streamed())
def test_utf8_streaming_properties(case):
    text, pieces, stops = case
    a = TextAssembler(stops)
    released = ""
    n_pushed = 0
    for p in pieces:
        a.push(p)
        n_pushed += 1
        now = a.text[: a.safe_end()]
        assert now.startswith(released), "released text is never taken back"
        assert "\ufffd" not in now, "no replacement character for valid UTF-8"
        released = now
        if a.stop_at is not None:
            break
    hits = [text.find(s) for s in stops if s in text]
    if hits:
        cut = min(hits)
        keep = a.tokens_before_stop()
        a.truncate_tokens(keep)
        assert a.text == text[:cut] and released == text[:cut]
        # the tokens kept are exactly those whose text starts before the stop (a token
        # straddling it is kept); a token's text starts where the complete characters of
        # the bytes before it end
        pushed = n_pushed
        byte_starts = np.cumsum([0] + [len(p) for p in pieces])[:pushed]
        char_starts = [len(b"".join(pieces)[:b].decode("utf-8", "ignore")) for b in byte_starts]
        assert keep == sum(1 for c in char_starts if c < cut)
    else:
        a.finish()
        assert a.stop_at is None
        assert a.text[: a.safe_end()] == text
        assert len(a.token_ends) == len(pieces)
