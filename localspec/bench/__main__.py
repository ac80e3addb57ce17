"""``python -m localspec.bench``: the same as ``localspec bench``."""

import sys

from localspec.bench.command import cli_bench

sys.exit(cli_bench(sys.argv[1:]))
