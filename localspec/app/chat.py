"""Multi-turn chat in one process: the message history, the engine, the settings.

Context-overflow policy (the same in every mode: none, lookup, draft, auto):

* The history (:attr:`ChatSession.messages`) is never trimmed: it is what the user owns.
* The *prompt* of a turn is the system message (if any) and the newest turns that fit:
  the oldest user/assistant turns are dropped, one whole turn at a time (a user message
  and the replies after it), until the rendered prompt plus ``max_tokens`` fits in the
  context window (``n_ctx``). The system message is always kept.
* If even the system message and the last user message alone do not fit with
  ``max_tokens``, the turn is refused with :class:`~localspec.errors.ContextOverflowError`
  and a hint (shorten the message, lower max_tokens, raise n_ctx); nothing is generated.

So a reply never runs into the end of the context window in a chat session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

from localspec.config import Settings, context_room, fits_context
from localspec.core.engine import Event, Generation
from localspec.core.messages import continues_final_message, opens_the_answer
from localspec.errors import ConfigError, ContextOverflowError
from localspec.core.events import EndReason, GenerationStats


@dataclass
class FittedPrompt:
    """The token ids of a turn's prompt and what was left out of it.

    Attributes:
        tokens: prompt token ids (chat template applied), length <= n_ctx - max_tokens.
        first: index into the history of the oldest non-system message in the prompt.
        dropped: number of non-system messages left out (the oldest ones).
    """

    tokens: list[int]
    first: int
    dropped: int


def _turn_starts(messages: Sequence[dict], lo: int) -> list[int]:
    """Indices >= lo where a user message begins a turn (the places a window may start)."""
    return [i for i in range(lo, len(messages)) if messages[i].get("role") == "user"]


def fit_messages(engine, messages: Sequence[dict], max_tokens: int) -> FittedPrompt:
    """Tokenize ``messages`` with the chat template, dropping the oldest turns to fit.

    Args:
        engine: a :class:`localspec.core.engine.SpeculativeEngine` (uses ``chat_tokens``, ``n_ctx``).
        messages: the history; ``messages[0]`` may be the system message; the last
            message is the user message being answered, or the assistant message being continued.
        max_tokens: tokens the reply may take.

    Returns:
        the :class:`FittedPrompt`.

    Raises:
        ConfigError: no messages, or the last message is empty.
        ContextOverflowError: the system message and the last user message alone,
            plus ``max_tokens``, exceed ``n_ctx``.
    """
    if not messages:
        raise ConfigError("there is no message to answer", "type a message")
    last = messages[-1]
    if not str(last.get("content", "")).strip():
        raise ConfigError("the message is empty", "type a message")
    n_ctx = engine.n_ctx
    system = [messages[0]] if messages[0].get("role") == "system" else []
    lo = len(system)
    starts = _turn_starts(messages, lo)
    # windows to try, longest first: the whole history, then from each later turn start,
    # and at the end the last message alone (it need not be a user message; one being continued keeps its turn)
    candidates = [lo] + [s for s in starts if s > lo]
    if candidates[-1] != len(messages) - 1 and not continues_final_message(messages):
        candidates.append(len(messages) - 1)
    def fits(tokens: list[int]) -> bool:
        return fits_context(n_ctx, len(tokens), max_tokens)

    def render(k: int) -> list[int]:
        return engine.chat_tokens(system + list(messages[candidates[k]:]))

    # fewer turns never take more tokens: binary search for the longest window that fits
    tokens = render(len(candidates) - 1)
    if fits(tokens):
        best, fit_tokens = len(candidates) - 1, tokens
        a, b = 0, len(candidates) - 1  # candidates[b] fits; find the smallest k that fits
        while a < b:
            mid = (a + b) // 2
            t = render(mid)
            if fits(t):
                b, best, fit_tokens = mid, mid, t
            else:
                a = mid + 1
        return FittedPrompt(fit_tokens, candidates[best], candidates[best] - lo)
    need = len(tokens) + max_tokens
    room = context_room(n_ctx, len(tokens))
    hint = "shorten the message"
    hint += f", lower max_tokens to at most {room}" if room > 0 else ""
    hint += " or raise n_ctx (--n-ctx)"
    raise ContextOverflowError(
        f"the message needs {len(tokens)} prompt tokens plus max_tokens {max_tokens} = {need}, "
        f"more than the context window of {n_ctx}",
        hint,
    )


@dataclass
class Turn:
    """One answer being generated. Iterate it for the engine's events; like a
    :class:`~localspec.core.engine.Generation` it has ``cancel``, ``text``, ``stats`` and
    ``on_prefill``, so a front-end drives either the same way.

    When iteration ends normally the reply is appended to the session's history. When
    it is stopped early (``cancel()``, ``close()``, Ctrl-C) the partial reply is
    appended too, marked in :attr:`cancelled`; :meth:`ChatSession.retry` answers the
    same user message again.
    """

    session: "ChatSession"
    generation: Generation
    prompt: FittedPrompt
    _done: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._it = self._run()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return next(self._it)

    def _run(self) -> Iterator[Event]:
        try:
            yield from self.generation
        finally:
            self._finish()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        history = self.session.messages
        if continues_final_message(history):  # the answer continued the final message: it grows
            prefill = history[-1]
            history[-1] = {**prefill, "content": prefill["content"] + self.generation.text}
            self.session._continued = (prefill, history[-1])  # retry gives the message back its own text
        else:
            history.append({"role": "assistant", "content": self.generation.text})
            self.session._continued = None

    def cancel(self) -> None:
        """End after the current round."""
        self.generation.cancel()

    @property
    def stats(self) -> GenerationStats:
        """The generation's statistics (complete once iteration ends)."""
        return self.generation.stats

    @property
    def on_prefill(self):
        """The generation's ``on_prefill(done, total)`` (a front-end follows a long prefill)."""
        return self.generation.on_prefill

    @on_prefill.setter
    def on_prefill(self, callback) -> None:
        self.generation.on_prefill = callback

    def close(self) -> None:
        """End now (the caches stay consistent; the partial reply is kept)."""
        self._it.close()
        self.generation.close()
        self._finish()

    def run(self) -> "Turn":
        for _ in self:
            pass
        return self

    @property
    def text(self) -> str:
        return self.generation.text

    @property
    def cancelled(self) -> bool:
        return self.generation.stats.end_reason is EndReason.CANCELLED


class ChatSession:
    """A conversation with one engine in one process.

    Args:
        engine: a loaded :class:`localspec.core.engine.SpeculativeEngine`.
        settings: sampling, drafting and generation settings (models are not reloaded).
        system: an optional system message, kept in every prompt.
        messages: an earlier history to continue (``{"role", "content"}`` dicts).

    Attributes:
        messages: the whole history, never trimmed (see the module's overflow policy).
        last_prompt: the :class:`FittedPrompt` of the latest turn.
    """

    def __init__(self, engine, settings: Settings | None = None, system: str | None = None,
                 messages: Sequence[dict] = ()) -> None:
        self.engine = engine
        self.settings = settings or Settings()
        self.messages: list[dict] = [dict(m) for m in messages]
        if system is not None:
            if self.messages and self.messages[0].get("role") == "system":
                self.messages[0] = {"role": "system", "content": system}
            else:
                self.messages.insert(0, {"role": "system", "content": system})
        self.last_prompt: FittedPrompt | None = None
        #: (the assistant message as given, the same message grown by the latest answer) when that answer
        #: continued it (an assistant prefill), so retry takes back only the answer's text
        self._continued: tuple[dict, dict] | None = None

    def _start(self, prediction: Sequence[int] | None = None) -> Turn:
        s = self.settings
        fitted = fit_messages(self.engine, self.messages, s.generation.max_tokens)
        self.last_prompt = fitted
        gen = self.engine.generate(fitted.tokens, s.sampling, s.drafting, s.generation, prediction=prediction)
        return Turn(self, gen, fitted)

    def send(self, text: str) -> Turn:
        """Add a user message and start answering it. Iterate the returned :class:`Turn`.

        Raises:
            ConfigError: the message is empty (nothing is added to the history).
            ContextOverflowError: it does not fit even alone (the message is not
                added, so the user can shorten it).
        """
        if not text.strip():
            raise ConfigError("the message is empty", "type a message")
        self.messages.append({"role": "user", "content": text})
        try:
            return self._start()
        except BaseException:
            self.messages.pop()
            raise

    def answer(self, prediction: Sequence[int] | None = None) -> Turn:
        """Answer the history as it is, e.g. a loaded file: its last message is a user message, or an assistant
        message with text that the answer continues (:func:`localspec.core.messages.continues_final_message`;
        the answer is then added to that message). A final assistant message without text or calls is
        dropped first (:func:`localspec.core.messages.opens_the_answer`): the answer takes its place.

        ``prediction``: token ids of a predicted output (see ``SpeculativeEngine.generate``).
        """
        if self.messages and opens_the_answer(self.messages[-1]):  # an empty assistant turn: this answer fills it
            self.messages.pop()
        if not self.messages or (self.messages[-1].get("role") != "user"
                                 and not continues_final_message(self.messages)):
            raise ConfigError("the conversation does not end with a user message (or an assistant message with "
                              "text to continue)", "add a user message to answer")
        return self._start(prediction)

    def retry(self) -> Turn:
        """Drop the last reply and answer the last user message again. Where the last answer continued an
        assistant message (a prefill, see :meth:`answer`), only the answer's text is taken back: the message
        gets its own text again and is continued anew."""
        last = self.messages[-1] if self.messages else None
        if self._continued is not None and last is self._continued[1]:
            self.messages[-1] = self._continued[0]
        elif last is not None and last.get("role") == "assistant":
            self.messages.pop()
        self._continued = None
        return self.answer()
