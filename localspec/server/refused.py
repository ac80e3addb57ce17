"""The request fields ``localspec serve`` refuses, in one table, with the reason for each.

Every endpoint's body check reads :data:`REFUSED_FIELDS` (through :func:`refused_field`): a field in
the table, sent with a value other than its no-op one, is a 400 with code ``unsupported_parameter``
naming the field, its message ``"<field>: <why>"``. docs/server.md's table of refused fields is
:func:`markdown_table` of this one (tests/unit/server/test_refused_fields.py keeps them equal).

Not in this table, because they are refusals of a value's shape rather than of a field: message
roles and content part types (``localspec.server.messages``), Responses item and tool types
(``localspec.server.responses_body``), JSON Schema keywords the grammar cannot express
(``localspec.server.structured.HINTS``), and a model without FIM tokens or without a tool template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
INFILL = "/infill"
OPENAI = (CHAT, COMPLETIONS)

#: Responses ``include`` values accepted (and without effect: there is no reasoning to include)
INCLUDE_IGNORED = ("reasoning.encrypted_content",)


@dataclass(frozen=True)
class RefusedField:
    """One refused request field.

    Attributes:
        name: the field's name in the request body (top level).
        endpoints: the routes that refuse it (e.g. ``("/v1/chat/completions", "/v1/completions")``).
        accepted: the values still accepted, in words (its no-op values), for docs/server.md.
        why: the reason and what to do instead; the error message is ``f"{name}: {why}"``.
        refused: ``refused(value) -> bool``: whether a sent value is one we cannot honour
            (absent and null are never refused).
        example: a value that is refused (the tests send it).
    """

    name: str
    endpoints: tuple[str, ...]
    accepted: str
    why: str
    refused: Callable[[Any], bool]
    example: Any


def _set(v: Any) -> bool:
    return v not in ([], {}, "", False)


def _not(*noops: Any) -> Callable[[Any], bool]:
    """Refused unless the value equals one of ``noops`` (JSON's ``1.0`` equals ``1``)."""
    return lambda v: v not in noops


NOT_IMPLEMENTED = "not implemented: refused rather than silently ignored"

REFUSED_FIELDS: tuple[RefusedField, ...] = (
    RefusedField("n", OPENAI, "1", "only n = 1 is supported: one engine generates one answer at a time "
                 "(send n requests)", _not(1), 2),
    RefusedField("best_of", OPENAI, "1", "only best_of = 1 is supported: one engine generates one answer at a "
                 "time", _not(1), 3),
    RefusedField("echo", OPENAI, "false", "echo is not supported: the prompt is not returned with the answer",
                 _not(False), True),
    RefusedField("logit_bias", OPENAI, "{}", f"logit_bias is {NOT_IMPLEMENTED}", _set, {"50256": -100}),
    RefusedField("presence_penalty", OPENAI, "0", f"presence_penalty (other than 0) is {NOT_IMPLEMENTED}",
                 _not(0), 0.5),
    RefusedField("frequency_penalty", OPENAI, "0", f"frequency_penalty (other than 0) is {NOT_IMPLEMENTED}",
                 _not(0), 0.5),
    RefusedField("functions", OPENAI, "[]", "the deprecated functions field is not supported: send tools",
                 _set, [{"name": "f"}]),
    RefusedField("function_call", OPENAI, '"none", "auto"', "the deprecated function_call field is not "
                 "supported: send tool_choice", _not("none", "auto"), {"name": "f"}),
    RefusedField("audio", OPENAI, "{}", "audio output is not supported: the served models write text", _set,
                 {"voice": "alloy"}),
    RefusedField("modalities", OPENAI, '["text"]', "only the text modality is supported: the served models "
                 "write text", _not(["text"]), ["text", "audio"]),
    RefusedField("previous_response_id", (RESPONSES,), "", "localspec serve stores no responses: send the "
                 "whole conversation in input", _set, "resp_1"),
    RefusedField("conversation", (RESPONSES,), "", "localspec serve stores no conversations: send the whole "
                 "conversation in input", _set, "conv_1"),
    RefusedField("background", (RESPONSES,), "false", "background responses are not supported: send the "
                 "request and wait for its answer", _set, True),
    RefusedField("prompt", (RESPONSES,), "", "stored prompt templates are not supported: send instructions "
                 "and input", _set, {"id": "pmpt_1"}),
    RefusedField("max_tool_calls", (RESPONSES,), "", f"max_tool_calls is {NOT_IMPLEMENTED} (parallel_tool_calls: "
                 "false allows one call)", _set, 3),
    RefusedField("truncation", (RESPONSES,), '"disabled"', 'only "disabled" is supported: localspec does not '
                 "drop input items; an input too long for the context is a 400", _not("disabled"), "auto"),
    RefusedField("top_logprobs", (RESPONSES,), "0", "logprobs are not supported on /v1/responses: use "
                 "/v1/chat/completions", _not(0), 2),
    RefusedField("include", (RESPONSES,), '["reasoning.encrypted_content"]',
                 f"only {', '.join(INCLUDE_IGNORED)} is accepted (and ignored): this server has no search "
                 "results, logprobs or images to include",
                 lambda v: isinstance(v, list) and any(x not in INCLUDE_IGNORED for x in v),
                 ["file_search_call.results"]),
    RefusedField("grammar", (INFILL,), '""', "grammar is not supported on /infill: use response_format on "
                 "/v1/completions", _set, 'root ::= "a"'),
    RefusedField("json_schema", (INFILL,), "{}", "json_schema is not supported on /infill: use response_format "
                 "on /v1/completions", _set, {"type": "object"}),
    RefusedField("n_probs", (INFILL,), "0", "n_probs is not supported on /infill: use logprobs on "
                 "/v1/completions", _not(0), 3),
    RefusedField("logit_bias", (INFILL,), "[], {}", f"logit_bias is {NOT_IMPLEMENTED}", _set, [[15, -1]]),
)


def refused_field(endpoint: str, body: dict) -> tuple[str, str] | None:
    """The first field of ``body`` that ``endpoint`` refuses, in the table's order.

    Args:
        endpoint: a route, one of :data:`CHAT`, :data:`COMPLETIONS`, :data:`RESPONSES`, :data:`INFILL`.
        body: the request body (a JSON object).

    Returns:
        ``(field name, error message)``, or None when nothing in the body is refused.
    """
    for f in REFUSED_FIELDS:
        if endpoint in f.endpoints and body.get(f.name) is not None and f.refused(body[f.name]):
            return f.name, f"{f.name}: {f.why}"
    return None


def markdown_table() -> str:
    """docs/server.md's table of refused fields: one row per field and reason (endpoints joined)."""
    rows = ["| field | endpoints | accepted values | why |", "|---|---|---|---|"]
    for f in REFUSED_FIELDS:
        accepted = f"`{f.accepted}`" if f.accepted else "none"
        rows.append(f"| `{f.name}` | {', '.join(f'`{e}`' for e in f.endpoints)} | {accepted} | "
                    f"{f.why.replace('|', '/')} |")
    return "\n".join(rows)
