"""Wall time and prompt tokens read vs cached when an agent alternates between two long prompts.

Sends the rounds A, B, A, B, ... (``--rounds``, default 4) to a running ``localspec serve``: two long
system prompts (``--tokens`` words each, roughly that many tokens), each with its own question, greedy,
a short answer. For each request it prints the wall time, the prompt tokens, the usage's
``cached_tokens`` and, from ``/metrics``, the prompt tokens the target read
(``localspec_prompt_tokens_read_total``) and the snapshots restored
(``localspec_prompt_cache_restores_total``)::

    localspec serve --port 8080 &
    python scripts/measure_prefix_cache.py --base-url http://127.0.0.1:8080

With the kept prefixes (the default ``--prompt-cache-mb``), rounds 3 and later read one token each;
with ``--prompt-cache-mb 0`` every switch reads the whole prompt again. ``--json`` prints one JSON
line per request instead of the table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

import httpx
import openai


def long_prompt(topic: str, words: int) -> str:
    """A system prompt of about ``words`` words of numbered rules on ``topic`` (a tool-laden agent's prompt)."""
    out, i = [], 0
    while len(out) < words:
        out += f"Rule {i} for {topic}: check item {i} carefully before you answer, and say why.".split()
        i += 1
    return " ".join(out[:words])


def metric(client: httpx.Client, name: str) -> float:
    """The sum of a /metrics series (all labels), 0 when absent."""
    text = client.get("/metrics").text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080", help="the server, without /v1")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default="localspec")
    p.add_argument("--tokens", type=int, default=4000, help="words per system prompt (about as many tokens)")
    p.add_argument("--rounds", type=int, default=4, help="requests, alternating A and B")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--json", action="store_true", help="one JSON line per request")
    a = p.parse_args()
    base = a.base_url.rstrip("/").removesuffix("/v1")
    oai = openai.OpenAI(base_url=base + "/v1", api_key=a.api_key, max_retries=0, timeout=3600)
    http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {a.api_key}"}, timeout=60)
    prompts = {
        "A": [{"role": "system", "content": long_prompt("code review", a.tokens)},
              {"role": "user", "content": "Say hello."}],
        "B": [{"role": "system", "content": long_prompt("shell commands", a.tokens)},
              {"role": "user", "content": "Name one file."}],
    }
    if not a.json:
        print(f"{'req':>3} {'prompt':>5} {'wall s':>8} {'prompt tok':>10} {'cached':>8} {'read':>8} {'restored':>8}")
    total = 0.0
    for i in range(a.rounds):
        name = "AB"[i % 2]
        read0 = metric(http, "localspec_prompt_tokens_read_total")
        restores0 = metric(http, "localspec_prompt_cache_restores_total")
        t0 = time.perf_counter()
        r = oai.chat.completions.create(model=a.model, messages=prompts[name], max_tokens=a.max_tokens, temperature=0)
        wall = time.perf_counter() - t0
        total += wall
        details = r.usage.prompt_tokens_details
        row = {"request": i + 1, "prompt": name, "wall_seconds": round(wall, 3), "prompt_tokens": r.usage.prompt_tokens,
               "cached_tokens": details.cached_tokens if details else None,
               "read_tokens": int(metric(http, "localspec_prompt_tokens_read_total") - read0),
               "restores": int(metric(http, "localspec_prompt_cache_restores_total") - restores0)}
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{row['request']:>3} {name:>5} {wall:>8.2f} {row['prompt_tokens']:>10} {row['cached_tokens']:>8} "
                  f"{row['read_tokens']:>8} {row['restores']:>8}", flush=True)
    if not a.json:
        print(f"total wall time: {total:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
