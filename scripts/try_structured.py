"""Structured outputs from real client libraries against a running ``localspec serve``: instructor,
pydantic-ai and LangChain (a check by hand, not a test).

None of them is a dependency: give each one's own Python (install them in their own environments)::

    python3 -m venv /tmp/si && /tmp/si/bin/pip install instructor
    python3 -m venv /tmp/sp && /tmp/sp/bin/pip install 'pydantic-ai-slim[openai]'
    python3 -m venv /tmp/sl && /tmp/sl/bin/pip install langchain-openai
    localspec serve --port 8080 &
    python scripts/try_structured.py http://127.0.0.1:8080/v1 --instructor /tmp/si/bin/python \\
        --pydantic-ai /tmp/sp/bin/python --langchain /tmp/sl/bin/python

Each library asks for a ``Person(name: str, age: int, colour: "red" | "green" | "blue")`` in every
mode it has for an OpenAI-compatible server, and validates the answer with pydantic:

- instructor: ``Mode.JSON_SCHEMA`` (``response_format`` json_schema), ``Mode.JSON`` (json_object),
  ``Mode.TOOLS`` (a forced tool call);
- pydantic-ai: ``NativeOutput`` (``response_format`` json_schema), ``ToolOutput`` (its default: a
  ``final_result`` tool, ``tool_choice: required``), ``PromptedOutput`` (the schema in the prompt);
- LangChain ``ChatOpenAI.with_structured_output``: ``method="json_schema"``, ``"function_calling"``,
  ``"json_mode"``.

The question names the keys: LangChain's ``json_mode`` sends no schema (as its documentation says,
the prompt must describe it). Prints each library's version, each mode's result or error; exits 1 if any mode failed. Talks only
to the given URL (no network otherwise).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

PERSON = """
from typing import Literal
from pydantic import BaseModel
class Person(BaseModel):
    name: str
    age: int
    colour: Literal["red", "green", "blue"]
ASK = "Invent a person. Answer as JSON with the keys name, age and colour (red, green or blue)."
import sys
from importlib.metadata import version
base = sys.argv[1]
failed = []
def attempt(mode, fn):
    try:
        p = fn()
        assert isinstance(p, Person), type(p)
        print(f"  {mode}: ok {p!r}", flush=True)
    except Exception as e:  # noqa: BLE001 - report and go on
        failed.append(mode)
        print(f"  {mode}: FAILED {type(e).__name__}: {str(e)[:400]}", flush=True)
"""

INSTRUCTOR = PERSON + """
import instructor, openai
print("instructor", version("instructor"), "openai", version("openai"))
raw = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
for mode in (instructor.Mode.JSON_SCHEMA, instructor.Mode.JSON, instructor.Mode.TOOLS):
    client = instructor.from_openai(raw, mode=mode)
    attempt(mode.name, lambda: client.chat.completions.create(
        model="localspec", response_model=Person, max_retries=0, temperature=0, max_tokens=96,
        messages=[{"role": "user", "content": ASK}]))
sys.exit(1 if failed else 0)
"""

PYDANTIC_AI = PERSON + """
from pydantic_ai import Agent, NativeOutput, PromptedOutput, ToolOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
print("pydantic-ai-slim", version("pydantic-ai-slim"), "openai", version("openai"))
model = OpenAIChatModel("localspec", provider=OpenAIProvider(base_url=base, api_key="none"))
for name, out in (("NativeOutput", NativeOutput(Person)), ("ToolOutput (default)", ToolOutput(Person)),
                  ("PromptedOutput", PromptedOutput(Person))):
    agent = Agent(model, output_type=out, retries=0, model_settings={"temperature": 0, "max_tokens": 96})
    attempt(name, lambda: agent.run_sync(ASK).output)
sys.exit(1 if failed else 0)
"""

LANGCHAIN = PERSON + """
from langchain_openai import ChatOpenAI
print("langchain-openai", version("langchain-openai"), "langchain-core", version("langchain-core"),
      "openai", version("openai"))
llm = ChatOpenAI(model="localspec", base_url=base, api_key="none", temperature=0, max_tokens=96, max_retries=0)
for method in ("json_schema", "function_calling", "json_mode"):
    attempt(method, lambda: llm.with_structured_output(Person, method=method).invoke(ASK))
sys.exit(1 if failed else 0)
"""

SNIPPETS = {"instructor": INSTRUCTOR, "pydantic_ai": PYDANTIC_AI, "langchain": LANGCHAIN}


def run(name: str, python: str, base_url: str, timeout: int) -> bool:
    print(f"\n== {name}", flush=True)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([python, "-c", SNIPPETS[name], base_url], text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  FAILED: no answer within {timeout} s")
        return False
    print(r.stdout.rstrip())
    if r.returncode not in (0, 1):
        print(r.stderr.strip()[-2000:])
    print(f"  ({time.perf_counter() - t0:.0f} s)")
    return r.returncode == 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base_url", nargs="?", default="http://127.0.0.1:8080/v1")
    p.add_argument("--instructor", metavar="PYTHON", help="a Python interpreter with instructor installed")
    p.add_argument("--pydantic-ai", metavar="PYTHON", help="a Python with pydantic-ai-slim[openai]")
    p.add_argument("--langchain", metavar="PYTHON", help="a Python with langchain-openai")
    p.add_argument("--timeout", type=int, default=900, help="seconds for each library's modes together")
    ns = p.parse_args()
    results = {name: run(name, python, ns.base_url, ns.timeout)
               for name, python in (("instructor", ns.instructor), ("pydantic_ai", ns.pydantic_ai),
                                    ("langchain", ns.langchain)) if python}
    print("\n== summary")
    for name, ok in results.items():
        print(f"{name}: {'ok' if ok else 'FAILED'}")
    return 0 if results and all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
