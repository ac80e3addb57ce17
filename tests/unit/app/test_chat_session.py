"""Items 4 and 6 on a fake chat model: the context-overflow policy of ChatSession, and
every turn of a long chat ending exactly (EOG, stop strings, max_tokens) in every mode."""

from __future__ import annotations

import pytest

from chat_fakes import SEP, FakeChatModel, user_text
from fakes import EOG
from localspec.app.chat import ChatSession, fit_messages
from localspec.config import DraftParams, GenerationParams, SamplingParams, Settings
from localspec.core.engine import SpeculativeEngine
from localspec.errors import ConfigError, ContextOverflowError
from localspec.core.events import EndReason, RoundStats, TokenEvent

MODES = ["none", "lookup", "draft"]


def settings(mode="draft", max_tokens=30, stop=(), draft_max=8, temperature=0.0, seed=0):
    return Settings(sampling=SamplingParams(temperature=temperature, seed=seed),
                    drafting=DraftParams(mode=mode, draft_max=draft_max),
                    generation=GenerationParams(max_tokens=max_tokens, stop=tuple(stop)))


def engine(n_ctx=256, reply_len=12):
    return SpeculativeEngine(FakeChatModel(reply_len, n_ctx=n_ctx), FakeChatModel(reply_len, n_ctx=n_ctx))


def check_caches(eng, turn):
    committed = list(turn.prompt.tokens) + turn.generation.token_ids
    assert eng.target.cached_tokens == committed[:-1]
    d = eng.draft_model
    assert d.cached_tokens == committed[: d.n_cached] and d.n_cached <= len(committed) - 1


def consume(turn):
    events = list(turn)
    toks = [e.token_id for e in events if isinstance(e, TokenEvent)]
    assert toks == turn.generation.token_ids
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == turn.text
    return events


# -- the overflow policy --------------------------------------------------------------------
def test_keeps_everything_while_it_fits():
    eng = engine(n_ctx=512)
    s = ChatSession(eng, settings("none", max_tokens=20), system="t9 t9")
    for i in range(3):
        consume(s.send(user_text(i)))
        assert s.last_prompt.dropped == 0
    assert [m["role"] for m in s.messages] == ["system"] + ["user", "assistant"] * 3


@pytest.mark.parametrize("mode", MODES)
def test_drops_oldest_turns_keeps_system_and_history(mode):
    n_ctx, max_tokens = 96, 16
    eng = engine(n_ctx=n_ctx)
    s = ChatSession(eng, settings(mode, max_tokens=max_tokens), system="t9 t9 t9")
    dropped_before = 0
    for i in range(12):
        turn = s.send(user_text(i))
        p = turn.prompt
        assert len(p.tokens) + max_tokens <= n_ctx
        # the prompt starts with the system message and holds whole turns, newest last
        assert p.tokens[:6] == [SEP, 1, 9, 9, 9, EOG]
        kept = s.messages[p.first:]
        assert kept[0]["role"] == "user" and kept[-1]["content"] == user_text(i)
        assert p.dropped >= dropped_before  # the window only moves forward
        dropped_before = p.dropped
        # dropping one turn fewer would not fit
        if p.dropped:
            prev_user = max(j for j in range(1, p.first) if s.messages[j]["role"] == "user")
            longer = eng.chat_tokens([s.messages[0], *s.messages[prev_user:]])
            assert len(longer) + max_tokens > n_ctx
        consume(turn)
        assert turn.generation.stats.end_reason == EndReason.EOG
        check_caches(eng, turn)
    assert dropped_before > 0, "the test should reach the overflow"
    assert len(s.messages) == 1 + 24, "the history itself is never trimmed"


def test_refuses_when_the_last_message_alone_does_not_fit():
    eng = engine(n_ctx=64)
    s = ChatSession(eng, settings("draft", max_tokens=20), system="t9")
    consume(s.send(user_text(0)))
    n_before = len(s.messages)
    long_msg = " ".join(["t5"] * 50)
    with pytest.raises(ContextOverflowError) as e:
        s.send(long_msg)
    assert "context window of 64" in e.value.message and "max_tokens 20" in e.value.message
    assert "lower max_tokens to at most" in e.value.hint and "n_ctx" in e.value.hint
    assert len(s.messages) == n_before, "a refused message is not added"
    # a message that fits alone but not with max_tokens names the largest max_tokens that would work
    with pytest.raises(ContextOverflowError) as e:
        s.send(" ".join(["t5"] * 40))
    room = int(e.value.hint.split("at most ")[1].split()[0])
    s.settings = settings("draft", max_tokens=room)
    turn = s.send(" ".join(["t5"] * 40))
    assert turn.prompt.dropped == 2 and len(turn.prompt.tokens) + room == 64
    consume(turn)


def test_empty_message_refused():
    s = ChatSession(engine(), settings())
    with pytest.raises(ConfigError, match="empty"):
        s.send("   ")
    assert s.messages == []
    with pytest.raises(ConfigError):
        fit_messages(s.engine, [], 10)


def test_cancelled_turn_keeps_partial_reply_and_retry_equals_uncancelled():
    eng = engine()
    s = ChatSession(eng, settings("draft", temperature=0.8, seed=5, draft_max=4))
    turn = s.send(user_text(1))
    for ev in turn:
        if isinstance(ev, TokenEvent) and ev.position == 2:
            break
    turn.close()
    assert turn.cancelled and s.messages[-1] == {"role": "assistant", "content": turn.text}
    check_caches(eng, turn)
    again = s.retry()
    consume(again)
    fresh = ChatSession(engine(), settings("draft", temperature=0.8, seed=5, draft_max=4))
    ref = fresh.send(user_text(1))
    consume(ref)
    assert again.generation.token_ids == ref.generation.token_ids
    assert [m["role"] for m in s.messages] == ["user", "assistant"]


# -- endings across many turns (cases.md C5, C8; max_tokens) ---------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_every_turn_ends_on_eog_c8(mode):
    eng = engine(n_ctx=160, reply_len=9)
    s = ChatSession(eng, settings(mode, max_tokens=30))
    for i in range(20):
        turn = s.send(user_text(i))
        consume(turn)
        g = turn.generation
        assert g.stats.end_reason == EndReason.EOG
        assert len(g.token_ids) == 9 and EOG not in g.token_ids and SEP not in g.token_ids
        check_caches(eng, turn)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("span", [1, 3])
def test_stop_strings_in_every_turn_c5(mode, span):
    """A stop string made of the text of tokens 2..2+span of each reply (inside an accepted
    block for draft and lookup): text, ids, count and both caches end exactly there."""
    eng = engine(n_ctx=200, reply_len=12)
    free = ChatSession(engine(n_ctx=200, reply_len=12), settings(mode, max_tokens=30))
    s = ChatSession(eng, settings(mode, max_tokens=30))
    blocks = 0
    for i in range(10):
        ref = free.send(user_text(i))
        consume(ref)
        ids = ref.generation.token_ids
        full = eng.target.detok(ids)
        stop = eng.target.detok(ids[2 : 2 + span])[1:-1]  # starts inside token 2
        cut = full.index(stop)
        s.settings = settings(mode, max_tokens=30, stop=[stop])
        turn = s.send(user_text(i))
        events = consume(turn)
        g = turn.generation
        assert g.stats.end_reason == EndReason.STOP
        assert g.text == full[:cut]
        n_keep = sum(1 for j in range(len(ids)) if len(eng.target.detok(ids[:j])) < cut)
        assert g.token_ids == ids[:n_keep] and g.stats.tokens == n_keep
        check_caches(eng, turn)
        # keep both histories identical: the free session continues from the cut reply
        free.messages[-1] = dict(s.messages[-1])
        blocks += any(isinstance(e, RoundStats) and e.accepted >= 2 for e in events)
    if mode == "draft":
        assert blocks == 10, "the stop should fall inside an accepted block in every turn"


@pytest.mark.parametrize("mode", ["lookup", "draft"])
@pytest.mark.parametrize("max_tokens", [1, 2, 3])
def test_small_max_tokens_every_turn(mode, max_tokens):
    eng = engine(n_ctx=128)
    s = ChatSession(eng, settings(mode, max_tokens=max_tokens, draft_max=8))
    for i in range(15):
        turn = s.send(user_text(i))
        consume(turn)
        assert len(turn.generation.token_ids) == max_tokens
        assert turn.generation.stats.end_reason == EndReason.MAX_TOKENS
        check_caches(eng, turn)


def test_a_turn_is_driven_like_a_generation():
    """The TUI's chat screen streams a Turn where it streamed a Generation: stats, on_prefill, cancel, text."""
    s = ChatSession(engine(), settings(max_tokens=6))
    turn = s.send("hello")
    seen = []
    turn.on_prefill = lambda done, total: seen.append((done, total))
    assert turn.generation.on_prefill is turn.on_prefill
    turn.run()
    assert turn.stats is turn.generation.stats and turn.stats.tokens == len(turn.generation.token_ids)
    assert s.messages[-1] == {"role": "assistant", "content": turn.text}
