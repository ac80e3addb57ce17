"""A model in a child process (localspec.backend.isolated.IsolatedModel, used for models on RPC workers),
on the tiny model without workers: its logits equal the in-process model's, the KV cache follows
truncate/sync, a killed child is a WorkerError (never a crash here) and a restart loads it again; a child
that stops answering (SIGSTOP: what a stalled RPC worker looks like from here) is a WorkerError within
its deadline, never a hang."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import numpy as np
import pytest

from localspec.backend.isolated import IsolatedModel
from localspec.backend.llama import LlamaModel
from localspec.errors import WorkerError


@pytest.fixture(scope="module")
def pair(tiny_path):
    local = LlamaModel(tiny_path, n_ctx=256, n_threads=1, huge_pages=False, flash_attn=False)
    child = IsolatedModel(tiny_path, n_ctx=256, n_threads=1, huge_pages=False, flash_attn=False)
    yield local, child
    child.close()
    local.close()


def test_the_childs_logits_equal_the_in_process_models(pair):
    local, child = pair
    ids = local.tokenize("def fibonacci(n):\n    ")
    assert child.tokenize("def fibonacci(n):\n    ") == ids and child.n_vocab == local.n_vocab
    for m in pair:
        m.reset()
    a, b = local.decode(ids, logits_for="all"), child.decode(ids, logits_for="all")
    assert a.shape == b.shape == (len(ids), local.n_vocab) and b.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert child.cached_tokens == local.cached_tokens == ids
    # 80 rows: more than the first shared buffer holds (it grows)
    more = [int(np.argmax(a[-1]))] * 80
    np.testing.assert_array_equal(local.decode(more, logits_for="all"), child.decode(more, logits_for="all"))
    child.truncate(len(ids))
    local.truncate(len(ids))
    assert child.n_cached == len(ids)
    assert child.sync(ids + [5, 6]) == local.sync(ids + [5, 6])
    assert not hasattr(child, "save_state")  # no KV snapshots of a cache that lives elsewhere


def test_a_killed_child_is_a_worker_error_and_a_restart_loads_it_again(pair):
    local, child = pair
    ids = local.tokenize("x = 1\n")
    os.kill(child.child_pids[0], signal.SIGKILL)
    with pytest.raises(WorkerError, match="model process ended"):
        child.decode(ids)
    assert child.lost
    with pytest.raises(WorkerError, match="model process ended"):  # until restarted: the same reason
        child.reset()
    child.restart()
    assert not child.lost and child.n_cached == 0
    local.reset()
    np.testing.assert_array_equal(child.decode(ids), local.decode(ids))


@contextmanager
def hang_guard(seconds: int):
    """Fail the test (instead of hanging the suite) when the block runs longer than ``seconds``."""
    def expired(signum, frame):
        raise AssertionError(f"still waiting after {seconds} s: the deadline did not work")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_child_that_stops_answering_is_a_worker_error_within_its_deadline(pair):
    local, child = pair
    ids = local.tokenize("def add(a, b):\n    return")
    child.timeout = 2.0
    assert child.allowance(len(ids)) == pytest.approx(2.0 * (1 + len(ids) / 32))
    pid = child.child_pids[0]
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with hang_guard(60), pytest.raises(WorkerError, match="the model process stopped answering: a "
                                           f"{len(ids)}-token pass had no answer within "
                                           f"{child.allowance(len(ids)):.1f} s") as e:
            child.decode(ids)
        assert time.monotonic() - t0 < child.allowance(len(ids)) + 6  # the deadline, then kill and join
        assert "raise --rpc-timeout (now 2 s)" in e.value.hint
    finally:
        if child.child_pids:  # not killed: let it go on, for the fixture's close
            os.kill(pid, signal.SIGCONT)
    assert child.lost and not child.child_pids
    with pytest.raises(WorkerError, match="stopped answering"):  # until restarted: the same reason
        child.sync(ids)
    child.truncate(0)  # a lost model has no cache to roll back: the generation's end stays consistent
    child.timeout = 60.0
    with hang_guard(120):
        child.restart()
    local.reset()
    np.testing.assert_array_equal(child.decode(ids), local.decode(ids))


def _exists(shm_name: str) -> bool:
    from multiprocessing import shared_memory

    try:
        seg = shared_memory.SharedMemory(name=shm_name)
    except FileNotFoundError:
        return False
    seg.close()
    return True


def test_a_child_killed_during_a_buffer_swap_leaves_no_shared_memory(tiny_path):
    """A pass asking for more rows than the buffer holds swaps it for a larger one; the child dies there.
    The old segment is freed at once, the new one at close (each one is n_vocab x rows x 4 bytes:
    44 MB for Qwen's 72 rows)."""
    child = IsolatedModel(tiny_path, n_ctx=256, n_threads=1, huge_pages=False, flash_attn=False)
    try:
        old = child._shm.name
        ids = child.tokenize("def f(x):\n    return x\n" * 12)
        assert len(ids) > child._rows.shape[0]  # "all" rows need a larger buffer
        os.kill(child.child_pids[0], signal.SIGKILL)
        with pytest.raises(WorkerError, match="model process ended"):
            child.decode(ids, logits_for="all")
        new = child._shm.name
        assert new != old and child.lost
        assert not _exists(old)
    finally:
        child.close()
    assert not _exists(new)


def test_a_model_that_does_not_load_closes_its_tokenizer_copy(tiny_path, monkeypatch):
    """The child fails to load (here: its RPC worker is down); the tokenizer-only copy made here is closed,
    not left to the garbage collector."""
    from localspec.backend import llama
    from localspec.server.process import free_port

    made = []

    class Recording(llama.LlamaModel):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(llama, "LlamaModel", Recording)
    with pytest.raises(Exception) as e:  # WorkerError (a worker down), or ConfigError in a build without RPC
        IsolatedModel(tiny_path, rpc=(f"127.0.0.1:{free_port()}",), n_ctx=256, n_threads=1, huge_pages=False)
    assert "refused" in str(e.value) or "RPC" in str(e.value)
    assert len(made) == 1 and made[0]._model is None  # the tokenizer copy, closed


def test_an_abort_keeps_the_batches_the_child_read(tiny_path):
    """A cancel in the middle of a long read (issue 45): the child's cache keeps the 32-token batches it read,
    the mirror here says the same, and reading on from there gives the logits of one uncut read."""
    from localspec.errors import DecodeAborted

    child = IsolatedModel(tiny_path, n_ctx=256, n_batch=32, n_threads=1, huge_pages=False, flash_attn=False)
    local = LlamaModel(tiny_path, n_ctx=256, n_batch=32, n_threads=1, huge_pages=False, flash_attn=False)
    try:
        ids = child.tokenize("def f(x):\n    return x\n" * 30)[:200]
        assert len(ids) == 200
        conn = child._conn

        class AbortAfterTwoBatches:
            """The pipe to the child: aborts once the child reported two batches read."""
            alive = 0

            def __getattr__(self, name):
                return getattr(conn, name)

            def recv(self):
                reply = conn.recv()
                if reply[0] == "alive":
                    AbortAfterTwoBatches.alive += 1
                    if AbortAfterTwoBatches.alive == 2:
                        child.abort()
                return reply

        child._conn = AbortAfterTwoBatches()
        try:
            with pytest.raises(DecodeAborted):
                child.decode(ids, logits_for=())
        finally:
            child._conn = conn
            child.clear_abort()
        n = child.n_cached
        assert n % 32 == 0 and 64 <= n < 200 and child.cached_tokens == ids[:n] and not child.lost
        rows = child.decode(ids[n:], "last")
        np.testing.assert_array_equal(rows, local.decode(ids, "last"))
    finally:
        child.close()
        local.close()
