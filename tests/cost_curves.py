"""Cost curves shared by the cost-model, policy and calibration tests (seconds, measured ratios), and
the two calls a round makes to a policy (:func:`ask`, :func:`tell`)."""

from localspec.backend.calibration import ModelCosts
from localspec.core.costmodel import EngineCosts
from localspec.core.drafters import Draft
from localspec.core.events import DrafterId, RoundStats
from localspec.core.policy import RoundState

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


# -- a round's two calls to its policy ---------------------------------------------------------
def ask(pol, limit, proposals=None, committed=(), generated=0, catchup_tokens=0, output_held=False):
    """``pol.choose`` as a round after ``committed`` asks it. ``proposals`` maps a free drafter to its
    proposed tokens, to (tokens, match length), or to a number of tokens that match nothing."""
    props = {}
    for name, p in (proposals or {}).items():
        tokens, match = p if isinstance(p, tuple) else (p, 0)
        if isinstance(tokens, int):
            tokens = [-1] * tokens
        props[DrafterId(name)] = Draft(tuple(tokens), None, DrafterId(name), match)
    return pol.choose(RoundState(list(committed), limit, props, generated, catchup_tokens, output_held))


def tell(pol, drafter, drafted, accepted, draft_seconds, verify_seconds, catchup_tokens=0, catchup_seconds=0.0,
         round_seconds=0.0):
    """``pol.observe`` as the end of a round tells it."""
    pol.observe(RoundStats(round=0, drafter=DrafterId(drafter), draft_tokens=(0,) * drafted,
                           target_tokens=(0,) * (accepted + 1), drafted=drafted, accepted=accepted,
                           committed=accepted + 1, draft_seconds=draft_seconds, verify_seconds=verify_seconds,
                           catchup_tokens=catchup_tokens, catchup_seconds=catchup_seconds,
                           round_seconds=round_seconds))
