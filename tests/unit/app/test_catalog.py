"""The catalog is the one source of the default pair."""

import pytest

from localspec.app.catalog import load_catalog
from localspec.config import Settings, default_pair
from localspec.errors import ConfigError


def test_the_settings_default_to_the_catalogs_default_pair():
    pair = load_catalog().default
    assert (Settings().target.model, Settings().draft.model) == (pair.target, pair.draft)


def test_the_default_pair_follows_the_catalog_file(tmp_path):
    """Settings read the default pair from the catalog file; it is written nowhere else."""
    path = tmp_path / "catalog.toml"
    path.write_text('default_pair = "b"\n[pairs.a]\ntarget = "t1"\ndraft = "d1"\n[pairs.b]\ntarget = "t2"\ndraft = "d2"\n')
    assert default_pair(path) == ("t2", "d2")
    path.write_text('default_pair = "c"\n[pairs.a]\ntarget = "t1"\ndraft = "d1"\n')
    with pytest.raises(ConfigError, match="cannot read the default model pair"):
        default_pair(path)
