"""localspec bench --quick on the tiny pair: the table, the JSON and the PNG are written."""

import json

import pytest

from localspec.bench import cli_bench

pytestmark = pytest.mark.tiny


def test_bench_quick_writes_json_and_png(tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli_bench(["--quick", "--tasks", "code-edit", "--max-tokens", "16", "--target", "smollm2-135m",
                    "--draft", "smollm2-135m", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "bench.json").read_text())
    png = (out / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    modes = {r["mode"] for r in data["rows"]}
    assert {"target", "peer-target", "lookup g4", "peer-lookup n4", "draft g2", "auto"} <= modes
    for r in data["rows"]:
        assert r["tok_s"] > 0
        if r["mode"] == "target":
            assert r["speedup"] == 1.0
        if not r["family"].startswith("peer"):  # our modes: greedy ids equal target-only's
            assert r["identical"], data["mismatches"]
        if r["acceptance_rate"] is not None:
            assert 0.0 <= r["acceptance_rate"] <= 1.0
    assert {g["goal"] for g in data["goals"]}
    assert data["costs"]["target_seconds"][0] > 0
    printed = capsys.readouterr().out
    assert "speedup" in printed and "break" not in printed.splitlines()[0]
