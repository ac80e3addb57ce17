"""Run real clients against a running ``localspec serve``: the openai client, LiteLLM, aider, Continue's CLI,
the Codex CLI, Qwen Code, opencode.

For the closing note of a change to the server and for anyone checking by hand. Each client
is optional and found where you say (install them in their own environments, e.g.)::

    python3 -m venv /tmp/aider-venv && /tmp/aider-venv/bin/pip install aider-chat   # brings litellm
    npm install -g --prefix /tmp/cn @continuedev/cli
    localspec serve --port 8080 &
    python scripts/try_agents.py --base-url http://127.0.0.1:8080/v1 \\
        --litellm-python /tmp/aider-venv/bin/python --aider /tmp/aider-venv/bin/aider --cn /tmp/cn/bin/cn

What runs, each in a fresh temporary folder (a git repository holding ``hello.py``; or all in
``--workdir``, kept):

- openai (this interpreter's): ``models.retrieve``, then a two-step tool conversation (a call
  to ``get_weather``, its result sent back as a ``role: tool`` message, the answer), streamed
  and not, with the ``speculation`` figures of every step;
- LiteLLM (``--litellm-python``): a completion with a tool, and a prompt over the context
  window, which LiteLLM must raise as ``ContextWindowExceededError``;
- aider (``--aider``): one edit with ``--message`` in each of ``--aider-formats`` (whole, diff)
  (docs/clients.md's command plus a ``.aider.model.metadata.json`` giving the context size);
  prints the file afterwards;
- Continue (``--cn``): ``cn -p "Say hello"`` and a prompt that needs its Read tool (the answer
  must name the function in ``hello.py``), with docs/clients.md's ``config.yaml`` in a temporary HOME;
- Codex (``--codex``): ``codex exec`` creating a file, with docs/clients.md's ``config.toml``;
- Qwen Code (``--qwen``, e.g. ``npm install --prefix /tmp/qwen @qwen-code/qwen-code``): ``qwen -p
  "Say hello"`` and a task that needs its read_file tool, each with its wall time and the server's
  prompt tokens sent / cached / read (``/metrics``), for measuring the prompt cache before and after;
  with ``QWEN_CODE_TOOL_CALL_STYLE=qwen-vl`` (``--qwen-tool-call-style``), and with ``--qwen-log-dir``
  each request Qwen Code sent and the answer's tool calls;
- opencode (``--opencode``, e.g. ``npm install --prefix /tmp/oc opencode-ai``): ``opencode run
  --format json`` on a task that needs its read tool, with a config naming the server as an
  OpenAI-compatible provider, written with opencode's data, cache and state into a temporary folder
  (XDG variables and HOME pointed there: the user's own opencode setup is never read or touched) and
  its network features off (:data:`OPENCODE_OFFLINE_ENV`); prints each tool call, the answer, the wall
  time and the server's prompt tokens, and PASS only when the read tool ran on ``hello.py`` and the
  answer after it names ``greet``.

Prints each client's version and what it did; exits 1 if any client that ran failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

#: seconds for one run of an agent CLI (--client-timeout)
CLIENT_TIMEOUT = 900
HELLO_PY = 'def greet(name):\n    return "Hello, " + name\n\n\nprint(greet("world"))\n'
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


#: --workdir: one folder every client runs in, kept (None: a fresh temporary folder each)
WORKDIR: Path | None = None
#: the commit's date in a --workdir made here, fixed so that a later run sends the agents the same prompt
FIXED_COMMIT_DATE = "2026-01-01T00:00:00+0000"


def workdir() -> Path:
    """A git repository holding ``hello.py`` (one commit): a fresh temporary folder, or --workdir, made
    here when it has no ``hello.py`` (commit dated FIXED_COMMIT_DATE) and used as it is otherwise, less
    the ``home`` folder an earlier run left there (so that an agent started again sees the same files)."""
    if WORKDIR is not None and (WORKDIR / "hello.py").exists():
        shutil.rmtree(WORKDIR / "home", ignore_errors=True)
        return WORKDIR
    d = WORKDIR or Path(tempfile.mkdtemp(prefix="localspec-agents-"))
    d.mkdir(parents=True, exist_ok=True)
    (d / "hello.py").write_text(HELLO_PY)
    env = {**os.environ, **({"GIT_AUTHOR_DATE": FIXED_COMMIT_DATE, "GIT_COMMITTER_DATE": FIXED_COMMIT_DATE}
                            if WORKDIR else {})}
    subprocess.run(["git", "init", "-q"], cwd=d, check=True)
    subprocess.run(["git", "add", "-A"], cwd=d, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], cwd=d, check=True,
                   env=env)
    return d


def done_with(d: Path) -> None:
    """Delete a client's temporary folder (never --workdir)."""
    if d != WORKDIR:
        shutil.rmtree(d, ignore_errors=True)


def spec_line(r) -> str:
    s = (r.model_extra or {}).get("speculation") or {}
    return (f"speculation: mode {s.get('mode')}, drafted {s.get('drafted')}, accepted {s.get('accepted')}, "
            f"acceptance {s.get('acceptance_rate')}, tokens per target pass {s.get('tokens_per_target_pass')}")


def try_openai(base_url: str, api_key: str, max_tokens: int) -> bool:
    import openai

    section(f"openai {openai.__version__}")
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=1800)
    model = client.models.list().data[0].id
    print("models.retrieve:", client.models.retrieve(model).id)
    msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    t0 = time.perf_counter()
    r1 = client.chat.completions.create(model=model, messages=msgs, tools=[WEATHER_TOOL], temperature=0,
                                        max_tokens=max_tokens)
    m1 = r1.choices[0].message
    print(f"step 1 ({time.perf_counter() - t0:.0f} s): finish_reason {r1.choices[0].finish_reason}, "
          f"tool_calls {[(c.function.name, c.function.arguments) for c in m1.tool_calls or []]}, "
          f"content {m1.content!r}")
    print("  " + spec_line(r1))
    streamed = list(client.chat.completions.create(model=model, messages=msgs, tools=[WEATHER_TOOL], temperature=0,
                                                   max_tokens=max_tokens, stream=True))
    args = "".join(tc.function.arguments or "" for ch in streamed if ch.choices
                   for tc in ch.choices[0].delta.tool_calls or [])
    same = bool(m1.tool_calls) and args == m1.tool_calls[0].function.arguments
    print(f"step 1 streamed: arguments reassembled {args!r}, equal to the non-streamed: {same}")
    if not m1.tool_calls:
        print("FAILED: no tool call")
        return False
    msgs += [m1.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": m1.tool_calls[0].id, "content": '{"temperature_c": 17, "sky": "rain"}'}]
    t0 = time.perf_counter()
    r2 = client.chat.completions.create(model=model, messages=msgs, tools=[WEATHER_TOOL], tool_choice="none",
                                        temperature=0, max_tokens=max_tokens)
    print(f"step 2 ({time.perf_counter() - t0:.0f} s): finish_reason {r2.choices[0].finish_reason}, "
          f"content {r2.choices[0].message.content!r}")
    print("  " + spec_line(r2))
    return same and "17" in (r2.choices[0].message.content or "")


LITELLM_SNIPPET = """
import sys, litellm
from importlib.metadata import version
base, key = sys.argv[1], sys.argv[2]
print("litellm", version("litellm"))
tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
r = litellm.completion(model="openai/localspec", api_base=base, api_key=key, temperature=0, max_tokens=48,
                       messages=[{"role": "user", "content": "What is the weather in Paris right now?"}], tools=[tool])
m = r.choices[0].message
print("tool call:", r.choices[0].finish_reason, [(c.function.name, c.function.arguments) for c in m.tool_calls or []])
try:
    litellm.completion(model="openai/localspec", api_base=base, api_key=key, max_tokens=8,
                       messages=[{"role": "user", "content": "word " * 200000}])
    print("context overflow: no error"); sys.exit(1)
except litellm.ContextWindowExceededError as e:
    print("context overflow: ContextWindowExceededError:", str(e)[:160])
sys.exit(0 if m.tool_calls else 1)
"""


def try_litellm(python: str, base_url: str, api_key: str) -> bool:
    section("LiteLLM")
    r = subprocess.run([python, "-c", LITELLM_SNIPPET, base_url, api_key], text=True, capture_output=True, timeout=3600)
    print(r.stdout.strip() or r.stderr.strip()[-2000:])
    return r.returncode == 0


def try_aider(aider: str, base_url: str, api_key: str, n_ctx: int, edit_format: str) -> bool:
    version = subprocess.run([aider, "--version"], text=True, capture_output=True).stdout.strip()
    section(f"{version}, --edit-format {edit_format}")
    d = workdir()
    (d / ".aider.model.metadata.json").write_text(json.dumps({"openai/localspec": {
        "max_input_tokens": n_ctx, "max_output_tokens": n_ctx, "input_cost_per_token": 0,
        "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"}}))
    cmd = [aider, "--openai-api-base", base_url, "--openai-api-key", api_key, "--model", "openai/localspec",
           "--yes-always", "--no-auto-commits", "--no-check-update", "--no-analytics", "--no-show-model-warnings",
           "--edit-format", edit_format, "--no-stream", "--map-tokens", "0",
           "--message", "Rename the function greet to welcome, everywhere in hello.py.", "hello.py"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=d, text=True, capture_output=True, timeout=3600,
                       env={**os.environ, "HOME": str(d), "AIDER_CHECK_UPDATE": "false"})
    out = (r.stdout + r.stderr).strip()
    print(textwrap.indent(out[-2500:], "  "))
    text = (d / "hello.py").read_text()
    print(f"hello.py after {time.perf_counter() - t0:.0f} s:\n" + textwrap.indent(text, "  "))
    done_with(d)
    return r.returncode == 0 and "def welcome" in text and "greet" not in text


def try_continue(cn: str, base_url: str, api_key: str) -> bool:
    version = subprocess.run([cn, "--version"], text=True, capture_output=True).stdout.strip()
    section(f"Continue CLI (@continuedev/cli) {version}")
    d = workdir()
    home = d / "home"
    (home / ".continue").mkdir(parents=True)
    config = home / ".continue" / "config.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: localspec
        version: 0.0.1
        schema: v1
        models:
          - name: localspec
            provider: openai
            model: localspec
            apiBase: {base_url}
            apiKey: {api_key}
            roles: [chat, edit, apply]
        """))
    ok = True
    for prompt, extra in (("Say hello", []),
                          ("Read hello.py with the Read tool and tell me the name of the function defined in it.",
                           ["--auto"])):
        t0 = time.perf_counter()
        r = subprocess.run([cn, "-p", prompt, "--config", str(config), *extra], cwd=d, text=True,
                           capture_output=True, timeout=3600, env={**os.environ, "HOME": str(home)})
        print(f"cn -p {prompt!r} {' '.join(extra)} -> exit {r.returncode} after {time.perf_counter() - t0:.0f} s:")
        print(textwrap.indent((r.stdout + r.stderr).strip()[-1500:] or "(no output)", "  "))
        answered = bool(r.stdout.strip()) and ("--auto" not in extra or "greet" in r.stdout)
        ok = ok and r.returncode == 0 and answered
    done_with(d)
    return ok


CODEX_TASK = "Create a file named hi.txt in the current directory containing the word hi."
QWEN_TASK = "Read hello.py and tell me the name of the function defined in it."


def codex_config(base_url: str, model: str, timeout_s: float) -> str:
    """Codex CLI's ``config.toml`` for localspec (docs/clients.md): the Responses API, no retries, no
    update check, analytics or sub-agents (offline), streams idle for up to ``timeout_s`` seconds."""
    return textwrap.dedent(f"""\
        model = "{model}"
        model_provider = "localspec"
        approval_policy = "never"
        sandbox_mode = "danger-full-access"
        web_search = "disabled"
        check_for_update_on_startup = false

        [analytics]
        enabled = false

        [agents]
        enabled = false

        [model_providers.localspec]
        name = "localspec"
        base_url = "{base_url}"
        wire_api = "responses"
        request_max_retries = 0
        stream_max_retries = 0
        stream_idle_timeout_ms = {int(timeout_s * 1000)}
        """)


def try_codex(codex: str, base_url: str, model: str) -> bool:
    """``codex exec`` on a small task, with docs/clients.md's config.toml in a temporary CODEX_HOME."""
    version = subprocess.run([codex, "--version"], text=True, capture_output=True).stdout.strip()
    section(f"Codex CLI (@openai/codex) {version}")
    d = workdir()
    home = d / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(codex_config(base_url, model, CLIENT_TIMEOUT))
    t0 = time.perf_counter()
    try:
        r = subprocess.run([codex, "exec", "--skip-git-repo-check", CODEX_TASK], cwd=d, text=True,
                           capture_output=True, timeout=CLIENT_TIMEOUT, stdin=subprocess.DEVNULL,
                           env={**os.environ, "CODEX_HOME": str(home)})
        out, rc = (r.stdout + r.stderr).strip(), r.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = f"(stopped after {CLIENT_TIMEOUT} s)\n" + (e.stdout or b"").decode()[-2000:], None
    print(f"codex exec {CODEX_TASK!r} -> exit {rc} after {time.perf_counter() - t0:.0f} s:")
    print(textwrap.indent(out[-3000:] or "(no output)", "  "))
    made = (d / "hi.txt").read_text() if (d / "hi.txt").exists() else None
    print(f"hi.txt: {made!r}")
    done_with(d)
    return rc == 0 and made is not None and "hi" in made


#: the server's counters read around each Qwen Code task (``/metrics``)
QWEN_METRICS = ("localspec_requests_total", "localspec_prompt_tokens_total", "localspec_prompt_tokens_cached_total",
                "localspec_prompt_tokens_read_total", "localspec_tokens_predicted_total", "localspec_prefill_seconds_total")


def server_metrics(base_url: str, api_key: str) -> dict[str, float]:
    """The counters of :data:`QWEN_METRICS` from the server's ``/metrics`` (summed over labels)."""
    import re
    import urllib.request

    root = base_url.rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(root + "/metrics", headers={"Authorization": f"Bearer {api_key}"})
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    return {name: sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))
            for name in QWEN_METRICS}


def server_n_ctx(base_url: str, api_key: str) -> int:
    """The context window (tokens) of the first model the server lists (``GET /v1/models``, its ``n_ctx``)."""
    import urllib.request

    req = urllib.request.Request(base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {api_key}"})
    return int(json.loads(urllib.request.urlopen(req, timeout=30).read())["data"][0]["n_ctx"])


def qwen_log_lines(log_dir: Path, seen: set[str]) -> list[str]:
    """One line per request Qwen Code logged in ``log_dir`` (``--openai-logging``) and not in ``seen``
    (which gains them), oldest first: its prompt id, messages sent, finish reason, the tool calls and
    the text of the answer (cut to 300 characters)."""
    lines = []
    for f in sorted(log_dir.glob("openai-*.json")) if log_dir.is_dir() else []:
        if f.name in seen:
            continue
        seen.add(f.name)
        data = json.loads(f.read_text())
        choice = ((data.get("response") or {}).get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        calls = [(c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
                 for c in msg.get("tool_calls") or []]
        lines.append(f"{(data.get('context') or {}).get('promptId')}: {len(data['request'].get('messages', []))} "
                     f"messages, finish {choice.get('finish_reason')}, tool_calls {calls}, "
                     f"content {(msg.get('content') or '')[:300]!r}"
                     + (f", error {str(data['error'])[:300]}" if data.get("error") else ""))
    return lines


def try_qwen(qwen: str, base_url: str, api_key: str, model: str, tool_call_style: str = "",
             log_dir: Path | None = None, task: str = QWEN_TASK) -> bool:
    """``qwen -p`` (Qwen Code, headless): "Say hello", then a task that needs its read_file tool, with
    --yolo; nothing but docs/clients.md's configuration (no max-tokens or idle-timeout overrides: the server
    caps max_tokens at the room left and keeps the stream alive while it reads the prompt). Prints each
    task's wall time and what the server read: prompt tokens sent, cached, read (``/metrics``).

    ``tool_call_style``: Qwen Code's ``QWEN_CODE_TOOL_CALL_STYLE`` (the form of the tool-call examples
    in its system prompt: ``qwen-vl`` writes Qwen2.5's ``<tool_call>{json}</tool_call>``; empty: unset,
    Qwen Code picks by the model's name). ``log_dir``: Qwen Code's ``--openai-logging-dir`` (outside
    the work folder, whose file tree is in the prompt); each request is then printed, with its answer's
    tool calls. ``task``: the read-file task's wording, ``{dir}`` standing for the work folder's path."""
    version = subprocess.run([qwen, "--version"], text=True, capture_output=True).stdout.strip()
    section(f"Qwen Code (@qwen-code/qwen-code) {version}")
    d = workdir()
    home = d / "home"
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}, "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}))
    env = {**os.environ, "HOME": str(home), "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key,
           "OPENAI_MODEL": model, "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
           # the 15-minute cap on a stream's total wait, which the first prompt's reading may pass on a slow CPU
           "QWEN_STREAM_MAX_LIFETIME_MS": str(CLIENT_TIMEOUT * 1000)}
    if tool_call_style:
        env["QWEN_CODE_TOOL_CALL_STYLE"] = tool_call_style
    print(f"QWEN_CODE_TOOL_CALL_STYLE={tool_call_style or '(unset)'}, model {model}")
    logging = ["--openai-logging", "--openai-logging-dir", str(log_dir)] if log_dir else []
    seen: set[str] = set()
    ok = True
    task = task.format(dir=d)
    for prompt in ("Say hello", task):
        before = server_metrics(base_url, api_key)
        t0 = time.perf_counter()
        try:
            r = subprocess.run([qwen, "--yolo", *logging, "-p", prompt], cwd=d, text=True, capture_output=True,
                               timeout=CLIENT_TIMEOUT, stdin=subprocess.DEVNULL, env=env)
            out, rc = (r.stdout + r.stderr).strip(), r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = f"(stopped after {CLIENT_TIMEOUT} s)\n" + (e.stdout or b"").decode()[-2000:], None
        seconds = time.perf_counter() - t0
        after = server_metrics(base_url, api_key)
        delta = {k.removeprefix("localspec_").removesuffix("_total"): round(after[k] - before[k], 1) for k in after}
        print(f"qwen --yolo -p {prompt!r} -> exit {rc} after {seconds:.0f} s:")
        print(textwrap.indent(out[-2000:] or "(no output)", "  "))
        print("  server: " + json.dumps(delta))
        for line in qwen_log_lines(log_dir, seen) if log_dir else []:
            print("  request " + line)
        ok = ok and rc == 0 and (prompt != task or "greet" in out)
    done_with(d)
    return ok


OPENCODE_TASK = "Read hello.py and tell me the name of the function defined in it."
#: opencode's switches for a run that reaches no network but the server's: no update check, no
#: models.dev catalogue fetch, no session sharing, no language-server downloads, no default plugins, no
#: reading of Claude Code's or other agents' files (skills)
def opencode_message(prompt: str) -> list[str]:
    """``prompt`` as ``opencode run``'s message arguments: one per space-separated word. opencode 1.18 joins
    its message arguments with spaces and wraps every argument holding a space in double quotes (its run
    command: ``includes(" ") ? `"${arg}"` : arg``), so a prompt passed as one argument reached the model as
    ``"Read the file ..."``, quotes included; word by word it arrives as typed (newlines kept inside words,
    a run of spaces becomes one). They follow ``--``: a word such as ``-m`` (the test task's ``python3 -m
    unittest``) would otherwise be read as opencode's own option (``-m`` is its ``--model``; the run ended at
    once with "Unexpected server error" and sent nothing)."""
    return ["--", *(w for w in prompt.split(" ") if w)]


OPENCODE_OFFLINE_ENV = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                        "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
                        "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1"}
#: opencode 1.18's built-in tools as its build agent sends them
OPENCODE_TOOLS = ("bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write")


def opencode_config(base_url: str, api_key: str, model: str, n_ctx: int, tools: list[str] | None = None) -> dict:
    """opencode's ``opencode.json`` for the server: a provider ``localspec`` on ``@ai-sdk/openai-compatible``
    (``baseURL`` = ``base_url``, the ``/v1`` root) with one model ``model`` (context ``n_ctx`` tokens, at most
    4,096 answered), chosen as the default; autoupdate and sharing off. ``tools``: the only tools left on
    (opencode's names, e.g. ``["read"]``; the others are turned off, which shortens its prompt); None: all."""
    config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
              "model": f"localspec/{model}",
              "provider": {"localspec": {
                  "npm": "@ai-sdk/openai-compatible", "name": "localspec",
                  "options": {"baseURL": base_url, "apiKey": api_key},
                  "models": {model: {"name": model, "tool_call": True,
                                     "limit": {"context": n_ctx, "output": min(4096, n_ctx)}}}}}}
    if tools is not None:
        config["tools"] = {name: name in tools for name in OPENCODE_TOOLS} | {name: True for name in tools}
    return config



def json_events(stdout: str) -> list[dict]:
    """The JSON objects of ``opencode run --format json``'s output, one a line; other lines are skipped."""
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def opencode_steps(stdout: str) -> list[str]:
    """One line per model request of ``opencode run --format json``'s output (its ``step_finish`` events):
    why the step ended (``tool-calls``, ``stop``, ...) and the tokens the server reported (prompt, answer)."""
    steps = []
    for event in json_events(stdout):
        if event.get("type") == "step_finish":
            part = event.get("part") or {}
            tokens = part.get("tokens") or {}
            steps.append(f"step {len(steps) + 1}: {part.get('reason')}, prompt tokens {tokens.get('input')} read + "
                         f"{(tokens.get('cache') or {}).get('read')} cached, answer tokens {tokens.get('output')}")
    return steps


def opencode_verdict(stdout: str, function: str = "greet") -> tuple[bool, str, list[str], str]:
    """Judge ``opencode run --format json``'s output (one JSON event a line; other lines are skipped):
    the read tool must have completed on ``hello.py`` and the answer, the text written after the last
    tool call, must name ``function``. Returns (passed, the reason, one line per tool call: its name,
    status, input and the first 120 characters of its output or error, the answer)."""
    events = json_events(stdout)
    calls, answer, read, errors = [], [], False, []
    for event in events:
        part = event.get("part") or {}
        if event.get("type") == "tool_use":
            state = part.get("state") or {}
            result = str(state.get("output") or state.get("error") or "")
            calls.append(f"{part.get('tool')} {state.get('status')} {json.dumps(state.get('input'))} -> {result[:120]!r}")
            path = str((state.get("input") or {}).get("filePath", ""))
            read = read or (part.get("tool") == "read" and state.get("status") == "completed"
                            and Path(path).name == "hello.py")
            answer = []
        elif event.get("type") == "text":
            answer.append(part.get("text") or "")
        elif event.get("type") == "error":
            errors.append(json.dumps(event.get("error"))[:300])
    text = "".join(answer).strip()
    if errors:
        return False, "opencode reported an error: " + "; ".join(errors), calls, text
    if not read:
        return False, "the read tool never completed on hello.py", calls, text
    if function not in text:
        return False, f"the read tool ran, but the answer after it does not name {function}", calls, text
    return True, f"the read tool ran on hello.py and the answer names {function}", calls, text


def try_opencode(opencode: str, base_url: str, api_key: str, model: str, n_ctx: int, task: str = OPENCODE_TASK,
                 tools: list[str] | None = None) -> bool:
    """``opencode run --format json TASK`` in a work folder holding ``hello.py``, with
    :func:`opencode_config` in a temporary folder that also holds opencode's HOME and XDG folders (its
    sessions, caches, logs), :data:`OPENCODE_OFFLINE_ENV`, ``--pure`` (no external plugins) and ``--title``
    (no extra request for a session title). Prints the tool calls, the answer, the wall time and the
    server's prompt tokens sent / cached / read (``/metrics``), then PASS or FAIL with the reason
    (:func:`opencode_verdict`)."""
    version = subprocess.run([opencode, "--version"], text=True, capture_output=True).stdout.strip()
    section(f"opencode (opencode-ai) {version}")
    d = workdir()
    iso = Path(tempfile.mkdtemp(prefix="localspec-opencode-"))
    config = iso / "opencode.json"
    config.write_text(json.dumps(opencode_config(base_url, api_key, model, n_ctx, tools), indent=2))
    # PWD too: opencode takes its working directory from it, not from the process's
    env = {**os.environ, **OPENCODE_OFFLINE_ENV, "HOME": str(iso / "home"), "OPENCODE_CONFIG": str(config), "PWD": str(d),
           **{f"XDG_{k}_HOME": str(iso / k.lower()) for k in ("CONFIG", "DATA", "CACHE", "STATE")}}
    print(f"config {config}:\n" + textwrap.indent(config.read_text(), "  "))
    task = task.format(dir=d)
    before = server_metrics(base_url, api_key)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([opencode, "run", "--pure", "--format", "json", "--title", "localspec try", *opencode_message(task)],
                           cwd=d,
                           text=True, capture_output=True, timeout=CLIENT_TIMEOUT, stdin=subprocess.DEVNULL, env=env)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode(), f"(stopped after {CLIENT_TIMEOUT} s)", None
    seconds = time.perf_counter() - t0
    after = server_metrics(base_url, api_key)
    delta = {k.removeprefix("localspec_").removesuffix("_total"): round(after[k] - before[k], 1) for k in after}
    ok, reason, calls, answer = opencode_verdict(out)
    print(f"opencode run {task!r} -> exit {rc} after {seconds:.0f} s")
    for step in opencode_steps(out):
        print("  " + step)
    for call in calls:
        print("  tool " + call)
    print(f"  answer: {answer!r}")
    if err.strip():
        print("  stderr:\n" + textwrap.indent(err.strip()[-1500:], "    "))
    print("  server: " + json.dumps(delta))
    ok = ok and rc == 0
    print(f"opencode: {'PASS' if ok else 'FAIL'}: {reason}" + ("" if rc == 0 else f" (exit {rc})"))
    shutil.rmtree(iso, ignore_errors=True)
    done_with(d)
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    p.add_argument("--api-key", default="none", help="the server's --api-key (any text without one)")
    p.add_argument("--n-ctx", type=int, help="the server's context window, for aider's metadata file and opencode's "
                   "model limit (default: the n_ctx that the server's GET /v1/models gives)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--litellm-python", help="a Python interpreter with litellm installed")
    p.add_argument("--aider", help="the aider executable")
    p.add_argument("--aider-formats", default="whole,diff", help="aider's edit formats to try, comma-separated")
    p.add_argument("--cn", help="the Continue CLI executable (cn)")
    p.add_argument("--codex", help="the Codex CLI executable (codex)")
    p.add_argument("--qwen", help="the Qwen Code executable (qwen)")
    p.add_argument("--qwen-tool-call-style", default="qwen-vl", metavar="STYLE",
                   help="Qwen Code's QWEN_CODE_TOOL_CALL_STYLE: qwen-vl (default: Qwen2.5's <tool_call>{json} form), "
                   "qwen-coder (Qwen3-Coder's XML form), general, gemma4; '' = unset (chosen by the model's name)")
    p.add_argument("--qwen-log-dir", type=Path, help="Qwen Code's --openai-logging-dir (outside --workdir): print "
                   "every request it sent, with the answer's tool calls")
    p.add_argument("--qwen-task", default=QWEN_TASK, help="Qwen Code's read-file task ({dir}: the work folder's "
                   "path), e.g. 'Call the read_file tool with file_path {dir}/hello.py, then tell me the name of the "
                   "function defined in it.'")
    p.add_argument("--opencode", help="the opencode executable (npm opencode-ai)")
    p.add_argument("--opencode-task", default=OPENCODE_TASK, help="opencode's read-file task ({dir}: the work "
                   "folder's path)")
    p.add_argument("--opencode-tools", help="the only opencode tools left on, comma-separated (e.g. read; the "
                   f"others, of {','.join(OPENCODE_TOOLS)}, are turned off); default all")
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="the model name Codex, Qwen Code and opencode send")
    p.add_argument("--client-timeout", type=int, default=900, help="seconds for each Codex / Qwen Code / opencode "
                   "run")
    p.add_argument("--skip-openai", action="store_true")
    p.add_argument("--workdir", type=Path, help="run the clients in this folder (kept) instead of a fresh temporary "
                   "one each, so that an agent started again, against a restarted server, sends the same prompt "
                   "(its git commit and path are in Qwen Code's); made here when it holds no hello.py")
    ns = p.parse_args()
    global CLIENT_TIMEOUT, WORKDIR
    CLIENT_TIMEOUT = ns.client_timeout
    WORKDIR = ns.workdir.resolve() if ns.workdir else None
    if ns.n_ctx is None and (ns.aider or ns.opencode):
        ns.n_ctx = server_n_ctx(ns.base_url, ns.api_key)
    results = {}
    if not ns.skip_openai:
        results["openai"] = try_openai(ns.base_url, ns.api_key, ns.max_tokens)
    if ns.litellm_python:
        results["litellm"] = try_litellm(ns.litellm_python, ns.base_url, ns.api_key)
    if ns.aider:
        for fmt in ns.aider_formats.split(","):
            results[f"aider {fmt}"] = try_aider(ns.aider, ns.base_url, ns.api_key, ns.n_ctx, fmt)
    if ns.cn:
        results["continue"] = try_continue(ns.cn, ns.base_url, ns.api_key)
    if ns.codex:
        results["codex"] = try_codex(ns.codex, ns.base_url, ns.model)
    if ns.qwen:
        results["qwen code"] = try_qwen(ns.qwen, ns.base_url, ns.api_key, ns.model, ns.qwen_tool_call_style,
                                        ns.qwen_log_dir.resolve() if ns.qwen_log_dir else None, ns.qwen_task)
    if ns.opencode:
        results["opencode"] = try_opencode(ns.opencode, ns.base_url, ns.api_key, ns.model, ns.n_ctx, ns.opencode_task,
                                           ns.opencode_tools.split(",") if ns.opencode_tools else None)
    section("summary")
    for name, ok in results.items():
        print(f"{name}: {'ok' if ok else 'FAILED'}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
