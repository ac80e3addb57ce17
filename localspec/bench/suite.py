"""The benchmark's tasks: the built-in suite (code completion, a code edit, a summary, prose, chat)
and user prompts from a file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import ConfigError


# -- the built-in suite ------------------------------------------------------------------
_EDIT_FILE = '''import csv
import sys
from dataclasses import dataclass


@dataclass
class Record:
    name: str
    city: str
    amount: float


def parse_line(line: str) -> Record:
    """Split one CSV line into a Record."""
    name, city, amount = next(csv.reader([line]))
    return Record(name.strip(), city.strip(), float(amount))


def load(path: str) -> list[Record]:
    records = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i == 0 or not line.strip():
                continue
            records.append(parse_line(line))
    return records


def total_by_city(records: list[Record]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for r in records:
        totals[r.city] = totals.get(r.city, 0.0) + r.amount
    return totals


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: totals.py FILE", file=sys.stderr)
        return 2
    records = load(argv[1])
    for city, total in sorted(total_by_city(records).items()):
        print(f"{city:20s} {total:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

_SUMMARY_TEXT = (
    "The town of Haldor sits where two rivers meet, and for three centuries its fortunes rose and fell "
    "with the water. In the early years the rivers carried timber from the northern forests, and the "
    "sawmills along the banks employed half the town. When the forests were cut back, the mills closed "
    "one by one, and many families moved south to the cities. The town survived by turning to the "
    "rivers in another way: a canal was dug in 1871 to connect Haldor to the coast, and for fifty years "
    "barges carried grain and wool through its locks. The railway ended that trade almost overnight. "
    "By 1930 the canal was silting up and the locks were rusted shut. What saved Haldor the second time "
    "was an accident. A group of students mapping the old canal found that the lock-keepers' cottages "
    "were among the best preserved examples of their kind, and a small museum opened in one of them. "
    "Visitors came for the museum and stayed for the walks along the towpath. Today the canal has been "
    "partly restored, a few of the locks work again for pleasure boats, and tourism employs more people "
    "in Haldor than the mills ever did. The town council has voted to restore the remaining locks by "
    "2030, although some residents worry that the crowds are changing the character of the place."
)


@dataclass(frozen=True)
class Task:
    name: str
    messages: tuple[dict, ...]
    kind: str = "builtin"


BUILTIN_TASKS: tuple[Task, ...] = (
    Task("code-completion", ({"role": "user", "content":
         "Complete this Python function. Reply with the code only.\n\n```python\n"
         "def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
         '    """Merge overlapping closed intervals and return them sorted by start."""\n'},)),
    Task("code-edit", ({"role": "user", "content":
         "Rename the function `parse_line` to `parse_record` everywhere in this file. "
         "Reply with the complete updated file only, no explanation.\n\n```python\n" + _EDIT_FILE + "```"},)),
    Task("summarize", ({"role": "user", "content":
         "Summarise the following text in four sentences.\n\n" + _SUMMARY_TEXT},)),
    Task("prose", ({"role": "user", "content":
         "Write a short story about a lighthouse keeper who finds a message in a bottle."},)),
    Task("chat", ({"role": "user", "content":
         "What is the difference between a process and a thread? Explain it to a new programmer."},)),
)

QUICK_TASKS = ("code-edit", "chat")


def load_user_prompts(path: Path) -> list[Task]:
    """User prompts: ``.jsonl`` lines ``{"name": ..., "prompt": ...}`` or ``{"name", "messages"}``,
    or a text file with prompts separated by lines holding only ``---``.

    Raises:
        ConfigError: the file is missing, empty or malformed.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read the prompts file {path}: {e.strerror}", "check the path") from None
    tasks: list[Task] = []
    if path.suffix == ".jsonl":
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                msgs = d.get("messages") or [{"role": "user", "content": d["prompt"]}]
                tasks.append(Task(str(d.get("name") or f"user-{len(tasks) + 1}"), tuple(msgs), "user"))
            except (ValueError, KeyError, TypeError, AttributeError):
                raise ConfigError(f"{path}:{i}: expected a JSON object with \"prompt\" or \"messages\"",
                                  'one object per line, e.g. {"name": "t1", "prompt": "..."}') from None
    else:
        chunks = [c.strip() for c in "\n".join(
            "\x00" if ln.strip() == "---" else ln for ln in text.splitlines()).split("\x00")]
        for c in chunks:
            if c:
                tasks.append(Task(f"user-{len(tasks) + 1}", ({"role": "user", "content": c},), "user"))
    if not tasks:
        raise ConfigError(f"no prompts in {path}", "separate prompts with lines holding only ---, or use .jsonl")
    return tasks
