"""Tool calling without a model: the request checks, the output parser (whole and streamed,
cut at every place), the template family table and the response shapes
(localspec/server/tools.py). The real model and the openai client: tests/integration/test_server_tools.py."""

from __future__ import annotations

import json
import random

import pytest

from localspec.server.bodies import parse_request
from localspec.server.errors import ApiError
from localspec.server.shapes import ResponseShape
from localspec.server.tools import FORMATS, ToolCall, ToolCallParser, ToolStream, complete, parse_all, tool_format

HERMES = FORMATS["hermes"]
NAMES = ("get_weather", "read_file")
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in NAMES]
CALL_W = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL_R = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
QWEN_TEMPLATE = ("{%- if tools %}{%- for tool in tools %}{{ tool | tojson }}{%- endfor %}{%- endif %}"
                 "<tool_call>{{ messages[0].content }}</tool_call>")

#: (model output, expected content, expected [(name, arguments)])
CASES = [
    ("Hello there  \n", "Hello there  \n", []),
    (CALL_W, None, [("get_weather", '{"city": "Paris"}')]),
    ("Let me check.\n" + CALL_W + "\n" + CALL_R, "Let me check.", [("get_weather", '{"city": "Paris"}'),
                                                                   ("read_file", '{"path": "a.py"}')]),
    # Qwen2.5-Coder often fences its call instead
    ('```json\n{"name": "read_file", "arguments": {"path": "b.py"}}\n```', None, [("read_file", '{"path": "b.py"}')]),
    # a fenced block that is not a call stays content, as written
    ('Config:\n```json\n{"a": 1}\n```\nDone.', 'Config:\n```json\n{"a": 1}\n```\nDone.', []),
    # malformed JSON (one brace short), an unknown function, arguments not an object: content
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>',
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>', []),
    ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
     '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', []),
    ('<tool_call>{"name": "read_file", "arguments": [1]}</tool_call>',
     '<tool_call>{"name": "read_file", "arguments": [1]}</tool_call>', []),
    # arguments as a string holding an object; no closing marker at the end of the output
    ('<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"c.py\\"}"}', None,
     [("read_file", '{"path": "c.py"}')]),
    # a call cut off by max_tokens: content
    ('<tool_call>\n{"name": "read_file", "argu', '<tool_call>\n{"name": "read_file", "argu', []),
    ("a <tool_ b", "a <tool_ b", []),
    ("x < y and `a` ```", "x < y and `a` ```", []),
    # a bare JSON object at the start of the answer whose name is a requested tool: a call (two, one a line)
    ('{"name": "read_file", "arguments": {"path": "a.py"}}', None, [("read_file", '{"path": "a.py"}')]),
    ('\n{\n  "name": "get_weather",\n  "arguments": {"city": "Paris"}\n}\n{"name": "read_file", "arguments": {}}',
     None, [("get_weather", '{"city": "Paris"}'), ("read_file", "{}")]),
    ('{"name":"read_file","parameters":{"path":"a.py"}} Done.', "Done.", [("read_file", '{"path": "a.py"}')]),
    # a JSON answer that names no tool, or not first, or that is not at the start, or cut off: text
    ('{"name": "John", "age": 30}', '{"name": "John", "age": 30}', []),
    ('{"name": "read_file_2", "arguments": {}}', '{"name": "read_file_2", "arguments": {}}', []),
    ('{"answer": 42, "name": "read_file"}', '{"answer": 42, "name": "read_file"}', []),
    ('Sure: {"name": "read_file", "arguments": {}}', 'Sure: {"name": "read_file", "arguments": {}}', []),
    ('{"name": "read_file", "arguments": {"pa', '{"name": "read_file", "arguments": {"pa', []),
    ('{"name": "read_file", "arguments": [1]}', '{"name": "read_file", "arguments": [1]}', []),
    # a call shown inside Markdown code is an example: content as written (cases.md C10)
    ("To call it, write:\n```\n" + CALL_R + "\n```\nThat is all.", "To call it, write:\n```\n" + CALL_R
     + "\n```\nThat is all.", []),
    ("Like so:\n```xml\n" + CALL_W + "\n```", "Like so:\n```xml\n" + CALL_W + "\n```", []),
    ("Write `" + CALL_W + "` on a line.", "Write `" + CALL_W + "` on a line.", []),
    ('````md\n```json\n{"name": "read_file", "arguments": {}}\n```\n````',
     '````md\n```json\n{"name": "read_file", "arguments": {}}\n```\n````', []),
    # after the code closes, a call is a call again
    ("Like so:\n```\n" + CALL_W + "\n```\nNow `x` then:\n" + CALL_R, "Like so:\n```\n" + CALL_W
     + "\n```\nNow `x` then:", [("read_file", '{"path": "a.py"}')]),
    # a stray backtick on an earlier line leaves a call on a later one a call
    ("Use the `x flag.\n" + CALL_R, "Use the `x flag.", [("read_file", '{"path": "a.py"}')]),
    ('Config:\n```json\n{"a": 1}\n```\n' + CALL_R, 'Config:\n```json\n{"a": 1}\n```', [("read_file", '{"path": "a.py"}')]),
]


def whole(text, **kw):
    content, calls = parse_all(ToolCallParser(HERMES, NAMES, **kw), text)
    return content, [(c.name, c.arguments) for c in calls]


def in_pieces(text, cuts, **kw):
    parser = ToolCallParser(HERMES, NAMES, **kw)
    items, prev = [], 0
    for c in [*cuts, len(text)]:
        items += parser.feed(text[prev:c])
        prev = c
    items += parser.finish()
    content = "".join(x for x in items if isinstance(x, str))
    return content or None, [(x.name, x.arguments) for x in items if isinstance(x, ToolCall)]


@pytest.mark.parametrize("text, content, calls", CASES)
def test_parse_whole_output(text, content, calls):
    assert whole(text) == (content, calls)


@pytest.mark.parametrize("text, content, calls", CASES)
def test_streamed_pieces_give_the_same_result(text, content, calls):
    for i in range(len(text) + 1):  # every single cut
        assert in_pieces(text, [i]) == (content, calls), i
    rng = random.Random(0)
    for _ in range(50):  # and many random ones
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, 6)))
        assert in_pieces(text, cuts) == (content, calls), cuts
    assert in_pieces(text, list(range(1, len(text)))) == (content, calls)  # one character at a time


def test_no_half_call_is_released_before_its_end():
    parser = ToolCallParser(HERMES, NAMES)
    assert parser.feed("Sure. <tool") == ["Sure."]
    assert parser.feed('_call>\n{"name": "read_file", "arguments": {"path"') == []
    items = parser.feed(': "a.py"}}\n</tool_call>')
    assert [(c.name, c.arguments) for c in items] == [("read_file", '{"path": "a.py"}')]


def test_a_bare_object_is_held_only_while_it_may_be_a_call():
    parser = ToolCallParser(HERMES, NAMES)
    assert parser.feed('  {"na') == [] and parser.feed('me": "read') == []
    assert parser.feed('_file", "arguments": {"path": "a.py"}') == []
    assert [(c.name, c.arguments) for c in parser.feed("}")] == [("read_file", '{"path": "a.py"}')]
    text = ToolCallParser(HERMES, NAMES)
    assert text.feed('{"name": "wr') == ['{"name": "wr']  # no tool starts so: released at once
    assert ToolCallParser(HERMES, NAMES).feed('{"age"') == ['{"age"']


@pytest.mark.parametrize("text, held", [
    ("<", True), ("  <tool", True), ("\n", True), ("`", True), ("``", True), ("```js", True),
    ("<system", False), ("<tool_call>", False), ("Hi", False), ("```python", False), ('{"name"', False),
    (" " * 70 + "<", False),
])
def test_holds_all_says_when_the_parser_has_released_nothing_of_an_answers_start(text, held):
    """``holds_all`` (what the generation asks before a round: should it draft?) is true only where the streamed
    parser, fed the same text, has released nothing and the next tokens decide between text and a call marker."""
    from localspec.server.tool_parser import holds_all

    assert holds_all(HERMES, text) is held
    if held:
        assert ToolCallParser(HERMES, NAMES).feed(text) == []
    elif not text.lstrip().startswith(("<tool_call>", "{")):
        assert ToolCallParser(HERMES, NAMES).feed(text + " and more") != []  # text once the question is settled
    if not held:  # monotone: the generation stops asking after the first no
        assert not any(holds_all(HERMES, text + more) for more in ("", "<", "`", " ", "tool_call>"))


def test_parallel_false_keeps_the_first_call():
    assert whole(CALL_W + "\n" + CALL_R, parallel=False) == (None, [("get_weather", '{"city": "Paris"}')])


def _constrained(choice, tools=None, parallel=True):
    from localspec.server.tools import ToolRequest

    tools = tools or TOOLS
    treq = ToolRequest(tools=tools, names=tuple(t["function"]["name"] for t in tools), parallel=parallel,
                       choice="named" if choice not in ("auto", "required") else choice,
                       name=None if choice in ("auto", "required") else choice)
    treq.format = HERMES
    return treq


def test_required_and_named_make_a_call_grammar():
    from localspec.server.tools import GRAMMAR_ROOT, call_grammar

    assert not _constrained("auto").constrained and _constrained("required").constrained
    g = call_grammar(_constrained("required"))
    first = g.splitlines()[0]
    # the template's block around the converter's start rule, repeated for parallel calls
    assert first == f'{GRAMMAR_ROOT} ::= "<tool_call>\\n" root "\\n</tool_call>" ("\\n" "<tool_call>\\n" root "\\n</tool_call>")*'
    assert '"\\"get_weather\\""' in g and '"\\"read_file\\""' in g
    named = call_grammar(_constrained("read_file", parallel=False))
    assert named.splitlines()[0] == f'{GRAMMAR_ROOT} ::= "<tool_call>\\n" root "\\n</tool_call>"'
    assert "read_file" in named and "get_weather" not in named


class GrammarRecorder:
    """An engine that records the grammars asked of it; ``<tool_call>`` is one token (id 7) when ``one_token``."""

    def __init__(self, one_token: bool) -> None:
        self.one_token = one_token
        self.asked: list[tuple[str, str, tuple]] = []

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        if text == "<tool_call>" and self.one_token:
            return [7]
        return [ord(c) for c in text]

    def grammar(self, gbnf: str, root: str = "root", triggers=()):
        self.asked.append((gbnf, root, tuple(triggers)))
        return object()

    def lazy_grammar(self, forms, root: str, ends: bytes, outside_code: bool = False):
        self.asked.append((tuple(forms), root, ends, outside_code))
        return object()


@pytest.mark.parametrize("choice, one_token", [
    ("auto", True),        # lazy: the grammars of the call forms, from the model's marker (one token or not) on
    ("auto", False),
    ("required", True),    # from the first token
    ("required", False),
    ("read_file", True),
])
def test_tool_constraint_per_choice(choice, one_token):
    from localspec.server.tools import GRAMMAR_ROOT, call_grammar, lazy_forms, tool_constraint

    engine = GrammarRecorder(one_token)
    treq = _constrained(choice)
    got = tool_constraint(engine, treq)
    if choice == "auto":
        forms = tuple(lazy_forms(treq))
        assert got is not None and engine.asked == [(forms, GRAMMAR_ROOT, b'">', True)]
        assert forms[0] == (b"<tool_call>", call_grammar(treq), False)  # the marker, one token or spelled
    else:
        assert got is not None and engine.asked == [(call_grammar(treq), GRAMMAR_ROOT, ())]


def test_call_grammar_follows_the_schema_and_falls_back_to_any_object():
    from localspec.server.tools import GRAMMAR_MAX_CHARS, call_grammar

    schema = {"type": "object", "properties": {"unit": {"enum": ["celsius", "kelvin"]}}, "required": ["unit"]}
    tools = [{"type": "function", "function": {"name": "t", "parameters": schema}}]
    g = call_grammar(_constrained("required", tools))
    assert '"\\"celsius\\""' in g and "value ::=" not in g  # the enum, not any JSON value
    # a schema the converter cannot read, and one whose grammar would be huge: any JSON object
    for params in ({"$ref": "#/defs/nowhere"}, {"type": "object", "properties": {"s": {"maxLength": 10**6}}}):
        tools = [{"type": "function", "function": {"name": "t", "parameters": params}}]
        g = call_grammar(_constrained("required", tools))
        assert len(g) < GRAMMAR_MAX_CHARS and "object ::=" in g and "value ::=" in g


def test_a_raw_newline_inside_a_string_still_parses():
    # the grammar's strings (like llama.cpp's) admit raw control characters; json.loads(strict) does not
    assert whole('<tool_call>\n{"name": "read_file", "arguments": {"path": "a\nb"}}\n</tool_call>') == \
        (None, [("read_file", '{"path": "a\\nb"}')])


def test_template_family_table():
    assert tool_format(QWEN_TEMPLATE) is HERMES
    assert tool_format("{% for message in messages %}{{ message.content }}{% endfor %}") is None  # SmolLM2-like
    assert tool_format(None) is None
    assert tool_format("{% if tools %}[TOOL_CALLS]{% endif %}") is None  # renders tools, format unknown


def body(**kw):
    return {"messages": [{"role": "user", "content": "hi"}], **kw}


def test_tool_request_fields():
    req = parse_request(body(tools=TOOLS), "chat")
    assert req.tools.choice == "auto" and req.tools.names == NAMES and req.tools.parallel
    req = parse_request(body(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "read_file"}},
                             parallel_tool_calls=False), "chat")
    assert (req.tools.choice, req.tools.name, req.tools.parallel) == ("named", "read_file", False)
    req = parse_request(body(tools=TOOLS, tool_choice="none"), "chat")
    assert req.tools.tools == [] and not req.tools.parses
    assert parse_request(body(tools=[], tool_choice="auto"), "chat").tools is None


@pytest.mark.parametrize("kw, param", [
    ({"tools": {"a": 1}}, "tools"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    # a call's arguments are an object: a schema of another type could never be met (tool_choice required)
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": ["string", "null"]}}}]},
     "tools[0].function.parameters"),
    ({"tools": TOOLS + TOOLS[:1]}, "tools"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]}, "messages[0].tool_calls[0]"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
])
def test_bad_tool_fields_are_400_naming_the_parameter(kw, param):
    with pytest.raises(ApiError) as e:
        parse_request(body(**kw), "chat")
    assert e.value.status == 400 and e.value.param == param


def test_an_assistant_prefill_with_a_grammar_is_400_and_without_one_is_taken():
    """A prefill continues the final assistant message, but the call parser and a response format's grammar
    start at the answer's start: a JSON answer would repeat the prefill's start, a call begun in the prefill
    would be lost. Refused, naming messages; the prefill alone, or with tools turned off (tool_choice none), is
    taken, and so is an assistant message with tool calls at the end (a new turn, not a prefill). A predicted
    output that begins with the prefill is drafted from where the answer begins."""
    prefill = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": '<tool_call>\n{"name": '}]
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}
    for kw, said in (({"tools": TOOLS}, "tools cannot continue"),
                     ({"tools": TOOLS, "tool_choice": "required"}, "tools cannot continue"),
                     ({"response_format": fmt}, "response_format cannot continue"),
                     ({"response_format": {"type": "json_object"}}, "response_format cannot continue")):
        with pytest.raises(ApiError) as e:
            parse_request(body(messages=prefill, **kw), "chat")
        assert e.value.status == 400 and e.value.param == "messages[1]" and said in e.value.message, kw
    assert parse_request(body(messages=prefill), "chat").messages[-1]["content"] == prefill[-1]["content"]
    assert parse_request(body(messages=prefill, tools=TOOLS, tool_choice="none"), "chat").tools.tools == []
    code = "def f(x):\n    return x\n"  # an editor predicts the whole answer, the prefill included
    for prefill_text, predicted in (("def f(x):\n", "    return x\n"), ("```python\n", code), (code, None)):
        msgs = prefill[:1] + [{"role": "assistant", "content": prefill_text}]
        assert parse_request(body(messages=msgs, prediction={"type": "content", "content": code}),
                             "chat").prediction == predicted
    called = prefill[:1] + [{"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]
    assert parse_request(body(messages=called, tools=TOOLS), "chat").tools.history


def test_object_schemas_of_every_spelling_are_taken():
    for params in ({}, {"properties": {}}, {"type": "object"}, {"type": ["object", "null"]}):
        tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
        assert parse_request(body(tools=tools), "chat").tools.names == ("f",)


def test_history_arguments_go_to_the_template_as_objects():
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]
    req = parse_request(body(messages=msgs, tools=TOOLS), "chat")
    assert req.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert req.messages[1]["content"] == "" and req.messages[2] == {"role": "tool", "content": "18 C",
                                                                    "tool_call_id": "call_1"}
    assert req.tools.history


def test_responses_streamed_and_whole_agree():
    req = parse_request(body(tools=TOOLS), "chat")
    req.tools.format = HERMES
    shape = ResponseShape("chat", "m")
    text = "Checking.\n" + CALL_W
    r = complete(shape, req.tools, text, "stop", {})
    msg, reason = r["choices"][0]["message"], r["choices"][0]["finish_reason"]
    assert reason == "tool_calls" and msg["content"] == "Checking."
    assert msg["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    stream = ToolStream(shape, req.tools, include_usage=False)
    chunks = [c for piece in (text[:13], text[13:40], text[40:]) for c in stream.feed(piece)] + stream.finish()
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == "Checking."
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0]["id"].startswith("call_") and calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert all("id" not in tc and "name" not in tc["function"] for tc in calls[1:])
    args = "".join(tc["function"]["arguments"] for tc in calls)
    assert json.loads(args) == {"city": "Paris"} and args == msg["tool_calls"][0]["function"]["arguments"]
    assert stream.finish_reason("stop") == "tool_calls"
    # malformed: content, the generation's own finish reason
    r = complete(shape, req.tools, "<tool_call>{oops</tool_call>", "stop", {})
    assert r["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in r["choices"][0]["message"]
    assert r["choices"][0]["message"]["content"] == "<tool_call>{oops</tool_call>"


def test_an_answer_the_token_limit_cut_after_a_call_finishes_with_length_streamed_and_whole():
    """A call, then the start of another when ``max_tokens`` ran out: the whole call is kept, the cut one is
    content, and the finish reason is ``length`` (as OpenAI reports a cut answer; ``/v1/responses`` then says
    ``incomplete``), not ``tool_calls``, which would tell the client the answer ended as the model chose."""
    req = parse_request(body(tools=TOOLS), "chat")
    req.tools.format = HERMES
    shape = ResponseShape("chat", "m")
    text = CALL_W + '\n{"name": "get_weather", "'
    r = complete(shape, req.tools, text, "length", {})
    choice = r["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["message"]["tool_calls"]) == 1
    stream = ToolStream(shape, req.tools, include_usage=False)
    chunks = stream.feed(text) + stream.finish()
    assert sum(len(c["choices"][0]["delta"].get("tool_calls", [])) for c in chunks) >= 1
    assert stream.finish_reason("length") == "length" and stream.finish_reason("stop") == "tool_calls"


@pytest.mark.parametrize("stream", [True, False])
def test_only_a_streamed_answer_with_parsed_calls_tells_the_generation_what_it_holds(stream):
    """A streamed tool request's rounds skip drafting while the parser holds all its text (the client's first text
    comes sooner); a non-streamed one is seen whole at its end, so nothing is held from the policy's point of view
    (``worker.output_hold``), and a request without tools holds nothing either."""
    from localspec.server.bodies import GenerationRequest
    from localspec.server.worker import output_hold

    req = GenerationRequest(kind="chat", messages=[{"role": "user", "content": "hi"}], stream=stream,
                            tools=_constrained("auto"))
    hold = output_hold(req)
    if stream:
        assert hold is not None and hold("  <") is True and hold("Sure") is False
    else:
        assert hold is None
    assert output_hold(GenerationRequest(kind="chat", messages=req.messages, stream=stream)) is None
