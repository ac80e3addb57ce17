"""localspec.app.run_order: the one "who goes first" rule of the bench and the TUI's race."""

from localspec.app.run_order import run_order


def test_repetitions_alternate_who_goes_first():
    assert [run_order("abc", r) for r in range(4)] == [list("abc"), list("cba"), list("abc"), list("cba")]
    assert run_order([], 1) == []
