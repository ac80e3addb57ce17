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
    # the oracle: the best fixed mode of ours, and auto measured against it in the same repetitions
    fixed = [r for r in data["rows"] if r["family"] in ("target", "lookup", "draft")]
    oracle = next(r for r in data["rows"] if r["mode"] == "oracle")
    assert oracle["speedup"] == max(r["speedup"] for r in fixed)
    assert oracle["oracle_of"] in {r["mode"] for r in fixed}
    auto = next(r for r in data["rows"] if r["mode"] == "auto")
    run = {(r["mode"], r["repeat"]): r["tok_s"] for r in data["runs"]}
    assert auto["auto_oracle"] == pytest.approx(run[("auto", 0)] / run[(oracle["oracle_of"], 0)])
    assert any(g["goal"].startswith("auto >= 0.9x the oracle") for g in data["goals"])
    # the machine and the calibrated ceiling are recorded
    assert data["machine"]["cpu"] and isinstance(data["machine"]["vector_extensions"], list)
    assert "=" in data["machine"]["llama_cpp_system_info"]  # e.g. "CPU : SSE3 = 1 | AVX = 1 | ..."
    ceil = data["costs"]["ceiling"]
    assert [c["context"] for c in ceil] == data["costs"]["contexts"] and all(c["speedup"] >= 1.0 for c in ceil)
    assert data["costs"]["ceiling_by_task"][0]["task"] == "code-edit"
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].startswith(f"CPU {data['machine']['cpu']}")
    assert "speedup" in printed and "auto/orc" in printed and "calibrated ceiling" in printed
    assert "oracle=" in printed
