"""Every error the server answers, as OpenAI's error object: one table, one translator.

An error answer is ``{"error": {message, type, param, code}}`` with an HTTP status (:class:`ApiError`).
Whatever turns an exception into an answer calls :func:`translate`: the app's exception handlers,
the worker (before an answer starts: the status; after: the stream's last event), the checks of a
request's sampling and drafting, the Responses API's renaming and ``/infill``. :data:`ANSWERS` holds
one row per exception type (the most specific class of an exception's MRO wins), so an exception is
answered alike wherever it is raised: a :class:`~localspec.errors.LocalspecError` is a 400 naming the
prompt (the request asks what the model cannot do), its :class:`~localspec.errors.BackendError` a 500, a
:class:`~localspec.errors.WorkerError` a 503 ``worker_unavailable``, a validation error a 400 naming the
parameter, and any other exception (a bug) a 500 whose message says nothing of it (the caller logs it).

Reference: llama-cpp-python's ``server/errors.py`` (``RouteErrorHandler``: one route class, a table of
pattern -> OpenAI error) and llama.cpp's ``ex_wrapper`` around every handler of its server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from localspec.config import invalid_values
from localspec.errors import BackendError, LocalspecError, WorkerError

#: ``error.type`` per HTTP status, as OpenAI names them
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
               405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
               500: "server_error", 503: "server_error"}

#: what a client is told of a bug (the server's log has the traceback)
INTERNAL = "internal server error (see the server log)"


class ApiError(Exception):
    """An error answered with OpenAI's error object ``{"error": {message, type, param, code}}``.

    Attributes:
        status: HTTP status code.
        message: one sentence for the client.
        param: the request parameter at fault (``"messages[1].content"``), or None.
        code: a short machine-readable code, or None.
        headers: extra response headers (``Retry-After``).
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        """OpenAI's ``error.type`` of the status (:data:`ERROR_TYPES`)."""
        return ERROR_TYPES.get(self.status, "invalid_request_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def renamed(self, param: str | None, message: str) -> "ApiError":
        """The same error naming another parameter (the Responses API's names for a chat check's error)."""
        return ApiError(self.status, message, param, self.code, self.headers)


class ErrorObject(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """OpenAI's error object, the body of every 4xx and 5xx answer (:meth:`ApiError.body`)."""

    error: ErrorObject


#: the error answers as ``/openapi.json`` documents them (instead of FastAPI's 422)
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {"4XX": {"model": ErrorBody, "description": "OpenAI's error object"}}


@dataclass(frozen=True)
class Answer:
    """How one exception type is answered (its ``type`` follows the status: :data:`ERROR_TYPES`).

    Attributes:
        status: HTTP status.
        code: ``error.code``, or None.
        names_param: the error is about the request: ``error.param`` is the parameter the caller names
            (:func:`translate`'s ``param``: the prompt's), else None.
        says_why: the client reads the exception's message (and hint); False: :data:`INTERNAL` only.
    """

    status: int
    code: str | None = None
    names_param: bool = False
    says_why: bool = True

    @property
    def type(self) -> str:
        return ERROR_TYPES[self.status]


#: exception type -> its answer; :class:`ApiError`, pydantic's and FastAPI's validation errors and
#: Starlette's HTTP errors carry their own status, parameter and code (see :func:`translate`)
ANSWERS: dict[type[BaseException], Answer] = {
    LocalspecError: Answer(400, names_param=True),  # what the model cannot do with this request
    BackendError: Answer(500),  # the inference backend failed (a decode error)
    WorkerError: Answer(503, "worker_unavailable"),  # an RPC worker is down or was lost; the next request retries
    Exception: Answer(500, says_why=False),  # a bug: the caller logs it with its traceback
}


def answer_for(e: BaseException) -> Answer:
    """The row of :data:`ANSWERS` for ``e``: its class's, else its nearest base class's."""
    return next(ANSWERS[c] for c in type(e).__mro__ if c in ANSWERS)


def is_bug(e: BaseException) -> bool:
    """Whether ``e`` is answered as a bug (:data:`INTERNAL`; the caller logs it with its traceback)."""
    own = (ApiError, ValidationError, RequestValidationError, HTTPException)
    return not isinstance(e, own) and not answer_for(e).says_why


def validation_error(err: ValidationError | Sequence[dict], skip: int = 0, param: str | None = None) -> ApiError:
    """A request's validation error (pydantic's, or FastAPI's ``RequestValidationError.errors()`` with
    ``skip=1`` for its ``"body"``) as a 400 naming the first parameter at fault
    (:func:`localspec.config.invalid_values`, the translator the CLI and the TUI use); ``param`` names
    an error of the whole object (a check across its fields)."""
    first = invalid_values(err, skip)[0]
    return ApiError(400, first.line(whole=param or "the body"), first.path or param, first.code)


def translate(e: BaseException, param: str | None = None, code: str | None = None) -> ApiError:
    """``e`` as the error answer the client gets (:data:`ANSWERS`).

    Args:
        e: any exception.
        param: the request parameter ``e`` is about where it names none itself: the prompt's
            (``messages``, ``prompt``) for a :class:`~localspec.errors.LocalspecError`; for a
            validation error of a whole object, that object (``speculation.draft_max``).
        code: ``error.code`` where the caller knows what ``e`` means there (``fim_unsupported``).

    Returns:
        An :class:`ApiError` (``e`` itself if it is one). The message of a bug is :data:`INTERNAL`:
        the caller logs ``e``.
    """
    if isinstance(e, ApiError):
        return e
    if isinstance(e, (ValidationError, RequestValidationError)):  # FastAPI's locations start with "body"
        return validation_error(e if isinstance(e, ValidationError) else e.errors(),
                                skip=isinstance(e, RequestValidationError), param=param)
    if isinstance(e, HTTPException):  # Starlette's: no route, no method
        return ApiError(e.status_code, str(e.detail), None, code or ("not_found" if e.status_code == 404 else None))
    row = answer_for(e)
    if is_bug(e):
        return ApiError(row.status, INTERNAL)
    message = e.message + (f" ({e.hint})" if e.hint else "") if isinstance(e, LocalspecError) else str(e)
    return ApiError(row.status, message, param if row.names_param else None, code or row.code)
