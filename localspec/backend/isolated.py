"""A model whose weights and KV cache live in a child process: what llama.cpp aborts ends the child only.

Why these hold together: the parent's proxy (:class:`IsolatedModel`) and the child's loop speak one
protocol over one pipe and one shared-memory block; the child runs this module, so both ends change
together.

llama.cpp's RPC client ends its whole process (``GGML_ABORT``) when a worker is lost in the middle of
a pass. A model with layers on RPC workers is therefore loaded in a child process
(:class:`IsolatedModel`); this process keeps a tokenizer-only copy of the same GGUF (tokenizing,
chat templates, grammars need no weights) and sends the child what changes the KV cache
(:meth:`~IsolatedModel.decode`, ``truncate``, ``reset``, ``sync``, ``set_flash_attn``). The logits
come back through shared memory (float32, ``rows x n_vocab``), the rest through a pipe.

When the child dies, the call in progress raises :class:`~localspec.errors.WorkerError` naming the
worker that is gone (each is checked again, :func:`localspec.backend.rpc.check_worker`), the model is
marked :attr:`~IsolatedModel.lost`, and :meth:`~IsolatedModel.restart` loads it again once the
workers are back (the KV cache starts empty; the engine re-reads the prompt).

llama.cpp's RPC client has no timeouts either: a worker that answered the handshake and then stops
answering (stopped with SIGSTOP or Ctrl+Z, hung, cut off by the network) would make a pass wait
forever. So every wait here on the child has a deadline (:meth:`IsolatedModel.allowance`): a pass of
m tokens gets ``timeout * (1 + m / RPC_TIMEOUT_TOKENS)`` seconds (``--rpc-timeout``, 60 s by default:
61.9 s for one token, 3 minutes for a 65-token verification, 17 minutes for a 512-token batch of a
prompt), a long prompt's prefill counting each ``n_batch`` batch on its own (the child reports after
each); while it starts and loads, the child reports after each tensor of weights it sends, and may be
silent ``max(timeout, RPC_LOAD_SILENCE)`` seconds between two reports. When a deadline passes, the
child is killed and the call raises a WorkerError naming the workers that no longer answer a
handshake (a stopped worker accepts the connection but stays silent): the model is lost, as above.

A cancel (:meth:`IsolatedModel.abort`, Esc) reaches the child's llama.cpp, whose abort callback only its
CPU backend asks: a pass waiting on a stalled worker never sees it. So a call that has not answered
:attr:`IsolatedModel.cancel_grace` seconds (:data:`~localspec.rpc_endpoints.RPC_CANCEL_GRACE`) after a cancel
ends the child as a missed deadline does and raises :class:`~localspec.errors.DecodeAborted` (the
engine ends the generation as cancelled, the answer so far kept); the model is lost, as above, and
loads again before the next generation.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Sequence

import numpy as np

from localspec.rpc_endpoints import RPC_CANCEL_GRACE, RPC_LOAD_SILENCE, RPC_TIMEOUT, RPC_TIMEOUT_TOKENS
from localspec.errors import BackendError, DecodeAborted, LocalspecError, WorkerError
from localspec import errors as _errors

#: rows of logits the shared buffer holds at first (a 64-token draft's verification needs 65);
#: it grows when a call asks for more
_INITIAL_ROWS = 72
#: the child's attributes this process mirrors after a load or a context change
_MIRRORED = ("n_ctx", "n_batch", "n_ubatch", "n_threads", "n_gpu_layers", "flash_attn", "repack", "huge_pages",
             "huge_page_bytes", "device_layers", "n_ctx_train", "device_endpoints")
#: seconds between two of the child's load reports, at least (llama.cpp reports every tensor)
_LOAD_REPORT_SECONDS = 0.25
#: seconds each worker gets to answer a handshake when a stall is explained
_CHECK_SECONDS = 2.0
#: seconds between two looks at a cancel while a call waits on the child
_CANCEL_POLL_SECONDS = 0.1
#: the longest the child waits for an abort or clear sent before a command to be applied (a pipe's latency)
_ABORT_SYNC_SECONDS = 5.0
#: what each command of the child does, in an error
_DOING = {"buffer": "sharing the logits buffer", "truncate": "rolling the KV cache back",
          "reset": "emptying the KV cache", "sync": "reusing the KV cache", "set_flash_attn": "making a new context"}


def _error_of(name: str, message: str, hint: str) -> LocalspecError:
    cls = getattr(_errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, LocalspecError)):
        cls = BackendError
    return cls(message, hint)


def _child_main(conn, abort_conn, path: str, kwargs: dict, rpc_endpoints: tuple[str, ...]) -> None:
    """The child: connect the workers, load the model, then serve calls until ``close`` or EOF."""
    import os

    os.environ["GGML_NO_BACKTRACE"] = "1"  # an abort here is expected and explained by the parent, not by gdb
    from localspec.backend import rpc
    from localspec.backend.llama import LlamaModel

    last = [time.monotonic()]

    def alive(fraction: float) -> None:  # a sign of life for the parent's deadline (see the module)
        if time.monotonic() - last[0] >= _LOAD_REPORT_SECONDS:
            last[0] = time.monotonic()
            try:
                conn.send(("alive", fraction))
            except OSError:  # the parent is gone
                pass

    conn.send(("alive", 0.0))  # started (each report restarts the parent's wait)
    try:
        workers = rpc.connect_workers(rpc_endpoints) if rpc_endpoints else []
        conn.send(("alive", 0.0))  # connected
        devices = rpc.local_devices() + [d for w in workers for d in w.devices] if workers else None
        model = LlamaModel(path, devices=devices, load_progress=alive, **kwargs)
        model.device_endpoints = {n: w.endpoint for w in workers for n in w.device_names}
    except LocalspecError as e:
        conn.send(("error", type(e).__name__, e.message, e.hint))
        return
    conn.send(("ok", {a: getattr(model, a, None) for a in _MIRRORED}))
    _serve(conn, abort_conn, model)


class _AbortFlags:
    """The child's end of the abort pipe. Abort and clear come on their own pipe, read by their own thread, so
    that a cancel reaches a decode in progress. Each carries a number; each command carries the number of the
    last one sent before it, and waits (:meth:`wait`) until this thread applied it: a clear_abort() sent just
    before a decode is in force in it (a decode that saw the abort before could stop at once, "on request")."""

    def __init__(self, abort_conn, model) -> None:
        self.applied = 0
        self.changed = threading.Condition()
        self.conn, self.model = abort_conn, model
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            try:
                seq, on = self.conn.recv()
            except (EOFError, OSError):
                seq = float("inf")  # the parent is gone: no command waits on it
            else:
                self.model.abort() if on else self.model.clear_abort()
            with self.changed:
                self.applied = seq
                self.changed.notify_all()
            if seq == float("inf"):
                return

    def wait(self, seq: int) -> None:
        """Until the flags numbered up to ``seq`` are applied (at most :data:`_ABORT_SYNC_SECONDS`)."""
        with self.changed:
            self.changed.wait_for(lambda: self.applied >= seq, timeout=_ABORT_SYNC_SECONDS)


def _serve(conn, abort_conn, model) -> None:
    """The child's loop: one command, one reply, until ``close`` or EOF. A decode longer than one
    ``n_batch`` batch reports ``("alive", tokens done)`` after each batch but the last."""
    in_force = _AbortFlags(abort_conn, model)
    shm, rows = None, None
    while True:
        try:
            cmd, args, abort_seq = conn.recv()
        except (EOFError, OSError):
            break
        in_force.wait(abort_seq)
        try:
            if cmd == "close":
                break
            if cmd == "buffer":
                if shm is not None:
                    shm.close()
                shm = shared_memory.SharedMemory(name=args[0])
                rows = np.ndarray((args[1], model.n_vocab), dtype=np.float32, buffer=shm.buf)
                out = None
            elif cmd == "decode":
                def report(done: int, total: int) -> None:
                    if 0 < done < total:
                        conn.send(("alive", done))

                got = model.decode(*args, progress=report if len(args[0]) > model.n_batch else None)
                rows[: len(got)] = got
                out = len(got)
            elif cmd == "set_flash_attn":
                model.set_flash_attn(*args)
                out = {a: getattr(model, a, None) for a in _MIRRORED}
            else:  # truncate, reset, sync
                out = getattr(model, cmd)(*args)
            conn.send(("ok", out, len(model.cached_tokens), model.decode_seconds, model.llama_decode_seconds))
        except LocalspecError as e:
            conn.send(("error", type(e).__name__, e.message, e.hint, len(model.cached_tokens)))
        except (ValueError, TypeError) as e:
            conn.send(("error", "BackendError", f"{type(e).__name__}: {e}", "", len(model.cached_tokens)))
    if shm is not None:
        rows = None
        shm.close()
    model.close()


class IsolatedModel:
    """A :class:`~localspec.backend.llama.LlamaModel` in a child process (see the module), with the
    same interface: tokenizer methods answer from a tokenizer-only copy here, KV-cache methods run
    in the child.

    Args:
        path: the GGUF file.
        rpc: RPC workers (``HOST:PORT``) the child connects to and puts the layers on.
        timeout: seconds a one-token pass may go unanswered (``--rpc-timeout``; see the module and
            :meth:`allowance`).
        kwargs: :class:`~localspec.backend.llama.LlamaModel`'s other arguments (``n_ctx``, ...).

    Attributes:
        cancel_grace: seconds a call may go unanswered after :meth:`abort` before the child is ended
            (see the module).

    Raises:
        WorkerError: a worker is down, refuses or speaks another protocol (named), the child died
            while loading, or it went silent longer than the load allows (see the module).
        ModelError / BackendError / ConfigError: as :class:`LlamaModel` raises them in the child.
    """

    def __init__(self, path: str | Path, rpc: Sequence[str] = (), timeout: float = RPC_TIMEOUT, **kwargs) -> None:
        from localspec.backend.llama import LlamaModel

        self.path = Path(path)
        self.rpc = tuple(rpc)
        self.timeout = float(timeout)
        self.cancel_grace = RPC_CANCEL_GRACE
        self._kwargs = kwargs
        self._tok = LlamaModel(self.path, vocab_only=True)
        self.n_vocab = self._tok.n_vocab
        self.cached_tokens: list[int] = []
        self.decode_seconds = 0.0
        self.llama_decode_seconds = 0.0  #: the child's model's (:attr:`LlamaModel.llama_decode_seconds`)
        self.repack_verdict = None
        self.flash_attn_mode = kwargs.get("flash_attn_mode")
        self.lost = False
        self._lost_message = self._lost_hint = ""
        self._aborting = False
        self._abort_at: float | None = None  # time.monotonic() of the abort() in force
        self._abort_lock = threading.Lock()
        self._abort_seq = 0  # the number of the last abort/clear sent to this child (see _serve)
        self._proc = None
        self._shm = None
        self._rows = None
        try:
            self._start()
        except BaseException:  # nothing of a model that did not load is kept: the child, its buffer, the tokenizer
            self.close()
            raise

    # -- the child ------------------------------------------------------------------------
    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # never fork a process with llama.cpp's threads in it
        self._conn, child_conn = ctx.Pipe()
        child_abort, self._abort_conn = ctx.Pipe(duplex=False)  # (receive end, send end)
        self._proc = ctx.Process(target=_child_main, args=(child_conn, child_abort, str(self.path), self._kwargs,
                                                           self.rpc), daemon=True, name="localspec-model")
        with self._abort_lock:
            self._abort_seq = 0  # a new child has applied none
        self._proc.start()
        child_conn.close()
        reply = self._recv("loading the model", max(self.timeout, RPC_LOAD_SILENCE))
        if reply[0] == "error":
            self._proc.join(5)
            raise _error_of(*reply[1:4])
        self.__dict__.update(reply[1])
        self.cached_tokens = []
        self.lost = False
        self._set_buffer(_INITIAL_ROWS)
        if self._aborting:
            self._tell_abort(True)

    def _set_buffer(self, rows: int) -> None:
        """Share a new logits buffer of ``rows`` rows with the child and free the old one, also when the
        child dies meanwhile (the new one is then freed by :meth:`close_child`)."""
        old = self._shm
        self._shm = shared_memory.SharedMemory(create=True, size=rows * self.n_vocab * 4)
        self._rows = np.ndarray((rows, self.n_vocab), dtype=np.float32, buffer=self._shm.buf)
        try:
            self._call("buffer", self._shm.name, rows)
        finally:
            if old is not None:
                old.close()
                old.unlink()

    def allowance(self, tokens: int = 0) -> float:
        """Seconds a call may go without a word from the child: ``timeout * (1 + tokens / 32)``
        for a pass of ``tokens`` tokens (:data:`~localspec.rpc_endpoints.RPC_TIMEOUT_TOKENS`), ``timeout``
        for a call that decodes nothing."""
        return self.timeout * (1 + tokens / RPC_TIMEOUT_TOKENS)

    def _recv(self, doing: str, seconds: float, next_seconds=None, cancellable: bool = False):
        """The child's reply, waiting at most ``seconds`` for each of its messages; an ``("alive",
        x)`` report restarts the wait (``next_seconds(x)`` seconds, or ``seconds`` again). ``cancellable``:
        an :meth:`abort` cuts the wait to :attr:`cancel_grace` seconds (see the module).

        Raises:
            WorkerError: the child died (:meth:`_died`) or went silent (:meth:`_stalled`).
            DecodeAborted: cancelled, and the child was ended after :attr:`cancel_grace` seconds without
                an answer (the model is lost; the message says why, as :meth:`_stalled` does)."""
        start = time.monotonic()
        while True:
            try:
                waited = self._wait(seconds, start if cancellable else None)
                if waited == "late":
                    raise self._stalled(doing, seconds)
                if waited == "cancelled":
                    lost = self._stalled(doing, self.cancel_grace, cancelled=True)
                    raise DecodeAborted(lost.message, lost.hint)
                reply = self._conn.recv()
            except (EOFError, OSError):
                raise self._died(doing) from None
            if reply[0] != "alive":
                return reply
            if next_seconds is not None:
                seconds = next_seconds(reply[1])

    def _wait(self, seconds: float, call_start: float | None) -> str | None:
        """Wait for the child's next message: None once it is there, ``"late"`` after ``seconds``;
        with ``call_start`` (the call's time.monotonic()), ``"cancelled"`` once :attr:`cancel_grace`
        seconds have passed since both the call's start and the :meth:`abort` in force."""
        if call_start is None:
            return None if self._conn.poll(seconds) else "late"
        deadline = time.monotonic() + seconds
        while True:
            abort_at = self._abort_at  # set by abort() from another thread at any time
            cut = deadline if abort_at is None else min(deadline, max(abort_at, call_start) + self.cancel_grace)
            if self._conn.poll(max(0.0, min(cut - time.monotonic(), _CANCEL_POLL_SECONDS))):
                return None
            now = time.monotonic()
            if now >= deadline:
                return "late"
            if abort_at is not None and now >= cut:
                return "cancelled"

    def _died(self, doing: str) -> WorkerError:
        """The child is gone: mark the model lost and name the worker that is down, if one is."""
        from localspec.backend import rpc

        self.lost = True
        self._proc.join(5)
        code = self._proc.exitcode
        gone = []
        for ep in self.rpc:
            try:
                rpc.check_worker(ep, timeout=_CHECK_SECONDS)
            except WorkerError as e:
                gone.append(e.message)
        what = "; ".join(gone) if gone else f"the model process ended (exit code {code}) while {doing}"
        self._lost_message = f"{self.path.name}: lost its RPC workers: {what}" if gone else f"{self.path.name}: {what}"
        self._lost_hint = "start the worker again: the next generation loads the model again once it answers"
        return WorkerError(self._lost_message, self._lost_hint)

    def _stalled(self, doing: str, seconds: float, cancelled: bool = False) -> WorkerError:
        """The child has not answered within ``seconds`` (``cancelled``: of a cancel): kill it, mark the
        model lost, and name the workers that no longer answer a handshake (all of them when each does)."""
        from localspec.backend import rpc

        self._proc.kill()
        self._proc.join(5)
        self.lost = True
        silent = []
        for ep in self.rpc:
            try:
                rpc.check_worker(ep, timeout=_CHECK_SECONDS)
            except WorkerError:
                silent.append(ep)
        late = (f"{doing} was cancelled and still had no answer {seconds:.1f} s later" if cancelled
                else f"{doing} had no answer within {seconds:.1f} s")
        if silent:
            who = f"RPC worker {silent[0]}" if len(silent) == 1 else "RPC workers " + ", ".join(silent)
            what = f"{who} stopped answering: {late}"
        elif self.rpc and cancelled:
            what = (f"RPC workers {', '.join(self.rpc)}: {late} (each answers a new connection now: a pass on "
                    "RPC workers does not stop on a cancel, so the model process was ended)")
        elif self.rpc:
            what = (f"RPC workers {', '.join(self.rpc)}: {late} (each answers a new connection now: a stall that "
                    "passed, or a pass slower than --rpc-timeout allows)")
        else:
            what = f"the model process stopped answering: {late}"
        self._lost_message = f"{self.path.name}: {what}"
        reload = "the next generation loads the model again once every worker answers"
        if cancelled and not silent:
            self._lost_hint = reload
        else:
            self._lost_hint = (f"resume or restart the worker (stopped with Ctrl+Z or SIGSTOP? hung? the network cut?): "
                               f"{reload}" + ("" if cancelled else f"; if passes are this slow on purpose (a big model "
                                              f"over a slow link), raise --rpc-timeout (now {self.timeout:g} s)"))
        return WorkerError(self._lost_message, self._lost_hint)

    def _call(self, cmd: str, *args, doing: str | None = None, seconds: float | None = None, next_seconds=None):
        """Send ``cmd`` to the child and wait for its reply (see :meth:`_recv`; ``doing``: the call in an
        error; ``seconds``: the first wait, default :attr:`timeout`): (result, tokens cached).

        Raises:
            WorkerError: the model is lost, or is lost now.
            DecodeAborted: cancelled (the model may be lost now: see :meth:`_recv`); as the child's model
                raises otherwise."""
        if self.lost:
            raise WorkerError(self._lost_message, self._lost_hint)
        try:
            self._conn.send((cmd, args, self._abort_seq))
        except (BrokenPipeError, OSError):
            raise self._died(cmd) from None
        reply = self._recv(doing or _DOING.get(cmd, cmd), self.timeout if seconds is None else seconds, next_seconds,
                           cancellable=True)
        if reply[0] == "error":
            del self.cached_tokens[reply[4]:]
            raise _error_of(*reply[1:4])
        _, out, n_cached, self.decode_seconds, self.llama_decode_seconds = reply
        return out, n_cached

    def restart(self) -> None:
        """Load the model again in a new child (after :attr:`lost`); the KV cache starts empty.

        Raises:
            WorkerError: a worker is still down (named).
        """
        self.close_child()
        self._start()

    # -- what changes the KV cache --------------------------------------------------------
    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] | str = "last",
               progress=None) -> np.ndarray:
        """:meth:`LlamaModel.decode <localspec.backend.llama.LlamaModel.decode>` in the child
        (``progress`` is called once, at the end). float32 (k, n_vocab).

        Raises:
            WorkerError: the child died (a worker was lost) or missed its deadline.
            DecodeAborted: :meth:`abort` was called (the cache keeps the chunks read before it, as
                LlamaModel's does); when the child did not stop within
                :attr:`cancel_grace` seconds it was ended and the model is lost (see the module).
            As LlamaModel.decode otherwise."""
        tokens = [int(t) for t in tokens]
        k = 1 if logits_for == "last" else len(tokens) if logits_for == "all" else len(list(logits_for))
        if k > self._rows.shape[0]:
            self._set_buffer(k)
        want = logits_for if isinstance(logits_for, str) else [int(i) for i in logits_for]
        batch = max(1, self.n_batch)
        before = len(self.cached_tokens)
        # recorded first, as the child records them: its error reply trims the mirror to what it kept (an
        # aborted read keeps the chunks it read); a model lost, or no reply, leaves it as it was
        self.cached_tokens.extend(tokens)
        try:
            # each n_batch batch gets its own deadline; the child reports after each but the last
            n, n_cached = self._call("decode", tokens, want, doing=f"a {len(tokens)}-token pass",
                                     seconds=self.allowance(min(batch, len(tokens))),
                                     next_seconds=lambda done: self.allowance(min(batch, len(tokens) - done)))
        except BaseException as e:
            if self.lost or not isinstance(e, LocalspecError):
                del self.cached_tokens[before:]
            raise
        del self.cached_tokens[n_cached:]
        if progress is not None:
            progress(len(tokens), len(tokens))
        return self._rows[:n].copy()

    def decode_argmax(self, tokens: Sequence[int], logits_for: Sequence[int] | str = "all",
                      width: int | None = None) -> np.ndarray:
        """:meth:`LlamaModel.decode_argmax <localspec.backend.llama.LlamaModel.decode_argmax>`: here the rows
        come over the shared buffer (:meth:`decode`) and the argmax is taken on them. int64 (k,).

        Raises:
            As :meth:`decode`."""
        return np.argmax(self.decode(tokens, logits_for)[:, :width], axis=1)

    def truncate(self, n: int) -> None:
        """The KV cache to its first ``n`` tokens. A lost model has no cache left to roll back: only the
        mirror (:attr:`cached_tokens`) shortens, and the next call that needs the cache raises WorkerError
        (a cancel that ended the child still leaves the generation's end consistent).

        Raises:
            WorkerError: the child is lost now; as LlamaModel.truncate otherwise."""
        if self.lost:
            del self.cached_tokens[n:]
            return
        _, n_cached = self._call("truncate", n)
        del self.cached_tokens[n_cached:]

    def reset(self) -> None:
        self._call("reset")
        self.cached_tokens.clear()

    def sync(self, tokens: Sequence[int]) -> int:
        common, n_cached = self._call("sync", [int(t) for t in tokens])
        del self.cached_tokens[n_cached:]
        return common

    def set_flash_attn(self, flash_attn: bool | None) -> None:
        attrs, _ = self._call("set_flash_attn", flash_attn, seconds=max(self.timeout, RPC_LOAD_SILENCE))
        self.__dict__.update(attrs)
        self._kwargs["flash_attn"] = flash_attn  # a restart keeps it
        self.cached_tokens.clear()

    @property
    def child_pids(self) -> tuple[int, ...]:
        """The child process's id, for CPU meters (its work is this model's)."""
        return (self._proc.pid,) if self._proc is not None and self._proc.is_alive() else ()

    @property
    def n_cached(self) -> int:
        return len(self.cached_tokens)

    def abort(self) -> None:
        """Stop the call running now (thread-safe): the child's decode stops within a graph node of its
        CPU backend; a call still unanswered :attr:`cancel_grace` seconds later ends the child (see the
        module). In force until :meth:`clear_abort`."""
        if self._abort_at is None:
            self._abort_at = time.monotonic()
        self._aborting = True
        self._tell_abort(True)

    def clear_abort(self) -> None:
        self._aborting = False
        self._abort_at = None
        self._tell_abort(False)

    def _tell_abort(self, on: bool) -> None:
        with self._abort_lock:  # abort() comes from other threads: one message at a time, numbered in order
            self._abort_seq += 1
            try:
                self._abort_conn.send((self._abort_seq, on))
            except OSError:  # the child is gone: the next call says so (lost)
                pass

    @property
    def abort_requested(self) -> bool:
        return self._aborting

    # -- everything else: the tokenizer-only copy --------------------------------------------
    def __getattr__(self, name: str):
        # the tokenizer copy has no KV cache: its snapshots (the server's prefix cache) are not this model's
        if name.startswith("__") or name in ("_tok", "save_state", "load_state"):
            raise AttributeError(name)
        return getattr(self._tok, name)

    def close_child(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("close", (), 0))
            except OSError:
                pass
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        if self._shm is not None:
            self._rows = None
            self._shm.close()
            self._shm.unlink()
            self._shm = None

    def close(self) -> None:
        """Stop the child and free the shared memory and the tokenizer. Safe to call twice."""
        self.close_child()
        if self.__dict__.get("_tok") is not None:
            self._tok.close()
