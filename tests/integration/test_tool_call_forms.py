"""Every form of tool call a small Qwen model writes ends as a structured call under tool_choice auto
(localspec.server.tools.lazy_call_grammar): the template's ``<tool_call>`` as one token or spelled over
several, a fenced ```json block, a bare JSON object at the start of the answer naming a tool; a JSON
answer naming no tool stays text. The grammars and triggers on real vocabularies (SmolLM2: no
``<tool_call>`` token, so the marker is always spelled), then generations of the Qwen2.5-Coder 0.5B alone
(its template renders tools; SmolLM2's does not), greedy, with speculation equal to mode none.
Without models: tests/unit/backend/test_lazy_grammar.py, tests/unit/server/test_tool_calls.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from generation import run
from localspec.server.tools import FORMATS, ToolRequest, new_parser, parse_all, tool_constraint

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the project",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
]
TREQ = ToolRequest(tools=TOOLS, names=("get_weather", "read_file"), choice="auto", format=FORMATS["hermes"])
FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'
BARE = '{"name": "read_file", "arguments": {"path": "a.py"}}'
MARKER = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'


def walk(engine, tokens):
    """Feed ``tokens`` to a fresh lazy grammar while it allows them: (how many it took, whether it
    constrains by then, whether the answer may end there)."""
    g = tool_constraint(engine, TREQ)
    try:
        for i, t in enumerate(tokens):
            if not g.allows(t):
                return i, g.active is not None, False
            g.accept(t)
        eog = engine.tokenize("<|im_end|>", bos=False)
        return len(tokens), g.active is not None, g.active is not None and g.allows(eog[-1])
    finally:
        g.close()


@pytest.mark.parametrize("text", [FENCED, BARE, "Sure.\n" + MARKER, "\n" + BARE])
def test_each_form_is_constrained_to_its_end_on_a_real_vocabulary(tiny_engine, text):
    tokens = tiny_engine.tokenize(text, special=False)
    assert len(tiny_engine.tokenize("<tool_call>", special=False)) > 1  # the marker is spelled here
    assert walk(tiny_engine, tokens) == (len(tokens), True, True)


@pytest.mark.parametrize("text, bad", [
    ('{"name": "read_file", "argumentz": {}}', "z"),            # a call begun: its keys are the schema's
    ('```json\n{"name": "get_weather", "arguments": {"path": "a"}}\n```', "path"),
    ('<tool_call>\n{"name": "rm", "arguments": {}}\n</tool_call>', "rm"),  # after the marker: a tool's name
])
def test_a_call_begun_cannot_go_astray(tiny_engine, text, bad):
    tokens = tiny_engine.tokenize(text, special=False)
    taken, active, _ = walk(tiny_engine, tokens)
    assert active and taken < len(tokens)
    before, piece = (tiny_engine.target.detokenize(x) for x in (tokens[:taken], tokens[taken:taken + 1]))
    i = text.index(bad)
    assert len(before) < i + len(bad) and len(before) + len(piece) > i  # the rejected token writes ``bad``


@pytest.mark.parametrize("text", ['{"name": "John", "age": 30}', 'Sure: ' + BARE, '```json\n{"name": "x"}\n```',
                                  '{"city": "Paris", "name": "get_weather"}'])
def test_json_naming_no_tool_or_not_at_the_start_stays_free(tiny_engine, text):
    tokens = tiny_engine.tokenize(text, special=False)
    assert walk(tiny_engine, tokens) == (len(tokens), False, False)


def test_mask_before_a_trigger_forbids_only_what_would_break_the_call(tiny_engine):
    g = tool_constraint(tiny_engine, TREQ)
    try:
        for t in tiny_engine.tokenize('{"name": "read_file', special=False):
            g.accept(t)
        masked = g.mask(np.zeros(g.triggers[0].grammar.n_vocab, dtype=np.float32))
        forbidden = {tiny_engine.target.token_bytes(int(t)) for t in np.flatnonzero(~np.isfinite(masked))}
        assert b'"' not in forbidden and b'",' not in forbidden  # the name closes
        assert b'"}' in forbidden and b'":' in forbidden  # ... and the call goes on with "arguments"
        assert all(b'"' in p for p in forbidden)  # only tokens that complete the trigger
    finally:
        g.close()


# -- generations of the Qwen2.5-Coder 0.5B ---------------------------------------------------
@pytest.fixture(scope="module")
def qwen(engines, pair_paths):
    """The 0.5B alone (target and draft): its template renders tools and <tool_call> blocks."""
    return engines.get(pair_paths[1], n_ctx=2048, n_batch=512)


WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]
#: with this system prompt the 0.5B answers the weather question with a bare object
BARE_SYSTEM = {"role": "system", "content": "You are a helpful assistant. Call functions with <tool_call> tags."}


#: LazyGrammar.fired of each form (the order of lazy_forms)
MARKER_FORM, FENCE_FORM, BARE_FORM = 0, 1, 2


def answer(engine, messages, mode="none", begun=()):
    """(token ids, content, [(name, arguments)], the form that fired or None) of a greedy answer under
    the lazy grammar; ``begun``:
    the answer's first pieces, as if the model had written them, each tokenized on its own (they end
    the prompt and are fed to the grammar first)."""
    start = [t for piece in begun for t in engine.tokenize(piece, special=False)]
    constraint = tool_constraint(engine, TREQ)
    for t in start:
        assert constraint.allows(t)
        constraint.accept(t)
    prompt = engine.chat_tokens(messages, tools=TOOLS) + start
    gen = run(engine, prompt, mode, 48, constraint=constraint)[0]
    content, calls = parse_all(new_parser(TREQ), "".join(begun) + gen.text)
    return gen.token_ids, content, [(c.name, json.loads(c.arguments)) for c in calls], constraint.fired


@pytest.fixture(scope="module")
def fenced(qwen):
    return answer(qwen, WEATHER)


def test_a_fenced_call_ends_as_a_structured_call(qwen, fenced):
    tokens, content, calls, fired = fenced
    assert qwen.target.detokenize(tokens).startswith("```json")  # the 0.5B's own form here
    assert content is None and calls == [("get_weather", {"city": "Paris"})] and fired == FENCE_FORM


@pytest.mark.parametrize("mode", ["lookup", "draft"])
def test_greedy_with_speculation_equals_mode_none_under_the_lazy_grammar(qwen, fenced, mode):
    assert answer(qwen, WEATHER, mode) == fenced


def test_a_bare_call_ends_as_a_structured_call(qwen):
    tokens, content, calls, fired = answer(qwen, [BARE_SYSTEM, *WEATHER])
    assert qwen.target.detokenize(tokens).startswith("{")
    assert content is None and calls == [("get_weather", {"city": "Paris"})] and fired == BARE_FORM
    assert answer(qwen, [BARE_SYSTEM, *WEATHER], "lookup")[0] == tokens


@pytest.mark.parametrize("begun", [["<tool_call>"], ["<", "tool", "_call", ">", "\n{"]])
def test_a_call_begun_with_the_marker_one_token_or_spelled_ends_as_a_structured_call(qwen, begun):
    """``<tool_call>`` is one token of Qwen's vocabulary; here also spelled over four."""
    assert len(qwen.tokenize("<tool_call>", special=False)) == 1
    assert len(qwen.tokenize("".join(begun[:4]), special=False)) == 1
    _, content, calls, fired = answer(qwen, [{"role": "user", "content": "Show me the file src/app.py"}], begun=begun)
    assert fired == MARKER_FORM and content is None and len(calls) == 1  # which call: the model's choice
    required = {"read_file": "path", "get_weather": "city"}
    assert all(isinstance(arguments[required[name]], str) for name, arguments in calls)


def test_a_fenced_json_answer_naming_no_tool_stays_text(qwen):
    """The 0.5B's answer here is a fenced object named after the file, not a tool: no trigger, text."""
    tokens, content, calls, fired = answer(qwen, [{"role": "user", "content": "Show me the file src/app.py"}])
    assert fired is None and calls == [] and content == qwen.target.detokenize(tokens) and '"name": "src/app.py"' in content


# -- a call shown inside Markdown code is an example, not a call (cases.md C10) -----------------
EXAMPLES = ["Example:\n```\n" + MARKER + "\n```\nDone.", "Example:\n```xml\n" + MARKER + "\n```",
            "Write `" + MARKER.replace("\n", "") + "` to call it.",
            '````md\n```json\n{"name": "read_file", "arguments": {}}\n```\n````']


@pytest.mark.parametrize("text", EXAMPLES)
def test_a_call_shown_inside_code_stays_free_on_a_real_vocabulary(tiny_engine, text):
    tokens = tiny_engine.tokenize(text, special=False)
    assert walk(tiny_engine, tokens) == (len(tokens), False, False)
    after = tiny_engine.tokenize(text + "\nNow:\n" + MARKER, special=False)  # once the code closes, a call
    assert walk(tiny_engine, after) == (len(after), True, True)


@pytest.mark.parametrize("fence", ["```\n", "```python\n", "`"])
def test_the_marker_token_inside_code_starts_no_call(qwen, fence):
    """Qwen's ``<tool_call>`` (one special token) begun inside a code block or span: the lazy grammar
    leaves the answer free and the parser leaves the marker in the content."""
    begun = ["Here is how a call looks:\n", fence, "<tool_call>"]
    assert len(qwen.tokenize("<tool_call>", special=False)) == 1
    tokens, content, calls, fired = answer(qwen, [{"role": "user", "content": "Show me the file src/app.py"}],
                                           begun=begun)
    assert fired is None and calls == []
    assert content == "".join(begun) + qwen.target.detokenize(tokens)
    # the same marker outside the code starts a call
    _, _, calls, fired = answer(qwen, [{"role": "user", "content": "Show me the file src/app.py"}],
                                begun=["Here is how a call looks:\n", "<tool_call>"])
    assert fired == MARKER_FORM and len(calls) == 1
