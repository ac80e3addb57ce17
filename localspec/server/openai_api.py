"""OpenAI's error object, and the checks of a decoded body before any model reads it.

The request bodies are :mod:`localspec.server.bodies` (their parts: :mod:`localspec.server.messages`);
the answers, stream chunks and logprobs are :mod:`localspec.server.shapes`.
"""

from __future__ import annotations

from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

from localspec.config import invalid_values

#: ``error.type`` per HTTP status, as OpenAI names them
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
               405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
               500: "server_error", 503: "server_error"}


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

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


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


#: the deepest nesting of arrays and objects a request body may have (OpenAI's request bodies
#: nest less than 10 levels; a tool's JSON schema may add some)
MAX_JSON_DEPTH = 64


def _surrogate_at(text: str) -> int | None:
    """Index of the first lone UTF-16 surrogate in ``text`` (valid in JSON, not in Unicode), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def check_json(body: Any) -> None:
    """Check a decoded request body before anything reads it (iterative: no recursion limit).

    Raises:
        ApiError: 400 ``invalid_json`` for arrays and objects nested more than
            :data:`MAX_JSON_DEPTH` levels; 400 ``invalid_unicode`` naming the field
            (``messages[0].content``) for a string or key holding a lone UTF-16 surrogate
            (``"\\ud800"``: valid JSON, but no Unicode text, so it cannot be tokenized).
    """
    stack: list[tuple[Any, str, int]] = [(body, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            at = _surrogate_at(value)
            if at is not None:
                raise ApiError(400, f"{path or 'the body'} holds a lone UTF-16 surrogate ({value[at]!r} at character "
                                    f"{at}), which is not valid Unicode text", path or None, "invalid_unicode")
        elif isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ApiError(400, f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
                               None, "invalid_json")
            if isinstance(value, dict):
                children = []
                for key, child in value.items():
                    where = f"{path}.{key}" if path else str(key)
                    if _surrogate_at(key) is not None:
                        raise ApiError(400, f"a key in {path or 'the body'} holds a lone UTF-16 surrogate, which is "
                                            "not valid Unicode text", path or None, "invalid_unicode")
                    children.append((child, where, depth + 1))
            else:
                children = [(child, f"{path}[{i}]", depth + 1) for i, child in enumerate(value)]
            stack.extend(reversed(children))  # document order: the first bad field is reported


def api_error(err: ValidationError | Sequence[dict], skip: int = 0) -> ApiError:
    """A request's validation error (pydantic's, or FastAPI's ``RequestValidationError.errors()`` with
    ``skip=1`` for its ``"body"``) as OpenAI's error object: 400 naming the first parameter at fault
    (:func:`localspec.config.invalid_values`, the translator the CLI and the TUI use)."""
    first = invalid_values(err, skip)[0]
    return ApiError(400, first.line(whole="the body"), first.path or None, first.code)
