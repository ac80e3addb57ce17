#!/usr/bin/env python3
"""Fuzz the server and the chat-template path longer than CI does (run by hand).

Runs ``tests/integration/test_server_fuzz.py`` and ``tests/integration/test_chat_template.py``
with ``LOCALSPEC_FUZZ_SCALE=N``: N times the CI's example counts, drawn at random each run.

* the server: 170 requests per unit of scale (schemathesis from ``/openapi.json``, positive
  and negative; hypothesis with hostile JSON and raw bytes) against ``localspec serve`` on the
  tiny model. Checks: no 5xx, no traceback in the server's log, the engine answers a probe as
  before. Prints the requests sent by status code.
* the chat template: 300 chats on SmolLM2 and 150 on the Qwen2.5-Coder template (the pair's
  0.5B model; ``--no-pair`` skips it) whose contents mix special-token markers, whitespace and
  any text. Checks: the tokens spell the rendered prompt, the control tokens are the
  template's only, a chat without markers is token-identical to the old path.

Exit status is pytest's (0: nothing found).

Usage: ``.venv/bin/python scripts/fuzz.py [--scale 20] [--no-pair]`` (scale 20: about 3400
requests and 9000 chats, 15-30 minutes on a 2-core CPU)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=20.0, help="multiple of the CI's example counts (default 20)")
    ap.add_argument("--no-pair", action="store_true", help="skip the Qwen template (needs the pair's 0.5B model)")
    ns = ap.parse_args()
    if ns.scale <= 0:
        ap.error("--scale must be > 0")
    env = {**os.environ, "LOCALSPEC_FUZZ_SCALE": str(ns.scale)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
           str(ROOT / "tests/integration/test_server_fuzz.py"), str(ROOT / "tests/integration/test_chat_template.py"),
           "-k", "fuzz" + (" and not qwen" if ns.no_pair else "")]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
