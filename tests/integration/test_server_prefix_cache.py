"""Several cached prompt prefixes through the server, on the tiny model with the real ``openai`` client.

An agent alternates between long prompts: A, B, then A again reads only what A's kept snapshot does not
hold (``/metrics``: ``localspec_prompt_tokens_read``; the usage's ``cached_tokens``), and answers what it
answered the first time, on an empty cache (a fresh server's answer); a request with ``cache_prompt: false``
neither restores nor keeps one, and the live prefix before it is there again after it. With the disk store (on by default) a restarted server reads A from disk; a
snapshot folder removed under a running server is a miss, never a 500; a folder that cannot be made is
one warning before the models load, and the server runs without it; a server killed while writing a
snapshot leaves nothing that a restart loads, and the store stays within its budget.
The KV-level exactness (logits) is in test_prefix_snapshots.py; the store's own rules in
tests/unit/backend/test_prompt_store.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time

import openai
import pytest

from helpers import metric, tiny_lookup_process, tiny_lookup_server

pytestmark = pytest.mark.tiny

KEY = "prefix-key"
#: two long system prompts (a few hundred tokens each, well over the 64-token snapshot minimum)
SYSTEM_A = "You are a careful Python reviewer. " + " ".join(f"Rule {i}: check the names and types in line {i}."
                                                          for i in range(30))
SYSTEM_B = "You are a terse shell assistant. " + " ".join(f"Note {i}: prefer portable flags for tool {i}."
                                                        for i in range(30))
A = [{"role": "system", "content": SYSTEM_A}, {"role": "user", "content": "Review: def add(a, b): return a+b"}]
B = [{"role": "system", "content": SYSTEM_B}, {"role": "user", "content": "List the files in this folder."}]
C = [{"role": "system", "content": SYSTEM_B.replace("shell", "SQL")}, {"role": "user", "content": "Count the rows."}]
#: the settings a stored snapshot is keyed by, pinned: a repack verdict measured on a busy machine may differ between
#: two starts (then the second does not read the first's snapshots: a miss, as it should be, but not this test's)
PINNED = ["--repack", "off", "--flash-attn", "off"]


@pytest.fixture(scope="module")
def served(tiny_path, tmp_path_factory):
    with tiny_lookup_server(tiny_path, tmp_path_factory.mktemp("serve-prefix"), KEY) as client:
        yield client, _base(client)


def ask(served, messages, **extra):
    """(answer, usage, prompt tokens the target read, snapshots restored) of one greedy chat request.

    Without the draft memory: its drafts (earlier answers) change the verification batches, which may
    round differently (cases.md C1); the prompt's own lookup drafts are the same on the same context."""
    client, base = served
    extra.setdefault("speculation", {"memory": False})
    read0 = metric(base, "localspec_prompt_tokens_read_total", KEY)
    restores0 = metric(base, "localspec_prompt_cache_restores_total", KEY)
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=24, temperature=0,
                                       extra_body=extra)
    return (r.choices[0].message.content, r.usage, metric(base, "localspec_prompt_tokens_read_total", KEY) - read0,
            metric(base, "localspec_prompt_cache_restores_total", KEY) - restores0)


def test_alternating_prompts_are_not_read_again_and_answer_the_same(served):
    first_a, usage_a, read_a, _ = ask(served, A)
    assert usage_a.prompt_tokens > 200 and read_a == usage_a.prompt_tokens  # an empty cache: all read
    _, usage_b, read_b, _ = ask(served, B)
    assert read_b >= usage_b.prompt_tokens - 20  # B shares only its first few tokens with A
    again, usage, read, restores = ask(served, A)
    assert again == first_a  # the answer of the first A, which ran on an empty cache
    assert restores == 1 and read == 1  # only the last prompt token, which the first round decodes
    assert usage.prompt_tokens_details.cached_tokens == usage_a.prompt_tokens - 1
    # A continued (an agent's next turn): only the new part is read, B's snapshot is not disturbed
    longer = A + [{"role": "assistant", "content": again}, {"role": "user", "content": "And with type hints?"}]
    _, usage_l, read_l, _ = ask(served, longer)
    assert read_l <= usage_l.prompt_tokens - usage_a.prompt_tokens
    _, _, read_b2, restores_b2 = ask(served, B)
    assert restores_b2 == 1 and read_b2 == 1


def test_cache_prompt_false_neither_restores_nor_keeps_a_snapshot(served):
    ask(served, A)
    _, usage, read, restores = ask(served, C, cache_prompt=False)
    assert restores == 0 and read == usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens == 0
    _, _, read_a, restores_a = ask(served, A)  # A's prefix, held before the opt-out, is live again (issue 42)
    assert read_a == 1 and restores_a == 0
    _, usage_c, read_c, restores_c = ask(served, C)  # C's was not: kept, C would come back without reading
    assert restores_c == 0 and read_c >= usage_c.prompt_tokens - 20


def test_a_restarted_server_reads_the_prompt_it_held_from_disk(tiny_path, tmp_path):
    disk = ["--prompt-cache-disk-mb", "256", *PINNED]
    with tiny_lookup_server(tiny_path, tmp_path, KEY, disk) as client:  # the same $LOCALSPEC_CACHE both times
        first, usage_a, read_a, _ = ask((client, _base(client)), A)
    assert read_a == usage_a.prompt_tokens
    assert list((tmp_path / "cache" / "prompts").glob("*.kv"))  # A's cache, stored at shutdown
    with tiny_lookup_server(tiny_path, tmp_path, KEY, disk) as client:
        again, usage, read, restores = ask((client, _base(client)), A)
        assert metric(_base(client), "localspec_prompt_cache_store_reads_total", KEY) == 1
    assert again == first and restores == 1 and read == 1
    assert usage.prompt_tokens_details.cached_tokens == usage_a.prompt_tokens - 1


def test_a_snapshot_folder_removed_under_the_server_is_a_miss_not_a_500(tiny_path, tmp_path):
    """Two servers sharing the folder, or a user freeing space: requests and the flush at shutdown go on."""
    folder = tmp_path / "cache" / "prompts"
    with tiny_lookup_server(tiny_path, tmp_path, KEY, PINNED) as client:  # the disk store is on by default
        first, usage_a, _, _ = ask((client, _base(client)), A)
    assert list(folder.glob("*.kv"))  # A's cache, stored at shutdown
    with tiny_lookup_server(tiny_path, tmp_path, KEY, PINNED) as client:
        served = (client, _base(client))
        again, _, read, restores = ask(served, A)
        assert again == first and restores == 1 and read == 1  # restored from disk
        shutil.rmtree(folder)
        ask(served, B)  # A's cache, the snapshot it was restored from, is stored again: its file is gone
        assert ask(served, A)[0] == first
        shutil.rmtree(folder)
        assert metric(served[1], "localspec_prompt_cache_disk_bytes", KEY) == 0
        ask(served, C)
        ask(served, B)  # C's cache is stored: in a new folder
        assert folder.stat().st_mode & 0o777 == 0o700
        assert metric(served[1], "localspec_prompt_cache_disk_bytes", KEY) == _held(folder) > 0
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and " 500 " not in log
    with tiny_lookup_server(tiny_path, tmp_path, KEY, PINNED) as client:
        assert ask((client, _base(client)), C)[3] == 1  # C's cache, restored from disk
        shutil.rmtree(folder)  # before the flush at shutdown, which stores the live cache: C's, known, gone
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and " 500 " not in log
    assert list(folder.glob("*.kv"))  # the flush at shutdown made the folder again


def test_a_folder_that_cannot_be_made_is_one_warning_before_the_models_load(tiny_path, tmp_path):
    (tmp_path / "cache").write_text("a file where $LOCALSPEC_CACHE's folder would be")
    with tiny_lookup_server(tiny_path, tmp_path, KEY, ["--prompt-cache-disk-mb", "256"]) as client:
        served = (client, _base(client))
        answer, _, _, _ = ask(served, A)
        assert answer and metric(served[1], "localspec_prompt_cache_disk_bytes", KEY) == 0
        assert ask(served, A)[3] == 0 and ask(served, B)[1].prompt_tokens  # the memory tier works as before
    log = (tmp_path / "server.log").read_text()
    warnings = [i for i, line in enumerate(log.splitlines()) if "prompt snapshots are not kept on disk" in line]
    loading = next(i for i, line in enumerate(log.splitlines()) if line.startswith("loading target"))
    assert len(warnings) == 1 and warnings[0] < loading, log[:2000]
    assert "cache/prompts cannot be made or written" in log and "Traceback" not in log


#: a system prompt of about 1,800 tokens: its snapshot (SmolLM2: ~23 KiB a token) takes ~40 MiB, long enough to write
#: that a kill lands in the middle of it
LONG = "You are a careful Python reviewer. " + " ".join(f"Rule {i}: check the names and types in line {i}."
                                                      for i in range(105))
#: the crash test's budget, and what an older version left in the folder before it
CRASH_BUDGET_MB = 64
OLD_VERSION_BYTES = 40 << 20


def test_a_server_killed_while_writing_a_snapshot_loads_no_damaged_one_and_stays_in_budget(tiny_path, tmp_path):
    folder = tmp_path / "cache" / "prompts"
    extra = ["--n-ctx", "2048", "--prompt-cache-disk-mb", str(CRASH_BUDGET_MB), *PINNED]
    killed_in = None
    for attempt in range(3):  # a kill that lands after the write is tried again, on a fresh folder
        shutil.rmtree(folder, ignore_errors=True)
        _plant_an_older_version(folder)
        with tiny_lookup_process(tiny_path, tmp_path, KEY, extra) as proc:
            client = openai.OpenAI(base_url=proc.base_url + "/v1", api_key=KEY, max_retries=0, timeout=300)
            prompt = [{"role": "system", "content": LONG}, {"role": "user", "content": f"Review attempt {attempt}"}]
            answer, usage, _, _ = ask((client, proc.base_url), prompt)  # a fresh answer: no snapshot on disk
            assert 1500 < usage.prompt_tokens < 1950
            # the next prompt keeps the long one's cache as a snapshot, written to disk in the background
            other = threading.Thread(target=_ignore_errors, args=(ask, (client, proc.base_url), B), daemon=True)
            other.start()
            tmp = _first_tmp(folder, proc.proc, timeout=120)
            if tmp is not None:
                proc.proc.send_signal(signal.SIGKILL)
                proc.proc.wait()
            other.join(60)
        if tmp is not None and tmp.exists():
            killed_in = tmp
            break
    assert killed_in is not None, "no kill landed while a snapshot was written"
    assert _held(folder) <= CRASH_BUDGET_MB << 20  # within the budget, the unfinished write counted
    data, meta = folder / f"{killed_in.name[:32]}.kv", folder / f"{killed_in.name[:32]}.json"
    unfinished, about = killed_in.read_bytes(), meta.read_text() if meta.exists() else None
    with tiny_lookup_server(tiny_path, tmp_path, KEY, extra):  # the restart cleans up
        assert not list(folder.glob("*.tmp")), "the unfinished write is still there"
        assert {p.stem for p in folder.glob("*.kv")} == {p.stem for p in folder.glob("*.json")}, "half a snapshot"
        assert _held(folder) <= CRASH_BUDGET_MB << 20
    # what a writer without fsync and rename could leave after a power cut: the metadata, and the data file as long
    # as it says but not its bytes (the unfinished ones, the rest zeros, one byte changed): only the checksum can tell
    assert about is not None, "the metadata is committed before the data"
    nbytes = json.loads(about)["nbytes"]
    raw = bytearray(unfinished[:nbytes].ljust(nbytes, b"\0"))
    raw[nbytes // 2] ^= 0xFF
    meta.write_text(about)
    data.write_bytes(bytes(raw))
    with tiny_lookup_server(tiny_path, tmp_path, KEY, extra) as client:
        served = (client, _base(client))
        again, usage_again, read, restores = ask(served, prompt)
        assert restores == 0 and read == usage_again.prompt_tokens  # not loaded: the prompt was read
        assert again == answer  # the answer of a fresh server
        assert not data.exists() and not meta.exists()  # deleted
        assert _held(folder) <= CRASH_BUDGET_MB << 20
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def _plant_an_older_version(folder) -> None:
    """What an older localspec (another format and key) left in ``folder``: counted in the same budget, the least
    recently used."""
    folder.mkdir(parents=True, exist_ok=True)
    old = "d" * 32
    (folder / f"{old}.kv").write_bytes(b"\0" * OLD_VERSION_BYTES)
    (folder / f"{old}.json").write_text(json.dumps({"format": 1, "key": {"hostname": "gone"}, "role": "target"}))
    for p in folder.iterdir():
        os.utime(p, (1, 1))


def _ignore_errors(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the server is killed under it
        pass


def _first_tmp(folder, proc, timeout: float):
    """The first temporary file of a snapshot's data being written in ``folder`` (None: the server exited or none
    appeared within ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for name in os.listdir(folder) if folder.is_dir() else ():
            if re.match(r"^[0-9a-f]{32}\.kv\..*tmp$", name):
                return folder / name
        time.sleep(0.0005)
    return None


def _held(folder) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def _base(client) -> str:
    return str(client.base_url).removesuffix("/v1/").removesuffix("/v1")
