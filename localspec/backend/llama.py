"""The native model: load a GGUF, decode, logits; llama.cpp's init and error log; chat rendering.

Why these hold together: this is the one module that imports llama_cpp (besides it only
:mod:`localspec.backend.grammar`, llama-cpp-python's JSON-schema converter, and
:mod:`localspec.bench.peer`, llama-cpp-python's ``Llama`` as a benchmark peer), so everything that
calls into llama-cpp-python itself lives here: the backend's one-time init and log callback, loading
the weights, the decode loop and rendering a chat with llama-cpp-python's Jinja formatter.
:class:`LlamaModel`'s other jobs are its base classes, one module each, that only use the handles
it holds: :class:`~localspec.backend.vocab.Vocabulary` (tokens, special tokens, grammars),
:class:`~localspec.backend.llama_context.LlamaContext` (the context: window, flash attention, abort
callback) and :class:`~localspec.backend.kv_cache.KvCache` (rollback, snapshots, the prefill copy).

One class per native resource (:class:`LlamaModel`; the grammar sampler it makes is
:class:`localspec.backend.grammar.Grammar`), closed by a context manager, with typed errors
on a null handle or a nonzero decode status; the rest of the code never sees ctypes. Logits
come from ``llama_get_logits_ith`` for the positions asked only: no ``logits_all``, no
n_ctx x n_vocab score matrix. Chat prompts are split into markup and content as pure text in
:mod:`localspec.backend.chat_template`.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from localspec.backend import hugepages
from localspec.backend.chat_template import chat_fragments, open_final_message, split_rendered_chat
from localspec.backend.kv_cache import KvCache, KvState, PrefillCopy
from localspec.backend.llama_context import LlamaContext
from localspec.backend.native import NativeResource, last_error, recent_errors
from localspec.backend.vocab import Vocabulary, VocabInfo
from localspec.config import MIN_DEFAULT_CONTEXT
from localspec.errors import BackendError, ConfigError, ContextOverflowError, DecodeAborted, ModelError

#: what other modules import from here: the model, its file check and param helpers, and its
#: base classes' data types (their home is their own module)
__all__ = ["GGUF_MAGIC", "KvState", "LlamaModel", "PrefillCopy", "VocabInfo", "check_gguf_file",
           "llama_cpp_version", "set_extra_bufts", "system_info"]

_init_lock = threading.Lock()
_initialized = False
_log_callback = None  # keep a reference: llama.cpp holds the C pointer
GGUF_MAGIC = b"GGUF"
#: while a model with explicit devices loads: llama.cpp's "layer N assigned to device D" lines
_layer_log: list[str] | None = None
_LAYER_LINE = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")


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
                    recent_errors.append(text.decode("utf-8", errors="replace").strip())
                    del recent_errors[:-8]
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


def _read_into_memory(lc, mparams) -> None:
    """Set llama.cpp's model params to read the file into memory instead of mapping it."""
    if hasattr(mparams, "load_mode"):  # llama.cpp with enum llama_load_mode
        mparams.load_mode = lc.LLAMA_LOAD_MODE_NONE
    elif hasattr(mparams, "use_mmap"):  # pragma: no cover - older llama-cpp-python
        mparams.use_mmap = False


def set_extra_bufts(mparams, on: bool) -> bool:
    """Set ``use_extra_bufts`` (weight repacking) on llama.cpp model params; False if the build lacks it."""
    if not hasattr(mparams, "use_extra_bufts"):  # pragma: no cover - older llama-cpp-python
        return False
    mparams.use_extra_bufts = bool(on)
    return True


class LlamaModel(Vocabulary, LlamaContext, KvCache, NativeResource):
    """A loaded GGUF model with one llama.cpp context and one sequence (id 0).

    Tracks exactly which tokens sit in the KV cache (:attr:`cached_tokens`).

    Args:
        path: GGUF file.
        n_ctx: context window, tokens; None: the default of :mod:`localspec.backend.context` (the
            model's training context where this machine's memory allows it, capped at ``n_ctx_max``),
            halved down to :data:`~localspec.config.MIN_DEFAULT_CONTEXT` when llama.cpp cannot make it.
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
        n_ctx: int | None = MIN_DEFAULT_CONTEXT,
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
                f"llama.cpp could not load {self.path}{last_error()}",
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

        The decode raises :class:`~localspec.errors.DecodeAborted`; the cache keeps the ``n_batch`` chunks
        of the call already read (a long prompt's read goes on from there) and drops the chunk being read.
        The flag stays set until :meth:`clear_abort`.
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
                      continue_final_message: bool = False, **render_kwargs) -> list[int]:
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
            continue_final_message: end inside the final message instead, right after its content (not
                empty), without the template's end of turn: the model continues that message (an assistant
                prefill; :func:`localspec.backend.chat_template.open_final_message`). Overrides
                ``add_generation_prompt``.
            render_kwargs: passed on to :meth:`render_chat`.

        Returns:
            Token ids, with BOS where the GGUF asks for it (never two).

        Raises:
            ModelError, ConfigError: from :meth:`render_chat`.
            ConfigError: a content holds special-token text and the template writes content
                in a form that cannot be located in the prompt (escaped or cut), or a text
                holds a lone UTF-16 surrogate; the final message to continue cannot be located.
        """
        def render(msgs: list[dict]) -> str:
            return self.render_chat(msgs, add_generation_prompt=add_generation_prompt and not continue_final_message,
                                    **render_kwargs)

        pieces = split_rendered_chat(messages, render)
        if continue_final_message:
            pieces = open_final_message(pieces, str(messages[-1].get("content") or "")) if pieces else None
            if pieces is None:
                raise ConfigError(
                    f"the chat template of {self.path.name} writes the final {messages[-1].get('role')} message in a "
                    "form that cannot be located in the prompt, so it cannot be continued",
                    "end the messages with a user message, or send a raw prompt (--raw, /v1/completions)")
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


    # -- decoding -------------------------------------------------------------------
    #: RPC workers (HOST:PORT) holding this model's layers, set by the loader; part of the cost cache key
    rpc: tuple[str, ...] = ()

    #: seconds spent in :meth:`decode` and :meth:`decode_argmax` since the model was loaded (wall time;
    #: benchmarks take differences of it to separate llama.cpp's work from the engine's own)
    decode_seconds: float = 0.0
    #: seconds spent inside ``llama_decode`` itself since the model was loaded (wall time): llama.cpp's
    #: passes, without the Python around them (filling the batch, copying or reducing the logits). The
    #: round's overhead is its time less this (:attr:`localspec.core.events.GenerationStats.pass_seconds`).
    llama_decode_seconds: float = 0.0

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] | str = "last",
               progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Append ``tokens`` to the KV cache and return logits for the positions asked.

        The call's wall time is added to :attr:`decode_seconds`. The rows are copied once, from
        llama.cpp's output buffer (``llama_get_logits``) into the array returned.

        Args:
            tokens: ids to evaluate at positions ``n_cached .. n_cached + len(tokens) - 1``.
            logits_for: ``"last"``, ``"all"``, or indices into ``tokens``.
            progress: called as ``progress(done, len(tokens))`` after each ``n_batch`` chunk
                (a long prompt's prefill).

        Returns:
            float32 array of shape (k, n_vocab), one row per position asked, in order.

        Raises:
            ContextOverflowError: the tokens do not fit in the context window.
            DecodeAborted: :meth:`abort` was called: the cache keeps the chunks read before it (their
                positions are :attr:`cached_tokens`), not the one it stopped.
            BackendError: llama_decode failed (the cache is rolled back to where it was).
        """
        t0 = time.perf_counter()
        try:
            return self._decode(tokens, logits_for, progress)
        finally:
            self.decode_seconds += time.perf_counter() - t0

    def decode_argmax(self, tokens: Sequence[int], logits_for: Sequence[int] | str = "all",
                      width: int | None = None) -> np.ndarray:
        """:meth:`decode`, returning only the argmax of each row asked: what greedy decoding reads.

        The argmax is taken in llama.cpp's output buffer, where the logits are: nothing is copied (a
        verification pass of 49 tokens of a 151,936-id vocabulary would copy 30 MB). Equal to
        ``np.argmax(decode(tokens, logits_for)[:, :width], axis=1)`` (ties: the lowest id).

        Args:
            tokens, logits_for: as :meth:`decode`.
            width: the argmax is taken over ids ``0 .. width - 1`` (None: the whole vocabulary).

        Returns:
            int64 array of shape (k,), one id per position asked, in order.

        Raises:
            As :meth:`decode`.
        """
        t0 = time.perf_counter()
        try:
            return self._decode(tokens, logits_for, None, lambda view: np.argmax(view[:, :width], axis=1))
        finally:
            self.decode_seconds += time.perf_counter() - t0

    def _decode(self, tokens: Sequence[int], logits_for: Sequence[int] | str,
                progress: Callable[[int, int], None] | None = None,
                take: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """:meth:`decode`; ``take(view)`` (default: a copy) reads each chunk's rows, a (k, n_vocab) float32
        view of llama.cpp's output buffer valid only during the call, into what is returned."""
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
            rows = self._decode_on_copy(tokens, logits_for, progress)
            return rows if take is None else take(rows)
        wanted = np.zeros(n, dtype=np.int8)
        wanted[want] = 1
        lc = self._lc
        start = self.n_cached
        taken: list[np.ndarray] = []
        if progress is not None:
            progress(0, n)
        for chunk_start in range(0, n, self.n_batch):
            chunk = tokens[chunk_start : chunk_start + self.n_batch]
            n_out = self._pass(chunk, start, chunk_start, wanted)
            if progress is not None:
                progress(min(chunk_start + len(chunk), n), n)
            if n_out:
                # the rows asked, contiguous and in batch order (llama.h, llama_get_logits)
                view = np.ctypeslib.as_array(lc.llama_get_logits(self._ctx), shape=(n_out, self.n_vocab))
                taken.append(view.copy() if take is None else take(view))
        if not taken:
            empty = np.empty((0, self.n_vocab), dtype=np.float32)
            return empty if take is None else take(empty)
        return taken[0] if len(taken) == 1 else np.concatenate(taken)

    def _batch_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batch's ``token``, ``pos`` and ``logits`` arrays as numpy views (int32, int32, int8; ``n_batch``
        each), filled a pass at a time at C speed; every slot's sequence is set to 0 once, here."""
        views = getattr(self, "_batch_views", None)
        if views is None or views[0] is not self._batch:
            batch, n = self._batch, self._ctx_args[1]  # the size llama_batch_init allocated
            for j in range(n):
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = 0
            arrays = tuple(np.ctypeslib.as_array(a, shape=(n,)) for a in (batch.token, batch.pos, batch.logits))
            views = self._batch_views = (batch, arrays)
        return views[1]

    def _pass(self, chunk: Sequence[int], start: int, chunk_start: int, wanted: np.ndarray) -> int:
        """One ``llama_decode`` of ``chunk`` (at most ``n_batch`` tokens, at positions ``start + chunk_start``
        on), logits asked where ``wanted`` (int8, one flag per token of the whole call) is 1; its time is added
        to :attr:`llama_decode_seconds`. Returns how many rows of logits it made.

        Raises:
            DecodeAborted: as :meth:`decode` (the cache keeps the chunks before this one).
            BackendError: as :meth:`decode` (the cache rolled back to ``start``).
        """
        lc, batch = self._lc, self._batch
        m = len(chunk)
        token, pos, logits = self._batch_arrays()
        batch.n_tokens = m
        token[:m] = chunk
        pos[:m] = np.arange(start + chunk_start, start + chunk_start + m)
        logits[:m] = wanted[chunk_start : chunk_start + m]
        n_out = int(np.count_nonzero(logits[:m]))
        # record first: an interrupt after llama_decode must not hide cached positions
        self.cached_tokens.extend(map(int, chunk))
        if self.abort_requested:
            rc = 2
        else:
            t0 = time.perf_counter()
            rc = lc.llama_decode(self._ctx, batch)
            self.llama_decode_seconds += time.perf_counter() - t0
        if rc != 0:
            # a cancel keeps the chunks already read (a retry reads on from there); a failure drops the call's
            aborted = rc == 2 and self.abort_requested
            keep = start + chunk_start if aborted else start
            lc.llama_memory_seq_rm(self._mem, 0, keep, -1)
            del self.cached_tokens[keep:]
            if aborted:
                raise DecodeAborted("decode stopped on request", "")
            raise BackendError(f"llama_decode failed with status {rc}{last_error()}", "raise n_ctx or lower n_batch")
        return n_out

