"""A scripted fake of the engine's small surface, with fixed timings on a fake clock.

Each round drafts min(draft_max, 4) tokens; the number accepted cycles through
ACCEPT_PATTERN, so every token kind appears: accepted, resampled (a rejection), bonus
(all accepted), and target (mode "none"). Deterministic, so snapshots are stable.
"""

from __future__ import annotations

import re
import threading
import time

from localspec.calibration import EngineCosts, ModelCosts
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.engine import Prefill
from localspec.events import EndReason, GenerationStats, RoundStats, TokenEvent, TokenKind

REPLY = ("Here is a function that reverses a string:\n\n```python\ndef reverse(s: str) -> str:\n"
         "    return s[::-1]\n```\n\nSlicing with a step of -1 walks the string backwards.")
ACCEPT_PATTERN = (2, 4, 0, None, 3, 1, 4)  # None: nothing drafted (a target-only round)
WRONG = ["foo", " bar", " baz", "qux", " spam", " eggs"]


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        with self._lock:
            self.t += dt


def split_tokens(text: str) -> list[str]:
    return re.findall(r"\s*[A-Za-z_]+|\s*\d|\s*[^\sA-Za-z_\d]|\s+", text)


class FakeGeneration:
    def __init__(self, engine: "FakeEngine", prompt, sampling, drafting, generation) -> None:
        self.engine = engine
        self.prompt = list(prompt)
        self.sampling, self.drafting, self.generation = sampling, drafting, generation
        self.stats = GenerationStats(prompt_tokens=len(prompt))
        self.text = ""
        self.token_ids: list[int] = []
        self.rounds: list[RoundStats] = []
        self._cancel = False
        self._it = self._run()

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def cancel(self) -> None:
        self._cancel = True

    def close(self) -> None:
        self._it.close()

    def _run(self):
        eng = self.engine
        clock = eng.clock
        reply = eng.reply_for(self.prompt, self.drafting)
        words = split_tokens(reply)
        chat = getattr(eng, "last_prompt", None)
        if chat and len(self.prompt) > len(chat) and self.prompt[:len(chat)] == chat:
            words = words[len(self.prompt) - len(chat):]  # a continuation: the answer so far is in the prompt
        limit = min(len(words), self.generation.max_tokens)
        mode = self.drafting.mode
        t0 = clock()
        self.stats.prefill_seconds = eng.prefill(self.prompt, draft=False)[0]
        pos, rnd = 0, 0
        end = None
        try:
            while pos < limit:
                if self._cancel:
                    end = EndReason.CANCELLED
                    break
                if eng.round_delay:
                    eng.started.set()
                    time.sleep(eng.round_delay)
                    if self._cancel:  # stopped during the pass (llama.cpp's abort callback): nothing committed
                        end = EndReason.CANCELLED
                        break
                planned = ACCEPT_PATTERN[rnd % len(ACCEPT_PATTERN)]
                if mode == "none" or planned is None:
                    g, k = 0, 0
                else:
                    g = min(self.drafting.cap, 4, max(limit - pos - 1, 0))
                    k = min(planned, g)
                n_commit = min(k + 1, limit - pos)
                good = [eng.token_id(w) for w in words[pos:pos + g + 1]]
                draft = good[:k] + [eng.token_id(WRONG[(rnd + i) % len(WRONG)]) for i in range(g - k)]
                target = good[:n_commit]
                kinds = [TokenKind.ACCEPTED] * k + [TokenKind.TARGET if g == 0 else
                                                    (TokenKind.BONUS if k == g else TokenKind.RESAMPLED)]
                d_s = 0.01 * g
                v_s = eng.verify_seconds + 0.002 * g
                clock.advance(d_s + v_s)
                for i in range(n_commit):
                    w = words[pos]
                    if self.stats.time_to_first_token is None:
                        self.stats.time_to_first_token = clock() - t0
                    self.token_ids.append(target[i])
                    self.text += w
                    self.stats.add_token(kinds[i])
                    yield TokenEvent(target[i], w, kinds[i], rnd, pos)
                    pos += 1
                catch = eng.catchup if rnd == 0 and g else (0, 0.0)
                clock.advance(catch[1])
                rs = RoundStats(rnd, "none" if g == 0 else mode, tuple(draft), tuple(target), g, k, n_commit,
                                d_s, v_s, g, eng.reason, *catch)
                self.rounds.append(rs)
                self.stats.add_round(rs)
                self.stats.elapsed_seconds = clock() - t0
                rnd += 1
                yield rs
            if end is None:
                end = EndReason.EOG if limit == len(words) else EndReason.MAX_TOKENS
        finally:
            self.stats.end_reason = end or EndReason.CANCELLED
            self.stats.tokens = len(self.token_ids)
            self.stats.elapsed_seconds = clock() - t0


class FakeEngine:
    """The engine's public surface (:class:`localspec.engine.Engine`), scripted; records what it was asked."""

    def __init__(self, clock: FakeClock | None = None, reply: str = REPLY, *, has_draft: bool = True,
                 round_delay: float = 0.0, prefill_seconds: float = 0.05, verify_seconds: float = 0.05,
                 replies: dict[str, str] | None = None, reason: str = "fixed",
                 catchup: tuple[int, float] = (0, 0.0)) -> None:
        self.clock = clock or FakeClock()
        self.reply = reply
        self.replies = replies or {}
        self.has_draft_model = has_draft
        self.cost_model = None
        self.round_delay = round_delay
        self.prefill_seconds = prefill_seconds
        self.verify_seconds = verify_seconds
        self.reason = reason  #: the policy reason every round reports
        self.catchup = catchup  #: (tokens, seconds) of a draft-model catch-up in round 0
        self.n_ctx = 4096
        self.vocab: dict[str, int] = {}
        self.texts: list[str] = []
        self.calls: list[dict] = []
        self.closed = False
        self.started = threading.Event()
        self.cached_prompt: list[int] | None = None  #: the prompt whose prefill is in the "KV cache"
        self.notices: list[str] = []  #: what the loader would tell the user once

    def token_id(self, text: str) -> int:
        if text not in self.vocab:
            self.vocab[text] = len(self.texts)
            self.texts.append(text)
        return self.vocab[text]

    def token_text(self, token_id: int) -> str:
        return self.texts[token_id]

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return [self.token_id(w) for w in split_tokens(text)]

    def chat_template(self) -> str | None:
        return None  # no tool support, like SmolLM2's template

    def chat_tokens(self, messages, tools=None) -> list[int]:
        self.last_messages = [dict(m) for m in messages]
        self.last_prompt = self.tokenize("".join(f"<{m['role']}>{m['content']}" for m in messages))
        return list(self.last_prompt)

    def reply_for(self, prompt, drafting) -> str:
        last = self.last_messages[-1]["content"] if getattr(self, "last_messages", None) else ""
        for key, reply in self.replies.items():
            if key in last:
                return reply
        return self.reply

    def prefill(self, prompt, draft: bool = True, progress=None) -> Prefill:
        """Like the engine's: costs ``prefill_seconds`` on the clock unless the prompt is cached."""
        if list(prompt) == self.cached_prompt:
            return Prefill(0.0, 0.0, len(prompt) - 1)
        self.cached_prompt = list(prompt)
        self.clock.advance(self.prefill_seconds)
        return Prefill(self.prefill_seconds, 0.0, 0)

    def calibrated_costs(self, draft_max: int, remeasure: bool = False, progress=None) -> EngineCosts:
        """A flat cost curve: every verification pass costs ``verify_seconds``."""
        curve = [self.verify_seconds] * (draft_max + 1)
        self.cost_model = EngineCosts(verify=list(curve), draft_token=None, target=ModelCosts(seconds=curve), draft=None)
        return self.cost_model

    def has_costs(self, draft_max: int) -> bool:
        return True  # nothing to measure: calibrated_costs makes a flat curve at once

    def loaded_models(self) -> dict:
        from localspec.engine import LoadedModel

        return {"target": LoadedModel("fake.gguf", False, None, 0)}

    def model_seconds(self) -> float:
        return 0.0

    def next_token_logits(self, tokens):
        raise NotImplementedError("the TUI never asks for logits")

    def grammar(self, gbnf: str, root: str = "root"):
        raise NotImplementedError("the TUI never constrains the output")

    def generate(self, prompt, sampling=None, drafting=None, generation=None, policy=None, prediction=None,
                 constraint=None):
        drafting = drafting or DraftParams()
        self.calls.append({"prompt": list(prompt), "sampling": sampling, "drafting": drafting,
                           "generation": generation, "messages": getattr(self, "last_messages", None)})
        return FakeGeneration(self, prompt, sampling or SamplingParams(), drafting, generation or GenerationParams())

    def close(self) -> None:
        self.closed = True


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
