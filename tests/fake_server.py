"""The server's app over the fake engine (the unit tests of tests/unit/server; fixture ``client`` of
tests/conftest.py builds its client with it)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from localspec.config import DraftParams, ModelSettings, ServerSettings, Settings
from localspec.core.engine import SpeculativeEngine
from localspec.server import create_app

#: the fake target's settings, in mode lookup (its drafts do not depend on measured costs)
SETTINGS = Settings(target=ModelSettings(model="fake.gguf"), drafting=DraftParams(mode="lookup"))


def app_client(model, server: ServerSettings | None = None, engine: type = SpeculativeEngine) -> TestClient:
    """Starlette's TestClient of the app over ``engine(model, None)`` (no draft model), :data:`SETTINGS` and
    the server's settings ``server`` (None: the defaults). Use it in a ``with`` block, which starts and
    stops the app's worker."""
    return TestClient(create_app(engine(model, None), SETTINGS, server))
