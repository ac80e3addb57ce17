"""The one table of refused request fields (issue 32, item 7): every endpoint refuses from it, and
docs/server.md lists exactly it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localspec.server.refused import REFUSED_FIELDS, markdown_table, refused_field

SERVER_DOC = Path(__file__).resolve().parents[3] / "docs" / "server.md"
#: a body each endpoint accepts, to which one refused field is added
MINIMAL = {"/v1/chat/completions": {"messages": [{"role": "user", "content": "t3"}], "max_tokens": 2},
           "/v1/completions": {"prompt": "t3", "max_tokens": 2},
           "/v1/responses": {"input": "t3", "max_output_tokens": 2},
           "/infill": {"input_prefix": "t3", "input_suffix": "t4", "n_predict": 2}}
CASES = [(f, e) for f in REFUSED_FIELDS for e in f.endpoints]


def test_docs_server_lists_the_table_the_server_refuses_from():
    text = SERVER_DOC.read_text()
    found = re.search(r"<!-- refused-fields:start -->\n(.*?)<!-- refused-fields:end -->", text, re.S)
    assert found, "docs/server.md lost its refused-fields markers"
    assert found.group(1).strip() == markdown_table(), (
        "docs/server.md's refused-fields table differs from localspec/server/refused.py: paste "
        "`python -c 'from localspec.server.refused import markdown_table; print(markdown_table())'` between the markers")


def test_every_endpoint_of_the_table_is_a_real_route(client):
    paths = set(client.get("/openapi.json").json()["paths"])
    assert {e for f in REFUSED_FIELDS for e in f.endpoints} <= paths


@pytest.mark.parametrize("field, endpoint", CASES, ids=[f"{f.name}-{e}" for f, e in CASES])
def test_each_refused_field_is_a_400_naming_it_with_the_tables_reason(client, field, endpoint):
    assert field.refused(field.example), f"{field.name}'s example is not refused by its own rule"
    r = client.post(endpoint, json={**MINIMAL[endpoint], field.name: field.example})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"]) == (field.name, "unsupported_parameter"), err
    assert err["message"] == f"{field.name}: {field.why}"


@pytest.mark.parametrize("endpoint", MINIMAL)
def test_the_minimal_bodies_are_served_so_the_400s_come_from_the_table(client, endpoint):
    """The fake model has no FIM tokens: /infill answers fim_unsupported, after the table's check."""
    r = client.post(endpoint, json=MINIMAL[endpoint])
    if endpoint == "/infill":
        assert r.status_code == 400 and r.json()["error"]["code"] == "fim_unsupported", r.text
    else:
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("endpoint, field, noop", [
    ("/v1/chat/completions", "n", 1), ("/v1/completions", "echo", False), ("/v1/chat/completions", "logit_bias", {}),
    ("/v1/chat/completions", "function_call", "auto"), ("/v1/responses", "truncation", "disabled"),
    ("/v1/responses", "include", ["reasoning.encrypted_content"]), ("/v1/responses", "background", False),
    ("/infill", "n_probs", 0), ("/v1/chat/completions", "presence_penalty", 0.0)])
def test_no_op_values_and_other_endpoints_fields_are_not_refused(endpoint, field, noop):
    assert refused_field(endpoint, {field: noop}) is None
    assert refused_field(endpoint, {field: None}) is None


def test_a_field_is_refused_only_where_the_table_says():
    assert refused_field("/v1/chat/completions", {"background": True}) is None  # a Responses field
    assert refused_field("/infill", {"n": 2}) is None
    assert refused_field("/v1/responses", {"n_probs": 3}) is None
