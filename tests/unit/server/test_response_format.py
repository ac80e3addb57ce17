"""``response_format`` -> a grammar or a 400 naming the part (localspec/server/structured.py), without a model.

The real model under these grammars, in every drafting mode, and the openai client:
tests/integration/test_structured_outputs.py.
"""

import pytest

from localspec.server.bodies import parse_request
from localspec.server.errors import ApiError
from localspec.server.structured import SCHEMA_PARAM, check_schema, response_grammar

HELLO = [{"role": "user", "content": "hi"}]


def schema_format(schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": strict}}


def refusal(schema) -> ApiError:
    with pytest.raises(ApiError) as e:
        response_grammar(schema_format(schema))
    assert e.value.status == 400 and e.value.code == "unsupported_schema"
    assert e.value.message.startswith(e.value.param + ": ")  # the message names the part too
    return e.value


OBJ = {"type": "object"}


@pytest.mark.parametrize("schema, path, keyword", [
    ({"type": "integer", "minimum": 0}, "", "minimum"),
    ({"type": "object", "properties": {"age": {"type": "number", "exclusiveMaximum": 3}}}, ".properties.age",
     "exclusiveMaximum"),
    ({"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}}, ".properties.mail.format",
     "email"),
    ({"type": "object", "patternProperties": {"^x": OBJ}}, "", "patternProperties"),
    ({"oneOf": [OBJ, {"type": "string"}]}, "", "oneOf"),
    ({"allOf": [OBJ]}, "", "allOf"),
    ({"type": "object", "if": OBJ, "then": OBJ}, "", "if"),
    ({"not": {"type": "string"}}, "", "not"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "", "uniqueItems"),
    ({"type": "array", "items": [{"type": "string"}], "minItems": 2}, "", "minItems"),
    ({"type": "array", "maxItems": 2}, "", "maxItems without items"),
    ({"type": "object", "properties": {"a": OBJ}, "required": ["b"]}, ".required", "'b'"),
    ({"type": "object", "minProperties": 1}, "", "minProperties"),
    ({"type": "string", "pattern": "[a-z]+"}, ".pattern", "anchored"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "", "pattern together with minLength/maxLength"),
    ({"type": ["object", "null"], "properties": {"a": OBJ}}, "", "properties is not supported beside a list"),
    ({"anyOf": [OBJ, {"type": "null"}], "type": "object"}, "", "type is not supported beside anyOf"),
    ({"$ref": "#/$defs/A", "minLength": 2, "$defs": {"A": {"type": "string"}}}, "", "minLength"),
    ({"$ref": "https://example.com/s.json"}, ".$ref", "only local references"),
    ({"$ref": "#/$defs/Missing"}, ".$ref", "points to nothing"),
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/N"}}, "$defs": {"N": {"type": "integer",
                                                                                    "maximum": 9}}},
     ".$defs.N", "maximum"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/x/N"}, "b": {"$ref": "#/$defs/y/N"}},
      "$defs": {"x": {"N": OBJ}, "y": {"N": OBJ}}}, ".properties.b.$ref", "same name"),
    ({"type": "object", "properties": {"a": True}}, ".properties.a", "must be a JSON object"),
    ({"type": "integer", "contentEncoding": "base64"}, "", "contentEncoding"),
    ({"type": "decimal"}, ".type", "not a JSON Schema type"),
    ({"type": []}, ".type", "empty list"),
])
def test_what_the_grammar_cannot_express_is_a_400_naming_the_part(schema, path, keyword):
    e = refusal(schema)
    assert e.param == SCHEMA_PARAM + path and keyword in e.message, e.message


def test_a_supported_schema_becomes_a_grammar_of_its_constraints():
    """A pydantic-style schema (titles, $defs, an Optional as anyOf with null, an enum, a list of Any,
    a recursive reference): accepted; the converter's grammar holds its literals."""
    schema = {
        "title": "Person", "type": "object", "required": ["name", "colour", "friends"],
        "properties": {
            "name": {"title": "Name", "type": "string", "maxLength": 20},
            "colour": {"$ref": "#/$defs/Colour"},
            "nick": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "tags": {"type": "array", "items": {}, "maxItems": 3},
            "born": {"type": "string", "format": "date"},
            "friends": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
        },
        "$defs": {"Colour": {"enum": ["red", "green"], "title": "Colour", "type": "string"},
                  "Node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                           "x-extension": 1}},
    }
    g = response_grammar(schema_format(schema, strict=False))
    for literal in (r'"\"red\""', r'"\"green\""', r'"\"name\""', r'"\"kids\""'):
        assert literal in g
    assert "root ::=" in g
    checked = check_schema(schema)
    assert "title" not in checked and "x-extension" not in checked["$defs"]["Node"]
    assert checked["properties"]["tags"]["items"] == {"type": "object"}  # {} is the converter's any object


def test_a_reference_named_as_a_property_or_a_converter_rule_is_refused():
    """The converter names a $ref's rule by its last segment and reuses a rule of that name: a property
    "Colour" of type string before a $ref to $defs/Colour would make the reference a string."""
    colour = {"enum": ["red", "green"]}
    for schema in ({"type": "object", "properties": {"Colour": {"type": "string"}, "c": {"$ref": "#/$defs/Colour"}},
                    "$defs": {"Colour": colour}},
                   {"type": "object", "properties": {"c": {"$ref": "#/$defs/string"}}, "$defs": {"string": colour}}):
        e = refusal(schema)
        assert e.param == SCHEMA_PARAM and "rename" in e.message


def test_json_object_text_and_the_shapes():
    assert response_grammar(None) is None and response_grammar({"type": "text"}) is None
    g = response_grammar({"type": "json_object"})
    assert "root ::= object" in g and "object ::=" in g  # the converter's any-object rule
    for value, param in [({"type": "xml"}, "response_format.type"), ("json", "response_format"),
                         ({"type": "json_schema"}, "response_format.json_schema"),
                         ({"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}},
                          "response_format.json_schema.strict"),
                         ({"type": "json_schema", "json_schema": {"schema": []}}, SCHEMA_PARAM)]:
        with pytest.raises(ApiError) as e:
            response_grammar(value)
        assert e.value.status == 400 and e.value.param == param, value


def test_the_request_carries_the_grammar_and_refuses_it_with_tools():
    req = parse_request({"messages": HELLO, "response_format": schema_format({"enum": ["a", "b"]})}, "chat")
    assert req.grammar is not None and 'root ::= "\\"a\\"" | "\\"b\\""' in req.grammar.replace("  ", " ")
    assert parse_request({"prompt": "x", "response_format": {"type": "json_object"}}, "completion").grammar
    assert parse_request({"messages": HELLO, "response_format": {"type": "text"}}, "chat").grammar is None
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    with pytest.raises(ApiError) as e:
        parse_request({"messages": HELLO, "tools": tools, "response_format": {"type": "json_object"}}, "chat")
    assert e.value.status == 400 and e.value.param == "response_format"
    req = parse_request({"messages": HELLO, "tools": tools, "tool_choice": "none",
                         "response_format": {"type": "json_object"}}, "chat")
    assert req.grammar is not None


def test_a_huge_grammar_is_refused():
    e = refusal({"type": "string", "maxLength": 100_000})
    assert e.param == SCHEMA_PARAM and "characters" in e.message
