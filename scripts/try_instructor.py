"""instructor's JSON_SCHEMA mode against a running ``localspec serve`` (a check by hand, not a test).

instructor is not a dependency: run this with a Python that has it and the openai client, e.g.

    python3 -m venv /tmp/instructor-venv && /tmp/instructor-venv/bin/pip install instructor
    localspec serve --target smollm2-135m --port 8080 &
    /tmp/instructor-venv/bin/python scripts/try_instructor.py http://127.0.0.1:8080/v1

instructor's ``Mode.JSON_SCHEMA`` sends ``response_format: {"type": "json_schema", ...}`` built from a
pydantic model and validates the answer with it; the grammar makes the answer follow the schema.
"""

from __future__ import annotations

import sys
from typing import Literal

import instructor
import openai
from pydantic import BaseModel


class Person(BaseModel):
    name: str
    age: int
    colour: Literal["red", "green", "blue"]


def main(base_url: str) -> None:
    client = instructor.from_openai(openai.OpenAI(base_url=base_url, api_key="none"), mode=instructor.Mode.JSON_SCHEMA)
    person = client.chat.completions.create(
        model="localspec", response_model=Person, max_retries=0, temperature=0, max_tokens=64,
        messages=[{"role": "user", "content": "Invent a person: name, age, favourite colour. Answer as JSON."}])
    print(repr(person))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/v1")
