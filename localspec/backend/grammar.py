"""Grammars: llama.cpp's grammar sampler over a model's vocabulary, and JSON Schema -> GBNF.

:class:`Grammar` is the constraint of a constrained generation (the server's tool calls); a
model makes one (:meth:`localspec.backend.llama.LlamaModel.grammar`, which creates the native
sampler) and this class masks, checks and advances it through the llama_cpp module the model
passes in. :func:`json_schema_grammar` imports llama-cpp-python's JSON-schema converter
(``llama_cpp.llama_grammar``, pure Python): with :mod:`localspec.backend.llama` and
:mod:`localspec.bench.peer`, one of the three modules that import llama_cpp.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from localspec.backend.native import NativeResource


def json_schema_grammar(schema: dict, prop_order: Sequence[str] = ()) -> str:
    """GBNF text for JSON following ``schema`` (a JSON Schema), start rule ``root``.

    llama-cpp-python's converter (``llama_cpp.llama_grammar.json_schema_to_gbnf``, a port of
    llama.cpp's ``json_schema_to_grammar``); object properties in ``prop_order`` come first.

    Raises:
        Exception: what the converter raises on a schema it cannot read (AssertionError,
            KeyError, ValueError, ...).
    """
    import json

    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return json_schema_to_gbnf(json.dumps(schema), prop_order=list(prop_order))


#: ``llama_token_data`` as numpy sees it: (id int32, logit float32, p float32), C layout
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)


class Grammar(NativeResource):
    """A GBNF grammar's state over one model's vocabulary: llama.cpp's grammar sampler.

    The constraint of a constrained generation (:class:`localspec.core.acceptance.Constraint`): the
    acceptance rule masks each target row with :meth:`mask` (or checks a single token with
    :meth:`allows`) before choosing, and :meth:`accept` moves the state past each committed
    token. Once the grammar is complete only end-of-generation tokens are allowed. Made by
    :meth:`localspec.backend.llama.LlamaModel.grammar`; free it with :meth:`close` (or a ``with`` block).

    Only ever :meth:`accept` a token the state allows: llama.cpp aborts on one it does not.
    """

    def __init__(self, lc, sampler, n_vocab: int) -> None:
        """Take ownership of ``sampler``, a grammar sampler (``llama_sampler_init_grammar``) over a
        vocabulary of ``n_vocab`` tokens; ``lc`` is the llama_cpp module that made it."""
        self._lc = lc
        self.n_vocab = n_vocab
        self._smpl = sampler
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self._all = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
        self._all["id"] = np.arange(self.n_vocab, dtype=np.int32)

    def _apply(self, arr: np.ndarray) -> None:
        lc = self._lc
        data = lc.llama_token_data_array(data=arr.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)),
                                         size=len(arr), selected=-1, sorted=False)
        lc.llama_sampler_apply(self._smpl, ctypes.byref(data))

    def allows(self, token: int) -> bool:
        """Whether the grammar's state allows ``token`` next (cheap: one candidate)."""
        one = self._one
        one["id"], one["logit"] = token, 0.0
        self._apply(one)
        return bool(np.isfinite(one["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` (shape (n_vocab,), float32) with every token the state forbids set to -inf (a copy).

        Costs a walk of the grammar over the whole vocabulary: tens of milliseconds for a
        150k-token vocabulary on a CPU.
        """
        arr = self._all
        arr["id"] = np.arange(self.n_vocab, dtype=np.int32)  # llama.cpp may reorder candidates
        arr["logit"] = logits[: self.n_vocab]
        self._apply(arr)
        out = np.full(logits.shape, -np.inf, dtype=np.float32)
        out[arr["id"]] = arr["logit"]
        return out

    def accept(self, token: int) -> None:
        """Move the state past ``token``, which it must allow."""
        self._lc.llama_sampler_accept(self._smpl, int(token))

    def close(self) -> None:
        if getattr(self, "_smpl", None):
            self._lc.llama_sampler_free(self._smpl)
            self._smpl = None
