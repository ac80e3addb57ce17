"""The llama-cpp-python peer: its own high-level API (``Llama.create_completion``), for side-by-side benchmarks.

``localspec bench`` races our modes against it (modes ``peer-target`` and ``peer-lookup``,
:mod:`localspec.bench.runner`); ``scripts/bench_server.py`` loads llama-cpp-python's server
with :func:`peer_extra_bufts`. With :mod:`localspec.backend.llama` and
:mod:`localspec.backend.grammar`, one of the three modules that import llama_cpp.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Sequence

import numpy as np

from localspec.backend.llama import set_extra_bufts
from localspec.config import MIN_DEFAULT_CONTEXT

_peer_cache: dict[tuple, object] = {}


def _llama():
    import llama_cpp  # imported when a peer runs: the bench's other modes do without it

    return llama_cpp


@contextmanager
def peer_extra_bufts(lc, on: bool):
    """While a ``Llama`` loads, its model params get ``use_extra_bufts = on``."""
    low = lc.llama_cpp
    original = low.llama_model_default_params

    def params():
        mp = original()
        set_extra_bufts(mp, on)
        return mp

    low.llama_model_default_params = params
    try:
        yield
    finally:
        low.llama_model_default_params = original


def run_llama_cpp_peer(
    path: str | os.PathLike,
    prompt_tokens: Sequence[int],
    max_tokens: int,
    n_ctx: int = MIN_DEFAULT_CONTEXT,
    n_threads: int | None = None,
    lookup_num_pred_tokens: int | None = None,
    n_gpu_layers: int = 0,
    n_batch: int = 512,
    repack: bool = False,
) -> tuple[list[int], str, float]:
    """Greedy generation through llama-cpp-python's ``Llama.create_completion`` (a peer).

    With ``lookup_num_pred_tokens`` the peer is ``Llama(draft_model=LlamaPromptLookupDecoding(
    num_pred_tokens=...), logits_all=True)`` (llama-cpp-python 0.3.36 crashes on its first
    batched verify without ``logits_all``). The ``Llama`` object is loaded once per
    (path, settings) and kept, so its own prompt cache works across calls like ours.
    ``repack`` is the same weight-repacking choice as :class:`LlamaModel`'s (a fair race);
    ``Llama`` has no argument for it, so its model params are set while it loads.

    Args:
        path: GGUF file.
        prompt_tokens: prompt ids (already templated and tokenized by the caller).
        max_tokens: most tokens generated.

    Returns:
        (generated token ids, generated text, wall seconds of the ``create_completion`` call).
        The token ids are those llama-cpp-python evaluated or sampled after the prompt.
    """
    lc = _llama()
    threads = n_threads or os.cpu_count() or 1
    key = (str(path), n_ctx, threads, lookup_num_pred_tokens, n_gpu_layers, n_batch, bool(repack))
    llm = _peer_cache.get(key)
    if llm is None:
        kwargs = dict(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                      n_gpu_layers=n_gpu_layers, n_batch=n_batch, verbose=False)
        if lookup_num_pred_tokens is not None:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            kwargs["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=lookup_num_pred_tokens)
            kwargs["logits_all"] = True
        with peer_extra_bufts(lc, bool(repack)):
            llm = _peer_cache[key] = lc.Llama(**kwargs)
    t0 = time.perf_counter()
    out = llm.create_completion(list(prompt_tokens), max_tokens=max_tokens, temperature=0.0, top_k=1,
                                top_p=1.0, min_p=0.0, repeat_penalty=1.0, stream=False)
    seconds = time.perf_counter() - t0
    n_out = int(out["usage"]["completion_tokens"])
    ids = [int(t) for t in llm._input_ids[len(prompt_tokens) :]][:n_out]  # evaluated ids after the prompt
    if len(ids) < n_out:
        # the newest sampled token is not evaluated yet; greedy: it is the argmax of the last logits row
        row = np.ctypeslib.as_array(lc.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        ids.append(int(np.argmax(row)))
    return ids, out["choices"][0]["text"], seconds


def close_llama_cpp_peers() -> None:
    """Free every peer ``Llama`` kept by :func:`run_llama_cpp_peer`."""
    for llm in _peer_cache.values():
        try:
            llm.close()
        except Exception:  # pragma: no cover - best effort
            pass
    _peer_cache.clear()
