"""Several cached prompt prefixes through the server, on the tiny model with the real ``openai`` client.

An agent alternates between long prompts: A, B, then A again reads only what A's kept snapshot does not
hold (``/metrics``: ``localspec_prompt_tokens_read``; the usage's ``cached_tokens``), and answers what it
answered the first time, on an empty cache (a fresh server's answer); a request with ``cache_prompt: false``
neither restores nor keeps one, and the live prefix before it is there again after it. With ``--prompt-cache-disk-mb`` a restarted server reads A from disk.
The KV-level exactness (logits) is in test_prefix_snapshots.py.
"""

from __future__ import annotations

import re

import httpx
import pytest

from helpers import tiny_lookup_server

pytestmark = pytest.mark.tiny

KEY = "prefix-key"
#: two long system prompts (a few hundred tokens each, well over the 64-token snapshot minimum)
SYSTEM_A = "You are a careful Python reviewer. " + " ".join(f"Rule {i}: check the names and types in line {i}."
                                                          for i in range(30))
SYSTEM_B = "You are a terse shell assistant. " + " ".join(f"Note {i}: prefer portable flags for tool {i}."
                                                        for i in range(30))
A = [{"role": "system", "content": SYSTEM_A}, {"role": "user", "content": "Review: def add(a, b): return a+b"}]
B = [{"role": "system", "content": SYSTEM_B}, {"role": "user", "content": "List the files in this folder."}]
C = [{"role": "system", "content": SYSTEM_B.replace("shell", "SQL")}, {"role": "user", "content": "Count the rows."}]


@pytest.fixture(scope="module")
def served(tiny_path, tmp_path_factory):
    with tiny_lookup_server(tiny_path, tmp_path_factory.mktemp("serve-prefix"), KEY) as client:
        yield client, _base(client)


def metric(base: str, name: str) -> float:
    text = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def ask(served, messages, **extra):
    """(answer, usage, prompt tokens the target read, snapshots restored) of one greedy chat request.

    Without the draft memory: its drafts (earlier answers) change the verification batches, which may
    round differently (cases.md C1); the prompt's own lookup drafts are the same on the same context."""
    client, base = served
    extra.setdefault("speculation", {"memory": False})
    read0 = metric(base, "localspec_prompt_tokens_read_total")
    restores0 = metric(base, "localspec_prompt_cache_restores_total")
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=24, temperature=0,
                                       extra_body=extra)
    return (r.choices[0].message.content, r.usage, metric(base, "localspec_prompt_tokens_read_total") - read0,
            metric(base, "localspec_prompt_cache_restores_total") - restores0)


def test_alternating_prompts_are_not_read_again_and_answer_the_same(served):
    first_a, usage_a, read_a, _ = ask(served, A)
    assert usage_a.prompt_tokens > 200 and read_a == usage_a.prompt_tokens  # an empty cache: all read
    _, usage_b, read_b, _ = ask(served, B)
    assert read_b >= usage_b.prompt_tokens - 20  # B shares only its first few tokens with A
    again, usage, read, restores = ask(served, A)
    assert again == first_a  # the answer of the first A, which ran on an empty cache
    assert restores == 1 and read == 1  # only the last prompt token, which the first round decodes
    assert usage.prompt_tokens_details.cached_tokens == usage_a.prompt_tokens - 1
    # A continued (an agent's next turn): only the new part is read, B's snapshot is not disturbed
    longer = A + [{"role": "assistant", "content": again}, {"role": "user", "content": "And with type hints?"}]
    _, usage_l, read_l, _ = ask(served, longer)
    assert read_l <= usage_l.prompt_tokens - usage_a.prompt_tokens
    _, _, read_b2, restores_b2 = ask(served, B)
    assert restores_b2 == 1 and read_b2 == 1


def test_cache_prompt_false_neither_restores_nor_keeps_a_snapshot(served):
    ask(served, A)
    _, usage, read, restores = ask(served, C, cache_prompt=False)
    assert restores == 0 and read == usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens == 0
    _, _, read_a, restores_a = ask(served, A)  # A's prefix, held before the opt-out, is live again (issue 42)
    assert read_a == 1 and restores_a == 0
    _, usage_c, read_c, restores_c = ask(served, C)  # C's was not: kept, C would come back without reading
    assert restores_c == 0 and read_c >= usage_c.prompt_tokens - 20


def test_a_restarted_server_reads_the_prompt_it_held_from_disk(tiny_path, tmp_path):
    disk = ["--prompt-cache-disk-mb", "256"]
    with tiny_lookup_server(tiny_path, tmp_path, KEY, disk) as client:  # the same $LOCALSPEC_CACHE both times
        first, usage_a, read_a, _ = ask((client, _base(client)), A)
    assert read_a == usage_a.prompt_tokens
    assert list((tmp_path / "cache" / "prompts").glob("*.kv"))  # A's cache, stored at shutdown
    with tiny_lookup_server(tiny_path, tmp_path, KEY, disk) as client:
        again, usage, read, restores = ask((client, _base(client)), A)
        assert metric(_base(client), "localspec_prompt_cache_store_reads_total") == 1
    assert again == first and restores == 1 and read == 1
    assert usage.prompt_tokens_details.cached_tokens == usage_a.prompt_tokens - 1


def _base(client) -> str:
    return str(client.base_url).removesuffix("/v1/").removesuffix("/v1")
