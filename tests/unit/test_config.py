"""localspec.config: one declaration per option, read by the CLI, the TUI form and the server;
the one prompt-fits-the-context rule."""

import pytest
from pydantic import ValidationError

from localspec.config import (TEMPERATURE_MAX, DraftParams, SamplingParams, constraints, context_room, fits_context,
                              option_info)
from localspec.server.bodies import SamplingFields, SpeculationFields


@pytest.mark.parametrize("name", ["temperature", "top_p", "top_k", "min_p", "seed"])
def test_the_server_checks_sampling_fields_with_the_declared_range(name):
    assert constraints(SamplingFields, name) == constraints(SamplingParams, name) != {}
    assert SamplingFields.model_fields[name].default is None  # absent: the server's setting


def test_the_server_checks_draft_max_with_the_declared_range():
    assert constraints(SpeculationFields, "draft_max") == constraints(DraftParams, "draft_max") == {"ge": 1, "le": 64}


def test_temperature_is_zero_to_two_everywhere():
    assert constraints(SamplingParams, "temperature") == {"ge": 0.0, "le": TEMPERATURE_MAX} == {"ge": 0.0, "le": 2.0}
    SamplingParams(temperature=2.0)
    with pytest.raises(ValidationError):
        SamplingParams(temperature=2.5)
    with pytest.raises(ValidationError):
        SamplingFields.model_validate({"temperature": 2.5})


def test_an_option_carries_its_label_unit_and_blank_meaning():
    info = option_info(DraftParams, "draft_max")
    assert info["label"] == "draft length (gamma)" and info["unit"] == "tokens"
    assert info["blank"].startswith("blank: the mode's own")
    assert DraftParams.model_fields["draft_max"].description == "most tokens drafted per round (gamma)"
    assert option_info(SamplingParams, "seed")["default_text"] == "fresh entropy"


@pytest.mark.parametrize("n_ctx, prompt, max_tokens, fits", [
    (16, 15, 1, True), (16, 16, 1, False), (16, 10, 6, True), (16, 10, 7, False), (16, 15, 0, True), (16, 20, 1, False),
])
def test_a_prompt_fits_when_it_leaves_room_for_max_tokens(n_ctx, prompt, max_tokens, fits):
    assert fits_context(n_ctx, prompt, max_tokens) is fits
    assert context_room(n_ctx, prompt) == n_ctx - prompt
