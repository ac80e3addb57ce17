#!/usr/bin/env python3
"""Give a coding agent one small task in a scratch repository, through the recording proxy, and keep the
session: the requests (``tests/data/agent-sessions/<client>-<task>.jsonl``, :mod:`record_agent_session`)
and a transcript (``docs/agents/<client>-<task>.md``: what the agent printed, each turn's times, whether
the task was done).

    localspec serve --port 8451 &                     # the default pair, the server's defaults
    python scripts/record_agent_tasks.py --upstream http://127.0.0.1:8451 \\
        --client qwen --agent /tmp/qwen/node_modules/.bin/qwen --task read

Clients (each installed in its own npm prefix; run headless, with every network feature but the server
off): ``qwen`` (Qwen Code, ``qwen --yolo -p``, docs/clients.md's environment), ``opencode``
(``opencode run --pure --format json``, :func:`try_agents.opencode_config` and its offline switches),
``codex`` (the Codex CLI, ``codex exec``, the Responses API, docs/clients.md's config.toml).

Tasks (:data:`TASKS`), in the repository :data:`REPO` made afresh for each run (the same files, paths and
commit every time, so that a session recorded twice sends the same prompts): ``read`` (read a file and
answer a question about it), ``change`` (change one function), ``test`` (add a test and run it). Each
names its files by their absolute path (the 1.5B made up folders for bare names, docs/clients.md). The
verdict is checked on the repository afterwards (:func:`verdict`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from localspec.backend.machine import describe  # noqa: E402
import try_agents  # noqa: E402  (the scripts folder is no package)

ROOT = Path(__file__).resolve().parents[1]
#: the scratch repository, made afresh for every session at this fixed path
REPO = Path("/tmp/localspec-agent-repo")
FILES = {
    "calc.py": '"""Small arithmetic helpers."""\n\n\ndef add(a, b):\n    return a + b\n\n\n'
               'def mean(values):\n    return sum(values) / len(values)\n',
    "text_utils.py": '"""Helpers for titles and text."""\n\n\ndef slugify(title):\n'
                     '    return "-".join(title.lower().split())\n\n\ndef word_count(text):\n'
                     '    return len(text.split())\n',
    "README.md": "# scratch\n\nTwo small modules: calc.py (arithmetic) and text_utils.py (text).\n",
}
TASKS = {
    "read": f"Read the file {REPO}/text_utils.py and tell me what the function slugify returns for the title "
            "'Hello Big World'.",
    "change": f"In {REPO}/calc.py, change the function mean so that it returns 0.0 for an empty list instead of "
              "raising ZeroDivisionError. Keep everything else as it is.",
    "test": f"Add a file {REPO}/test_calc.py with a unittest test case for the function add of {REPO}/calc.py, "
            f"then run it with the shell command `cd {REPO} && python3 -m unittest test_calc` and tell me whether "
            "it passed.",
}
#: the agents' HOME (and configuration) folders, made afresh for every session at this fixed path
HOME = Path("/tmp/localspec-agent-home")
MODEL = "qwen2.5-coder-1.5b"


def make_repo() -> None:
    """:data:`REPO` afresh: :data:`FILES`, one commit with a fixed author and date."""
    shutil.rmtree(REPO, ignore_errors=True)
    REPO.mkdir(parents=True)
    for name, text in FILES.items():
        (REPO / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_DATE": try_agents.FIXED_COMMIT_DATE,
           "GIT_COMMITTER_DATE": try_agents.FIXED_COMMIT_DATE}
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(["git", *cmd], cwd=REPO, check=True, env=env)


def verdict(task: str, output: str) -> tuple[bool, str]:
    """Whether ``task`` was done, judged on :data:`REPO` and the agent's printed ``output``, and why."""
    if task == "read":
        ok = "hello-big-world" in output
        return ok, "the answer names hello-big-world" if ok else "the answer does not name hello-big-world"
    if task == "change":
        probe = ("import calc; assert calc.mean([]) == 0.0, calc.mean([]); assert calc.mean([1, 2, 3]) == 2; "
                 "assert calc.add(2, 3) == 5")
        r = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
        return r.returncode == 0, ("mean([]) == 0.0 and mean([1, 2, 3]) == 2" if r.returncode == 0
                                   else "calc.py fails the check: " + r.stderr.strip().splitlines()[-1:][0][:300])
    test = REPO / "test_calc.py"
    if not test.exists():
        return False, "no test_calc.py"
    r = subprocess.run([sys.executable, "-m", "unittest", "test_calc"], cwd=REPO, capture_output=True, text=True)
    ran = r.stderr.count("Ran ") and "Ran 0 tests" not in r.stderr
    return bool(r.returncode == 0 and ran), f"python3 -m unittest test_calc: exit {r.returncode}, " + (
        r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "no output")


def agent_command(client: str, agent: str, task: str, base_url: str, home: Path, timeout: int) -> tuple[list, dict]:
    """The command line and environment that run ``client`` headless on ``task`` against ``base_url`` (the
    proxy's ``/v1``), its configuration written under ``home`` (its HOME: the user's own is never read)."""
    home.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "PWD": str(REPO)}
    if client == "qwen":
        (home / ".qwen").mkdir()
        (home / ".qwen" / "settings.json").write_text(json.dumps({
            "security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False}, "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}))
        env |= {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "none", "OPENAI_MODEL": MODEL,
                "QWEN_CODE_TOOL_CALL_STYLE": "qwen-vl", "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
                "QWEN_STREAM_MAX_LIFETIME_MS": str(timeout * 1000)}
        return [agent, "--auth-type", "openai", "--yolo", "-p", TASKS[task]], env
    if client == "opencode":
        config = home / "opencode.json"
        config.write_text(json.dumps(try_agents.opencode_config(base_url, "none", MODEL, 32768), indent=2))
        env |= {**try_agents.OPENCODE_OFFLINE_ENV, "OPENCODE_CONFIG": str(config),
                **{f"XDG_{k}_HOME": str(home / k.lower()) for k in ("CONFIG", "DATA", "CACHE", "STATE")}}
        return [agent, "run", "--pure", "--format", "json", "--title", f"localspec {task}", TASKS[task]], env
    if client == "codex":
        codex_home = home / "codex"
        codex_home.mkdir(parents=True)
        (codex_home / "config.toml").write_text(try_agents.codex_config(base_url, MODEL, timeout))
        env |= {"CODEX_HOME": str(codex_home)}
        return [agent, "exec", "--skip-git-repo-check", TASKS[task]], env
    raise SystemExit(f"unknown client {client!r}: qwen, opencode or codex")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def turn_rows(log: list[dict]) -> list[str]:
    """The transcript's table of turns: one row per request the proxy logged."""
    rows = ["| turn | request | status | headers (s) | first token (s) | end (s) | prompt tokens (cached) "
            "| finish | answer |", "|---|---|---|---|---|---|---|---|---|"]
    for e in log:
        u = e.get("usage") or {}
        prompt = u.get("prompt_tokens", u.get("input_tokens"))
        cached = (u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}).get("cached_tokens")
        calls = "; ".join(f"call {n}({a})" for n, a in e.get("tool_calls") or [])
        said = (e.get("text") or "").strip()
        answer = " ".join(x for x in (f"{said[:200]!r}" if said else "", calls[:300]) if x) or "(empty)"
        if e.get("error"):
            answer = "error " + json.dumps(e["error"])[:300]
        answer = answer.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| {e['turn']} | {e['method']} {e['path']} | {e['status']} | {e['headers_s']} | "
                    f"{e['first_token_s']} | {e['end_s']}{' (client left)' if e.get('disconnected') else ''} | "
                    f"{prompt} ({cached}) | {e.get('finish_reason')} | {answer} |")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", default="http://127.0.0.1:8451", help="the server's root URL (no /v1)")
    p.add_argument("--client", required=True, choices=("qwen", "opencode", "codex"))
    p.add_argument("--agent", required=True, help="the client's executable")
    p.add_argument("--task", required=True, choices=tuple(TASKS))
    p.add_argument("--timeout", type=int, default=3600, help="seconds the agent may run")
    p.add_argument("--sessions", type=Path, default=ROOT / "tests" / "data" / "agent-sessions")
    p.add_argument("--docs", type=Path, default=ROOT / "docs" / "agents")
    p.add_argument("--server-note", default="", help="a line for the transcript: how the server was started")
    ns = p.parse_args()
    name = f"{ns.client}-{ns.task}"
    out, log_path = ns.sessions / f"{name}.jsonl", Path(tempfile.gettempdir()) / f"agent-{name}.log.jsonl"
    out.unlink(missing_ok=True)
    log_path.unlink(missing_ok=True)
    make_repo()
    home = HOME / ns.client  # a fixed path: it shows in prompts (Qwen Code's memory folder)
    shutil.rmtree(home, ignore_errors=True)
    port = free_port()
    proxy = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "record_agent_session.py"), "--upstream",
                              ns.upstream, "--port", str(port), "--out", str(out), "--log", str(log_path)])
    time.sleep(3)
    version = subprocess.run([ns.agent, "--version"], capture_output=True, text=True).stdout.strip()
    cmd, env = agent_command(ns.client, ns.agent, ns.task, f"http://127.0.0.1:{port}/v1", home, ns.timeout)
    before = try_agents.server_metrics(ns.upstream + "/v1", "none")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    t0 = time.perf_counter()
    # its own process group: Qwen Code runs itself again as a child node process, which a timeout must stop too
    agent = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = agent.communicate(timeout=ns.timeout)
        rc = agent.returncode
    except subprocess.TimeoutExpired:
        os.killpg(agent.pid, signal.SIGKILL)
        stdout, stderr = agent.communicate()
        rc = None
    seconds = time.perf_counter() - t0
    time.sleep(1)
    proxy.terminate()
    try:
        proxy.wait(30)
    except subprocess.TimeoutExpired:
        proxy.kill()
    after = try_agents.server_metrics(ns.upstream + "/v1", "none")
    delta = {k.removeprefix("localspec_").removesuffix("_total"): round(after[k] - before[k], 1) for k in after}
    printed = stdout
    if ns.client == "opencode":
        steps, (_, _, calls, answer) = try_agents.opencode_steps(stdout), try_agents.opencode_verdict(stdout)
        printed = "\n".join(steps + ["tool " + c for c in calls] + [f"answer: {answer}"])
    done, why = verdict(ns.task, printed if ns.client != "opencode" else answer)
    diff = subprocess.run(["git", "status", "--short"], cwd=REPO, capture_output=True, text=True).stdout
    diff += subprocess.run(["git", "diff"], cwd=REPO, capture_output=True, text=True).stdout
    log = [json.loads(x) for x in log_path.read_text().splitlines()] if log_path.exists() else []
    size = out.stat().st_size if out.exists() else 0
    ns.docs.mkdir(parents=True, exist_ok=True)
    exit_text = "timed out" if rc is None else f"exit {rc}"
    md = [f"# {ns.client} ({version}), task `{ns.task}`", "",
          f"Recorded {started} on this machine: {describe()}, load average {os.getloadavg()[0]:.1f}. "
          f"{ns.server_note}", "",
          f"Task: {TASKS[ns.task]}", "",
          f"Command: `{' '.join(cmd[:-1])} \"<task>\"` (`scripts/record_agent_tasks.py --client {ns.client} "
          f"--task {ns.task}`)", "",
          f"**{'Finished' if done else 'Not finished'}**: {why}; the agent's {exit_text} after {seconds:.0f} s, "
          f"{len(log)} requests. Recording: `tests/data/agent-sessions/{name}.jsonl` ({size / 1e6:.2f} MB).", "",
          f"Server counters over the session (`/metrics`): `{json.dumps(delta)}`", "",
          "## Turns (proxy timings, seconds after the request arrived)", "", *turn_rows(log), "",
          "## What the agent printed", "", "```", (printed.strip() or "(nothing)")[-6000:], "```", ""]
    if stderr.strip():
        md += ["stderr (last lines):", "", "```", stderr.strip()[-3000:], "```", ""]
    md += ["## The repository afterwards (`git status --short`, `git diff`)", "", "```", diff.strip() or "(unchanged)",
           "```", ""]
    (ns.docs / f"{name}.md").write_text("\n".join(md))
    (ns.docs / f"{name}.log.jsonl").write_text(log_path.read_text() if log_path.exists() else "")
    print(f"{name}: {'FINISHED' if done else 'NOT FINISHED'} ({why}); {exit_text} after {seconds:.0f} s, "
          f"{len(log)} requests, recording {out} ({size} bytes)")
    shutil.rmtree(home, ignore_errors=True)
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
