"""localspec.app.flags: the command-line flags derived from the options' declarations."""

import argparse

from localspec.config import DraftParams, SamplingParams
from localspec.app.flags import add_generation_arguments, add_model_arguments, settings_from_args, value_range


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_generation_arguments(p)
    add_model_arguments(p)
    return p


def _help(p: argparse.ArgumentParser, flag: str) -> str:
    return next(a.help for a in p._actions if flag in a.option_strings)


def test_a_flag_takes_its_help_range_and_default_from_the_declaration():
    p = _parser()
    assert _help(p, "--temperature") == "0 = greedy (0.0 <= X <= 2.0; default 0)"
    assert _help(p, "--top-k") == f"{SamplingParams.model_fields['top_k'].description} (N >= 0; default 0)"
    assert _help(p, "--seed") == "random seed (N >= 0; default fresh entropy)"
    assert _help(p, "--draft-max").startswith("most tokens drafted per round (gamma) (1..64; default 64 in mode auto")
    assert value_range(DraftParams, "draft_p_min") == "0.0 <= x <= 1.0"


def test_choices_come_from_the_declared_literal_or_bool():
    p = _parser()
    choices = {a.option_strings[0]: a.choices for a in p._actions if a.choices}
    assert choices["--mode"] == ["auto", "draft", "lookup", "none"]
    assert choices["--huge-pages"] == ["on", "off"] and choices["--repack"] == ["auto", "on", "off"]


def test_a_flag_for_one_model_names_it():
    p = _parser()
    assert _help(p, "--n-gpu-layers").startswith("target layers on the GPU")
    assert _help(p, "--draft-n-gpu-layers").startswith("draft layers on the GPU")
    assert _help(p, "--draft").endswith("same tokenizer as the target")


def test_flags_merge_over_the_settings():
    s = settings_from_args(_parser().parse_args(["--temperature", "0.7", "--mode", "lookup", "--huge-pages", "off"]))
    assert s.sampling.temperature == 0.7 and s.drafting.mode == "lookup" and s.target.huge_pages is False


def test_a_target_without_draft_drafts_with_its_catalog_pairs_draft():
    """A newcomer's `--target smollm2-135m` loaded the default pair's Qwen draft (another tokenizer) and
    failed; the target's own pair gives the draft. An explicit --draft, or a target in no pair, keeps it."""
    from localspec.config import Settings

    def draft(*argv, base=None):
        return settings_from_args(_parser().parse_args(list(argv)), base).draft.model

    default = Settings().draft.model
    assert draft("--target", "smollm2-135m") == "smollm2-135m"
    assert draft("--target", "smollm2-135m", "--draft", "x.gguf") == "x.gguf"
    assert draft("--target", "my.gguf") == default
    assert draft() == default
    chosen = Settings().model_copy(update={"draft": Settings().draft.model_copy(update={"model": "mine.gguf"})})
    assert draft("--target", "smollm2-135m", base=chosen) == "mine.gguf"  # the settings file's draft stays


def test_rpc_workers_from_the_flag_and_the_settings_file(tmp_path):
    """--rpc takes HOST:PORT[,HOST:PORT...] (repeatable) for the target only; a malformed endpoint is an
    error naming the flag; the settings file's target.rpc is read the same way."""
    import json

    import pytest

    from localspec.app.settings_file import load_settings
    from localspec.errors import ConfigError

    p = _parser()
    s = settings_from_args(p.parse_args(["--rpc", "10.0.0.2:50052,10.0.0.3:50052", "--rpc", "box:7"]))
    assert s.target.rpc == ("10.0.0.2:50052", "10.0.0.3:50052", "box:7") and s.draft.rpc == ()
    with pytest.raises(ConfigError, match=r"--rpc: .*'box' is not HOST:PORT"):
        settings_from_args(p.parse_args(["--rpc", "box"]))
    f = tmp_path / "settings.json"
    f.write_text(json.dumps({"target": {"model": "smollm2-135m", "rpc": ["10.0.0.2:50052"]}}))
    assert load_settings(f).target.rpc == ("10.0.0.2:50052",)


def test_rpc_timeout_from_the_flag_and_the_settings_file(tmp_path):
    """--rpc-timeout SECONDS (the target's; default 60) bounds each pass on the workers; 0 is refused, naming
    the flag; the settings file's target.rpc_timeout is read the same way."""
    import json

    import pytest

    from localspec.app.settings_file import load_settings
    from localspec.errors import ConfigError

    p = _parser()
    assert settings_from_args(p.parse_args([])).target.rpc_timeout == 60.0
    assert settings_from_args(p.parse_args(["--rpc-timeout", "7.5"])).target.rpc_timeout == 7.5
    assert "--rpc-timeout SECONDS" in p.format_help()
    with pytest.raises(ConfigError, match=r"--rpc-timeout: .*greater than 0"):
        settings_from_args(p.parse_args(["--rpc-timeout", "0"]))
    f = tmp_path / "settings.json"
    f.write_text(json.dumps({"target": {"model": "smollm2-135m", "rpc_timeout": 120}}))
    assert load_settings(f).target.rpc_timeout == 120.0
