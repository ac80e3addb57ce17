#!/usr/bin/env bash
# The same prompt through `localspec generate` and through `localspec serve` with the openai client, in the
# same minutes: their tok/s and rounds must agree (a second server request may be faster: the draft memory).
# Usage: scripts/compare_cli_server.sh [MODEL] [PORT]   (run from the checkout, .venv built by the README)
set -euo pipefail
M=${1:-smollm2-135m}; PORT=${2:-8765}; PY=.venv/bin/python
P="Write a Python function that parses a CSV file with a header row into a list of dicts, with docstring and three examples."
$PY -m localspec.cli generate --json --target "$M" --mode lookup --max-tokens 300 --temperature 0 "$P" |
  $PY -c 'import json,sys; s=[json.loads(l) for l in sys.stdin if l.strip()][-1]; s=s.get("stats", s); print("generate", {k: s.get(k) for k in ("tokens_per_second", "rounds")})'
$PY -m localspec.cli serve --target "$M" --mode lookup --port "$PORT" > /tmp/compare_cli_server.log 2>&1 & SP=$!
trap 'kill $SP' EXIT
for _ in $(seq 180); do curl -sf "localhost:$PORT/health" > /dev/null && break; sleep 1; done
$PY - "$PORT" "$P" <<'PY'
import sys, openai
c = openai.OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="x")
for n in range(2):
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": sys.argv[2]}], max_tokens=300, temperature=0)
    s = r.model_extra.get("speculation", {})
    print("server", n, {k: s.get(k) for k in ("tokens_per_second", "rounds")})
PY
