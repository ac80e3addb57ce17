"""localspec.app.catalog: the catalog is the one source of the default pair."""

from localspec.app.catalog import load_catalog
from localspec.config import Settings


def test_the_settings_default_to_the_catalogs_default_pair():
    """config.py (the bottom layer) cannot read the catalog, so it repeats the default pair's two
    names: they must be the catalog's (``default_pair`` in catalog.toml), or ``localspec models``
    would mark one pair as the default while the program loads another."""
    pair = load_catalog().default
    assert (Settings().target.model, Settings().draft.model) == (pair.target, pair.draft)
