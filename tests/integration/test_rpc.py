"""The target on two llama.cpp RPC workers on loopback (``localspec worker``), the tiny model's layers
split between them: greedy output identical to a local run in modes none, lookup and draft; a worker
down, silent or of another protocol at load is an error naming it, exit code 7, within the timeout.

The client runs as ``localspec generate`` in a child process: llama.cpp's RPC client aborts its
process on a lost worker, which must never take pytest down. Needs llama-cpp-python built with
``-DGGML_RPC=ON``; without it the module is skipped, unless ``LOCALSPEC_REQUIRE_RPC=1`` (set by
``.ci/run``, which builds it so), where that is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localspec.server.process import free_port
from localspec.backend import rpc

CLI = str(Path(sys.executable).with_name("localspec"))  # the console script, as a user runs it
PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
COMMON = ["--target", "smollm2-135m", "--draft", "smollm2-135m", "--temperature", "0", "--max-tokens", "48",
          "--n-ctx", "512", "--n-threads", "1", "--repack", "off", "--huge-pages", "off", "--no-color"]


def _require_rpc() -> None:
    if rpc.supported():
        return
    if os.environ.get("LOCALSPEC_REQUIRE_RPC") == "1":
        pytest.fail("LOCALSPEC_REQUIRE_RPC=1 but this llama-cpp-python has no RPC backend; " + rpc.REBUILD_HINT)
    pytest.skip("llama-cpp-python without the RPC backend (" + rpc.REBUILD_HINT + ")")


def start_worker(port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([CLI, "worker", "--port", str(port), "--threads", "1", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"worker exited {proc.returncode}: {proc.stderr.read()}")
        try:
            rpc.check_worker(f"127.0.0.1:{port}", timeout=2)
            return proc
        except Exception:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("worker did not start")


@pytest.fixture(scope="module")
def workers():
    _require_rpc()
    ports = [free_port(), free_port()]
    procs = [start_worker(p) for p in ports]
    yield [f"127.0.0.1:{p}" for p in ports], procs
    for p in procs:
        p.kill()
        p.wait()


def generate(*args: str, timeout: float = 240, json_lines: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "generate", PROMPT, "--raw", *COMMON, *(["--json"] if json_lines else []), *args],
                          capture_output=True, text=True, timeout=timeout)


def token_ids(out: str) -> list[int]:
    return [e["id"] for e in map(json.loads, filter(None, out.splitlines())) if e.get("type") == "token"]


@pytest.mark.parametrize("mode", ["none", "lookup", "draft"])
def test_greedy_output_on_two_workers_equals_the_local_run(workers, mode):
    endpoints, _ = workers
    local = generate("--mode", mode)
    remote = generate("--mode", mode, "--rpc", ",".join(endpoints))
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    ids = token_ids(local.stdout)
    assert len(ids) == 48
    assert token_ids(remote.stdout) == ids


def test_the_load_names_each_worker_with_its_layers(workers):
    endpoints, _ = workers
    r = generate("--mode", "none", "--rpc", ",".join(endpoints), "--max-tokens", "2", json_lines=False)
    assert r.returncode == 0, r.stderr
    assert f"connecting to RPC workers {endpoints[0]}, {endpoints[1]}" in r.stderr
    line = next(ln for ln in r.stderr.splitlines() if " layers: " in ln)
    held = {ep: int(line.split(ep + " ")[1].split(",")[0].rstrip("…")) for ep in endpoints}
    # SmolLM2-135M: 30 layers and the output layer, all on the workers
    assert all(n > 0 for n in held.values()) and sum(held.values()) == 31, line


def test_a_worker_that_is_down_at_load_is_named(workers):
    endpoints, _ = workers
    down = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    r = generate("--mode", "none", "--rpc", f"{endpoints[0]},{down}", "--rpc-timeout", "600", timeout=240)
    seconds = time.monotonic() - t0
    assert r.returncode == 7, r.stderr
    assert f"error: RPC worker {down} refused the connection" in r.stderr
    assert "hint: start one there with: localspec worker --host 127.0.0.1" in r.stderr
    assert "Traceback" not in r.stderr
    # the refusal ends the run (the command's start and one handshake): not a stall timeout (600 s here), nor
    # this test's own limit (240 s)
    assert seconds < 60, seconds


def test_the_workers_serve_again_after_a_failed_client(workers):
    """A client that failed at load left the workers usable (one client at a time, then the next)."""
    endpoints, procs = workers
    assert all(p.poll() is None for p in procs)
    r = generate("--mode", "none", "--rpc", ",".join(endpoints), "--max-tokens", "4")
    assert r.returncode == 0, r.stderr


def test_worker_refuses_a_busy_port_and_says_it_is_unauthenticated(workers):
    endpoints, _ = workers
    port = endpoints[0].split(":")[1]
    r = subprocess.run([CLI, "worker", "--port", port], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr
    proc = subprocess.Popen([CLI, "worker", "--port", str(free_port())], stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline() + proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait()
    assert "no authentication" in first and "only trusted machines" in first


def test_a_worker_on_localhost_listens_on_its_ipv4_address():
    """ggml's server takes only an IPv4 literal: ``--host localhost`` is resolved first (it used to print its
    banner and stop), and the banner names the address it listens on."""
    _require_rpc()
    port = free_port()
    proc = start_worker(port, "--host", "localhost")
    try:
        time.sleep(0.5)
        assert proc.poll() is None  # still serving after a client came and went
        assert rpc.check_worker(f"127.0.0.1:{port}", timeout=5)[:2] == rpc.RPC_PROTOCOL
        assert proc.poll() is None
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert f"localspec worker on 127.0.0.1:{port} (localhost)" in err, err


def test_a_worker_on_an_ipv6_address_is_refused_with_a_hint():
    _require_rpc()
    r = subprocess.run([CLI, "worker", "--host", "::1", "--port", str(free_port())], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "IPv6" in r.stderr and "hint:" in r.stderr and "IPv4 only" in r.stderr, r.stderr
    assert "localspec worker on" not in r.stderr


@contextlib.contextmanager
def served_on_two_workers(tmp_path, *extra: str):
    """``localspec serve`` (tiny model, mode lookup) with its layers on two fresh loopback workers; yields
    (server, worker processes, their ports, "host:port" endpoints, ask) where ``ask()`` is a greedy
    16-token completion through the openai client. The workers are resumed and killed at the end."""
    import openai

    from localspec.server.process import ServerProcess

    _require_rpc()
    ports = [free_port(), free_port()]
    procs = [start_worker(p) for p in ports]
    endpoints = [f"127.0.0.1:{p}" for p in ports]
    argv = [CLI, "serve", "--target", "smollm2-135m", "--mode", "lookup", "--rpc", ",".join(endpoints), "--port",
            "{port}", "--n-ctx", "512", "--n-threads", "1", "--log-level", "warning", *extra]
    try:
        with ServerProcess(argv, tmp_path / "server.log", env={"LOCALSPEC_CACHE": str(tmp_path / "cache")},
                           timeout=180) as srv:
            client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="none", max_retries=0, timeout=120)

            def ask():
                # nothing kept between requests (no prefix reuse, no draft memory): a reloaded model answers from
                # the same state as the first request, so batched-pass near-ties fall the same way on every CPU
                return client.completions.create(model="tiny", prompt=PROMPT, max_tokens=16, temperature=0,
                                                 extra_body={"cache_prompt": False, "speculation": {"memory": False}})

            yield srv, procs, ports, endpoints, ask
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()


def test_a_worker_lost_while_serving_fails_the_request_and_the_server_recovers(tmp_path):
    """``localspec serve --rpc``: a worker killed between requests makes the next request a 503 naming it
    (llama.cpp aborted the model's child process, not the server), /health says degraded, and once the
    worker is back the next request loads the model again and answers as before."""
    import httpx
    import openai

    with served_on_two_workers(tmp_path) as (srv, procs, ports, endpoints, ask):
        first = ask().choices[0].text
        procs[1].kill()
        procs[1].wait()
        for _ in range(2):  # lost during the pass, then still down at the reload
            with pytest.raises(openai.APIStatusError) as e:
                ask()
            assert e.value.status_code == 503 and endpoints[1] in str(e.value), str(e.value)
            health = httpx.get(srv.base_url + "/health", timeout=10).json()
            assert health["status"] == "degraded" and "lost an RPC worker" in health["reason"]
            assert srv.proc.poll() is None
        procs[1] = start_worker(ports[1])
        assert ask().choices[0].text == first
        assert httpx.get(srv.base_url + "/health", timeout=10).json()["status"] == "ok"
        assert "Traceback" not in srv.log_tail(100_000)


def test_a_worker_that_stops_answering_fails_the_request_within_the_deadline_and_the_server_recovers(tmp_path):
    """``localspec serve --rpc --rpc-timeout 4``: a worker stopped (SIGSTOP) in the middle of a streamed
    answer (it accepted the connection and answered the handshake, then went silent: llama.cpp's RPC
    client would wait forever) ends the stream with a worker_unavailable error naming it within the
    pass's deadline; while it stays stopped the next request is a 503 naming it and /health says
    degraded; once it runs again (SIGCONT) the next request loads the model again and answers as before."""
    import httpx
    import openai

    with served_on_two_workers(tmp_path, "--rpc-timeout", "4") as (srv, procs, ports, endpoints, ask):
        first = ask().choices[0].text
        body = {"prompt": PROMPT, "max_tokens": 400, "temperature": 0, "stream": True}
        with httpx.stream("POST", srv.base_url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            assert next(ln for ln in lines if ln.startswith("data: {"))  # the answer is under way
            procs[1].send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            events = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]
            seconds = time.monotonic() - t0
        last = events[-1]
        assert last.get("error", {}).get("code") == "worker_unavailable", last
        assert f"RPC worker {endpoints[1]} stopped answering" in last["error"]["message"], last
        # a pass of up to 9 tokens (lookup drafts 8): 4 * (1 + 9/32) s, then naming the silent worker (2 s)
        assert seconds < 4 * (1 + 9 / 32) + 2 + 4, f"{seconds:.1f} s"
        health = httpx.get(srv.base_url + "/health", timeout=10).json()
        assert health["status"] == "degraded" and "lost an RPC worker" in health["reason"]
        with pytest.raises(openai.APIStatusError) as e:  # still stopped: the reload names it
            ask()
        assert e.value.status_code == 503 and endpoints[1] in str(e.value), str(e.value)
        assert srv.proc.poll() is None
        procs[1].send_signal(signal.SIGCONT)
        assert ask().choices[0].text == first
        assert httpx.get(srv.base_url + "/health", timeout=10).json()["status"] == "ok"
        assert "Traceback" not in srv.log_tail(100_000)
