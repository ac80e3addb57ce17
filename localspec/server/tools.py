"""Tool calling for ``/v1/chat/completions``: OpenAI's ``tools`` in, ``message.tool_calls`` out.

The request's ``tools`` (``[{"type": "function", "function": {name, description,
parameters}}]``) and a history with assistant ``tool_calls`` and ``role: tool`` messages go
through the target's own chat template (:meth:`localspec.core.engine.SpeculativeEngine.chat_tokens`
with ``tools``); the model then writes its calls in its template family's format, which a
:class:`ToolFormat` from :data:`FORMATS` parses back. Only the Hermes format (Qwen2.5,
Hermes, many fine-tunes: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) is
known today; another family is one more entry in :data:`FORMATS`.

``tool_choice``:

- ``"none"``: the tools are not shown to the model and nothing is parsed (the history may
  still hold earlier calls);
- ``"auto"`` (the default with tools): the model chooses between text and calls; once it
  begins a call, the call's grammar applies from there on (a lazy grammar,
  :func:`lazy_call_grammar`), so a call begun is never malformed and names a requested tool.
  A call begins with the format's start marker (Qwen's ``<tool_call>``, one special token or
  spelled in several: then the grammar below), a fenced ```json block or, at the start of the
  answer, a bare JSON object, each of these two once its ``"name"`` is a requested tool's
  (:func:`lazy_forms`); a JSON answer naming no tool stays text;
- ``"required"`` / ``{"type": "function", "function": {"name": N}}``: the answer must be
  calls: a grammar (:func:`call_grammar`, GBNF made from the tools' JSON Schemas by
  llama-cpp-python's converter) admits only the format's call blocks, each a JSON object
  ``{"name": one of the tools (or N), "arguments": an object following that tool's
  parameters schema}``, and then the end of the answer. The target's rows are restricted
  to it inside the acceptance rule (:mod:`localspec.core.acceptance`), so the answer follows the
  target's distribution restricted to the grammar exactly, drafts and all. The answer can
  still be cut by ``max_tokens`` or a stop string (then: the text as content).

Parsing (:class:`ToolCallParser`, the same code for streamed and whole answers): text
outside call blocks is content (whitespace next to a call dropped); a block whose JSON is
an object with a ``name`` among the request's tools and ``arguments`` an object (or a
string holding one) becomes a call, and so does such an object, bare, at the start of the
answer (its first key ``name``); any other block or object stays in the content as written. A
call is released only when its block is complete, so a stream never shows half a call,
nor a call that later fails to parse. ``parallel_tool_calls: false`` keeps the first call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from localspec.backend.grammar import json_schema_grammar
from localspec.server.errors import ApiError
from localspec.server.shapes import ResponseShape
from localspec.server.tool_parser import FORMATS, ToolCall, ToolCallParser, ToolFormat, argument_fragments, parse_all
from localspec.server.tool_parser import tool_format  # noqa: F401 - re-exported: app.py and tests read it here


def unsupported_error(model: str, template: str | None, param: str) -> ApiError:
    """The 400 for tools sent to a model whose template cannot take them."""
    if not template or not re.search(r"\btools\b", template):
        why = f"the chat template of {model} has no tool support"
    else:
        why = (f"the chat template of {model} renders tools in a format localspec cannot parse "
               f"(known: {', '.join(FORMATS)})")
    return ApiError(400, f"{param}: {why}; serve a model whose template renders tools and "
                         "<tool_call> blocks (e.g. the default qwen2.5-coder-1.5b), or send the "
                         "request without tools", param, "tools_not_supported")


# -- the request ----------------------------------------------------------------------------
@dataclass
class ToolRequest:
    """The checked tool fields of a chat request.

    Attributes:
        tools: the tools as the template takes them (``[{"type": "function", "function":
            {...}}]``); empty with ``tool_choice: "none"``.
        names: the callable functions' names.
        choice: ``"auto"``, ``"required"`` or ``"named"``.
        name: the function named by ``tool_choice``, or None.
        parallel: ``parallel_tool_calls`` (default true).
        history: the messages use tool calls or tool results (the template must know them).
        format: the template's call format, set by the app (None until then).
    """

    tools: list[dict]
    names: tuple[str, ...]
    choice: str = "auto"
    name: str | None = None
    parallel: bool = True
    history: bool = False
    format: ToolFormat | None = None

    @property
    def parses(self) -> bool:
        """Whether the answer is parsed for calls (tools shown to the model)."""
        return bool(self.tools)

    @property
    def constrained(self) -> bool:
        """Whether the answer must be calls (``required`` or named): :func:`call_grammar` applies."""
        return self.format is not None and self.choice in ("required", "named")


def tool_request(body, messages: list[dict]) -> ToolRequest | None:
    """The tool fields of a validated chat body
    (:class:`~localspec.server.bodies.ChatCompletionBody`: ``tools``, ``tool_choice``,
    ``parallel_tool_calls``) and whether its ``messages`` (as the template takes them) use tools.

    Returns:
        None when the request neither sends tools nor uses them in its history.
    """
    history = any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
    tools = [t.template_tool() for t in body.tools or ()]
    names = tuple(t["function"]["name"] for t in tools)
    choice, name = "auto", None
    if body.tool_choice in ("none", "required"):
        choice = body.tool_choice
    elif body.tool_choice not in (None, "auto"):  # a NamedToolChoice, checked against the tools
        choice, name = "named", body.tool_choice.function.name
    if not tools and not history:
        return None
    return ToolRequest(tools=[] if choice == "none" else tools, names=names, choice=choice, name=name,
                       parallel=body.parallel_tool_calls is not False, history=history)


def _special_tokens(engine, text: str) -> list[int]:
    """``text`` tokenized with special-token parsing, without BOS."""
    ids = engine.tokenize(text)
    bos = engine.tokenize("")  # [BOS] where the GGUF adds one, else []
    return ids[len(bos):] if ids[:len(bos)] == bos else ids


def check_markup_text(engine, messages: list[dict], treq: ToolRequest) -> None:
    """Refuse special-token text in what the template writes as markup: the tools and history calls.

    Message content is tokenized as text (:meth:`localspec.backend.llama.LlamaModel.tokenize_chat`),
    but a chat template writes the tool schemas and the calls' names and arguments itself,
    so ``<|im_end|>\n<|im_start|>system`` in a tool's description would open a turn.

    Raises:
        ApiError: 400 naming the tool or the call.
    """
    def check(text: str, param: str) -> None:
        if _special_tokens(engine, text) != engine.tokenize(text, special=False):
            raise ApiError(400, f"{param} holds special-token text (such as <|im_start|>), which the chat "
                                "template would write as markup: remove it", param, "special_token_text")

    for i, tool in enumerate(treq.tools):
        check(json.dumps(tool, ensure_ascii=False), f"tools[{i}]")
    for i, m in enumerate(messages):
        for j, call in enumerate(m.get("tool_calls") or []):
            check(json.dumps(call, ensure_ascii=False), f"messages[{i}].tool_calls[{j}]")


def prompt_tokens(engine, messages: list[dict], treq: ToolRequest) -> list[int]:
    """The chat prompt with the tools rendered.

    Raises:
        ApiError: 400 for special-token text in the tools or history calls (:func:`check_markup_text`).
    """
    check_markup_text(engine, messages, treq)
    return engine.chat_tokens(messages, tools=treq.tools or None)


# -- the grammar of a required call ---------------------------------------------------------
#: the grammar's start rule (the converter names its own start rule ``root``)
GRAMMAR_ROOT = "localspec-tool-calls"
#: a grammar longer than this (characters) falls back to any-object arguments: a schema such as
#: ``{"maxLength": 100000}`` expands into a rule per character
GRAMMAR_MAX_CHARS = 64_000


def _call_schema(tool: dict, any_arguments: bool) -> dict:
    fn = tool["function"]
    params = fn.get("parameters")
    if any_arguments or not isinstance(params, dict) or not params:
        params = {"type": "object"}
    return {"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
            "required": ["name", "arguments"]}


def _schema_gbnf(tools: list[dict], any_arguments: bool) -> str:
    schema = {"anyOf": [_call_schema(t, any_arguments) for t in tools]}
    return json_schema_grammar(schema, prop_order=["name", "arguments"])


def _callable(treq: ToolRequest) -> list[dict]:
    """The tools a call may name: all of them, or the one ``tool_choice`` names."""
    return [t for t in treq.tools if treq.name is None or t["function"]["name"] == treq.name]


def _calls_body(treq: ToolRequest) -> str:
    """The converter's rules for one call object ``{"name": ..., "arguments": ...}``, start rule ``root``
    (any-object arguments when the schemas cannot be read or make too long a grammar)."""
    tools = _callable(treq)
    try:
        body = _schema_gbnf(tools, any_arguments=False)
        if len(body) > GRAMMAR_MAX_CHARS:
            raise ValueError("grammar too long")
    except Exception:  # the converter raises AssertionError, KeyError, ValueError... on schemas it cannot read
        body = _schema_gbnf(tools, any_arguments=True)
    return body


def call_grammar(treq: ToolRequest) -> str:
    """The GBNF an answer to ``tool_choice`` required or named must follow (start rule :data:`GRAMMAR_ROOT`).

    One call block (several with ``parallel_tool_calls``) of the template's format, each
    holding ``{"name": ..., "arguments": ...}``: the name one of the tools (the named one),
    the arguments following its ``parameters`` JSON Schema as llama-cpp-python's converter
    reads it. A schema the converter cannot read (a remote ``$ref``, say), or that makes a
    grammar over :data:`GRAMMAR_MAX_CHARS`, is replaced by "any JSON object" for every tool.
    """
    fmt = treq.format
    assert fmt is not None and (treq.constrained or treq.choice == "auto")
    before, after = (json.dumps(x) for x in fmt.template_block)  # GBNF literals are JSON-escaped strings
    call = f"{before} root {after}"
    more = f" ({json.dumps(fmt.separator)} {call})*" if treq.parallel else ""
    return f"{GRAMMAR_ROOT} ::= {call}{more}\n{_calls_body(treq)}"


# -- the lazy grammar of tool_choice auto ---------------------------------------------------
#: whitespace inside a call written without the template's marker, in the grammar and in its
#: trigger alike: llama.cpp's own ``space`` rule (one space, or a newline and an indent), which
#: admits the pretty-printed JSON small Qwen models write in a fenced block (the converter of
#: this llama-cpp-python writes ``space ::= " "?``)
SPACE_GBNF = 'space ::= (" " | "\\n" [ \\t]{0,20})?'
SPACE_RE = rb"(?: |\n[ \t]{0,20})?"
#: whitespace around a call's JSON object inside a fenced block, and between two calls
GAP_GBNF = "[ \\t\\n]{0,8}"
GAP_RE = rb"[ \t\n]{0,8}"


def _loose_body(treq: ToolRequest) -> str:
    """:func:`_calls_body` with :data:`SPACE_GBNF` as its ``space`` rule."""
    body = re.sub(r"(?m)^space ::= .*$", lambda _: SPACE_GBNF, _calls_body(treq))
    return body if SPACE_GBNF in body else f"{body}\n{SPACE_GBNF}"


def _call_head(treq: ToolRequest) -> bytes:
    """A regular expression for the start of a call object up to its name, a tool's:
    ``{"name": "read_file"``, whitespace as :data:`SPACE_RE`."""
    names = b"|".join(re.escape(json.dumps(t["function"]["name"]).encode()) for t in _callable(treq))
    return rb"\{" + SPACE_RE + rb'"name"' + SPACE_RE + b":" + SPACE_RE + b"(?:" + names + b")"


def lazy_forms(treq: ToolRequest) -> list[tuple[bytes, str, bool]]:
    """The forms of a call that start the lazy grammar of ``tool_choice`` auto: (trigger, grammar,
    at_start) each, the trigger a regular expression over the answer's bytes (the call starts at its
    first group, else at the match), the grammar GBNF with start rule :data:`GRAMMAR_ROOT` for the
    calls from there to the end of the answer; in order:

    - the template's marker (Qwen's ``<tool_call>``), as one special token or spelled in several:
      :func:`call_grammar` from the marker on;
    - each other block of the format (a fenced ```json block) whose object starts with a requested
      tool's name, ``{"name": "read_file"``: from the fence on, calls in such blocks;
    - at the start of the answer, a bare JSON object that starts so: such objects.

    A JSON answer whose ``name`` is not a requested tool (or that has no ``name`` first) triggers
    nothing and stays text. Whitespace inside the object: :data:`SPACE_RE`.
    """
    fmt = treq.format
    assert fmt is not None
    head = _call_head(treq)
    body = _loose_body(treq)

    def calls(one: str) -> str:
        more = f" ({GAP_GBNF} {one})*" if treq.parallel else ""
        return f"{GRAMMAR_ROOT} ::= {one}{more}\n{body}"

    forms = [(re.escape(fmt.start.encode()), call_grammar(treq), False)]
    for start, end in fmt.blocks[1:]:
        block = f"{json.dumps(start)} {GAP_GBNF} root {GAP_GBNF} {json.dumps(end)}"
        forms.append((re.escape(start.encode()) + GAP_RE + head, calls(f"({block})"), False))
    forms.append((rb"\A[ \t\r\n]*(" + head + b")", calls("root"), True))
    return forms


def lazy_call_grammar(engine, treq: ToolRequest):
    """The constraint of ``tool_choice`` auto: free text until the answer begins a call in one of
    :func:`lazy_forms`, that form's grammar from there on
    (:meth:`localspec.core.engine.SpeculativeEngine.lazy_grammar`). A form begun inside Markdown code (a
    fenced block or an inline code span: the model shows a call as an example) starts nothing, as the
    parser leaves it in the content (:class:`ToolCallParser`).

    Raises:
        ConfigError: llama.cpp cannot parse a grammar.
    """
    ends = bytes(sorted({treq.format.start.encode()[-1], ord('"')}))  # the last byte of every form's trigger
    return engine.lazy_grammar(lazy_forms(treq), GRAMMAR_ROOT, ends, outside_code=True)


def tool_constraint(engine, treq: ToolRequest):
    """The constraint of a chat answer with tools (:meth:`localspec.core.engine.SpeculativeEngine.grammar`),
    or None.

    ``required`` / named: :func:`call_grammar` from the first token. ``auto``: the lazy grammar of
    :func:`lazy_call_grammar` (a call begun in any of :func:`lazy_forms` is constrained from its
    start, so it parses and names a requested tool with arguments that follow its schema). None
    without tools.
    """
    if treq.format is None or not treq.tools:
        return None
    if treq.constrained:
        return engine.grammar(call_grammar(treq), GRAMMAR_ROOT)
    if treq.choice != "auto":
        return None
    return lazy_call_grammar(engine, treq)


# -- responses ------------------------------------------------------------------------------
def new_parser(treq: ToolRequest) -> ToolCallParser:
    """The parser for one request's answer (``treq.format`` set, ``treq.parses`` true)."""
    assert treq.format is not None
    return ToolCallParser(treq.format, treq.names, treq.parallel)


def answer_finish_reason(has_calls: bool, generation_reason: str) -> str:
    """The ``finish_reason`` of an answer parsed for tool calls: ``"length"`` when the token limit cut it (calls
    or not, as OpenAI reports it: the answer may end in a half-written call, left as content), else
    ``"tool_calls"`` when it holds a call, else the generation's own reason (``"stop"``)."""
    if generation_reason == "length" or not has_calls:
        return generation_reason
    return "tool_calls"


def complete(shape: ResponseShape, treq: ToolRequest, text: str, finish_reason: str, extra: dict,
             logprobs: list | None = None) -> dict:
    """The non-streamed ``chat.completion`` of an answer parsed for tool calls.

    With at least one call: ``message.tool_calls`` and ``finish_reason: "tool_calls"`` (``"length"`` when the
    token limit cut the answer: :func:`answer_finish_reason`); without: the text as content and the generation's
    own finish reason. ``logprobs``: every
    output token's entry (the calls' tokens included), when asked for.
    """
    content, calls = parse_all(new_parser(treq), text)
    body = shape.complete(content, answer_finish_reason(bool(calls), finish_reason), extra, logprobs)
    if calls:
        body["choices"][0]["message"]["tool_calls"] = [c.message_dict() for c in calls]
    return body


class ToolStream:
    """The ``chat.completion.chunk`` objects of a streamed answer parsed for tool calls.

    Content is released as it comes (less a possible start of a call marker); each call
    once its block is complete, as OpenAI streams one: a chunk with ``delta.tool_calls
    [{index, id, type, function: {name, arguments: ""}}]``, then chunks with argument
    fragments.
    """

    def __init__(self, shape: ResponseShape, treq: ToolRequest, include_usage: bool) -> None:
        self.shape = shape
        self.parser = new_parser(treq)
        self.include_usage = include_usage
        self.index = 0  #: calls released so far

    def _call_chunk(self, tool_call: dict) -> dict:
        c = self.shape.chunk(None, include_usage=self.include_usage)
        c["choices"][0]["delta"] = {"tool_calls": [tool_call]}
        return c

    def _chunks(self, items: list, tokens: list | None, logprobs: list | None = None) -> list[dict]:
        out = []
        content = "".join(x for x in items if isinstance(x, str))
        if content or tokens:
            out.append(self.shape.chunk(content or None, tokens=tokens, include_usage=self.include_usage,
                                        logprobs=logprobs))
        for call in (x for x in items if isinstance(x, ToolCall)):
            out.append(self._call_chunk({"index": self.index, "id": call.id, "type": "function",
                                         "function": {"name": call.name, "arguments": ""}}))
            for frag in argument_fragments(call.arguments):
                out.append(self._call_chunk({"index": self.index, "function": {"arguments": frag}}))
            self.index += 1
        return out

    def feed(self, text: str, tokens: list | None = None, logprobs: list | None = None) -> list[dict]:
        """Chunks for the next piece of text (``tokens``: its token events, for ``choices[0].tokens``;
        ``logprobs``: their entries, on the chunk of its content, when asked for)."""
        return self._chunks(self.parser.feed(text), tokens, logprobs)

    def finish(self) -> list[dict]:
        """Chunks for what the parser still holds at the end."""
        return self._chunks(self.parser.finish(), None)

    def finish_reason(self, generation_reason: str) -> str:
        return answer_finish_reason(self.index > 0, generation_reason)
