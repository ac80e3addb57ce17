"""The TUI tests' engine: the real :class:`localspec.core.engine.SpeculativeEngine` over scripted fake models.

:class:`FakeEngine` *is* the engine (its ``Generation`` loop, drafters, acceptance rule,
policies and statistics); only its two models are fakes (:class:`ScriptedModel`, the
``tests/fakes.py`` :class:`FakeModel` with a word tokenizer and a script):

* the target model answers every chat prompt with a scripted reply (:data:`REPLY`, or one
  of ``replies`` chosen by a word of the last message), then an end-of-generation token;
* the draft model follows the same script but, by position in the reply
  (:data:`DRAFT_PATTERN`), is sure and right, sure and wrong, or unsure (its top-1
  probability under :data:`DRAFT_P_MIN`, so a draft stops there). With
  ``draft_p_min = DRAFT_P_MIN`` (``tui_helpers.build`` sets it) every token kind appears
  in mode ``draft``: accepted, resampled (a rejection), bonus (all accepted) and target (a
  round that drafted nothing); mode ``none`` gives target tokens only;
* every decode advances the shared :class:`FakeClock` by a fixed cost (``prefill_seconds``
  for a batch without logits, ``verify_seconds`` plus ``TOKEN_SECONDS`` per extra token for a
  target pass, ...), and the engine times everything on that clock (its ``clock``
  argument): the timings it reports, and the snapshots that show them, are exact and stable.
"""

from __future__ import annotations

import re
import threading
import time

import numpy as np

from fakes import FakeModel
from localspec.backend.llama import VocabInfo
from localspec.backend.calibration import ModelCosts
from localspec.config import AUTO_DRAFT_MAX
from localspec.core.costmodel import EngineCosts
from localspec.core.engine import SpeculativeEngine
from localspec.core.events import DrafterId, RoundStats
from localspec.core.policy import Choice, RoundState
from localspec.errors import DecodeAborted

REPLY = ("Here is a function that reverses a string:\n\n```python\ndef reverse(s: str) -> str:\n"
         "    return s[::-1]\n```\n\nSlicing with a step of -1 walks the string backwards.")
#: what the draft model does at each position of a reply (cyclic): r sure and right, w sure and
#: wrong (a rejection), u unsure (a draft stops before it; a round starting there drafts nothing).
#: With draft length 8 the rounds go: 2 accepted + resampled, 4 + resampled, 0 + resampled, target
#: only, 8 + bonus, 3 + bonus (stopped at a "u"), 1 + resampled.
DRAFT_PATTERN = "rrwrrrrwwu" "rrrrrrrrr" "rrru" "rw"
#: the draft p-min under which the draft model's unsure rows fall (and its sure rows do not)
DRAFT_P_MIN = 0.5
WRONG = ["foo", " bar", " baz", "qux", " spam", " eggs"]
N_VOCAB = 2048
EOG = 0  #: token 0 is the end-of-generation token (no text)
SURE, UNSURE = 30.0, 6.0  #: the top logit of a sure row, of an unsure one (softmax max ~0.16 of 2048 ids)
TOKEN_SECONDS = 0.002  #: a pass's cost per token after the first


class FakeClock:
    """A clock that only the fake models move (seconds)."""

    def __init__(self) -> None:
        self.t = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        with self._lock:
            self.t += dt


def split_tokens(text: str) -> list[str]:
    """The fake tokenizer: words with their leading space, single digits and punctuation."""
    return re.findall(r"\s*[A-Za-z_]+|\s*\d|\s*[^\sA-Za-z_\d]|\s+", text)


class Script:
    """What the target and the draft model share: the word vocabulary and the replies.

    ``expect(prompt, reply)`` (called by :meth:`ScriptedModel.tokenize_chat`) registers the
    answer to a chat prompt; a model then continues any sequence that starts with a
    registered prompt (the longest one) from the same position in that reply, so a
    continuation (prompt + the answer so far) goes on where the answer stopped.
    """

    def __init__(self, reply: str, replies: dict[str, str] | None = None) -> None:
        self.reply = reply
        self.replies = dict(replies or {})  #: a word of the last message -> the reply to it
        self.texts = [""]  # id 0: end of generation
        self.ids: dict[str, int] = {}
        self.expected: dict[tuple[int, ...], tuple[int, ...]] = {}

    def token_id(self, text: str) -> int:
        if text not in self.ids:
            if len(self.texts) >= N_VOCAB:
                raise AssertionError(f"the fake vocabulary is full ({N_VOCAB} words)")
            self.ids[text] = len(self.texts)
            self.texts.append(text)
        return self.ids[text]

    def tokenize(self, text: str) -> list[int]:
        return [self.token_id(w) for w in split_tokens(text)]

    def reply_for(self, messages) -> str:
        last = messages[-1]["content"] if messages else ""
        return next((r for key, r in self.replies.items() if key in last), self.reply)

    def expect(self, prompt, reply: str) -> None:
        self.expected[tuple(prompt)] = tuple(self.tokenize(reply))

    def position(self, seq) -> tuple[tuple[int, ...], int] | None:
        """(the reply, how far into it ``seq`` is), after the longest registered prompt ``seq`` starts with."""
        best = None
        for prompt in self.expected:
            if len(prompt) <= len(seq) and (best is None or len(prompt) > len(best)) \
                    and tuple(seq[: len(prompt)]) == prompt:
                best = prompt
        return None if best is None else (self.expected[best], len(seq) - len(best))

    def wrong(self, i: int, right: int) -> int:
        """A word that is not ``right`` (what the draft model proposes at a "w" position)."""
        tok = self.token_id(WRONG[i % len(WRONG)])
        return tok if tok != right else self.token_id(WRONG[(i + 1) % len(WRONG)])


class ScriptedModel(FakeModel):
    """A :class:`FakeModel` that says its script's replies, costs fixed seconds on a fake clock,
    and can be slowed down (real seconds, ``delay`` per decode) and aborted like LlamaModel.

    Args:
        script: the vocabulary and the replies (shared with the other model).
        clock: advanced by every decode: ``batch_seconds`` for a batch without logits (a
            prefill, a catch-up), else ``pass_seconds`` + :data:`TOKEN_SECONDS` per extra token.
        pattern: None for the target (always sure and right); the draft model's :data:`DRAFT_PATTERN`.
    """

    def __init__(self, script: Script, clock: FakeClock, *, path: str, pass_seconds: float,
                 batch_seconds: float, pattern: str | None = None, n_ctx: int = 4096) -> None:
        super().__init__(n_ctx=n_ctx, n_batch=512)
        self.n_vocab = N_VOCAB
        self.eog_tokens = frozenset({EOG})
        self.script, self.clock, self.pattern, self.path = script, clock, pattern, path
        self.pass_seconds, self.batch_seconds = pass_seconds, batch_seconds
        self.decode_seconds = 0.0  #: on the fake clock, as LlamaModel counts it (engine.model_seconds)
        self.delay = 0.0  #: real seconds every decode waits (a slow model, to stop it mid-answer)
        self.started = threading.Event()  #: set when a slowed decode starts
        self._abort = False

    def logits_after(self, seq) -> np.ndarray:
        logits = np.zeros(N_VOCAB, dtype=np.float32)
        found = self.script.position(seq)
        reply, i = found if found is not None else ((), 0)
        tok, top = (reply[i], SURE) if i < len(reply) else (EOG, SURE)
        step = self.pattern[i % len(self.pattern)] if self.pattern and i < len(reply) else "r"
        if step == "w":
            tok = self.script.wrong(i, tok)
        logits[tok] = UNSURE if step == "u" else top
        return logits

    def decode(self, tokens, logits_for="last", progress=None):
        self._wait()
        out = super().decode(tokens, logits_for, progress)
        batch = not isinstance(logits_for, str) and len(logits_for) == 0
        seconds = self.batch_seconds if batch else self.pass_seconds + TOKEN_SECONDS * (len(tokens) - 1)
        self.decode_seconds += seconds
        self.clock.advance(seconds)
        return out

    def _wait(self) -> None:
        if self.delay:
            self.started.set()
            end = time.monotonic() + self.delay
            while time.monotonic() < end and not self._abort:
                time.sleep(min(0.005, self.delay))
        if self._abort:
            raise DecodeAborted("decode aborted")

    def abort(self) -> None:
        self._abort = True

    def clear_abort(self) -> None:
        self._abort = False

    def token_bytes(self, t: int, special: bool = False) -> bytes:
        return self.script.texts[t].encode() if t < len(self.script.texts) else b""

    def tokenize(self, text: str, **kw) -> list[int]:
        return self.script.tokenize(text)

    def tokenize_chat(self, messages, **kw) -> list[int]:
        """``<role>content`` per message; registers the scripted reply to this prompt."""
        prompt = self.script.tokenize("".join(f"<{m['role']}>{m['content']}" for m in messages))
        self.script.expect(prompt, self.script.reply_for(messages))
        return prompt

    def vocab_info(self) -> VocabInfo:
        texts = tuple(t.encode() for t in self.script.texts) + (b"",) * (N_VOCAB - len(self.script.texts))
        return VocabInfo(0, N_VOCAB, -1, EOG, False, texts, (4,) * N_VOCAB)


def model_costs(pass_seconds: float, n: int) -> ModelCosts:
    """What a calibration of a :class:`ScriptedModel` finds: ``seconds[b-1]`` of a pass over b tokens."""
    return ModelCosts(seconds=[pass_seconds + TOKEN_SECONDS * b for b in range(n)])


class ScriptedPolicy:
    """A draft policy that plays back ``rounds`` (one :class:`Choice` a round; the last repeats), cut to the
    round's limit: the rounds of a snapshot then follow the test's script, not the product's policy
    (mode ``auto``'s choices change whenever it is tuned). Wants every free drafter's proposal, as mode
    ``auto`` does, so a scripted ``lookup`` round drafts what prompt lookup found."""

    free_drafters = (DrafterId.PREDICTION, DrafterId.LOOKUP)

    def __init__(self, rounds) -> None:
        if not rounds:
            raise ValueError("a scripted policy needs at least one round")
        self.rounds = [Choice(DrafterId(d), g, why) for d, g, why in rounds]
        self.played = 0

    def choose(self, state: RoundState) -> Choice:
        c = self.rounds[min(self.played, len(self.rounds) - 1)]
        self.played += 1
        return Choice(c.drafter, min(c.draft_len, state.limit), c.reason)

    def observe(self, rs: RoundStats) -> None:
        """Nothing to learn: the rounds are scripted."""


class FakeEngine(SpeculativeEngine):
    """The real engine over a scripted target and (``has_draft``) draft model on a :class:`FakeClock`.

    Beyond the engine it only records: ``calls`` (every :meth:`generate`, with the chat
    messages last tokenized), ``last_messages``, ``last_prompt``, ``closed``; and gives the tests their knobs: ``reply``,
    ``round_delay`` (real seconds each target pass waits), ``started`` (set when a slowed pass
    starts). Its costs (``cost_model``, mode ``auto``) are the fake models' true costs. With ``rounds``
    ((drafter, draft length, reason) per round), every generation follows them (:class:`ScriptedPolicy`)
    whatever the mode, in place of the mode's policy.
    """

    def __init__(self, clock: FakeClock | None = None, reply: str = REPLY, *, replies: dict[str, str] | None = None,
                 has_draft: bool = True, round_delay: float = 0.0, prefill_seconds: float = 0.05,
                 verify_seconds: float = 0.05, draft_seconds: float = 0.01, catchup_seconds: float = 0.1,
                 n_ctx: int = 4096, draft_max: int = AUTO_DRAFT_MAX, rounds=None) -> None:
        clock = clock or FakeClock()
        self.script = Script(reply, replies)
        self.prefill_seconds, self.verify_seconds = prefill_seconds, verify_seconds
        self.catchup_seconds = catchup_seconds
        target = ScriptedModel(self.script, clock, path="fake-target.gguf", pass_seconds=verify_seconds,
                               batch_seconds=prefill_seconds, n_ctx=n_ctx)
        draft = ScriptedModel(self.script, clock, path="fake-draft.gguf", pass_seconds=draft_seconds,
                              batch_seconds=catchup_seconds, pattern=DRAFT_PATTERN, n_ctx=n_ctx) if has_draft else None
        target_costs = model_costs(verify_seconds, draft_max + 1)
        draft_costs = model_costs(draft_seconds, 2) if has_draft else None
        costs = EngineCosts(verify=list(target_costs.seconds), draft_token=draft_seconds if has_draft else None,
                            target=target_costs, draft=draft_costs)
        super().__init__(target, draft, costs=costs, clock=clock)
        self.round_delay = round_delay
        self.rounds = rounds
        self.calls: list[dict] = []
        self.last_messages: list[dict] | None = None  #: the chat messages last tokenized
        self.last_prompt: list[int] | None = None  #: their prompt token ids
        self.closed = False

    @property
    def reply(self) -> str:
        return self.script.reply

    @property
    def round_delay(self) -> float:
        return self.target.delay

    @round_delay.setter
    def round_delay(self, seconds: float) -> None:
        self.target.delay = seconds

    @property
    def started(self) -> threading.Event:
        return self.target.started

    def chat_tokens(self, messages, tools=None) -> list[int]:
        self.last_messages = [dict(m) for m in messages]
        self.last_prompt = super().chat_tokens(messages, tools)
        return list(self.last_prompt)

    def generate(self, prompt, sampling=None, drafting=None, generation=None, policy=None, prediction=None,
                 constraint=None, logprobs=None, memory=None, cache_prompt=True):
        self.calls.append({"prompt": list(prompt), "sampling": sampling, "drafting": drafting,
                           "generation": generation, "messages": self.last_messages})
        if policy is None and self.rounds is not None:
            policy = ScriptedPolicy(self.rounds)
        return super().generate(prompt, sampling, drafting, generation, policy, prediction, constraint, logprobs,
                                memory, cache_prompt)

    def close(self) -> None:
        self.closed = True
        super().close()


def factory_for(*engines: FakeEngine, fail: Exception | None = None):
    """An engine_factory handing out the given fakes in order (the last one repeats)."""
    made: list = []

    def factory(settings, progress=None, stage=None):
        if progress:
            progress("assemble", 50, 100)
            progress("assemble", 100, 100)
        if stage:
            stage(f"loading target {settings.target.model}")
        if fail is not None:
            raise fail
        eng = engines[min(len(made), len(engines) - 1)]
        eng.settings = settings
        made.append(eng)
        return eng

    factory.made = made
    return factory
