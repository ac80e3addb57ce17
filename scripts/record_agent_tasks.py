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
verdict is checked on the repository (or the answer) right after the task's own run (:func:`verdict`).

``--follow-ups N`` (default 4) then gives the same session N more user turns (:data:`FOLLOW_UPS`), each a
run of the client with its resume switch, so the recording is a session of N + 1 user turns in which every
request carries the conversation so far: what issue 45's replay benchmark (``scripts/bench_agents.py``)
measures the prompt cache on.
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
#: what the user says next in the same session, one agent run each, continued with the client's own resume
#: switch (:func:`agent_command`): a session of the task and these is 5 user turns, each request carrying the
#: whole conversation again (issue 45 item 1 asks for sessions of at least 5 turns). They ask about the same
#: small repository, so an agent that reads or runs something again re-sends what it already sent.
FOLLOW_UPS = {
    "read": [f"Now read {REPO}/calc.py and tell me what mean([2, 4]) returns.",
             "What does word_count from text_utils.py return for 'one two three'?",
             f"Read {REPO}/README.md and say in one sentence what it describes.",
             "Which of the two Python files defines more functions? Answer with the file name."],
    "change": [f"Show me the function mean of {REPO}/calc.py as it is now.",
               "What does mean([]) return now? Answer with the value.",
               f"Add a docstring to the function add in {REPO}/calc.py that says it returns a + b.",
               "List the functions defined in calc.py now."],
    "test": [f"Run `cd {REPO} && python3 -m unittest test_calc` again and tell me how many tests ran.",
             f"Add a test of the function mean for the list [2, 4] to {REPO}/test_calc.py.",
             f"Run `cd {REPO} && python3 -m unittest test_calc` and tell me whether all tests passed.",
             "Which functions of calc.py are tested now?"],
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


def agent_command(client: str, agent: str, prompt: str, base_url: str, home: Path, timeout: int,
                  resume: bool = False) -> tuple[list, dict]:
    """The command line and environment that run ``client`` headless on ``prompt`` against ``base_url`` (the
    proxy's ``/v1``), its configuration written under ``home`` (its HOME: the user's own is never read).

    ``resume``: continue the client's last session (Qwen Code ``--continue``, opencode ``run --continue``,
    Codex ``exec resume --last``), so ``prompt`` is the next user turn of the same conversation; the
    configuration written by the first call is kept."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "PWD": str(REPO)}
    if client == "qwen":
        (home / ".qwen").mkdir(exist_ok=True)
        (home / ".qwen" / "settings.json").write_text(json.dumps({
            "security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False}, "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}))
        env |= {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "none", "OPENAI_MODEL": MODEL,
                "QWEN_CODE_TOOL_CALL_STYLE": "qwen-vl", "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
                "QWEN_STREAM_MAX_LIFETIME_MS": str(timeout * 1000)}
        return [agent, "--auth-type", "openai", "--yolo", *(["--continue"] if resume else []), "-p", prompt], env
    if client == "opencode":
        config = home / "opencode.json"
        config.write_text(json.dumps(try_agents.opencode_config(base_url, "none", MODEL, 32768), indent=2))
        env |= {**try_agents.OPENCODE_OFFLINE_ENV, "OPENCODE_CONFIG": str(config),
                **{f"XDG_{k}_HOME": str(home / k.lower()) for k in ("CONFIG", "DATA", "CACHE", "STATE")}}
        return [agent, "run", "--pure", "--format", "json",
                *(["--continue"] if resume else ["--title", "localspec task"]), *try_agents.opencode_message(prompt)], env
    if client == "codex":
        codex_home = home / "codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(try_agents.codex_config(base_url, MODEL, timeout))
        env |= {"CODEX_HOME": str(codex_home)}
        return [agent, "exec", *(["resume", "--last"] if resume else []), "--skip-git-repo-check", prompt], env
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
    p.add_argument("--follow-ups", type=int, default=4, choices=range(0, 5),
                   help="user turns after the task, in the same session (default 4: 5 user turns)")
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
    prompts = [TASKS[ns.task], *FOLLOW_UPS[ns.task][:ns.follow_ups]]
    base_url = f"http://127.0.0.1:{port}/v1"
    before = try_agents.server_metrics(ns.upstream + "/v1", "none")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = []  # per user turn: (prompt, what the agent printed, stderr, exit text, seconds)
    t0 = time.perf_counter()
    for i, prompt in enumerate(prompts):
        cmd, env = agent_command(ns.client, ns.agent, prompt, base_url, home, ns.timeout, resume=i > 0)
        t1 = time.perf_counter()
        # its own process group: Qwen Code runs itself again as a child node process, which a timeout must stop
        agent = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        left = max(1.0, ns.timeout - (t1 - t0))
        try:
            stdout, stderr = agent.communicate(timeout=left)
            rc = agent.returncode
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            stdout, stderr = agent.communicate()
            rc = None
        printed = stdout
        if ns.client == "opencode":
            steps, (_, _, calls, answer) = try_agents.opencode_steps(stdout), try_agents.opencode_verdict(stdout)
            printed = "\n".join(steps + ["tool " + c for c in calls] + [f"answer: {answer}"])
        runs.append((prompt, printed, stderr, "timed out" if rc is None else f"exit {rc}", time.perf_counter() - t1))
        if i == 0:  # the task is judged on its own turn: the follow-ups may change the repository again
            done, why = verdict(ns.task, answer if ns.client == "opencode" else printed)
        print(f"user turn {i}: {runs[-1][3]} after {runs[-1][4]:.0f} s", flush=True)
        if rc is None:
            break
    seconds = time.perf_counter() - t0
    time.sleep(1)
    proxy.terminate()
    try:
        proxy.wait(30)
    except subprocess.TimeoutExpired:
        proxy.kill()
    after = try_agents.server_metrics(ns.upstream + "/v1", "none")
    delta = {k.removeprefix("localspec_").removesuffix("_total"): round(after[k] - before[k], 1) for k in after}
    diff = subprocess.run(["git", "status", "--short"], cwd=REPO, capture_output=True, text=True).stdout
    diff += subprocess.run(["git", "diff"], cwd=REPO, capture_output=True, text=True).stdout
    log = [json.loads(x) for x in log_path.read_text().splitlines()] if log_path.exists() else []
    size = out.stat().st_size if out.exists() else 0
    ns.docs.mkdir(parents=True, exist_ok=True)
    exit_text = ", ".join(r[3] for r in runs)
    cmd0, _ = agent_command(ns.client, ns.agent, "<prompt>", base_url, home, ns.timeout)
    cmd1, _ = agent_command(ns.client, ns.agent, "<prompt>", base_url, home, ns.timeout, resume=True)
    md = [f"# {ns.client} ({version}), task `{ns.task}`", "",
          f"Recorded {started} on this machine: {describe()}, load average {os.getloadavg()[0]:.1f}. "
          f"{ns.server_note}", "",
          f"Task: {TASKS[ns.task]}", "",
          f"Then {len(prompts) - 1} follow-ups in the same session: " + " / ".join(prompts[1:]), "",
          f"Commands: `{' '.join(cmd0)}`, then `{' '.join(cmd1)}` for each follow-up "
          f"(`scripts/record_agent_tasks.py --client {ns.client} --task {ns.task} --follow-ups {ns.follow_ups}`)", "",
          f"**{'Finished' if done else 'Not finished'}**: {why}; the agent's runs: {exit_text}; {seconds:.0f} s in "
          f"all, {len(log)} requests. Recording: `tests/data/agent-sessions/{name}.jsonl` ({size / 1e6:.2f} MB).", "",
          f"Server counters over the session (`/metrics`): `{json.dumps(delta)}`", "",
          "## Turns (proxy timings, seconds after the request arrived)", "", *turn_rows(log), ""]
    for i, (prompt, printed, stderr, rc_text, secs) in enumerate(runs):
        md += [f"## User turn {i} ({rc_text}, {secs:.0f} s): {prompt}", "", "```",
               (printed.strip() or "(nothing)")[-4000:], "```", ""]
        if stderr.strip():
            md += ["stderr (last lines):", "", "```", stderr.strip()[-1500:], "```", ""]
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
