"""A cancel (Esc) during a pass that ignores llama.cpp's abort, as a pass waiting on a stalled RPC worker
does (the abort callback reaches only the CPU backend): :class:`IsolatedModel` ends its child after
``cancel_grace`` seconds, the generation ends as cancelled with the answer so far, and the model loads
again before the next generation, as after ``--rpc-timeout``.

No llama.cpp here: the child runs the real serving loop (``isolated._serve``) over the fake backend,
whose pass blocks after a number of decodes, deaf to ``abort()`` (:class:`StallingModel`), or stops on it
(``deaf=False``, the CPU backend's behaviour)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from fakes import FakeModel, greedy_reference
from localspec.backend import isolated
from localspec.backend.isolated import IsolatedModel
from localspec.config import DraftParams, GenerationParams, SamplingParams
from localspec.core.engine import SpeculativeEngine
from localspec.core.events import EndReason, TokenEvent
from localspec.errors import DecodeAborted, WorkerError

PROMPT = [3, 5, 7, 3, 5]


class StallingModel(FakeModel):
    """The fake backend whose decode number ``stall_after + 1`` blocks: forever when ``deaf`` (a pass
    stuck on a stalled RPC worker), else until :meth:`abort`, then raises DecodeAborted (the CPU backend)."""

    def __init__(self, stall_after: int, deaf: bool) -> None:
        super().__init__()
        self.stall_after, self.deaf = stall_after, deaf
        self.aborted = threading.Event()
        self.decode_seconds = self.llama_decode_seconds = 0.0

    def decode(self, tokens, logits_for="last", progress=None):
        if len(self.decode_calls) >= self.stall_after:
            while self.deaf or not self.aborted.is_set():
                time.sleep(0.05)
            raise DecodeAborted("decode stopped on request", "")
        return super().decode(tokens, logits_for, progress)

    def abort(self) -> None:
        self.aborted.set()

    def clear_abort(self) -> None:
        self.aborted.clear()


def stalling_child(conn, abort_conn, path, kwargs, rpc_endpoints) -> None:
    """``isolated._child_main`` with :class:`StallingModel` for the model (run in the spawned child)."""
    model = StallingModel(kwargs["stall_after"], kwargs["deaf"])
    conn.send(("ok", {a: getattr(model, a, None) for a in isolated._MIRRORED}))
    isolated._serve(conn, abort_conn, model)


@pytest.fixture
def make_model(monkeypatch):
    """``make_model(stall_after, deaf=True, rpc=())``: an IsolatedModel over a StallingModel child, timeout 60 s
    (a one-token pass may go 61.9 s unanswered), closed at the end."""
    monkeypatch.setattr(isolated, "_child_main", stalling_child)
    monkeypatch.setattr("localspec.backend.llama.LlamaModel", lambda *a, **k: FakeModel())  # the tokenizer copy
    made = []

    def make(stall_after: int, deaf: bool = True, rpc=()) -> IsolatedModel:
        made.append(IsolatedModel("fake.gguf", rpc=rpc, timeout=60.0, stall_after=stall_after, deaf=deaf))
        return made[-1]

    yield make
    for m in made:
        m.close()


@contextmanager
def hang_guard(seconds: int):
    """Fail the test (instead of waiting out the 62 s deadline) when the block runs longer than ``seconds``."""
    def expired(signum, frame):
        raise AssertionError(f"still waiting after {seconds} s: the cancel did not cut the wait")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@contextmanager
def stopped_worker():
    """An endpoint that accepts connections and never answers: a worker stopped with SIGSTOP, as seen
    from here (the kernel still completes the TCP handshake)."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        yield f"127.0.0.1:{srv.getsockname()[1]}"


def _later(fn, seconds: float = 0.3) -> None:
    """Call ``fn`` from another thread in ``seconds`` (as the UI's Esc does while a pass runs)."""
    threading.Timer(seconds, fn).start()


def test_a_cancel_ends_a_pass_that_ignores_the_abort_within_the_grace(make_model):
    with stopped_worker() as worker:
        model = make_model(stall_after=1, rpc=(worker,))
        model.decode(PROMPT)
        _later(model.abort)
        t0 = time.monotonic()
        with hang_guard(20), pytest.raises(DecodeAborted) as e:
            model.decode([4])
        took = time.monotonic() - t0
    # the grace (2 s), then the kill and one handshake check of the worker (2 s): not the 61.9 s deadline
    assert 0.3 + model.cancel_grace <= took < 0.3 + model.cancel_grace + isolated._CHECK_SECONDS + 2
    assert model.lost and not model.child_pids
    assert e.value.message == (f"fake.gguf: RPC worker {worker} stopped answering: a 1-token pass was cancelled "
                               f"and still had no answer {model.cancel_grace:.1f} s later")
    assert "the next generation loads the model again" in e.value.hint
    model.truncate(3)  # nothing left to roll back: the generation's end stays consistent
    assert model.cached_tokens == PROMPT[:3]
    with pytest.raises(WorkerError, match="was cancelled and still had no answer"):  # until restarted
        model.decode([4])


def test_a_pass_that_stops_on_the_abort_keeps_its_child(make_model):
    model = make_model(stall_after=1, deaf=False)
    model.decode(PROMPT)
    pid = model.child_pids
    _later(model.abort)
    t0 = time.monotonic()
    with hang_guard(20), pytest.raises(DecodeAborted, match="decode stopped on request"):
        model.decode([4])
    assert time.monotonic() - t0 < model.cancel_grace
    assert not model.lost and model.child_pids == pid and model.cached_tokens == PROMPT
    model.clear_abort()
    model.truncate(2)
    assert model.cached_tokens == PROMPT[:2]


def test_esc_during_a_stalled_pass_ends_the_generation_as_cancelled_and_the_model_loads_again(make_model):
    """The engine over the isolated target (mode none: one target pass per token): the 7th pass stalls;
    Generation.cancel() from another thread (the UI's Esc) ends it within the grace as ``cancelled`` with
    the 5 tokens already made (the prefill took one pass and the first token's pass is the 2nd); then the
    front ends' recovery (``reload_lost_target``) loads the model again and the next answer is complete."""
    from localspec.app.loader import reload_lost_target

    eng = SpeculativeEngine(make_model(stall_after=6))
    gen = eng.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="none"),
                       GenerationParams(max_tokens=20))
    _later(gen.cancel, 0.5)
    t0 = time.monotonic()
    with hang_guard(20):
        seen = [ev.token_id for ev in gen if isinstance(ev, TokenEvent)]
    assert time.monotonic() - t0 < 0.5 + eng.target.cancel_grace + 3
    assert gen.stats.end_reason == EndReason.CANCELLED
    assert gen.token_ids == seen == greedy_reference(PROMPT, 5)
    assert eng.target.lost
    assert reload_lost_target(eng) and not eng.target.lost and eng.target.n_cached == 0
    again = eng.generate(PROMPT, SamplingParams(temperature=0.0), DraftParams(mode="none"),
                         GenerationParams(max_tokens=4)).run()
    assert again.token_ids == greedy_reference(PROMPT, 4) and again.stats.end_reason == EndReason.MAX_TOKENS


def test_a_clear_abort_sent_before_a_decode_is_in_force_in_it_however_slow_its_pipe():
    """The CI failure of 2026-12-06 (``test_an_abort_keeps_the_batches_the_child_read``): abort, clear_abort,
    then a decode. The abort flags travel on their own pipe, read by the child's own thread, so the decode
    could start before that thread had applied the clear, and stop at once "on request". The child's loop
    (``isolated._serve``, run here in a thread) now waits for the flags sent before each command; the abort
    pipe here takes 0.3 s a message, so without that wait the decode sees the stale abort."""
    import multiprocessing as mp

    class SlowPipe:
        def __init__(self, conn):
            self.conn = conn

        def recv(self):
            got = self.conn.recv()
            time.sleep(0.3)
            return got

    class FlagModel(FakeModel):
        def __init__(self):
            super().__init__()
            self.flag = False
            self.decode_seconds = self.llama_decode_seconds = 0.0

        def abort(self):
            self.flag = True

        def clear_abort(self):
            self.flag = False

        def decode(self, tokens, logits_for="last", progress=None):
            if self.flag:
                raise DecodeAborted("decode stopped on request", "")
            return super().decode(tokens, logits_for, progress)

    model = FlagModel()
    parent, child = mp.Pipe()
    abort_in, abort_out = mp.Pipe(duplex=False)
    name = f"lsabort{time.monotonic_ns()}"
    from multiprocessing import shared_memory
    shm = shared_memory.SharedMemory(create=True, size=8 * model.n_vocab * 4, name=name)
    serving = threading.Thread(target=isolated._serve, args=(child, SlowPipe(abort_in), model), daemon=True)
    serving.start()
    try:
        parent.send(("buffer", (name, 8), 0))
        assert parent.recv()[0] == "ok"
        abort_out.send((1, True))
        abort_out.send((2, False))
        parent.send(("decode", (PROMPT, "last"), 2))
        reply = parent.recv()
        assert reply[0] == "ok", reply
        assert model.flag is False and model.decode_calls
        abort_out.send((3, True))
        parent.send(("decode", ([9], "last"), 3))  # an abort sent before a command is in force in it too
        reply = parent.recv()
        assert reply[:2] == ("error", "DecodeAborted"), reply
        parent.send(("close", (), 0))
        serving.join(5)
        assert not serving.is_alive()
    finally:
        shm.close()
        shm.unlink()
