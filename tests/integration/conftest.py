"""Real GGUF models: the tiny SmolLM2-135M (fast) and the Qwen2.5-Coder 1.5B/0.5B pair.

``tiny_engine`` and ``pair_engine`` come from tests/conftest.py, and so does ``client``, which talks to
``server`` below.
"""

import pytest


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    """The test module's ``localspec serve`` (a started :class:`~localspec.server.process.ServerProcess`,
    stopped after the module's tests): SmolLM2, or the pair's target where the module sets
    ``SERVE_TARGET = "pair"``, in mode lookup with the module's ``KEY`` and its ``SERVE`` flags
    (:func:`helpers.tiny_lookup_process`)."""
    from helpers import tiny_lookup_process

    module = request.module
    pair = getattr(module, "SERVE_TARGET", "tiny") == "pair"
    target = request.getfixturevalue("pair_paths")[0] if pair else request.getfixturevalue("tiny_path")
    tmp = tmp_path_factory.mktemp(module.__name__.rpartition(".")[2])
    with tiny_lookup_process(target, tmp, module.KEY, module.SERVE, timeout=300 if pair else 120) as proc:
        yield proc
