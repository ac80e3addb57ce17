"""Logits to probabilities, and sampling. Pure numpy.

One function, :func:`logits_to_probs`, turns logits into the distribution actually
sampled from; it shapes both the target and the draft distribution, so both see the
same temperature, top-k, top-p and min-p (habit from pytorch-labs/gpt-fast).
"""

from __future__ import annotations

import numpy as np

from localspec.config import SamplingParams

_PARTIAL_SORT_SIZES = (64, 1024)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax of a 1-D array, float64 for stable ratios. Shape (n_vocab,) -> (n_vocab,)."""
    x = logits.astype(np.float64, copy=False)
    e = np.exp(x - x.max())
    return e / e.sum()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-softmax of the last axis, in float64: ``x - max - log(sum(exp(x - max)))``.

    Shape (..., n_vocab) float32 or float64 -> the same shape, float64 (natural log, <= 0).
    """
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def token_logprobs(logits: np.ndarray, tokens, n_top: int) -> list[tuple[float, tuple[tuple[int, float], ...]]]:
    """Each token's log-probability under its row of raw logits, and the row's ``n_top`` most
    probable tokens: what an OpenAI ``logprobs`` answer reports (before temperature, top-k, top-p
    and min-p, as llama.cpp's server reports by default).

    Args:
        logits: float32 (n, n_vocab): row i is the distribution that predicted ``tokens[i]``.
        tokens: n token ids.
        n_top: 0..n_vocab alternatives per row (0: none).

    Returns:
        n pairs (logprob of the token, ((token id, logprob), ...) the top ``n_top`` by descending
        logprob, equal logprobs by ascending id); logprobs are float (natural log, float64 math).
    """
    rows = log_softmax(np.asarray(logits)[: len(tokens)])
    out = []
    for row, tok in zip(rows, tokens):
        top: tuple[tuple[int, float], ...] = ()
        if n_top > 0:
            k = min(n_top, row.shape[0])
            kth = -np.partition(-row, k - 1)[k - 1]  # the k-th largest logprob
            part = np.flatnonzero(row >= kth)  # every tie at the boundary: the lowest ids win below
            order = part[np.lexsort((part, -row[part]))][:k]
            top = tuple((int(t), float(row[t])) for t in order)
        out.append((float(row[int(tok)]), top))
    return out


def _top_p_keep(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the smallest most-probable set with mass >= top_p.

    Uses a partial sort of the top 64 or 1024 candidates first; a full sort only when
    those do not reach top_p. Ties at the boundary are resolved by index order of the
    sort, as in a full sort.
    """
    n = probs.shape[0]
    for k in _PARTIAL_SORT_SIZES:
        if k >= n:
            break
        part = np.argpartition(-probs, k)[:k]
        order = part[np.argsort(-probs[part], kind="stable")]
        csum = np.cumsum(probs[order])
        if csum[-1] >= top_p:
            cut = int(np.searchsorted(csum, top_p)) + 1
            return order[:cut]
    order = np.argsort(-probs, kind="stable")
    csum = np.cumsum(probs[order])
    cut = min(int(np.searchsorted(csum, top_p)) + 1, n)
    return order[:cut]


def logits_to_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution sampled from, after temperature, top-k, top-p and min-p.

    Args:
        logits: shape (n_vocab,), float32 or float64.
        params: sampling settings. Temperature 0 gives a one-hot distribution at the
            argmax (greedy; ties go to the lowest id, as ``np.argmax``).

    Returns:
        float64 array of shape (n_vocab,) summing to 1; filtered tokens are exactly 0.
    """
    if params.temperature == 0.0:
        probs = np.zeros(logits.shape[0], dtype=np.float64)
        probs[int(np.argmax(logits))] = 1.0
        return probs
    x = logits.astype(np.float64) / params.temperature
    if params.top_k and params.top_k < x.shape[0]:
        kth = np.partition(x, -params.top_k)[-params.top_k]
        x = np.where(x >= kth, x, -np.inf)
    probs = softmax(x)
    if params.min_p > 0.0:
        probs = np.where(probs >= params.min_p * probs.max(), probs, 0.0)
        probs /= probs.sum()
    if params.top_p < 1.0:
        keep = _top_p_keep(probs, params.top_p)
        filtered = np.zeros_like(probs)
        filtered[keep] = probs[keep]
        probs = filtered / filtered.sum()
    return probs


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from ``probs`` (shape (n_vocab,), sums to 1).

    Inverse-CDF sampling with one uniform draw, so a seeded ``rng`` gives
    reproducible tokens.
    """
    csum = np.cumsum(probs)
    u = rng.random() * csum[-1]
    idx = int(np.searchsorted(csum, u, side="right"))
    idx = min(idx, probs.shape[0] - 1)
    if probs[idx] <= 0.0:
        # float round-off at the upper edge: take the last id with nonzero mass
        idx = int(np.flatnonzero(probs > 0.0)[-1])
    return idx
