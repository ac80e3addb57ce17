"""The default context window: the model's training context where this machine's memory allows it.

The rule (:func:`default_context`), for a model loaded without an explicit ``n_ctx``:

* what a context costs, per token of window: the KV cache, ``layers x KV heads x (key dim + value
  dim) x 2 bytes`` (llama.cpp's default f16 cache; :func:`kv_bytes_per_token`), plus the attention
  scores llama.cpp reserves for one batch with flash attention off, ``heads x n_ubatch x 4 bytes``
  (f32); llama.cpp allocates both when the context is made, for the whole window;
* the budget: half of the memory available after the model's weights are in
  (:func:`available_memory`: Linux's ``MemAvailable``, less the weights when the file is mapped
  rather than read into memory). The other half is headroom: the draft model, the prompt-prefix
  snapshots of the server, the compute buffers, the other programs;
* the window: the training context (``n_ctx_train`` from the GGUF), capped at ``cap`` (a draft
  model: the target's window), when it fits the budget; else the largest power of two below it
  that fits, but never below :data:`MIN_DEFAULT_CONTEXT` (the former fixed default, or the training
  context when that is smaller).

An explicit ``--n-ctx`` (or ``n_ctx`` in the settings file) always wins. On this project's 24 GB
machine the default pair gets its training context, 32,768 tokens: 896 MiB of KV cache for the
1.5B target and 384 MiB for the 0.5B draft (the rule budgets 1.6 and 1.25 GiB with the scores, of about 10).
"""

from __future__ import annotations

import os

from localspec.config import MIN_DEFAULT_CONTEXT, PROMPT_CACHE_MB, PROMPT_CACHE_SHARE, ServerSettings
#: share of the available memory a default context's KV cache and scores may take
CONTEXT_MEMORY_SHARE = 0.5
#: bytes of one cached K or V value: llama.cpp's default cache type, f16
KV_VALUE_BYTES = 2
#: bytes of one attention score (f32)
SCORE_BYTES = 4


def kv_bytes_per_token(n_layer: int, n_head_kv: int, k_dim: int, v_dim: int,
                       value_bytes: int = KV_VALUE_BYTES) -> int:
    """Bytes the KV cache takes per token of window: ``n_layer x n_head_kv x (k_dim + v_dim) x value_bytes``.

    Qwen2.5-Coder-1.5B (28 layers, 2 KV heads of 128): 28,672 bytes; its 0.5B (24 layers, 2 KV heads
    of 64): 12,288; SmolLM2-135M (30 layers, 3 KV heads of 64): 23,040.
    """
    return max(0, n_layer) * max(0, n_head_kv) * max(0, k_dim + v_dim) * value_bytes


def context_bytes_per_token(kv_bytes: int, n_head: int, n_ubatch: int) -> int:
    """Bytes per token of window the rule counts: the KV cache's ``kv_bytes`` and the attention scores
    of one ``n_ubatch``-token batch over it (``n_head x n_ubatch x 4``; flash attention off)."""
    return kv_bytes + max(0, n_head) * max(0, n_ubatch) * SCORE_BYTES


def default_context(n_ctx_train: int, bytes_per_token: int, available_bytes: int, cap: int | None = None,
                    share: float = CONTEXT_MEMORY_SHARE, floor: int = MIN_DEFAULT_CONTEXT) -> int:
    """The default context window, tokens (the rule of this module's docstring).

    Args:
        n_ctx_train: the model's training context, tokens (<= 0: unknown; then ``floor``).
        bytes_per_token: what a token of window costs (:func:`context_bytes_per_token`).
        available_bytes: memory available for it (:func:`available_memory`).
        cap: the most it may be (a draft model: the target's window), or None.
        share: the share of ``available_bytes`` the window may take.
        floor: the smallest memory-limited result (the training context when that is smaller).

    Returns:
        The training context (capped) when ``want x bytes_per_token <= share x available_bytes``; else
        the largest power of two that fits, at least ``min(floor, want)``.
    """
    want = n_ctx_train if n_ctx_train > 0 else floor
    if cap is not None:
        want = min(want, cap)
    low = min(floor, want)
    budget = share * max(0, available_bytes)
    if want * bytes_per_token <= budget:
        return want
    n = 1 << max(0, want.bit_length() - 1)  # the largest power of two <= want
    while n > low and n * bytes_per_token > budget:
        n >>= 1
    return max(n, low)


def second_copy_fits(weights_bytes: int, window_bytes: int, available_bytes: int,
                     share: float = CONTEXT_MEMORY_SHARE) -> bool:
    """Whether a second copy of a loaded model (its weights and a window as large as the first's, e.g. a
    prefill copy) fits: ``weights_bytes + window_bytes <= share x (available_bytes - window_bytes)``.

    The first copy's window is subtracted from the available memory because llama.cpp allocates it
    untouched, so the kernel still counts most of it as available; ``share`` leaves the same headroom as
    :func:`default_context`.
    """
    return weights_bytes + window_bytes <= share * max(0, available_bytes - window_bytes)


def available_memory() -> int:
    """Memory available to a new allocation, bytes: Linux's ``MemAvailable`` (``/proc/meminfo``); elsewhere
    the physical memory (``os.sysconf``); 0 when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no sysconf (Windows)
        return 0


# -- the server's prompt cache: what is left once the models are loaded ------------------------
def default_prompt_cache_mb(available_bytes: int) -> float:
    """The prompt cache's default budget, MiB: ``min(PROMPT_CACHE_MB, PROMPT_CACHE_SHARE x available)`` in
    whole MiB, where ``available_bytes`` is the memory available once the models are loaded (Linux's
    ``MemAvailable``); :data:`PROMPT_CACHE_MB` where it is unknown (0 or less). 2,048 MiB from 8 GiB
    available up; 512 MiB with 2 GiB; 0 (no cache) under 4 MiB."""
    if available_bytes <= 0:
        return float(PROMPT_CACHE_MB)
    return float(min(PROMPT_CACHE_MB, int(available_bytes * PROMPT_CACHE_SHARE) >> 20))


def with_prompt_cache_default(server: ServerSettings, available_bytes: int | None = None) -> ServerSettings:
    """``server`` with ``prompt_cache_mb`` set: as given, or where it is None (the default) from the memory
    available now (:func:`default_prompt_cache_mb`; ``available_bytes`` None: measured,
    :func:`available_memory`). Call it once the models are loaded."""
    if server.prompt_cache_mb is not None:
        return server
    if available_bytes is None:
        available_bytes = available_memory()
    return server.model_copy(update={"prompt_cache_mb": default_prompt_cache_mb(available_bytes)})
