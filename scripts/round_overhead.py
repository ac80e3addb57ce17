"""Python-side cost of generations on the fake backend (no llama.cpp), for comparing two trees by
instruction count: run it under `valgrind --tool=callgrind` with N = 1 and N = 3 and take the difference / 2.
Usage: python scripts/round_overhead.py ROOT MODE N (ROOT: a checkout; MODE: draft | lookup | none)."""
import sys
root, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path[:0] = [root, root + "/tests"]
from fakes import FakeModel
try:
    from localspec.core.engine import SpeculativeEngine
except ImportError:
    from localspec.engine import SpeculativeEngine
from localspec.config import DraftParams, GenerationParams, SamplingParams
for _ in range(n):
    eng = SpeculativeEngine(FakeModel(n_ctx=4096, n_batch=512), FakeModel(n_ctx=4096, n_batch=512))
    gen = eng.generate([3, 5, 7, 3, 5], SamplingParams(temperature=0.0, seed=1), DraftParams(mode=mode, draft_max=8),
                       GenerationParams(max_tokens=150))
    gen.run()
print(len(gen.rounds))
