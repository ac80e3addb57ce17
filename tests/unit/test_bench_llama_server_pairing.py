"""scripts/bench_llama_server.py's paired design: the visiting order, the paired ratios (end to end,
or per token where the answers' lengths differ) and the comparisons' medians and goals. The
scripts folder is no package: the script is loaded from its file."""

import pytest


@pytest.fixture
def bench(bench_llama_server):
    return bench_llama_server


def run(task, server, rep, seconds, tokens=100, text="same"):
    return {"task": task, "server": server, "rep": rep, "latency": seconds, "tokens": tokens, "text": text}


def test_the_order_visits_every_task_and_server_once_a_task_s_variants_back_to_back(bench):
    tasks, servers = ["code-edit", "chat", "fnmatch-rename"], ["ls-plain", "ls-ngram", "lp-auto", "lp-pred"]
    order = bench.visit_order(tasks, servers, seed=0, rep=1)
    assert sorted(order) == sorted((t, s) for t in tasks for s in servers)
    task_runs = [t for i, (t, _) in enumerate(order) if i == 0 or order[i - 1][0] != t]
    assert sorted(task_runs) == sorted(tasks)  # each task's requests are contiguous
    assert order == bench.visit_order(tasks, servers, seed=0, rep=1)  # seeded: the same order again
    orders = {tuple(bench.visit_order(tasks, servers, seed=0, rep=r)) for r in range(6)}
    assert len(orders) > 1  # the order changes between repetitions


def test_a_paired_ratio_is_end_to_end_for_equal_lengths_and_per_token_otherwise(bench):
    r = bench.paired_ratio(run("t", "x", 0, 2.0), run("t", "y", 0, 3.0))
    assert r["ratio"] == pytest.approx(1.5) and not r["per_token"] and r["equal"]
    # x answered 200 tokens in 4 s (0.02 s/token), y 100 tokens in 3 s (0.03 s/token): x is 1.5x per token
    r = bench.paired_ratio(run("t", "x", 0, 4.0, tokens=200, text="a"), run("t", "y", 0, 3.0, text="b"))
    assert r["ratio"] == pytest.approx(1.5) and r["per_token"] and not r["equal"]
    assert r["tokens"] == [200, 100] and r["seconds"] == [4.0, 3.0]


def test_comparisons_take_each_task_s_median_then_the_median_over_the_tasks(bench):
    runs = []
    # lp-pred vs ls-ngram on two edits: code-edit 2.0, 1.0, 1.5 (median 1.5); fnmatch 0.9 each (median 0.9)
    for rep, (ce, fn) in enumerate([(2.0, 0.9), (1.0, 0.9), (1.5, 0.9)]):
        runs += [run("code-edit", "ls-ngram", rep, ce), run("code-edit", "lp-pred", rep, 1.0),
                 run("fnmatch-rename", "ls-ngram", rep, fn), run("fnmatch-rename", "lp-pred", rep, 1.0),
                 run("chat", "ls-plain", rep, 1.0), run("chat", "lp-auto", rep, 1.0 / 0.96)]
    comps = bench.compare(runs, ["code-edit", "fnmatch-rename", "chat"])
    pred = next(c for c in comps if c["x"] == "lp-pred")
    assert [r["task"] for r in pred["rows"]] == ["code-edit", "fnmatch-rename"]  # chat is no edit
    assert [r["median"] for r in pred["rows"]] == pytest.approx([1.5, 0.9])
    assert [r["met"] for r in pred["rows"]] == [True, False]  # each edit's goal: >= 1.0x
    assert pred["median"] == pytest.approx(1.2) and pred["met"]  # the edits' median: >= 1.2x
    chat = next(c for c in comps if c["y"] == "ls-plain")
    assert chat["median"] == pytest.approx(0.96) and chat["met"] is False  # goal >= 1.0x
    # lp-auto never ran on an edit: no lp-auto vs ls-ngram comparison
    assert not any(c["x"] == "lp-auto" and c["y"] == "ls-ngram" for c in comps)
