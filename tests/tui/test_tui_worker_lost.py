"""Pilot tests: the target loses an RPC worker (a generation fails with a WorkerError naming it). The
error is shown with the worker's host:port, nothing stays busy, and the next prompt loads the target
again (``IsolatedModel.restart``) with the load bar's stage line naming the workers; while the worker
is still down that prompt fails the same way and the one after tries again.

The target is the fake engine's scripted model made to act as an IsolatedModel on one worker
(:class:`LosingTarget`): the control flow is the app's, the model a fake (tests/integration/test_rpc.py
loses real workers under the server, which reloads through the same ``reload_lost_target``)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from localspec.errors import WorkerError
from tui_fakes import REPLY, FakeEngine
from tui_helpers import build, idle, running, submit

pytestmark = pytest.mark.asyncio

WORKER = "127.0.0.1:50052"
STALLED = f"fake-target.gguf: RPC worker {WORKER} stopped answering: a 1-token pass had no answer within 61.9 s"


class LosingTarget:
    """Makes ``engine.target`` act as an IsolatedModel with its layers on :data:`WORKER`: ``lose()``
    fails its next decode with a WorkerError and marks it lost (every decode fails until it is restarted);
    ``restart()`` fails while ``down`` and waits for ``release`` (to look at the app meanwhile)."""

    def __init__(self, engine: FakeEngine) -> None:
        t = self.target = engine.target
        t.rpc, t.path, t.lost = (WORKER,), Path("fake-target.gguf"), False
        t.device_layers, t.device_endpoints = {"RPC0": 30, "CPU": 1}, {"RPC0": WORKER}
        self.down = False
        self.restarts = 0
        self.release = threading.Event()
        self.release.set()
        self._lose = False
        decode = t.decode

        def lossy_decode(tokens, logits_for="last", progress=None):
            if self._lose or t.lost:
                self._lose, t.lost = False, True
                raise WorkerError(STALLED, "resume or restart the worker")
            return decode(tokens, logits_for, progress)

        t.decode = lossy_decode
        t.restart = self.restart

    def lose(self) -> None:
        self._lose = True

    def restart(self) -> None:
        self.restarts += 1
        self.release.wait(10)
        if self.down:
            raise WorkerError(f"RPC worker {WORKER} accepted the connection but did not answer the handshake within "
                              "5 s", "start one there with: localspec worker --host 127.0.0.1 --port 50052")
        self.target.reset()
        self.target.lost = False


def notes(app) -> list[str]:
    return [n.message for n in app._notifications]


def answers(app) -> list[str]:
    return [m["content"] for m in app.screen.messages if m["role"] == "assistant"]


async def test_a_lost_worker_is_named_and_the_next_prompt_loads_the_model_again(fake):
    from localspec.tui.screens import LoadBar

    lossy = LosingTarget(fake)
    app = build(fake, remember=False)
    async with running(app) as pilot:
        lossy.lose()
        await submit(pilot, "hello")
        assert any(STALLED in m and "resume or restart the worker" in m for m in notes(app)), notes(app)
        assert app.busy is None and app.engine_state == "ready" and fake.target.lost
        assert answers(app) == [] and app.screen.messages[-1]["content"] == "hello"  # the question is kept

        # the worker is still down: the reload fails, naming it; nothing is stuck
        lossy.down = True
        await submit(pilot, "hello again")
        assert lossy.restarts == 1 and fake.target.lost and app.busy is None and app.engine_state == "ready"
        assert any(f"RPC worker {WORKER} accepted the connection but did not answer" in m for m in notes(app))

        # back: the next prompt loads the target again, the load bar naming the worker, then answers
        lossy.down = False
        lossy.release.clear()
        await submit(pilot, "third time", wait=False)
        for _ in range(250):
            await pilot.pause(0.02)
            if app.load_text.startswith("loading fake-target.gguf again"):
                break
        assert app.load_text == f"loading fake-target.gguf again on its RPC workers {WORKER}"
        assert app.engine_state == "loading" and app.screen.query_one(LoadBar).display
        lossy.release.set()
        await idle(pilot)
        assert lossy.restarts == 2 and not fake.target.lost
        assert app.load_text == f"fake-target.gguf layers: {WORKER} 30, this machine 1"
        assert not app.screen.query_one(LoadBar).display
        assert any("fake-target.gguf is loaded again on its RPC workers" in m for m in notes(app))
        assert answers(app) == [REPLY]
        # and the one after needs no reload
        await submit(pilot, "fourth")
        assert lossy.restarts == 2 and answers(app) == [REPLY, REPLY]


async def test_stopping_while_the_model_reloads_leaves_the_app_usable(fake):
    """Esc during the reload: the reload finishes (it cannot be cut), the answer is stopped, the app answers next."""
    lossy = LosingTarget(fake)
    app = build(fake, remember=False)
    async with running(app) as pilot:
        lossy.lose()
        await submit(pilot, "hello")
        lossy.release.clear()
        await submit(pilot, "again", wait=False)
        for _ in range(250):
            await pilot.pause(0.02)
            if lossy.restarts:
                break
        await pilot.press("escape")
        await asyncio.sleep(0.05)
        lossy.release.set()
        await idle(pilot)
        assert not fake.target.lost and app.busy is None
        await submit(pilot, "and now")
        assert answers(app)[-1] == REPLY
