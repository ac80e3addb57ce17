"""The checks of a decoded body before any model reads it (OpenAI's error object is
:mod:`localspec.server.errors`).

The request bodies are :mod:`localspec.server.bodies` (their parts: :mod:`localspec.server.messages`);
the answers, stream chunks and logprobs are :mod:`localspec.server.shapes`.
"""

from __future__ import annotations

from typing import Any

from localspec.server.errors import ApiError

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
