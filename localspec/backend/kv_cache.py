"""The KV cache half of :class:`~localspec.backend.llama.LlamaModel`: what it holds, rolling it back,
snapshots of it, and the second copy of the weights that reads long prompts (the prefill copy).

:class:`KvCache` is a base class of ``LlamaModel``: it reads the llama.cpp handles the model holds
(``_lc``, the llama_cpp module; ``_ctx``; ``_mem``) and calls its ``_decode``; it never imports
llama.cpp itself.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from localspec.errors import CacheRollbackError, DecodeAborted


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

    model: Any  # a LlamaModel (localspec.backend.llama imports this module)
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


class KvCache:
    """The KV cache of sequence 0 (a base class of :class:`~localspec.backend.llama.LlamaModel`).

    Attributes:
        cached_tokens: the tokens the cache holds, in order.
    """

    _lc: Any
    _ctx: Any
    _mem: Any
    path: Path
    n_ctx: int
    n_batch: int
    flash_attn: bool | None
    cached_tokens: list[int]
    llama_decode_seconds: float
    _prefill_copy: PrefillCopy | None

    @property
    def n_cached(self) -> int:
        """Number of positions in the KV cache (sequence 0)."""
        return len(self.cached_tokens)

    # -- the prefill copy -----------------------------------------------------------
    def attach_prefill_copy(self, copy: Any, tl_repacked: float, tl_standard: float,
                            copy_seconds_per_token: float, min_tokens: int) -> None:
        """Let ``copy`` (this model's weights loaded again in llama.cpp's standard layout, same window,
        batch and flash-attention setting) read long prompts: a decode of at least ``min_tokens``
        tokens that wants no logits or only the last row runs there and its KV cache is copied into
        this model's (``llama_state_seq_get_data``/``_set_data``, about 28 KiB a token for
        Qwen2.5-Coder-1.5B), when the time saved, ``n x (tl_repacked - tl_standard) / min_tokens``,
        exceeds the copies' (:meth:`PrefillCopy.pays`). Verification passes (logits for every
        position) always run here, in this model's layout. The copy is closed with this model.

        Args:
            copy: the second model (a :class:`~localspec.backend.llama.LlamaModel`); this model owns it from now on.
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
        cache still holds what it held, all of it again where the refusal emptied the cache. Aborted
        (:class:`~localspec.errors.DecodeAborted`): the chunks the copy read before the abort are copied here."""
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
        t0, in_llama = time.perf_counter(), model.llama_decode_seconds
        try:
            rows = model._decode(tokens, logits_for, progress)
        except DecodeAborted:  # a cancel: the chunks the copy read are kept here too, as a read here keeps them
            if model.n_cached > len(held) and (state := model.save_state()) is not None:
                self.load_state(state)  # refused: this cache is as it was, or empty (cached_tokens says which)
            raise
        pc.seconds += time.perf_counter() - t0
        self.llama_decode_seconds += model.llama_decode_seconds - in_llama  # llama.cpp's pass, there
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
        """Empty the KV cache: its cells are marked free (as :meth:`truncate` frees them), not zeroed. Zeroing
        (``llama_memory_clear(..., data=true)``) wrote the whole window's buffers, 0.09 s at a 32,768-token
        window of the default target (2-core Intel Xeon with AMX), before every snapshot restore."""
        self._lc.llama_memory_clear(self._mem, False)
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
        cached = self.cached_tokens
        common = _common_prefix(cached, tokens, min(len(cached), len(tokens) - 1))
        self.truncate(common)
        return common


def _common_prefix(a: list[int], b: Sequence[int], n: int) -> int:
    """The length of the common prefix of ``a[:n]`` and ``b[:n]``: slices compared at C speed, the span holding
    the first difference halved (a round's rollback compares the whole context, thousands of tokens, every round)."""
    b = b[:n] if isinstance(b, list) else list(b[:n])
    if a[:n] == b:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; the first difference lies in [lo, hi)
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    while a[lo] == b[lo]:
        lo += 1
    return lo
