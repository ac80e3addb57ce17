#!/usr/bin/env python3
"""Fuzz ``localspec serve`` longer than CI does (run by hand).

Runs ``tests/integration/test_server_fuzz.py`` with ``LOCALSPEC_FUZZ_SCALE=N``: N times the CI's
170 requests (schemathesis from ``/openapi.json``, positive and negative; hypothesis with hostile
JSON and raw bytes), drawn at random each run, against a ``localspec serve`` on the tiny model.
Checks: no 5xx, no traceback in the server's log, the engine answers a probe as before. Prints
the requests sent by status code; exit status is pytest's (0: nothing found).

Usage: ``.venv/bin/python scripts/fuzz_server.py [--scale 20]`` (scale 20: about 3400 requests,
15-30 minutes on a 2-core CPU)
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
    ns = ap.parse_args()
    if ns.scale <= 0:
        ap.error("--scale must be > 0")
    env = {**os.environ, "LOCALSPEC_FUZZ_SCALE": str(ns.scale)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
           str(ROOT / "tests/integration/test_server_fuzz.py")]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
