"""The llama.cpp context of :class:`~localspec.backend.llama.LlamaModel`: its window (the default rule of
:mod:`localspec.backend.context`, halved when llama.cpp cannot allocate it), its batch, its threads,
flash attention and the abort callback; made when the model loads and again by :meth:`LlamaContext.set_flash_attn`.

:class:`LlamaContext` is a base class of ``LlamaModel``: it reads the llama.cpp handles the model holds
(``_lc``, the llama_cpp module; ``_model``) and never imports llama.cpp itself.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from localspec.backend import hugepages
from localspec.backend.context import (MIN_DEFAULT_CONTEXT, available_memory, context_bytes_per_token,
                                       default_context, kv_bytes_per_token)
from localspec.backend.native import last_error
from localspec.errors import BackendError

_abort_fn = None  # keep a reference: llama.cpp holds the C pointer


def _flag_abort_callback(lc):
    """llama.cpp's ``ggml_abort_callback`` as C's ``strlen``, or None where no C library is found.

    llama.cpp's CPU backend asks the abort callback after every graph node (about a thousand
    a token): a Python callback would take the GIL that often, slowing every decode and
    waiting on the UI thread. ``strlen(data)`` reads a 2-byte flag buffer instead, with no
    Python involved: 0 while ``data[0]`` is NUL (go on), 1 once it is set (abort); both are
    valid ``bool`` returns on every C ABI (the low byte of the return register).
    """
    global _abort_fn
    if _abort_fn is None:
        try:
            libc = ctypes.CDLL(None) if os.name != "nt" else ctypes.cdll.msvcrt
            _abort_fn = lc.ggml_abort_callback(ctypes.cast(libc.strlen, ctypes.c_void_p).value)
        except (OSError, AttributeError, TypeError):  # pragma: no cover - no C library to borrow from
            _abort_fn = False
    return _abort_fn or None


class LlamaContext:
    """The model's one llama.cpp context (a base class of :class:`~localspec.backend.llama.LlamaModel`).

    Attributes:
        n_ctx: the context window, tokens (at most what was asked; llama.cpp pads it up).
        n_batch: most tokens per ``llama_decode`` call.
        n_ubatch: llama.cpp's micro-batch, tokens.
        n_ctx_default: whether the window is the default one (``n_ctx=None`` when loading).
        flash_attn: flash attention on (True), off (False) or llama.cpp's auto (None).
    """

    _lc: Any
    _model: Any
    _ctx: Any
    _mem: Any
    _ctx_args: tuple[int | None, int, int]
    _abort_flag: Any
    path: Path
    n_ctx_train: int
    huge_pages: bool
    flash_attn: bool | None
    cached_tokens: list[int]
    _prefill_copy: Any

    def kv_bytes_per_token(self) -> int:
        """Bytes of f16 KV cache per token of window, from the GGUF's hyperparameters (layers, KV heads,
        key and value dimensions: ``<arch>.attention.key_length``/``value_length``, else embedding / heads)."""
        lc, m = self._lc, self._model
        n_head = int(lc.llama_model_n_head(m))
        arch = self.metadata("general.architecture") or ""

        def dim(kind: str) -> int:
            given = self.metadata(f"{arch}.attention.{kind}_length")
            return int(given) if given and given.isdigit() else int(lc.llama_model_n_embd(m)) // max(1, n_head)

        return kv_bytes_per_token(int(lc.llama_model_n_layer(m)), int(lc.llama_model_n_head_kv(m)), dim("key"),
                                  dim("value"))

    def window_bytes(self) -> int:
        """Bytes the context's window takes as the default-context rule counts them (KV cache and one
        batch's attention scores, :func:`~localspec.backend.context.context_bytes_per_token`)."""
        return self.n_ctx * context_bytes_per_token(self.kv_bytes_per_token(),
                                                    int(self._lc.llama_model_n_head(self._model)), self.n_batch)

    def default_n_ctx(self, n_batch: int, n_ctx_max: int | None = None) -> int:
        """The default window for this model on this machine now (:func:`~localspec.backend.context.default_context`):
        the memory available less the weights when they are mapped (a mapped file's pages count as available)."""
        weights = 0 if self.huge_pages else self.path.stat().st_size
        per_token = context_bytes_per_token(self.kv_bytes_per_token(), int(self._lc.llama_model_n_head(self._model)),
                                            n_batch)
        return default_context(self.n_ctx_train, per_token, available_memory() - weights, cap=n_ctx_max)

    def _first_context(self, flash_attn: bool | None, n_ctx_max: int | None) -> None:
        """Make the context, with the default window (:meth:`default_n_ctx`) when ``n_ctx`` was None; a default
        window llama.cpp cannot allocate is halved (not below :data:`MIN_DEFAULT_CONTEXT`) and tried again."""
        n_ctx, n_batch, threads = self._ctx_args
        #: whether the window is the default one (``n_ctx=None``), chosen by :meth:`default_n_ctx`
        self.n_ctx_default = n_ctx is None
        if n_ctx is None:
            self._ctx_args = (self.default_n_ctx(n_batch, n_ctx_max), n_batch, threads)
        while True:
            try:
                return self._new_context(flash_attn)
            except BackendError:
                n_ctx, n_batch, threads = self._ctx_args
                if not self.n_ctx_default or n_ctx <= MIN_DEFAULT_CONTEXT:
                    raise
                self._ctx_args = (max(MIN_DEFAULT_CONTEXT, n_ctx // 2), n_batch, threads)

    def _new_context(self, flash_attn: bool | None) -> None:
        lc = self._lc
        n_ctx, n_batch, threads = self._ctx_args
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        abort_fn = _flag_abort_callback(lc)
        if abort_fn is not None:
            cparams.abort_callback = abort_fn
            cparams.abort_callback_data = ctypes.cast(self._abort_flag, ctypes.c_void_p)
        if flash_attn is not None:
            cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
        # /proc/self/smaps is read only when huge pages were asked for
        with hugepages.new_regions() if getattr(self, "huge_pages", False) else nullcontext([]) as regions:
            ctx = lc.llama_init_from_model(self._model, cparams)
        if ctx and regions:
            # the KV cache and compute buffers are read every token too; mostly untouched yet, so
            # they are only marked, and the kernel gives them huge pages as they are first written
            hugepages.collapse(regions)
        if not ctx:
            raise BackendError(f"could not create a llama.cpp context for {self.path} (n_ctx={n_ctx})"
                               f"{last_error()}", "lower n_ctx or n_batch")
        self._ctx = ctx
        self._mem = lc.llama_get_memory(ctx)
        # llama.cpp pads n_ctx up (to a multiple of 256) but clamps n_batch/n_ubatch to the
        # n_ctx asked for; a decode call longer than its n_batch aborts the process
        # (GGML_ASSERT), so keep to the smaller of what was asked and what it set.
        self.n_ctx = min(n_ctx, int(lc.llama_n_ctx(ctx)))
        self.n_batch = max(1, min(n_batch, int(lc.llama_n_batch(ctx)), int(lc.llama_n_ubatch(ctx))))
        self.n_ubatch = int(lc.llama_n_ubatch(ctx))

    def set_flash_attn(self, flash_attn: bool | None) -> None:
        """Recreate the llama.cpp context with flash attention on (True), off (False) or auto (None).

        The weights stay loaded; the KV cache starts empty (:attr:`cached_tokens` is cleared).
        A no-op when the setting is unchanged.

        Raises:
            BackendError: the new context cannot be created (the old one is kept).
        """
        if flash_attn == self.flash_attn and self._ctx:
            return
        old_ctx, old_mem = self._ctx, self._mem
        try:
            self._new_context(flash_attn)
        except BackendError:
            self._ctx, self._mem = old_ctx, old_mem
            raise
        self._lc.llama_free(old_ctx)
        self.flash_attn = flash_attn
        self.cached_tokens.clear()
        if self._prefill_copy is not None:
            try:
                self._prefill_copy.model.set_flash_attn(flash_attn)
            except BackendError:  # the copy cannot follow: drop it (its cache would not transfer)
                self._prefill_copy.model.close()
                self._prefill_copy = None
