"""Long drafts in mode auto: the sparse calibration (a few batch sizes and an interpolated curve)
and the choice of a long draft where the evidence and the verify curve allow it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from localspec.backend import calibration
from localspec.backend.calibration import ModelCosts, measure_decode_costs
from localspec.config import AUTO_DRAFT_MAX, FIXED_DRAFT_MAX, DraftParams
from localspec.core.costmodel import (
    EngineCosts,
    best_draft_length,
    calibration_points,
    context_points,
    interpolate_curve,
    monotone_fit,
    shifted_curve,
    succession_prior,
)
from localspec.core.events import DrafterId
from localspec.core.policy import AdaptivePolicy

from cost_curves import ask

T1 = 0.05


def linear_curve(t9_over_t1: float, n: int = 65, t1: float = T1) -> list[float]:
    """T(b) = t1 (1 + s (b - 1)) with T(9) / T(1) = ``t9_over_t1``: the issue's Intel CPU (3.05) and
    the AMD EPYC without AVX-512 (6.8)."""
    s = (t9_over_t1 - 1.0) / 8.0
    return [t1 * (1.0 + s * (b - 1)) for b in range(1, n + 1)]


def costs_for(curve: list[float]) -> EngineCosts:
    mc = ModelCosts(seconds=list(curve))
    return EngineCosts(verify=list(curve), draft_token=None, target=mc, draft=None)


# -- the settings --------------------------------------------------------------------
def test_draft_max_default_depends_on_the_mode_and_a_user_value_caps_it():
    assert DraftParams().cap == AUTO_DRAFT_MAX == 64
    assert DraftParams(mode="lookup").cap == DraftParams(mode="draft").cap == FIXED_DRAFT_MAX == 8
    assert DraftParams(mode="auto", draft_max=5).cap == 5
    assert DraftParams(draft_min=30).cap == 64  # auto's default leaves room for a long draft_min
    with pytest.raises(ValidationError, match="draft_min"):
        DraftParams(mode="lookup", draft_min=9)
    with pytest.raises(ValidationError):
        DraftParams(draft_max=65)


# -- the calibration points and the curve between them ---------------------------------------
def test_calibration_points_are_dense_then_sparse():
    pts = calibration_points(65)
    # 64 beside 65: a tile-sized pass can cost less than the line from 32 to 65 (the AMX Xeon, model 167)
    assert pts == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 65]
    assert sum(pts) == 225  # token counts timed per repetition, against 2,145 for every b
    assert calibration_points(9) == list(range(1, 10))  # the old default range: every b, as before
    assert calibration_points(2) == [1, 2] and calibration_points(1) == [1] and calibration_points(0) == []
    big = calibration_points(200)
    assert big == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128, 200]
    assert all(b / a <= 2 for a, b in zip(big[7:], big[8:-1]))  # no gap wider than 2x between points
    assert big[-1] / big[-2] <= 2
    assert calibration_points(64) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64]
    # the longer context: 1 and every point from 8 up, the long passes a sure copy drafts among them
    assert context_points(65) == [1, 8, 16, 32, 64, 65] and context_points(9) == [1, 8, 9]
    assert context_points(2) == [1, 2]
    assert set(context_points(200)) <= set(big) and context_points(0) == []


def test_interpolated_curve_reproduces_a_piecewise_linear_cost():
    true = linear_curve(3.05)
    pts = calibration_points(65)
    got = interpolate_curve(pts, [true[b - 1] for b in pts], 65)
    assert got == pytest.approx(true)
    # beyond the last point: the slope of the last two points
    longer = interpolate_curve(pts, [true[b - 1] for b in pts], 80)
    assert longer[79] == pytest.approx(true[64] + 15 * (true[64] - true[63]))


def test_interpolated_curve_keeps_a_measured_jump_and_is_never_decreasing():
    # a kernel threshold between 7 and 8 tokens inside the dense part is kept where it was measured
    pts = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12]
    secs = [1, 1.5, 2, 2.5, 3, 3.5, 4, 7, 7.2, 7.5]
    got = interpolate_curve(pts, secs, 12)
    assert got[6] == 4 and got[7] == 7
    assert got[9] == pytest.approx(7.2 + (7.5 - 7.2) / 3)
    # noise: a later median below an earlier one and that one meet at their mean (least squares), and
    # one high outlier does not lift every later point to itself
    assert interpolate_curve([1, 2, 4], [1.0, 2.0, 1.5], 4) == [1.0, 1.75, 1.75, 1.75]
    assert interpolate_curve([1, 2, 3, 4, 5], [1.0, 9.0, 3.0, 4.0, 5.0], 5) == pytest.approx([1.0, 5.25, 5.25, 5.25, 5.25])
    assert monotone_fit([3.0, 1.0, 2.0, 5.0]) == [2.0, 2.0, 2.0, 5.0] and monotone_fit([]) == []


def test_a_longer_contexts_curve_is_the_short_one_plus_the_measured_difference():
    base = [1.0 + 0.5 * (b - 1) for b in range(1, 66)]
    extra = [0.1 + 0.02 * b for b in range(1, 66)]  # attention over the cached tokens, linear in b
    pts = context_points(65)
    got = shifted_curve(base, pts, [base[b - 1] + extra[b - 1] for b in pts])
    assert got == pytest.approx([x + y for x, y in zip(base, extra)])
    # a measured time below the short context's (noise) adds nothing rather than lowering the curve
    assert shifted_curve([1.0, 2.0, 3.0], [1, 3], [0.9, 3.3]) == pytest.approx([1.0, 2.15, 3.3])
    with pytest.raises(ValueError):
        shifted_curve([1.0, 2.0], [1, 3], [1.0, 2.0])
    with pytest.raises(ValueError):
        interpolate_curve([1, 3], [1.0], 4)
    with pytest.raises(ValueError):
        interpolate_curve([3, 1], [1.0, 2.0], 4)


class ClockModel:
    """A model whose decode of b tokens with c cached takes (1 + 0.25 (b - 1)) ms + 1 us per cached
    token on a fake clock, plus 3 ms from 8 tokens on (a kernel threshold); it counts decodes per b."""

    n_vocab = 1000
    n_threads = 2
    n_batch = 512
    n_gpu_layers = 0
    n_ctx = 4096
    clock = [0.0]

    def __init__(self, path, flash_attn_mode: str | None = None) -> None:
        self.path = path
        self.cached_tokens: list[int] = []
        self.calls: dict[int, int] = {}
        self.flash_attn = False
        if flash_attn_mode:
            self.flash_attn_mode = flash_attn_mode

    @staticmethod
    def cost(b: int, cached: int, fa: bool = False) -> float:
        return (1e-3 * (1 + 0.25 * (b - 1)) + (3e-3 if b >= 8 else 0.0)) * (0.9 if fa else 1.0) + 1e-6 * cached

    @property
    def n_cached(self) -> int:
        return len(self.cached_tokens)

    def is_eog(self, t):
        return False

    def set_flash_attn(self, on):
        if on != self.flash_attn:
            self.cached_tokens = []
        self.flash_attn = on

    def decode(self, tokens, logits_for="last"):
        b = len(tokens)
        if logits_for == "all":
            self.calls[b] = self.calls.get(b, 0) + 1
        self.clock[0] += self.cost(b, len(self.cached_tokens), self.flash_attn)
        self.cached_tokens.extend(tokens)

    def truncate(self, n):
        del self.cached_tokens[n:]


@pytest.fixture
def clock_model(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: ClockModel.clock[0])
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 2000)
    return f


def test_calibration_times_only_the_points_and_interpolates_the_rest(clock_model):
    m = ClockModel(clock_model)
    costs = measure_decode_costs(m, 65, repeats=2, contexts=(64, 1024))
    pts = calibration_points(65)
    assert costs.points == pts
    timed = {b for b, n in m.calls.items() if n >= 2}
    assert timed == set(pts)  # b = 10, 11, 13, ... were never decoded
    # the long context: only 1, 8, 16, 32, 64 and 65 timed again (the warm-up decodes one token per context)
    assert {b: m.calls[b] for b in pts} == {b: 4 if b in (8, 16, 32, 64, 65) else 6 if b == 1 else 2 for b in pts}
    for i, c in enumerate((64, 1024)):
        curve = costs.curves[i]
        assert len(curve) == 65
        for b in pts:  # measured exactly where measured
            assert curve[b - 1] == pytest.approx(ClockModel.cost(b, c)), (c, b)
        for b in (10, 20, 40, 60):  # linear in between, and the cost is linear there
            assert curve[b - 1] == pytest.approx(ClockModel.cost(b, c)), (c, b)
    back = ModelCosts.from_json(costs.to_json())
    assert back.points == pts and back.point_seconds == costs.point_seconds
    assert back.context_points == costs.context_points == [1, 8, 16, 32, 64, 65]
    assert back.points_at(1) == [1, 8, 16, 32, 64, 65]


def test_flash_attn_auto_times_the_losing_setting_at_two_points_only(clock_model):
    m = ClockModel(clock_model, flash_attn_mode="auto")
    costs = calibration.calibrate_model(m, 65, repeats=1, contexts=(64, 1024))
    assert costs.flash_attn is True and m.flash_attn is True  # 10 % faster in this model
    assert costs.points == calibration_points(65)
    # off and on: b = 1 and 65 at the short context (on's samples count for its curve); then on: the
    # other 11 points there, 6 at the long context
    assert m.calls[65] == 3 and m.calls[1] >= 4 and m.calls[12] == 1 and m.calls[16] == 2 and 10 not in m.calls
    assert costs.curves[1][11] == pytest.approx(ClockModel.cost(12, 1024, fa=True))
    assert costs.prefill_token_seconds is not None
    assert m.cached_tokens == []  # filler left in the cache would be a wrong prefix


def test_online_observations_refine_an_interpolated_length():
    curve = linear_curve(3.05)
    costs = costs_for(curve)
    for _ in range(10):
        costs.observe_verify(41, curve[40] * 1.5)  # b = 41 was never measured; it runs 50 % slower
    assert costs.verify[40] == pytest.approx(curve[40] * 1.5, rel=0.02)


# -- the long-draft choice -----------------------------------------------------------
def test_a_long_lookup_match_is_drafted_long_where_the_curve_allows():
    curve = linear_curve(3.05)  # the Intel CPU: a 9-token pass costs 3.05 single ones
    pol = AdaptivePolicy(costs_for(curve), 64, has_draft=False)
    ch = ask(pol, 64, {"lookup": (list(range(300, 364)), 259)}, list(range(300)))  # 259 tokens of context agree
    prior = pol.free_values(DrafterId.LOOKUP)  # its bucket's prior, floored by the rule of succession on its match
    assert prior == [max(a, b) for a, b in zip(pol.lookup_est.values(259), succession_prior(259, 64, 2))]
    assert ch.drafter == "lookup" and ch.draft_len == best_draft_length(prior, curve, 0.0, 64)[0]
    assert ch.draft_len > 32  # far past the old cap of 8
    # less evidence, a shorter first draft (still past the old cap)
    pol = AdaptivePolicy(costs_for(curve), 64, has_draft=False)
    assert 8 < ask(pol, 64, {"lookup": (list(range(100, 164)), 67)}, list(range(100))).draft_len < ch.draft_len
    # the user's cap still holds
    capped = AdaptivePolicy(costs_for(curve), 8, has_draft=False)
    assert ask(capped, 64, {"lookup": (list(range(100, 108)), 67)}, list(range(100))).draft_len == 8


def test_a_steep_curve_keeps_long_matches_shorter():
    flat, steep = linear_curve(3.05), linear_curve(6.8)  # Intel with AVX-512 vs AMD EPYC without
    lens = []
    for curve in (flat, steep):
        pol = AdaptivePolicy(costs_for(curve), 64, has_draft=False)
        lens.append(ask(pol, 64, {"lookup": (list(range(100, 164)), 40)}, list(range(100))).draft_len)
    assert 0 < lens[1] < lens[0]
    # the choice is the argmax of the expected rate on each curve (nothing about the CPU hard-coded)
    prior = succession_prior(40, 64, 2)  # the match's own evidence (40 tokens) over its bucket's (32-63)
    assert lens == [best_draft_length(prior, c, 0.0, 64)[0] for c in (flat, steep)]


def test_a_prediction_with_a_long_agreeing_run_is_drafted_long_and_to_the_cap_once_it_holds():
    curve = linear_curve(3.05)
    pol = AdaptivePolicy(costs_for(curve), 64, has_draft=False)
    committed = list(range(300))
    ch = ask(pol, 64, {"prediction": (list(range(300, 364)), 300)}, committed)
    assert ch.drafter == "prediction" and ch.draft_len > 32
    for r in range(6):  # the answer copies every proposed token
        committed = committed + list(range(len(committed), len(committed) + 64))
        ch = ask(pol, 64, {"prediction": (list(range(len(committed), len(committed) + 64)), 300 + 64 * r)}, committed)
    assert ch.draft_len == 64
    # a short match in chat-like text is not drafted long
    pol = AdaptivePolicy(costs_for(curve), 64, has_draft=False)
    assert ask(pol, 64, {"lookup": (list(range(10, 74)), 3)}, list(range(10))).draft_len <= 4


def test_long_drafts_that_keep_failing_get_shorter():
    curve = linear_curve(3.05)
    pol = AdaptivePolicy(costs_for(curve), 64, has_draft=False)
    committed = list(range(1000))
    first = None
    for r in range(12):
        proposal = list(range(5000 + 100 * r, 5064 + 100 * r))
        ch = ask(pol, 64, {"lookup": (proposal, 259)}, committed)
        first = first if first is not None else ch.draft_len
        committed = committed + proposal[:3] + [1]  # every copy breaks after 3 tokens
    assert first > 32 and ch.draft_len < 8
