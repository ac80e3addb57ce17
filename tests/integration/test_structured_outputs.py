"""Structured outputs on the tiny model: ``response_format``'s grammar inside the acceptance rule
(greedy identical in every drafting mode, the sampled distribution the same in every mode), the
lazy grammar that constrains a tool call once opened, and the real ``openai`` client against
``localspec serve``. The schema checks without a model: tests/unit/server/test_response_format.py.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Literal

import openai
import pytest
from pydantic import BaseModel

from generation import run
from localspec.core.events import EndReason
from localspec.server.structured import response_grammar

pytestmark = pytest.mark.tiny

PERSON = {"type": "object", "required": ["name", "age", "colour"], "additionalProperties": False,
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
                         "colour": {"enum": ["red", "green", "blue"]}}}
COLOURS = ("red", "green", "blue")
#: the sampled test's schema: a bare enum, a few tokens per answer
CHOICE = {"enum": list(COLOURS)}
#: the server tests' schema
ANSWER = {"type": "object", "required": ["answer"], "additionalProperties": False,
          "properties": {"answer": {"enum": list(COLOURS)}}}


def grammar_of(schema) -> str:
    return response_grammar({"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}})


def valid(obj, schema) -> None:
    """``obj`` follows ``schema`` (jsonschema when installed, else the keys and types by hand)."""
    try:
        import jsonschema
    except ImportError:
        assert isinstance(obj, dict) and set(obj) <= set(schema["properties"]) and set(schema["required"]) <= set(obj)
        for key, value in obj.items():
            sub = schema["properties"][key]
            assert value in sub["enum"] if "enum" in sub else isinstance(value, {"string": str, "integer": int}[sub["type"]])
        return
    jsonschema.validate(obj, schema)


def test_greedy_under_a_schema_is_the_same_in_every_mode_and_valid(tiny_engine):
    g = grammar_of(PERSON)
    prompt = tiny_engine.chat_tokens([{"role": "user", "content": "Describe a person as JSON."}])
    out = {}
    for mode in ("none", "lookup", "draft"):
        gen = run(tiny_engine, prompt, mode, 48, draft_max=6, constraint=tiny_engine.grammar(g))[0]
        assert gen.stats.end_reason == EndReason.EOG, gen.text
        valid(json.loads(gen.text), PERSON)
        out[mode] = gen.token_ids
    assert out["lookup"] == out["none"] and out["draft"] == out["none"]


#: chi-square critical values at p = 0.001, by degrees of freedom
CHI2_001 = {1: 10.83, 2: 13.82, 3: 16.27}


def chi2_two_samples(a: Counter, b: Counter) -> tuple[float, int]:
    """Pearson's chi-square of a 2 x k contingency table (two samples' counts); (statistic, dof)."""
    keys = [k for k in set(a) | set(b) if a[k] + b[k] > 0]
    na, nb = sum(a.values()), sum(b.values())
    stat = 0.0
    for k in keys:
        total = a[k] + b[k]
        for count, n in ((a[k], na), (b[k], nb)):
            expected = total * n / (na + nb)
            stat += (count - expected) ** 2 / expected
    return stat, len(keys) - 1


def test_the_chi_square_bound_can_fail():
    stat, dof = chi2_two_samples(Counter(red=60, green=30, blue=10), Counter(red=35, green=30, blue=35))
    assert stat > CHI2_001[dof]


N_SAMPLES = 80


def test_sampled_answers_follow_the_same_distribution_in_every_mode(tiny_engine):
    """T = 1, an enum of three colours: the answers' frequencies over N seeds in mode none (the
    target's distribution restricted to the grammar, by definition) and in modes lookup and draft
    agree (two-sample chi-square at p = 0.001; the seeds are fixed, so the run is deterministic)."""
    g = grammar_of(CHOICE)
    prompt = tiny_engine.chat_tokens([{"role": "user", "content": "Pick a colour: red, green or blue. "
                                                                  "Answer as JSON."}])
    counts = {}
    for mode in ("none", "lookup", "draft"):
        seen = Counter()
        for seed in range(N_SAMPLES):
            gen = run(tiny_engine, prompt, mode, 8, draft_max=3, temperature=1.0, seed=seed,
                      constraint=tiny_engine.grammar(g), check_invariant=False)[0]
            assert gen.stats.end_reason == EndReason.EOG, gen.text
            seen[json.loads(gen.text)] += 1
        counts[mode] = seen
    assert len(counts["none"]) >= 2, counts  # a distribution, not a point mass: the test has power
    for mode in ("lookup", "draft"):
        stat, dof = chi2_two_samples(counts["none"], counts[mode])
        assert stat < CHI2_001[dof], (mode, counts)


@pytest.mark.parametrize("schema", [{"type": "object", "properties": {"n": {"type": "string"}}},
                                    {"type": "object", "properties": {"n": {"type": "string", "maxLength": 9}}},
                                    {}])
def test_a_string_takes_no_raw_control_character(tiny_engine, schema):
    """JSON escapes U+0000-U+001F in strings (RFC 8259, section 7): inside a string the grammar allows the
    escaped newline, never a raw one or a tab, whatever the schema says of the string; a raw newline between
    values stays allowed where JSON allows whitespace (not here: the converter's ``space`` is one space)."""
    g = tiny_engine.grammar(grammar_of(schema) if schema else response_grammar({"type": "json_object"}))
    for t in tiny_engine.tokenize('{"n": "ab', special=False):
        assert g.allows(t)
        g.accept(t)
    one = {c: tiny_engine.tokenize(c, special=False) for c in ("\n", "\t", "\x01", "c", "\\n", '"')}
    assert all(len(ids) == 1 for c, ids in one.items() if c not in ("\\n",)), one
    assert not g.allows(one["\n"][0]) and not g.allows(one["\t"][0]) and not g.allows(one["\x01"][0])
    assert g.allows(one["c"][0]) and g.allows(one["\\n"][0]) and g.allows(one['"'][0])
    g.close()


def test_a_lazy_grammar_leaves_the_text_free_until_its_trigger_then_constrains(tiny_engine):
    """The mechanism of tool_choice auto (llama.cpp's lazy grammar sampler, trigger tokens): before the
    trigger token the output is the unconstrained one, token for token; from it on, the grammar's;
    the same in every mode."""
    prompt = tiny_engine.chat_tokens([{"role": "user", "content": "Tell me about the sea."}])
    free = run(tiny_engine, prompt, "none", 8)[0].token_ids
    i = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    trigger = free[i]
    piece = tiny_engine.target.token_bytes(trigger).decode()
    g = f'root ::= {json.dumps(piece)} " {{\\"n\\": " [0-9] "}}"'
    out = {}
    for mode in ("none", "lookup", "draft"):
        gen = run(tiny_engine, prompt, mode, 40, constraint=tiny_engine.grammar(g, triggers=[trigger]))[0]
        assert gen.token_ids[:i + 1] == free[:i + 1]
        rest = tiny_engine.target.detokenize(gen.token_ids[i + 1:])
        assert gen.stats.end_reason == EndReason.EOG and json.loads(rest.strip())["n"] in range(10), gen.text
        out[mode] = gen.token_ids
    assert out["lookup"] == out["none"] and out["draft"] == out["none"]


def test_tool_choice_auto_is_lazy_without_a_one_token_marker_too(tiny_engine):
    """SmolLM2 has no <tool_call> token: the marker spelled in several tokens triggers the lazy grammar
    (issue 45; every form: tests/integration/test_tool_call_forms.py)."""
    from localspec.backend.grammar import LazyGrammar
    from localspec.server.tools import FORMATS, ToolRequest, tool_constraint

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    treq = ToolRequest(tools=tools, names=("f",), choice="auto", format=FORMATS["hermes"])
    assert len(tiny_engine.tokenize("<tool_call>", special=False)) > 1
    assert isinstance(tool_constraint(tiny_engine, treq), LazyGrammar)
    required = ToolRequest(tools=tools, names=("f",), choice="required", format=FORMATS["hermes"])
    assert tool_constraint(tiny_engine, required) is not None


# -- through localspec serve and the openai client -------------------------------------------
KEY = "json-key"
#: the flags of this module's server (fixture ``server``)
SERVE = ("--n-ctx", "2048")


class Choice(BaseModel):
    answer: Literal["red", "green", "blue"]


ASK = [{"role": "user", "content": "Pick a colour: red, green or blue. Answer as JSON."}]


def test_json_object_through_the_openai_client(client):
    # (asked for "a JSON object with a name", SmolLM2 writes one name string until max_tokens: a model's limit)
    ask = [{"role": "user", "content": "Give a JSON object with a person's name and age."}]
    r = client.chat.completions.create(model="tiny", messages=ask, response_format={"type": "json_object"},
                                       temperature=0, max_tokens=64)
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_json_schema_through_the_openai_client_parse_and_stream(client):
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    r = parse(model="tiny", messages=ASK, response_format=Choice, temperature=0, max_tokens=32)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Choice) and parsed.answer in COLOURS
    fmt = {"type": "json_schema", "json_schema": {"name": "choice", "schema": ANSWER, "strict": True}}
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, response_format=fmt, temperature=0,
                                                 max_tokens=32, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == json.loads(r.choices[0].message.content)


def test_an_unsupported_schema_is_a_400_through_the_client(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "strict": True, "schema": {
        "type": "object", "properties": {"mail": {"type": "string", "format": "email"}}}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=ASK, response_format=fmt, max_tokens=8)
    assert e.value.body["param"] == "response_format.json_schema.schema.properties.mail.format"
    assert "email" in e.value.body["message"] and "supported" in e.value.body["message"]
