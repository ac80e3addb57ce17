"""Cost curves shared by the cost-model, policy and calibration tests (seconds, measured ratios)."""

from localspec.backend.calibration import EngineCosts, ModelCosts

# models.md: Qwen2.5-Coder-1.5B on 2 cores, 33 ms per token, ratios b=1..5
T1 = 0.033


CPU_CURVE = [T1 * r for r in (1.0, 1.68, 2.26, 2.57, 3.21)]


FLAT_CURVE = [T1] * 9  # a GPU-like curve: verifying 9 tokens costs one pass


def costs_for(curve, draft_token=None):
    """EngineCosts with the verify curve ``curve`` (seconds per pass of b = 1, 2, ... tokens)."""
    mc = ModelCosts(seconds=list(curve))
    return EngineCosts(verify=list(curve), draft_token=draft_token, target=mc, draft=None)


# -- issue 12: curves by position, match-length prior, the policy against the closed form --------
#: T(b)/T(1), b = 1..9, measured on this project's machines: an AVX-512 CPU (docs/benchmark-history.md) and a
#: 2-core CPU without AVX-512 whose verification pass jumps between 7 and 8 tokens (issue 12)
AVX512_RATIOS = (1.00, 1.81, 2.30, 2.82, 3.50, 4.13, 4.69, 4.83, 5.18)


NO_AVX512_RATIOS = (1.00, 1.59, 2.28, 3.36, 4.16, 4.75, 4.79, 8.11, 8.11)


def curve_for(ratios, t1=T1):
    return [t1 * r for r in ratios]
