"""scripts/bench_llama_server.py's two regimes (issue 44, item 1): cold sends the opt-outs once per request
and restarts ngram-mod; warm sends each request twice in a row with the same prompt, keeps every server's
state and times the second send; the per-request record in the shared ``*_vs-llama-server.json`` format.

The servers and the HTTP client are fakes: what is tested is the script's control flow (which requests go
where, with which fields, which one is timed), not a speed."""

import argparse

import pytest

TASKS = ["fnmatch-rename", "chat"]
SERVERS = ["ls-ngram", "lp-auto", "lp-pred"]


class FakeServer:
    base_url = "http://127.0.0.1:1"

    def stop(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def fake_servers(bench_llama_server, monkeypatch):
    """Every request the script sends, as (server's base url, nonce, extra body, prediction given); the servers'
    restarts. Each request's latency is its number in the run (1.0, 2.0, ...)."""
    bench = bench_llama_server
    sent, restarts = [], []

    def start_all(stack, servers, argv_of, tmp, extra_of):
        return {s: type("P", (FakeServer,), {"base_url": f"http://{s}"})() for s in servers}

    def timed_request(client, message, prediction, max_tokens, nonce, extra_body=None):
        sent.append((str(client.base_url), nonce, extra_body, prediction is not None))
        n = len(sent)
        return {"latency": float(n), "tokens": 100 + n, "decode_tps": 10.0, "text": f"answer {n}",
                "drafted": n, "accepted": n, "speculation": None, "timings": None}

    def server_process(argv, log, timeout):
        restarts.append(log.name)
        return type("P", (FakeServer,), {"base_url": "http://ls-ngram"})()

    monkeypatch.setattr(bench, "start_all", start_all)
    monkeypatch.setattr(bench, "timed_request", timed_request)
    monkeypatch.setattr(bench, "ServerProcess", server_process)
    return bench, sent, restarts


def run_regime(bench, regime, tmp_path):
    args = argparse.Namespace(repeats=1, seed=0, opt_outs=True, fresh_ngram=True)
    all_tasks = {t: (f"do {t}", "original" if t != "chat" else None, 64) for t in TASKS}
    return bench.run_paired(args, SERVERS, TASKS, all_tasks, lambda s: [s], tmp_path, regime)


def test_warm_sends_each_request_twice_in_a_row_with_the_same_prompt_and_times_the_second(fake_servers, tmp_path):
    bench, sent, restarts = fake_servers
    runs, orders = run_regime(bench, "warm", tmp_path)
    assert len(sent) == 2 * len(TASKS) * len(SERVERS) and not restarts  # ngram-mod's pool kept
    assert all(extra is None for _, _, extra, _ in sent)  # no opt-outs: each side keeps its state
    for i, (task, server) in enumerate(orders[0]):
        first, second = sent[2 * i], sent[2 * i + 1]
        assert first == second and first[0] == f"http://{server}/v1/"  # the same request to the same server, back to back
        r = runs[i]
        assert (r["task"], r["server"], r["regime"]) == (task, server, "warm")
        assert r["latency"] == 2.0 * i + 2 and r["first"]["latency"] == 2.0 * i + 1  # the second is timed
        assert r["first"]["same_text"] is False  # "answer 1" vs "answer 2"
    # a prediction goes to lp-pred only, on both sends
    assert {url for url, _, _, pred in sent if pred} == {"http://lp-pred/v1/"}


def test_cold_sends_each_request_once_with_the_opt_outs_and_restarts_ngram_mod(fake_servers, tmp_path):
    bench, sent, restarts = fake_servers
    runs, orders = run_regime(bench, "cold", tmp_path)
    # ngram-mod: a warm-up after each restart, then the timed request
    assert len(restarts) == len(TASKS) and len(sent) == len(TASKS) * len(SERVERS) + len(TASKS)
    timed = [s for s in sent if "warm-up" not in s[1]]
    for (url, _, extra, _), (task, server) in zip(timed, orders[0]):
        assert extra == bench.opt_outs(server)
    assert all("first" not in r and r["regime"] == "cold" for r in runs)


def test_the_curve_record_has_the_shared_files_rows_per_regime(bench_llama_server):
    bench = bench_llama_server
    ls = {"rep": 0, "task": "chat", "server": "ls-ngram", "latency": 3.0, "tokens": 200, "text": "x",
          "speculation": None, "timings": {"prompt_ms": 250.0, "draft_n": 10, "draft_n_accepted": 8}}
    lp = {"rep": 0, "task": "chat", "server": "lp-auto", "latency": 2.0, "tokens": 200, "text": "x",
          "speculation": {"prefill_seconds": 0.5, "drafted": 5}, "timings": None,
          "first": {"latency": 9.0, "tokens": 200, "drafted": 1, "accepted": 1, "same_text": True}}
    rec = bench.curve_record("a CPU", "a setup", {"warm": [ls, lp]}, {"warm": []})
    assert rec["cpu"] == "a CPU" and set(rec["variants"]) == {"ls-ngram", "lp-auto"}
    rows = rec["regimes"]["warm"]["rows"]
    assert rec["regimes"]["warm"]["design"] == bench.REGIMES["warm"][0]
    # the keys of /work/shared/cpu-curves/*_vs-llama-server.json's rows, no answer text
    assert all({"rep", "task", "variant", "seconds", "tokens", "prefill", "spec"} <= set(r) and "text" not in r
               for r in rows)
    assert rows[0]["prefill"] == pytest.approx(0.25) and rows[0]["spec"] == {} and rows[0]["timings"]["draft_n"] == 10
    assert rows[1]["prefill"] == 0.5 and rows[1]["first"]["seconds"] == 9.0 and rows[1]["variant"] == "lp-auto"


def test_warm_compares_chat_with_ngram_mod_and_the_rename_without_a_prediction_with_one(bench_llama_server):
    bench = bench_llama_server

    def run(task, server, seconds):
        return {"task": task, "server": server, "rep": 0, "latency": seconds, "tokens": 100, "text": "t"}

    runs = [run("chat", "ls-ngram", 1.0), run("chat", "lp-auto", 1.25), run("chat", "ls-plain", 5.0),
            run("fnmatch-rename", "lp-pred", 1.0), run("fnmatch-rename", "lp-auto", 1.0 / 0.92),
            run("fnmatch-rename", "ls-ngram", 2.0)]
    comps = {(c["x"], c["y"], c["tasks"]): c for c in bench.compare(runs, ["fnmatch-rename", "chat"],
                                                                    bench.REGIMES["warm"][1])}
    assert comps[("lp-auto", "ls-ngram", "chat")]["median"] == pytest.approx(0.8)
    assert comps[("lp-auto", "ls-ngram", "chat")]["met"] is False  # goal >= 1.0x warm
    rename = comps[("lp-auto", "lp-pred", "fnmatch-rename")]
    assert rename["median"] == pytest.approx(0.92) and rename["met"] is True  # within 10 %
    assert comps[("lp-pred", "ls-ngram", "edits")]["median"] == pytest.approx(2.0)


def test_two_runs_records_of_one_cpu_merge_and_of_two_cpus_do_not(bench_llama_server):
    bench = bench_llama_server

    def record(cpu, task, server):
        r = {"rep": 0, "task": task, "server": server, "latency": 1.0, "tokens": 10, "text": "x"}
        return bench.curve_record(cpu, f"{task} run", {"cold": [r], "warm": [r]}, {"cold": [{"x": task}]})

    merged = bench.merge_records(record("zen4", "fnmatch-rename", "lp-pred"), record("zen4", "chat", "ls-plain"))
    assert merged["setup"] == "fnmatch-rename run | chat run" and set(merged["variants"]) == {"lp-pred", "ls-plain"}
    assert [r["task"] for r in merged["regimes"]["warm"]["rows"]] == ["fnmatch-rename", "chat"]
    assert merged["regimes"]["cold"]["comparisons"] == [{"x": "fnmatch-rename"}, {"x": "chat"}]
    with pytest.raises(ValueError, match="different CPUs"):
        bench.merge_records(record("zen4", "chat", "lp-auto"), record("xeon", "chat", "lp-auto"))
