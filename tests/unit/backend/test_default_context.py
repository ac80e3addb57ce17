"""The default context window (localspec.backend.context): the training context where memory allows it."""

from localspec.backend import calibration
from localspec.backend.context import (MIN_DEFAULT_CONTEXT, available_memory, context_bytes_per_token, default_context,
                                       kv_bytes_per_token)
from localspec.config import DRAFT_MAX_LIMIT, ModelSettings

GIB = 1 << 30


def test_kv_bytes_per_token_of_the_default_pair_and_the_tiny_model():
    assert kv_bytes_per_token(28, 2, 128, 128) == 28_672  # Qwen2.5-Coder-1.5B
    assert kv_bytes_per_token(24, 2, 64, 64) == 12_288  # Qwen2.5-Coder-0.5B
    assert kv_bytes_per_token(30, 3, 64, 64) == 23_040  # SmolLM2-135M
    assert context_bytes_per_token(28_672, 12, 512) == 28_672 + 12 * 512 * 4


def test_the_training_context_when_it_fits():
    per_token = context_bytes_per_token(28_672, 12, 512)
    assert default_context(32_768, per_token, 19 * GIB) == 32_768  # the 1.5B on a 24 GB machine
    assert default_context(32_768, per_token, 19 * GIB, cap=16_384) == 16_384  # a draft capped at its target


def test_the_largest_power_of_two_that_fits_when_memory_is_short():
    per_token = 100_000
    # half of 2 GB = 1e9 bytes: 10,000 tokens fit, so 8,192 of a 32k training context
    assert default_context(32_768, per_token, 2_000_000_000) == 8_192
    assert default_context(131_072, per_token, 2_000_000_000) == 8_192


def test_never_below_the_former_default_nor_above_the_training_context():
    assert default_context(32_768, 10**9, 1 * GIB) == MIN_DEFAULT_CONTEXT  # nothing fits: the floor
    assert default_context(2_048, 10**9, 1 * GIB) == 2_048  # a model trained on less keeps its own
    assert default_context(0, 1_000, 100 * GIB) == MIN_DEFAULT_CONTEXT  # unknown training context


def test_available_memory_is_read():
    assert available_memory() > 0


def test_the_settings_default_is_the_models_own_and_an_explicit_one_wins():
    assert ModelSettings(model="x").n_ctx is None
    assert ModelSettings(model="x", n_ctx=2048).n_ctx == 2048


class _Model:
    def __init__(self, n_ctx):
        self.path, self.n_ctx = "m.gguf", n_ctx


def test_the_cost_key_does_not_change_with_a_window_beyond_what_calibration_measures():
    """The curves are timed at 16 and 512 cached tokens: a 32k window measures what a 4k one did, so a
    calibration cached with the former 4,096 default stays valid; a smaller window is its own key."""
    assert calibration.COST_KEY_CONTEXT >= calibration.LONG_CONTEXT + DRAFT_MAX_LIMIT + 1
    key = calibration.model_cost_key
    assert key(_Model(32_768)) == key(_Model(4096)) == key(_Model(8192))
    assert key(_Model(2048))["n_ctx"] == 2048
