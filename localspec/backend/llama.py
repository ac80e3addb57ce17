"""The native model: load a GGUF, tokenize, decode, logits, rollback; llama.cpp's init and error log.

One class per native resource (:class:`LlamaModel`; the grammar sampler it makes is
:class:`localspec.backend.grammar.Grammar`), closed by a context manager, with typed errors
on a null handle or a nonzero decode status; the rest of the code never sees ctypes. Logits
come from ``llama_get_logits_ith`` for the positions asked only: no ``logits_all``, no
n_ctx x n_vocab score matrix. The module that loads llama.cpp; besides it only
:mod:`localspec.backend.grammar` (llama-cpp-python's JSON-schema converter) and
:mod:`localspec.bench.peer` (llama-cpp-python's ``Llama``, a benchmark peer) import llama_cpp.
Chat prompts are split into markup and content as pure text in
:mod:`localspec.backend.chat_template`.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from localspec.backend import hugepages
from localspec.backend.chat_template import TOKEN_ATTR_SPECIAL, chat_fragments, split_rendered_chat
from localspec.backend.context import (MIN_DEFAULT_CONTEXT, available_memory, context_bytes_per_token,
                                       default_context, kv_bytes_per_token)
from localspec.backend.grammar import Grammar, LazyGrammar, Trigger
from localspec.backend.native import NativeResource
from localspec.errors import BackendError, CacheRollbackError, ConfigError, ContextOverflowError, DecodeAborted, ModelError

_init_lock = threading.Lock()
_initialized = False
_log_callback = None  # keep a reference: llama.cpp holds the C pointer
GGUF_MAGIC = b"GGUF"
_recent_errors: list[str] = []
#: while a model with explicit devices loads: llama.cpp's "layer N assigned to device D" lines
_layer_log: list[str] | None = None
_LAYER_LINE = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")


def _last_error() -> str:
    return f" (llama.cpp: {_recent_errors[-1]})" if _recent_errors else ""


def _llama():
    import llama_cpp  # noqa: WPS433 - loaded here, on first use

    return llama_cpp


def llama_cpp_version() -> str:
    """llama-cpp-python's version and the llama.cpp build it wraps, e.g. ``"0.3.36 (llama.cpp b6xxx)"``."""
    lc = _llama()
    ver = str(getattr(lc, "__version__", "?"))
    try:
        raw = lc.llama_version()
        if raw:
            ver += f" (llama.cpp {raw.decode(errors='replace')})"
    except Exception:  # pragma: no cover - older bindings have no llama_version
        pass
    return ver


def system_info() -> str:
    """llama.cpp's ``llama_print_system_info()``: the CPU features its kernels use, e.g. ``AVX2 = 1``."""
    _ensure_init()
    try:
        return _llama().llama_print_system_info().decode(errors="replace").strip()
    except Exception:  # pragma: no cover
        return ""


def _ensure_init(verbose: bool = False) -> None:
    global _initialized, _log_callback
    with _init_lock:
        if _initialized:
            return
        lc = _llama()
        lc.llama_backend_init()
        if not verbose:

            @lc.llama_log_callback
            def _keep_errors(level, text, user_data):  # pragma: no cover - native callback
                if level in (3, 4) and text:  # GGML_LOG_LEVEL_WARN, _ERROR: kept for error messages
                    _recent_errors.append(text.decode("utf-8", errors="replace").strip())
                    del _recent_errors[:-8]
                elif _layer_log is not None and text and b"assigned to device" in text:
                    _layer_log.append(text.decode("utf-8", errors="replace"))

            _log_callback = _keep_errors
            lc.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _initialized = True


def check_gguf_file(path: Path) -> None:
    """Refuse a missing, empty, non-GGUF or obviously truncated file before llama.cpp sees it.

    Raises:
        ModelError: with the reason and a hint.
    """
    if not path.exists():
        raise ModelError(f"model file not found: {path}", "check the path, or list presets with: localspec models")
    if not path.is_file():
        raise ModelError(f"not a file: {path}", "pass the path of a .gguf file")
    size = path.stat().st_size
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(
            f"{path} is not a GGUF file (starts with {magic!r})",
            "localspec loads llama.cpp GGUF files; convert or download a .gguf",
        )
    if size < 1024:
        raise ModelError(f"{path} is truncated ({size} bytes)", "download the file again")


@dataclass(frozen=True)
class VocabInfo:
    """What the tokenizer compatibility check compares (pure data, see localspec.core.tokenizer)."""

    vocab_type: int
    n_tokens: int
    bos: int
    eos: int
    add_bos: bool
    texts: tuple[bytes, ...]
    attrs: tuple[int, ...]


def _read_into_memory(lc, mparams) -> None:
    """Set llama.cpp's model params to read the file into memory instead of mapping it."""
    if hasattr(mparams, "load_mode"):  # llama.cpp with enum llama_load_mode
        mparams.load_mode = lc.LLAMA_LOAD_MODE_NONE
    elif hasattr(mparams, "use_mmap"):  # pragma: no cover - older llama-cpp-python
        mparams.use_mmap = False


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


def set_extra_bufts(mparams, on: bool) -> bool:
    """Set ``use_extra_bufts`` (weight repacking) on llama.cpp model params; False if the build lacks it."""
    if not hasattr(mparams, "use_extra_bufts"):  # pragma: no cover - older llama-cpp-python
        return False
    mparams.use_extra_bufts = bool(on)
    return True


@dataclass(frozen=True, eq=False)
class KvState:
    """A snapshot of a model's KV cache (sequence 0): the tokens it holds and llama.cpp's copy of their
    cells (``llama_state_seq_get_data``), restored by :meth:`LlamaModel.load_state`.

    Attributes:
        tokens: the cached tokens, in order.
        data: llama.cpp's bytes (a ctypes ``uint8`` array, not copied again).
        nbytes: bytes of ``data``.
        flash_attn: the context's flash-attention setting it was taken under (the V layout differs).
    """

    tokens: tuple[int, ...]
    data: object
    nbytes: int
    flash_attn: bool | None


@dataclass
class PrefillCopy:
    """A model's second copy in llama.cpp's standard weight layout that reads its long prompts
    (:meth:`LlamaModel.attach_prefill_copy`).

    Attributes:
        model: the copy (a :class:`LlamaModel` loaded without repacking).
        gain_per_token: seconds saved per prompt token read there instead of in the repacked layout.
        copy_per_token: seconds per cached token to move the KV cache between the two contexts.
        min_tokens: the fewest tokens of a decode sent there.
        tokens, seconds: prompt tokens read there so far, and the wall seconds of those decodes.
    """

    model: "LlamaModel"
    gain_per_token: float
    copy_per_token: float
    min_tokens: int
    tokens: int = 0
    seconds: float = 0.0

    def pays(self, n_cached: int, n: int) -> bool:
        """Whether reading ``n`` tokens after ``n_cached`` cached ones there saves more than moving the
        cache costs: ``n >= min_tokens`` and ``n x gain > (2 x n_cached + n) x copy`` (the cache goes
        there, unless the copy already holds it, and all of it comes back)."""
        return n >= self.min_tokens and n * self.gain_per_token > (2 * n_cached + n) * self.copy_per_token


class LlamaModel(NativeResource):
    """A loaded GGUF model with one llama.cpp context and one sequence (id 0).

    Tracks exactly which tokens sit in the KV cache (:attr:`cached_tokens`).

    Args:
        path: GGUF file.
        n_ctx: context window, tokens; None: the default of :mod:`localspec.backend.context` (the
            model's training context where this machine's memory allows it, capped at ``n_ctx_max``),
            halved down to 4,096 when llama.cpp cannot make it.
        n_ctx_max: the most a default window (``n_ctx=None``) may be (a draft model: the target's
            window), or None.
        n_batch: most tokens per llama_decode call; longer inputs are split.
        n_threads: CPU threads for decoding.
        n_gpu_layers: layers offloaded to the GPU (-1 = all, 0 = none). Needs a GPU
            build of llama-cpp-python; on a CPU build it is ignored by llama.cpp.
        flash_attn: True / False sets llama.cpp's flash attention on / off
            (``flash_attn_type``); None leaves llama.cpp's default (auto). llama-cpp-python's
            ``Llama`` sets it off unless asked. :meth:`set_flash_attn` changes it later.
        huge_pages: read the weights into memory and move them into transparent huge pages
            (:mod:`localspec.backend.hugepages`; Linux with THP ``always``/``madvise``), instead of
            mapping the file with llama.cpp's default ``mmap``; one-token decoding streams every
            weight, and 2 MiB pages spare the TLB. Where huge pages are not available, or every
            layer is offloaded to a GPU (``n_gpu_layers=-1`` on a GPU build), the file is mapped
            as usual. :attr:`huge_page_bytes` says how much of the weights the kernel collapsed.
        repack: let llama.cpp repack the weights into its "extra" CPU buffer types
            (``use_extra_bufts``: AMX tiles on Sapphire/Granite Rapids, interleaved Q4_0 on
            AVX2/NEON). Off by default: on virtualized AMX CPUs the AMX matrix kernel crashes the
            process on the first decode of more than one token (llama.cpp issue 20824). Turn it
            on only where :mod:`localspec.backend.repack`'s child-process probe found it safe.
        flash_attn_mode: the setting the user asked for (``"auto"``/``"on"``/``"off"``), kept
            for the calibration, which with ``"auto"`` times both and keeps the faster
            (:mod:`localspec.backend.calibration`); None for a model loaded outside the loader.
        devices: ggml devices (``ggml_backend_dev_t`` addresses) the offloaded layers may go to,
            e.g. RPC workers' (:func:`localspec.backend.rpc.connect_workers`); ``[]`` keeps every
            layer on this CPU; None lets llama.cpp use every registered device. With it,
            :attr:`device_layers` says how many layers each device got.
        vocab_only: load the tokenizer and metadata only (no weights, no context): tokenizing,
            chat templates and grammars work, :meth:`decode` does not.
        load_progress: called as ``load_progress(fraction)`` (0..1) while llama.cpp loads the
            weights, once per tensor (its ``progress_callback``): a sign of life while they go to
            RPC workers (:mod:`localspec.backend.isolated`).

    Raises:
        ModelError: the file is missing, not a GGUF, truncated, or fails to load.
        BackendError: the context cannot be created.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        n_ctx: int | None = 4096,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        flash_attn: bool | None = None,
        huge_pages: bool = True,
        repack: bool = False,
        flash_attn_mode: str | None = None,
        verbose: bool = False,
        devices: Sequence[int] | None = None,
        vocab_only: bool = False,
        n_ctx_max: int | None = None,
        load_progress: Callable[[float], None] | None = None,
    ) -> None:
        self.path = Path(path)
        check_gguf_file(self.path)
        _ensure_init(verbose)
        lc = self._lc = _llama()
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers < 0 else n_gpu_layers
        mparams.vocab_only = bool(vocab_only)
        #: whether the weights were loaded into llama.cpp's extra (repacked) buffer types
        self.repack = bool(repack) and set_extra_bufts(mparams, True)
        if not self.repack:
            set_extra_bufts(mparams, False)
        # every layer on a GPU: the CPU streams no weights, so nothing is gained from huge pages
        all_on_gpu = n_gpu_layers < 0 and bool(lc.llama_supports_gpu_offload())
        self.huge_pages = huge_pages = (bool(huge_pages) and not all_on_gpu and not vocab_only
                                        and hugepages.available())
        if huge_pages:
            _read_into_memory(lc, mparams)
        #: ggml device name -> layers llama.cpp put there (only when ``devices`` was given)
        self.device_layers: dict[str, int] = {}
        with hugepages.new_regions() if huge_pages else nullcontext([]) as regions:
            self._model = self._load_weights(lc, mparams, devices, load_progress)
        #: bytes of the weights the kernel moved into huge pages (0: none, or not asked)
        self.huge_page_bytes = hugepages.collapse(regions) if huge_pages and self._model else 0
        if not self._model:
            raise ModelError(
                f"llama.cpp could not load {self.path}{_last_error()}",
                "the file may be truncated or corrupt, or of an architecture this llama.cpp build does not know; "
                "download it again",
            )
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self._vocab))
        self.n_ctx_train = int(lc.llama_model_n_ctx_train(self._model))
        threads = n_threads or os.cpu_count() or 1
        self._ctx_args = (n_ctx, n_batch, threads)
        self._ctx = None
        self._abort_flag = ctypes.create_string_buffer(2)  # see abort(); read by llama.cpp's threads
        self.flash_attn = flash_attn
        if not vocab_only:  # a tokenizer only (an IsolatedModel's): no context, no batch
            try:
                self._first_context(flash_attn, n_ctx_max)
            except BackendError:
                lc.llama_model_free(self._model)
                self._model = None
                raise
        self.n_threads, self.n_gpu_layers = threads, n_gpu_layers
        self._batch = None if vocab_only else lc.llama_batch_init(n_batch, 0, 1)
        self.cached_tokens: list[int] = []
        self._read_vocab(lc)
        self.flash_attn_mode = flash_attn_mode  # asked for (auto/on/off): the calibration reads it
        #: the :class:`localspec.backend.repack.RepackVerdict` the loader followed (None: not probed)
        self.repack_verdict = None
        self._piece_cache: dict[int, bytes] = {}
        self._specials: dict[str, tuple[int, int]] | None = None
        self._formatters: dict[bool, object] = {}  # compiled chat templates, by add_generation_prompt
        self._piece_buf = ctypes.create_string_buffer(256)
        self._logits_rows = 0
        self._prefill_copy: PrefillCopy | None = None

    # -- lifecycle ------------------------------------------------------------------
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
        window llama.cpp cannot allocate is halved (not below 4,096) and tried again."""
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

    def _read_vocab(self, lc) -> None:
        """The special ids: BOS, EOS, whether BOS is added, the end-of-generation set."""
        self.bos = int(lc.llama_vocab_bos(self._vocab))
        self.eos = int(lc.llama_vocab_eos(self._vocab))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self._vocab))
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for t in range(self.n_vocab):
            if lc.llama_vocab_is_eog(self._vocab, t):
                self._eog[t] = True
        self.eog_tokens = frozenset(int(t) for t in np.flatnonzero(self._eog))

    def _load_weights(self, lc, mparams, devices: Sequence[int] | None,
                      load_progress: Callable[[float], None] | None = None):
        """``llama_model_load_from_file``; with ``devices``, offload only to them and count the layers
        llama.cpp put on each (its "layer N assigned to device D" log lines) into :attr:`device_layers`;
        ``load_progress(fraction)`` after each tensor (llama.cpp's ``progress_callback``)."""
        global _layer_log
        if load_progress is not None:
            # kept referenced (a local of this call) while llama.cpp holds the pointer: during the load
            callback = lc.llama_progress_callback(lambda fraction, _data: load_progress(float(fraction)) or True)
            mparams.progress_callback = callback
        if devices is not None:
            # a NULL-terminated ggml_backend_dev_t list; kept alive while llama.cpp reads it
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
            _layer_log = []
        try:
            return lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        finally:
            lines, _layer_log = _layer_log or [], None
            for m in filter(None, map(_LAYER_LINE.search, lines)):
                self.device_layers[m.group(2)] = self.device_layers.get(m.group(2), 0) + 1

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
                               f"{_last_error()}", "lower n_ctx or n_batch")
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

    def close(self) -> None:
        """Free the context, batch and model. Safe to call twice."""
        lc = getattr(self, "_lc", None)
        if lc is None:
            return
        copy = getattr(self, "_prefill_copy", None)
        if copy is not None:
            copy.model.close()
            self._prefill_copy = None
        if getattr(self, "_batch", None) is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            lc.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

    # -- cancelling -----------------------------------------------------------------
    def abort(self) -> None:
        """Stop the running (or next) :meth:`decode` within about one graph node; thread-safe.

        The decode raises :class:`~localspec.errors.DecodeAborted` with the cache rolled back
        to where it was before the call. The flag stays set until :meth:`clear_abort`.
        """
        self._abort_flag[0] = b"\x01"
        if getattr(self, "_prefill_copy", None) is not None:
            self._prefill_copy.model.abort()

    def clear_abort(self) -> None:
        """Let decodes run again after :meth:`abort`."""
        self._abort_flag[0] = b"\x00"
        if getattr(self, "_prefill_copy", None) is not None:
            self._prefill_copy.model.clear_abort()

    @property
    def abort_requested(self) -> bool:
        return self._abort_flag.raw[0] != 0

    # -- metadata -------------------------------------------------------------------
    def metadata(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            self._lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        """The GGUF's default chat template (Jinja), or None."""
        raw = self._lc.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8") if raw else None

    def render_chat(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                    tools: Sequence[dict] | None = None) -> str:
        """Render chat messages (``{"role", "content"}`` dicts) with the GGUF's chat template.

        ``tools`` (OpenAI's ``[{"type": "function", "function": {...}}]``) is passed to the
        template as its ``tools`` variable, as Hugging Face's ``apply_chat_template`` does;
        assistant messages may carry ``tool_calls`` and ``role: tool`` messages the results.

        Raises:
            ModelError: the GGUF has no chat template.
            ConfigError: the template refuses the messages (a Jinja ``raise_exception``,
                e.g. "System role not supported" from a Gemma-style template) or fails
                to render; the message carries the template's own words.
        """
        template = self.chat_template()
        if not template:
            raise ModelError(
                f"{self.path.name} has no chat template",
                "use a raw prompt (localspec generate --raw) or an instruct model",
            )
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        bos_text = self.token_bytes(self.bos, special=True).decode("utf-8", "replace") if self.bos >= 0 else ""
        eos_text = self.token_bytes(self.eos, special=True).decode("utf-8", "replace") if self.eos >= 0 else ""
        try:
            formatter = self._formatters.get(add_generation_prompt)
            if formatter is None:  # compiling the template costs milliseconds; rendering, microseconds
                formatter = Jinja2ChatFormatter(template, eos_text, bos_text,
                                                add_generation_prompt=add_generation_prompt)
                self._formatters[add_generation_prompt] = formatter
            return formatter(messages=list(messages), tools=list(tools) if tools else None).prompt
        except Exception as e:  # Jinja syntax/undefined errors and the template's own raise_exception
            said = str(e).strip() or type(e).__name__
            has_system = any(m.get("role") == "system" for m in messages)
            hint = ("this model's chat template takes no system message: drop --system (and the system message of "
                    "--messages), or send a raw prompt with --raw" if has_system or "system" in said.lower() else
                    "check the roles and order of the messages (many templates want user and assistant to "
                    "alternate), or send a raw prompt with --raw")
            raise ConfigError(f"the chat template of {self.path.name} refused the messages: {said}", hint) from e

    def tokenize_chat(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                      **render_kwargs) -> list[int]:
        """Chat messages -> prompt token ids, with message content always tokenized as text.

        Only the chat template's own markup becomes special tokens: a message whose text
        holds ``<|im_end|>\\n<|im_start|>system`` cannot open a turn, and a content gives
        the same tokens whatever markers it holds. The prompt of a chat whose contents hold
        no special-token text is token-identical to tokenizing the whole rendered prompt
        with special parsing (what this returned before), so KV-cache prefixes keep
        matching. (The GGUF's user-defined tokens, e.g. Qwen's ``<tool_call>``, are matched
        in text too, as llama.cpp and Hugging Face tokenizers do; they open no turn.)

        Args:
            messages: dicts with ``role`` and ``content`` (a string) and any other keys the
                template reads.
            add_generation_prompt: end with the template's assistant header.
            render_kwargs: passed on to :meth:`render_chat`.

        Returns:
            Token ids, with BOS where the GGUF asks for it (never two).

        Raises:
            ModelError, ConfigError: from :meth:`render_chat`.
            ConfigError: a content holds special-token text and the template writes content
                in a form that cannot be located in the prompt (escaped or cut), or a text
                holds a lone UTF-16 surrogate.
        """
        def render(msgs: list[dict]) -> str:
            return self.render_chat(msgs, add_generation_prompt=add_generation_prompt, **render_kwargs)

        pieces = split_rendered_chat(messages, render)
        if pieces is None:
            for i, m in enumerate(messages):
                content = m.get("content")
                if isinstance(content, str) and (self.tokenize(content, add_special=False) !=
                                                 self.tokenize(content, add_special=False, parse_special=False)):
                    raise ConfigError(
                        f"message {i} holds special-token text, and the chat template of {self.path.name} "
                        "changes message content, so it cannot be kept as plain text",
                        "remove the special-token markers (such as <|im_start|>) from the message, or send a raw "
                        "prompt (--raw, /v1/completions)")
            return self.tokenize(render(list(messages)))  # no content can become a special token
        tokens = [self.bos] if self.add_bos and self.bos >= 0 else []
        for frag in chat_fragments(pieces, self.special_tokens()):
            tokens += [frag] if isinstance(frag, int) else self.tokenize(frag, add_special=False, parse_special=False)
        if self.bos >= 0 and len(tokens) >= 2 and tokens[0] == self.bos and tokens[1] == self.bos:
            tokens = tokens[1:]
        return tokens

    def fim_tokens(self) -> dict[str, int]:
        """The fill-in-the-middle tokens llama.cpp found in the GGUF (``tokenizer.ggml.fim_*_token_id``
        metadata, or known token texts such as ``<|fim_prefix|>``): role -> token id, -1 where absent.

        Roles (llama.cpp's ``llama_vocab_fim_<role>``): ``pre``, ``suf``, ``mid`` (prefix, suffix,
        middle), ``pad``, ``rep`` (repository name, Qwen2.5-Coder's ``<|repo_name|>``), ``sep``
        (file separator, ``<|file_sep|>``).
        """
        lc = self._lc
        return {role: int(getattr(lc, f"llama_vocab_fim_{role}")(self._vocab))
                for role in ("pre", "suf", "mid", "pad", "rep", "sep")}

    def special_tokens(self) -> dict[str, tuple[int, int]]:
        """The texts llama.cpp's tokenizer reads as special tokens: text -> (id, attributes).

        Control, user-defined and unknown tokens (llama.cpp's ``cache_special_tokens``);
        computed once per model.
        """
        if self._specials is None:
            lc = self._lc
            table: dict[str, tuple[int, int]] = {}
            for t in range(self.n_vocab):
                attrs = int(lc.llama_vocab_get_attr(self._vocab, t))
                if attrs & TOKEN_ATTR_SPECIAL:
                    text = (lc.llama_vocab_get_text(self._vocab, t) or b"").decode("utf-8", "replace")
                    if text:
                        table.setdefault(text, (t, attrs))
            self._specials = table
        return self._specials

    def vocab_info(self) -> VocabInfo:
        lc = self._lc
        texts = tuple(lc.llama_vocab_get_text(self._vocab, t) or b"" for t in range(self.n_vocab))
        attrs = tuple(int(lc.llama_vocab_get_attr(self._vocab, t)) for t in range(self.n_vocab))
        return VocabInfo(
            vocab_type=int(lc.llama_vocab_type(self._vocab)),
            n_tokens=self.n_vocab,
            bos=self.bos,
            eos=self.eos,
            add_bos=self.add_bos,
            texts=texts,
            attrs=attrs,
        )

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token]) if 0 <= token < self.n_vocab else False

    # -- tokenizer ------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool | None = None, parse_special: bool = True) -> list[int]:
        """Text -> token ids.

        Special tokens written as text (``<|im_start|>``) become single ids. BOS is added
        when the GGUF asks for it (``add_special=None``), and never twice: a text that
        already starts with the BOS token keeps one.

        Raises:
            ConfigError: the text holds a lone UTF-16 surrogate (e.g. from JSON ``"\\ud800"``),
                which is not Unicode text and has no UTF-8 encoding.
        """
        lc = self._lc
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ConfigError(f"the text holds a lone UTF-16 surrogate ({text[e.start]!r} at character {e.start}), "
                              "which is not valid Unicode", "send UTF-8 text; pair or remove the surrogate") from None
        add = self.add_bos if add_special is None else add_special
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add, parse_special)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add, parse_special)
        tokens = list(buf[:n])
        if self.bos >= 0 and len(tokens) >= 2 and tokens[0] == self.bos and tokens[1] == self.bos:
            tokens = tokens[1:]
        return tokens

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The bytes a token decodes to (control tokens render empty unless ``special``)."""
        key = token if not special else -1 - token
        hit = self._piece_cache.get(key)
        if hit is not None:
            return hit
        lc = self._lc
        n = lc.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
            out = buf.raw[:n]
        else:
            out = self._piece_buf.raw[:n]
        self._piece_cache[key] = out
        return out

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def grammar(self, gbnf: str, root: str = "root", triggers: Sequence[int] = ()) -> Grammar:
        """A fresh :class:`Grammar` state for ``gbnf`` (GBNF text, llama.cpp's grammar format) from rule ``root``.

        ``triggers`` (token ids): a lazy grammar (llama.cpp's ``llama_sampler_init_grammar_lazy_patterns``
        with trigger tokens only): it allows every token until one of them is accepted, which it then
        accepts as its own first token (the grammar must start with that token's text), and
        constrains from there on.

        Raises:
            ConfigError: llama.cpp cannot parse the grammar (or ``root`` is not one of its rules).
        """
        _recent_errors.clear()
        lc = self._lc
        if triggers:
            ids = (lc.llama_token * len(triggers))(*triggers)
            sampler = lc.llama_sampler_init_grammar_lazy_patterns(self._vocab, gbnf.encode(), root.encode(),
                                                                  None, 0, ids, len(triggers))
        else:
            sampler = lc.llama_sampler_init_grammar(self._vocab, gbnf.encode(), root.encode())
        if not sampler:
            raise ConfigError(f"llama.cpp could not parse the grammar{_last_error()}",
                              "check the GBNF text and that its root rule exists")
        return Grammar(self._lc, sampler, self.n_vocab)

    def lazy_grammar(self, forms: Sequence[tuple[bytes, str, bool]], root: str, ends: bytes) -> LazyGrammar:
        """A :class:`LazyGrammar` over this vocabulary: free output until one of ``forms`` matches it.

        ``forms``: (pattern, gbnf, at_start) each, a regular expression over the output's bytes
        (:class:`Trigger`) and the grammar (start rule ``root``) from its match's start on. ``ends``:
        every byte a match can end with (the tokens holding one are found once per vocabulary and byte set).

        Raises:
            ConfigError: llama.cpp cannot parse a grammar.
        """
        triggers: list[Trigger] = []
        try:
            for pattern, gbnf, at_start in forms:
                triggers.append(Trigger(re.compile(pattern), self.grammar(gbnf, root), at_start))
        except Exception:
            for t in triggers:
                t.grammar.close()
            raise
        window = 256 + max(len(p) for p, _, _ in forms)  # a pattern's text bounds its matches' length
        return LazyGrammar(triggers, lambda t: self.token_bytes(t, special=True), self._spell,
                           lambda: self._tokens_holding(ends), window)

    def _spell(self, text: bytes) -> list[int] | None:
        """Tokens whose (special-rendered) pieces are ``text``, or None (``text`` ends inside a character)."""
        try:
            tokens = self.tokenize(text.decode("utf-8"), add_special=False, parse_special=False)
        except (UnicodeDecodeError, ConfigError):
            return None
        return tokens if b"".join(self.token_bytes(t, special=True) for t in tokens) == text else None

    def _tokens_holding(self, ends: bytes) -> np.ndarray:
        """The ids whose piece holds one of the bytes ``ends``, shape (k,) int64 (a vocabulary scan, cached)."""
        cache = self.__dict__.setdefault("_holding", {})
        if ends not in cache:
            cache[ends] = np.array([t for t in range(self.n_vocab)
                                    if any(b in self.token_bytes(t, special=True) for b in ends)], dtype=np.int64)
        return cache[ends]

    # -- decoding -------------------------------------------------------------------
    @property
    def n_cached(self) -> int:
        """Number of positions in the KV cache (sequence 0)."""
        return len(self.cached_tokens)

    #: RPC workers (HOST:PORT) holding this model's layers, set by the loader; part of the cost cache key
    rpc: tuple[str, ...] = ()

    #: seconds spent in :meth:`decode` since the model was loaded (wall time; benchmarks
    #: take differences of it to separate llama.cpp's work from the engine's own)
    decode_seconds: float = 0.0

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] | str = "last",
               progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Append ``tokens`` to the KV cache and return logits for the positions asked.

        The call's wall time is added to :attr:`decode_seconds`.

        Args:
            tokens: ids to evaluate at positions ``n_cached .. n_cached + len(tokens) - 1``.
            logits_for: ``"last"``, ``"all"``, or indices into ``tokens``.
            progress: called as ``progress(done, len(tokens))`` after each ``n_batch`` chunk
                (a long prompt's prefill).

        Returns:
            float32 array of shape (k, n_vocab), one row per position asked, in order.

        Raises:
            ContextOverflowError: the tokens do not fit in the context window.
            DecodeAborted: :meth:`abort` was called (the cache is rolled back to where it was).
            BackendError: llama_decode failed (the cache is rolled back to where it was).
        """
        t0 = time.perf_counter()
        try:
            return self._decode(tokens, logits_for, progress)
        finally:
            self.decode_seconds += time.perf_counter() - t0

    def _decode(self, tokens: Sequence[int], logits_for: Sequence[int] | str,
                progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        if self.n_cached + n > self.n_ctx:
            raise ContextOverflowError(
                f"{self.n_cached + n} tokens do not fit in the context window of {self.n_ctx}",
                "shorten the prompt or raise n_ctx",
            )
        if logits_for == "last":
            want = [n - 1]
        elif logits_for == "all":
            want = list(range(n))
        else:
            want = sorted(int(i) for i in logits_for)
        copy = self._prefill_copy
        if copy is not None and len(want) <= 1 and (not want or want[0] == n - 1) and copy.pays(self.n_cached, n):
            return self._decode_on_copy(tokens, logits_for, progress)
        want_set = set(want)
        lc = self._lc
        start = self.n_cached
        rows: list[np.ndarray] = []
        batch = self._batch
        if progress is not None:
            progress(0, n)
        for chunk_start in range(0, n, self.n_batch):
            chunk = tokens[chunk_start : chunk_start + self.n_batch]
            m = len(chunk)
            batch.n_tokens = m
            out_idx = []
            for j, tok in enumerate(chunk):
                i = chunk_start + j
                batch.token[j] = int(tok)
                batch.pos[j] = start + i
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = 0
                flag = i in want_set
                batch.logits[j] = flag
                if flag:
                    out_idx.append(j)
            # record first: an interrupt after llama_decode must not hide cached positions
            self.cached_tokens.extend(int(t) for t in chunk)
            rc = 2 if self.abort_requested else lc.llama_decode(self._ctx, batch)
            if rc != 0:
                # drop whatever part of this call reached the cache
                lc.llama_memory_seq_rm(self._mem, 0, start, -1)
                del self.cached_tokens[start:]
                if rc == 2 and self.abort_requested:
                    raise DecodeAborted("decode stopped on request", "")
                raise BackendError(f"llama_decode failed with status {rc}{_last_error()}",
                                   "raise n_ctx or lower n_batch")
            if progress is not None:
                progress(min(chunk_start + m, n), n)
            for j in out_idx:
                ptr = lc.llama_get_logits_ith(self._ctx, j)
                rows.append(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy())
        return np.stack(rows) if rows else np.empty((0, self.n_vocab), dtype=np.float32)

    # -- the prefill copy -----------------------------------------------------------
    def attach_prefill_copy(self, copy: "LlamaModel", tl_repacked: float, tl_standard: float,
                            copy_seconds_per_token: float, min_tokens: int) -> None:
        """Let ``copy`` (this model's weights loaded again in llama.cpp's standard layout, same window,
        batch and flash-attention setting) read long prompts: a decode of at least ``min_tokens``
        tokens that wants no logits or only the last row runs there and its KV cache is copied into
        this model's (``llama_state_seq_get_data``/``_set_data``, about 28 KiB a token for
        Qwen2.5-Coder-1.5B), when the time saved, ``n x (tl_repacked - tl_standard) / min_tokens``,
        exceeds the copies' (:meth:`PrefillCopy.pays`). Verification passes (logits for every
        position) always run here, in this model's layout. The copy is closed with this model.

        Args:
            copy: the second model; this model owns it from now on.
            tl_repacked, tl_standard: seconds of a ``min_tokens``-token prompt pass in this model's
                layout and in the copy's (the repack probe's ``tl``).
            copy_seconds_per_token: seconds to copy one cached token's KV out and back in (``tc``).
            min_tokens: the fewest tokens of a decode sent to the copy.

        Raises:
            ValueError: the copy's window, batch or flash-attention setting differs (the KV cache
                would not transfer).
        """
        if (copy.n_ctx, copy.n_batch, copy.flash_attn) != (self.n_ctx, self.n_batch, self.flash_attn):
            raise ValueError(f"prefill copy differs: window/batch/flash attention {copy.n_ctx}/{copy.n_batch}/"
                             f"{copy.flash_attn} against {self.n_ctx}/{self.n_batch}/{self.flash_attn}")
        gain = max(0.0, (tl_repacked - tl_standard) / max(1, min_tokens))
        self._prefill_copy = PrefillCopy(copy, gain, max(0.0, copy_seconds_per_token), max(1, min_tokens))

    @property
    def prefill_copy(self) -> "PrefillCopy | None":
        """The second copy that reads long prompts (:meth:`attach_prefill_copy`), or None."""
        return self._prefill_copy

    def _decode_on_copy(self, tokens: Sequence[int], logits_for, progress) -> np.ndarray:
        """:meth:`_decode` on the prefill copy, its KV cache then copied here. If the copy gives no state or
        this context refuses it, the copy is dropped and the tokens are read here: only ``tokens`` where the
        cache still holds what it held, all of it again where the refusal emptied the cache."""
        pc = self._prefill_copy
        model = pc.model
        held = list(self.cached_tokens)
        if model.cached_tokens[: len(held)] == held:  # it holds what this model holds, maybe more
            model.truncate(len(held))
        else:
            state = self.save_state()
            if state is None or not model.load_state(state):
                model.reset()
                model._decode(held, ())
        t0 = time.perf_counter()
        rows = model._decode(tokens, logits_for, progress)
        pc.seconds += time.perf_counter() - t0
        pc.tokens += len(tokens)
        state = model.save_state()
        if state is None or not self.load_state(state):
            # the cache here still holds ``held`` (no state, or one refused before touching it) or nothing
            # (llama.cpp refused the state): read here only what it lacks
            self._prefill_copy = None
            model.close()
            if self.cached_tokens != held:
                self.reset()
            todo = [*held, *tokens][self.n_cached:]
            rows = self._decode(todo, [len(todo) - 1] if len(rows) else (), progress)
        return rows

    def truncate(self, n: int) -> None:
        """Roll the KV cache back to its first ``n`` positions (``llama_memory_seq_rm``).

        Raises:
            CacheRollbackError: the model's cache cannot be partly removed (recurrent or
                hybrid architectures); the engine must not continue on it.
        """
        if n < 0:
            raise ValueError("n must be >= 0")
        if n > self.n_cached:
            return
        ok = self._lc.llama_memory_seq_rm(self._mem, 0, n, -1)
        if not ok:
            raise CacheRollbackError(
                f"{self.path.name}: the KV cache cannot be rolled back to {n} tokens",
                "this architecture does not support partial cache removal; use --mode none",
            )
        del self.cached_tokens[n:]

    def reset(self) -> None:
        """Empty the KV cache."""
        self._lc.llama_memory_clear(self._mem, True)
        self.cached_tokens.clear()

    def save_state(self) -> KvState | None:
        """A snapshot of the KV cache (:class:`KvState`), or None when it is empty or llama.cpp copies nothing.

        Costs a copy of the cache's cells (about 28 KiB a token for Qwen2.5-Coder-1.5B), no decode.
        """
        if not self.cached_tokens:
            return None
        lc = self._lc
        size = int(lc.llama_state_seq_get_size(self._ctx, 0))
        buf = (ctypes.c_uint8 * size)()
        n = int(lc.llama_state_seq_get_data(self._ctx, buf, size, 0))
        return KvState(tuple(self.cached_tokens), buf, n, self.flash_attn) if n > 0 else None

    def load_state(self, state: KvState) -> bool:
        """Replace the KV cache by ``state`` (:meth:`save_state` of this model): the cache then holds
        ``state.tokens``, computed as when the snapshot was taken (no decode).

        Returns:
            True; False when it was taken under another flash-attention setting or is longer than the
            window (the cache is left as it was), or llama.cpp refuses it (the cache is then empty).
        """
        if state.flash_attn != self.flash_attn or len(state.tokens) > self.n_ctx:
            return False
        self.reset()
        if int(self._lc.llama_state_seq_set_data(self._ctx, state.data, state.nbytes, 0)) == 0:
            self.reset()
            return False
        self.cached_tokens[:] = state.tokens
        return True

    def sync(self, tokens: Sequence[int]) -> int:
        """Make the cache hold a prefix of ``tokens`` ending one short of it, reusing the common prefix.

        Returns the number of positions now cached (``<= len(tokens) - 1``); the caller
        then decodes ``tokens[n:]``.
        """
        limit = len(tokens) - 1
        common = 0
        cached = self.cached_tokens
        m = min(len(cached), limit)
        while common < m and cached[common] == tokens[common]:
            common += 1
        self.truncate(common)
        return common
