"""What the worker threads run: drive a generation, race two generations round by round.

Nothing here touches a widget; results go out through the ``post`` callbacks, which the
screens turn into Messages. The engine is not thread-safe: callers hold the app's
engine lock while these run.
"""

from __future__ import annotations

import time
from typing import Callable

from localspec.core.events import RoundStats

from localspec.tui.stats import LiveStats, RoundView

#: post(pieces, rounds, stats) with pieces (text, kind, round) and rounds RoundView
PostFn = Callable[[list, list, LiveStats], None]
Clock = Callable[[], float]

#: tokens reach the screen in batches at most this often (seconds): five updates a second
#: look live, and each update is a redraw whose CPU a 2-core machine takes from llama.cpp
BATCH_SECONDS = 0.2


def drive(gen, engine, post: PostFn, clock: Clock = time.perf_counter, batch_seconds: float = BATCH_SECONDS
          ) -> tuple[LiveStats, list[RoundView]]:
    """Consume ``gen``, posting batches of tokens at most every ``batch_seconds``.

    The statistics posted are a copy of the engine's own :class:`GenerationStats`
    (``gen.stats``, up to date after every round) plus the latest round's choice: the
    TUI counts nothing itself. Returns the final statistics and every round.
    """
    text_of = engine.token_text
    stats = LiveStats()
    all_rounds: list[RoundView] = []
    pieces: list[tuple[str, str, int]] = []
    rounds: list[RoundView] = []
    last = clock()
    for ev in gen:
        if isinstance(ev, RoundStats):
            rv = RoundView.from_stats(ev, text_of)
            stats.sync(gen.stats)
            stats.note_round(rv)
            rounds.append(rv)
            all_rounds.append(rv)
            now = clock()
            if now - last >= batch_seconds:
                post(pieces, rounds, stats.copy())
                pieces, rounds, last = [], [], now
        else:
            pieces.append((ev.text, ev.kind.value, ev.round))
    stats.finish(gen.stats)
    if pieces or rounds:
        post(pieces, rounds, stats.copy())
    return stats, all_rounds


def warm_up(engine, prompt) -> float:
    """Race mode, before timing: put ``prompt`` in the engine's KV caches (target and draft
    model) with ``engine.prefill``, untimed in the race; returns the seconds it took."""
    done = engine.prefill(prompt)
    return float(done.target_seconds + done.draft_seconds)


class RaceSide:
    """One side of a race: its generation and the time measured over its own rounds.

    The statistics are the engine's :class:`GenerationStats` with ``elapsed_seconds``
    replaced by the wall time of this side's own rounds (the engine's clock also runs
    while the other side decodes); the decode rate then excludes what the generation
    spent on prefill and draft-model catch-up, as everywhere else.
    """

    def __init__(self, name: str, gen, engine, warmup_seconds: float = 0.0) -> None:
        self.name = name
        self.gen = gen
        self.text_of = engine.token_text
        self.stats = LiveStats(warmup_seconds=warmup_seconds)
        self.seconds = 0.0  #: wall time of this side's own rounds
        self.ttft: float | None = None
        self.rounds: list[RoundView] = []
        self.pieces: list[tuple[str, str, int]] = []
        self.new_rounds: list[RoundView] = []
        self.done = False

    def step(self, clock: Clock) -> None:
        """Run one round (its tokens and its RoundStats); add its wall time to this side."""
        t0 = clock()
        try:
            while True:
                ev = next(self.gen)
                if isinstance(ev, RoundStats):
                    rv = RoundView.from_stats(ev, self.text_of)
                    self.stats.note_round(rv)
                    self.rounds.append(rv)
                    self.new_rounds.append(rv)
                    break
                if self.ttft is None:
                    self.ttft = self.seconds + (clock() - t0)
                self.pieces.append((ev.text, ev.kind.value, ev.round))
        except StopIteration:
            self.done = True
        self.seconds += clock() - t0
        self._sync()

    def _sync(self) -> None:
        self.stats.sync(self.gen.stats)
        self.stats.elapsed_seconds = self.seconds
        self.stats.time_to_first_token = self.ttft

    def take(self) -> tuple[list, list, LiveStats]:
        out = (self.pieces, self.new_rounds, self.stats.copy())
        self.pieces, self.new_rounds = [], []
        return out

    def finish(self) -> LiveStats:
        """The engine's final counts, with this side's own time."""
        self._sync()
        self.stats.final = True
        return self.stats


def race(sides: list[RaceSide], post: Callable[[str, list, list, LiveStats], None], clock: Clock = time.perf_counter,
         cancelled: Callable[[], bool] = lambda: False, batch_seconds: float = BATCH_SECONDS) -> dict[str, LiveStats]:
    """Alternate the sides round by round in this one thread until all are done.

    Each side's time is the sum of its own rounds' wall time, so neither is charged
    for the other's work; ``cancelled()`` is checked between rounds. Warm both sides'
    caches first (:func:`warm_up`) so that neither times a prefill.
    """
    last = clock()
    while not all(s.done for s in sides):
        if cancelled():
            for s in sides:
                if not s.done:
                    s.gen.cancel()
        for s in sides:
            if not s.done:
                s.step(clock)
        now = clock()
        if now - last >= batch_seconds or all(s.done for s in sides):
            for s in sides:
                pieces, rounds, st = s.take()
                if pieces or rounds:
                    post(s.name, pieces, rounds, st)
            last = now
    return {s.name: s.finish() for s in sides}
