"""Structured outputs for the OpenAI API: ``response_format`` -> a GBNF grammar, or a 400.

``response_format`` (OpenAI's shapes):

- ``{"type": "text"}`` or absent: no constraint;
- ``{"type": "json_object"}``: the answer is one JSON object (the converter's generic object
  rule, as llama.cpp's ``json.gbnf``);
- ``{"type": "json_schema", "json_schema": {"name": ..., "description": ..., "schema": {...},
  "strict": bool}}``: the answer is JSON following ``schema``. The grammar applies whether
  ``strict`` is true or false (strict only changes what OpenAI accepts; here every answer
  that ends by itself follows the schema).

The grammar is made by llama-cpp-python's converter (:func:`localspec.backend.grammar.json_schema_grammar`)
and enters the acceptance rule as the tool calls' grammar does (:mod:`localspec.core.acceptance`):
the answer follows the target's distribution restricted to the grammar, in every drafting mode.

The converter silently ignores the keywords it cannot express (``minimum``, ``format:
email``, ``patternProperties``, ``not``, ...), which would let an answer break the schema;
:func:`check_schema` walks the schema first and refuses each of those with a 400 naming its
path (``response_format.json_schema.schema.properties.age: minimum is not supported``) and a
hint. Annotations (``title``, ``description``, ``default``, ``examples``, ``x-*``, ...) are
accepted and ignored. What passes may still be narrower than the schema: an object without
``additionalProperties`` gets no extra properties, and an empty schema ``{}`` an object.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from localspec.backend.grammar import json_schema_grammar
from localspec.config import user_error
from localspec.server.messages import said
from localspec.server.errors import ApiError, validation_error

#: the parameter path of the schema in errors
SCHEMA_PARAM = "response_format.json_schema.schema"
#: a grammar longer than this (characters) is refused: ``maxLength: 100000`` expands into a rule per character
GRAMMAR_MAX_CHARS = 64_000

#: keywords that do not constrain the value (accepted, not passed to the converter)
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "example", "$schema", "$id", "$comment",
                         "deprecated", "readOnly", "writeOnly", "nullable", "$defs", "definitions"})
#: the string formats the converter expresses
FORMATS = ("date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5")
TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
#: keyword -> hint, for the known keywords the grammar cannot express
HINTS = {
    "oneOf": "use anyOf (the grammar cannot keep the alternatives exclusive)",
    "allOf": "merge the subschemas into one",
    "not": "describe the exclusion in a description instead",
    "if": "use anyOf of the cases", "then": "use anyOf of the cases", "else": "use anyOf of the cases",
    "minimum": "the grammar cannot bound numbers: state the range in the description",
    "maximum": "the grammar cannot bound numbers: state the range in the description",
    "exclusiveMinimum": "the grammar cannot bound numbers: state the range in the description",
    "exclusiveMaximum": "the grammar cannot bound numbers: state the range in the description",
    "multipleOf": "use an enum of the allowed values",
    "patternProperties": "list the properties in properties, or use additionalProperties with a schema",
    "propertyNames": "list the properties in properties",
    "minProperties": "list the required properties in required",
    "maxProperties": "list the properties in properties and leave out additionalProperties",
    "uniqueItems": "check uniqueness after parsing",
    "contains": "give items a schema every item follows",
}
#: rule names the converter uses itself (its primitives and formats, and the start rule)
_CONVERTER_RULES = ("root", "dot", "space", "char", "value", "object", "array", "string", "number", "integer",
                    "boolean", "null", "uuid", "decimal-part", "integral-part", "date", "time", "date-time",
                    "date-string", "time-string", "date-time-string")
_GENERIC_HINT = "leave it out, or describe the rule in the schema's description"


class _Refused(Exception):
    def __init__(self, path: str, message: str, hint: str = _GENERIC_HINT) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message, self.hint = path, message, hint


def _only(schema: dict, path: str, allowed: set[str], what: str) -> None:
    """Refuse every keyword of ``schema`` other than ``allowed`` and the annotations."""
    for key in schema:
        if key in allowed or key in ANNOTATIONS or key.startswith("x-"):
            continue
        if key in HINTS:
            raise _Refused(path, f"{key} is not supported", HINTS[key])
        raise _Refused(path, f"{key} is not supported{what}")


class _Walker:
    """One walk of a schema: checks it and returns the copy the converter gets (annotations dropped)."""

    def __init__(self, root: dict) -> None:
        self.root = root
        self.defs: dict[str, Any] = {}  # ref -> its checked copy (None while being walked: recursion)
        self.ref_names: dict[str, str] = {}  # a ref's last segment (the converter's rule name) -> the ref
        self.rule_names: set[str] = set(_CONVERTER_RULES)  # names the converter gives other rules

    def walk(self, schema: Any, path: str) -> dict:
        if not isinstance(schema, dict):
            raise _Refused(path, f"a schema must be a JSON object, not {json.dumps(schema)[:40]}",
                           "use {} for any value, or a schema with a type")
        if "$ref" in schema:
            return self._ref(schema, path)
        if "anyOf" in schema:
            _only(schema, path, {"anyOf"}, " beside anyOf (put it in each alternative)")
            alts = schema["anyOf"]
            if not isinstance(alts, list) or not alts:
                raise _Refused(f"{path}.anyOf", "anyOf must be a non-empty array of schemas")
            return {"anyOf": [self.walk(a, f"{path}.anyOf[{i}]") for i, a in enumerate(alts)]}
        kind = schema.get("type")
        if isinstance(kind, list):
            _only(schema, path, {"type"}, " beside a list of types (use anyOf with one schema per type)")
            if not kind:
                raise _Refused(f"{path}.type", "type must not be an empty list", "name at least one type")
            for t in kind:
                self._type(t, path)
            return {"type": list(kind)}
        if "const" in schema or "enum" in schema:
            return self._constant(schema, path)
        if kind is not None:
            self._type(kind, path)
        if kind == "object" or (kind is None and ("properties" in schema or "additionalProperties" in schema)):
            return self._object(schema, path)
        if kind == "array" or (kind is None and ("items" in schema or "prefixItems" in schema)):
            return self._array(schema, path)
        if kind == "string" or (kind is None and ("pattern" in schema or "format" in schema)):
            return self._string(schema, path)
        _only(schema, path, {"type"}, "")
        return {"type": kind} if kind else {}

    @staticmethod
    def _type(kind: Any, path: str) -> None:
        if kind not in TYPES:
            raise _Refused(f"{path}.type", f"type {json.dumps(kind)} is not a JSON Schema type",
                           f"use one of {', '.join(TYPES)}")

    def _ref(self, schema: dict, path: str) -> dict:
        _only(schema, path, {"$ref"}, " beside $ref (move it into the referenced schema)")
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise _Refused(f"{path}.$ref", f"$ref {json.dumps(ref)[:60]} is not supported",
                           "only local references such as #/$defs/Name are")
        name = ref.rsplit("/", 1)[-1]
        if self.ref_names.setdefault(name, ref) != ref:
            raise _Refused(f"{path}.$ref", f"$ref {ref} and {self.ref_names[name]} end in the same name, "
                                           "which the grammar converter cannot tell apart", "rename one of them")
        if ref not in self.defs:
            target: Any = self.root
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    raise _Refused(f"{path}.$ref", f"$ref {ref} points to nothing", "check the path")
                target = target[part]
            self.defs[ref] = None
            self.defs[ref] = self.walk(target, ref[2:].replace("/", "."))
        return {"$ref": ref}

    def _constant(self, schema: dict, path: str) -> dict:
        _only(schema, path, {"type", "const", "enum"}, " beside const or enum")
        if "const" in schema:
            return {"const": schema["const"]}
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise _Refused(f"{path}.enum", "enum must be a non-empty array")
        return {"enum": values}

    def _object(self, schema: dict, path: str) -> dict:
        _only(schema, path, {"type", "properties", "required", "additionalProperties"}, " for objects")
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise _Refused(f"{path}.properties", "properties must be an object of schemas")
        self.rule_names.update(props)
        out: dict[str, Any] = {"type": "object", "properties": {
            k: self.walk(v, f"{path}.properties.{k}") for k, v in props.items()}}
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise _Refused(f"{path}.required", "required must be an array of property names")
        missing = [r for r in required if r not in props]
        if missing:
            raise _Refused(f"{path}.required", f"required names {missing[0]!r}, which is not in properties",
                           "declare every required property in properties")
        out["required"] = required
        extra = schema.get("additionalProperties", False)
        if isinstance(extra, dict):
            extra = self.walk(extra, f"{path}.additionalProperties")
        elif not isinstance(extra, bool):
            raise _Refused(f"{path}.additionalProperties", "additionalProperties must be a boolean or a schema")
        if extra is not False:
            out["additionalProperties"] = extra
        if "properties" not in schema and "additionalProperties" not in schema:
            return {"type": "object"}  # any object (required is empty: checked above)
        return out

    def _array(self, schema: dict, path: str) -> dict:
        _only(schema, path, {"type", "items", "prefixItems", "minItems", "maxItems"}, " for arrays")
        items = schema.get("items", schema.get("prefixItems"))
        bounds = {k: schema[k] for k in ("minItems", "maxItems") if k in schema}
        for k, v in bounds.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise _Refused(f"{path}.{k}", f"{k} must be a non-negative integer")
        if items is None:
            if bounds:
                raise _Refused(path, f"{next(iter(bounds))} without items is not supported",
                               'give the items a schema ({} for any)')
            return {"type": "array"}
        if isinstance(items, list):
            if bounds or ("items" in schema and "prefixItems" in schema):
                raise _Refused(path, "an item list (prefixItems) with minItems, maxItems or items is not supported",
                               "the answer has exactly one item per listed schema")
            return {"type": "array", "prefixItems": [self.walk(s, f"{path}.prefixItems[{i}]")
                                                     for i, s in enumerate(items)]}
        if "prefixItems" in schema:
            raise _Refused(f"{path}.prefixItems", "prefixItems must be an array of schemas")
        item = self.walk(items, f"{path}.items")
        return {"type": "array", "items": item or {"type": "object"}, **bounds}

    def _string(self, schema: dict, path: str) -> dict:
        _only(schema, path, {"type", "pattern", "format", "minLength", "maxLength"}, " for strings")
        ways = [k for k in ("pattern", "format") if k in schema] + (
            ["minLength/maxLength"] if "minLength" in schema or "maxLength" in schema else [])
        if len(ways) > 1:
            raise _Refused(path, f"{ways[0]} together with {ways[1]} is not supported", "keep one of them")
        if "format" in schema and schema["format"] not in FORMATS:
            raise _Refused(f"{path}.format", f"format {json.dumps(schema['format'])} is not supported",
                           f"supported: {', '.join(FORMATS)}; or use a pattern")
        pattern = schema.get("pattern")
        if pattern is not None and (not isinstance(pattern, str) or not re.fullmatch(r"\^.*\$", pattern, re.S)):
            raise _Refused(f"{path}.pattern", "only a pattern anchored at both ends (^...$) is supported",
                           "write the whole string's pattern as ^...$")
        return {k: v for k, v in schema.items() if k in ("type", "pattern", "format", "minLength", "maxLength")}


def check_schema(schema: Any) -> dict:
    """Check that the converter expresses every constraint of ``schema`` (a JSON Schema).

    Returns:
        The schema as the converter gets it: annotations dropped, ``$defs`` kept for the references.

    Raises:
        ApiError: 400 naming the part (``response_format.json_schema.schema.<path>``) and a hint.
    """
    if not isinstance(schema, dict):
        raise ApiError(400, f"{SCHEMA_PARAM} must be a JSON Schema object", SCHEMA_PARAM, "invalid_schema")
    walker = _Walker(schema)
    try:
        out = walker.walk(schema, "")
    except _Refused as e:
        param = SCHEMA_PARAM + ("." + e.path.lstrip(".") if e.path else "")
        raise ApiError(400, f"{param}: {e.message} by localspec's grammar; {e.hint}", param,
                       "unsupported_schema") from None
    defs: dict[str, Any] = {}
    for ref, copy in walker.defs.items():  # put each reference's copy back at its place
        *parents, last = ref[2:].split("/")
        node = defs
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = copy
    clash = sorted(set(walker.ref_names) & walker.rule_names)
    if clash:  # the converter names a reference's rule by its last segment and would take the other rule
        ref = walker.ref_names[clash[0]]
        raise ApiError(400, f"{SCHEMA_PARAM}: $ref {ref} ends in {clash[0]!r}, also the name of a property or "
                            "of one of the grammar converter's own rules, which it cannot tell apart; rename the "
                            "definition", SCHEMA_PARAM, "unsupported_schema")
    if "$ref" in out:  # the converter resolves the references below a node only when the node has none
        out = {"anyOf": [out]}
    return {**defs, **out}


def _grammar(schema: dict, param: str) -> str:
    try:
        gbnf = json_schema_grammar(schema)
    except Exception as e:  # the converter raises AssertionError, KeyError, ValueError...
        raise ApiError(400, f"{param}: the grammar converter could not read the schema ({e})", param,
                       "unsupported_schema") from None
    if len(gbnf) > GRAMMAR_MAX_CHARS:
        raise ApiError(400, f"{param}: the schema makes a grammar of {len(gbnf)} characters, over the limit of "
                            f"{GRAMMAR_MAX_CHARS}; lower maxLength, maxItems or the pattern's repetitions",
                       param, "unsupported_schema")
    return gbnf


_SHAPE = ('response_format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
          '"json_schema": {"name": ..., "schema": {...}, "strict": true}}')


def _spec_key(key: str, kind: str) -> Any:
    return said(f"response_format.json_schema.{key} must be a {kind}", "invalid_value")


class JsonSchemaSpec(BaseModel):
    """``json_schema``'s object: the answer is JSON following ``schema`` (strict or not)."""

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)
    name: Annotated[str | None, _spec_key("name", "str")] = None
    description: Annotated[str | None, _spec_key("description", "str")] = None
    schema_: Annotated[dict[str, Any] | None, said(f"{SCHEMA_PARAM} must be a JSON Schema object",
                                                   "invalid_schema")] = Field(
        None, alias="schema", description="a JSON Schema object, required (the keywords the grammar cannot express "
                                          "are refused)")
    strict: Annotated[bool | None, _spec_key("strict", "bool")] = None


class ResponseFormat(BaseModel):
    """``response_format`` (chat and completions; the Responses API's ``text.format`` becomes it):
    ``{"type": "text"}`` (no constraint), ``{"type": "json_object"}`` (one JSON object) or
    ``{"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}}`` (JSON
    following ``schema``)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = Field(None, description='with type "json_schema": the schema')

    @model_validator(mode="before")
    @classmethod
    def _a_format(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise user_error(_SHAPE, "invalid_value")
        if value.get("type") not in ("text", "json_object", "json_schema"):
            raise user_error(_SHAPE, "invalid_value", at="type")
        spec = value.get("json_schema")
        if value["type"] != "json_schema":
            return {k: v for k, v in value.items() if k != "json_schema"}  # not read
        if not isinstance(spec, dict) or "schema" not in spec:
            raise user_error("response_format.json_schema must be an object with a schema: " + _SHAPE,
                             "invalid_value", at="json_schema")
        return value


class _Holder(BaseModel):
    response_format: ResponseFormat | None = None


def format_grammar(fmt: ResponseFormat | None) -> str | None:
    """The GBNF (start rule ``root``) an answer to a validated :data:`ResponseFormat` must follow, or None (text).

    Raises:
        ApiError: 400 naming the part of the schema at fault (:func:`check_schema`), with a hint.
    """
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return _grammar({"type": "object"}, "response_format")
    return _grammar(check_schema(fmt.json_schema.schema_), SCHEMA_PARAM)


def response_grammar(value: Any) -> str | None:
    """The GBNF (start rule ``root``) an answer to ``response_format`` ``value`` (a decoded JSON value,
    validated as :data:`ResponseFormat`) must follow, or None (text).

    Raises:
        ApiError: 400 naming the part of ``response_format`` at fault, with a hint.
    """
    try:
        return format_grammar(_Holder.model_validate({"response_format": value}).response_format)
    except ValidationError as e:
        raise validation_error(e) from None
