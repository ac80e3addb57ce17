"""One base error with a user-facing message and a hint, and its few subclasses.

The CLI and the TUI are the only places where these become exit codes or
notifications; nothing else prints them.
"""

from __future__ import annotations


class LocalspecError(Exception):
    """An error a user can act on.

    Attributes:
        message: what went wrong, one sentence.
        hint: what to do about it, one sentence (may be empty).
    """

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\nhint: {self.hint}" if self.hint else self.message


class ConfigError(LocalspecError):
    """Invalid settings or an unknown preset."""

    exit_code = 2


class ModelError(LocalspecError):
    """A model file is missing, corrupt, not a GGUF, or cannot be fetched."""

    exit_code = 3


class TokenizerMismatchError(LocalspecError):
    """Target and draft models do not share a tokenizer."""

    exit_code = 4


class ContextOverflowError(LocalspecError):
    """A prompt does not fit in the context window."""

    exit_code = 5


class BackendError(LocalspecError):
    """The inference backend failed (decode error, failed KV-cache rollback)."""

    exit_code = 6


class CacheRollbackError(BackendError):
    """The KV cache of a model cannot be partly removed (recurrent/hybrid models)."""


class DecodeAborted(BackendError):
    """A decode was stopped by :meth:`localspec.backend.llama.LlamaModel.abort` (a cancel), not by a fault.

    The KV cache keeps the ``n_batch`` chunks of the call read before the abort (a long prompt's read is
    not thrown away: a retry of the prompt goes on from there) and drops the chunk it stopped; the engine
    ends the generation with end reason ``cancelled`` and rolls its caches back to what was committed.
    """


class WorkerError(LocalspecError):
    """An RPC worker (llama.cpp's rpc-server, ``localspec worker``) is down, refuses, is busy,
    speaks another protocol version, or was lost during a generation; the message names it (host:port)."""

    exit_code = 7
