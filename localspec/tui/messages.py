"""Messages workers post to the UI. Workers never touch widgets; they post these."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

from localspec.tui.stats import LiveStats


# -- model loading ------------------------------------------------------------------
@dataclass
class LoadProgress(Message):
    """Bytes assembled / downloaded / verified so far (total 0 = unknown); with ``unit`` ``"steps"``,
    measurement steps of the calibration done so far."""

    stage: str
    done: int
    total: int
    unit: str = "bytes"


@dataclass
class LoadStage(Message):
    text: str


@dataclass
class TargetReloading(Message):
    """The target lost its RPC workers and is loaded again before the next generation (the load bar
    shows it, with :class:`LoadStage` lines); ``done``: that ended, loaded or not."""

    done: bool = False


@dataclass
class EngineReady(Message):
    engine: object
    description: str


@dataclass
class LoadFailed(Message):
    message: str
    hint: str = ""


# -- generation ---------------------------------------------------------------------
@dataclass
class PrefillProgress(Message):
    """Prompt tokens read into the KV cache so far (a long prompt's prefill, before the first token)."""

    tag: str
    done: int
    total: int


@dataclass
class TokensEmitted(Message):
    """A batch of streamed tokens: ``pieces`` are (text, kind, round); ``rounds`` the
    RoundStats finished in this batch; ``stats`` the running statistics."""

    tag: str
    pieces: list[tuple[str, str, int]]
    rounds: list = field(default_factory=list)
    stats: LiveStats | None = None


@dataclass
class GenerationFinished(Message):
    tag: str
    text: str
    stats: LiveStats
    rounds: list


@dataclass
class GenerationFailed(Message):
    tag: str
    message: str
    hint: str = ""


@dataclass
class Notice(Message):
    """Something a worker wants the user to know (shown as a notification)."""

    text: str
    severity: str = "information"


@dataclass
class JobDone(Message):
    """A worker left the engine (posted to the app, never blocking the worker)."""

    tag: str


# -- race -----------------------------------------------------------------------------
@dataclass
class RaceFinished(Message):
    """Both sides of one race are done: per side (``"target"``, ``"spec"``) the statistics
    (``elapsed_seconds`` is the wall time of that side's own rounds only) and the text.
    ``repeat`` counts from 1 up to ``repeats`` within one request."""

    results: dict[str, LiveStats]
    cancelled: bool = False
    texts: dict[str, str] = field(default_factory=dict)
    repeat: int = 1
    repeats: int = 1
