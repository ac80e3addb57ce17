"""scripts/record_agent_tasks.py's command lines: the task runs as a new session, each follow-up continues
that session with the client's own resume switch (issue 45 item 1: sessions of at least 5 user turns), and
the configuration under the agent's HOME is written once and kept. Nothing is run: the command lines are
checked against the switches of the clients' ``--help`` (Qwen Code 0.15.10, opencode 1.18.33, Codex CLI
0.171.0)."""

import pytest


@pytest.mark.parametrize("client,first,resumed", [
    ("qwen", ["--auth-type", "openai", "--yolo", "-p"], ["--auth-type", "openai", "--yolo", "--continue", "-p"]),
    ("opencode", ["run", "--pure", "--format", "json", "--title", "localspec task"],
     ["run", "--pure", "--format", "json", "--continue"]),
    ("codex", ["exec", "--skip-git-repo-check"], ["exec", "resume", "--last", "--skip-git-repo-check"]),
])
def test_a_follow_up_continues_the_same_session(record_agent_tasks, tmp_path, client, first, resumed):
    home = tmp_path / "home"
    cmd, env = record_agent_tasks.agent_command(client, "/bin/agent", "the task", "http://127.0.0.1:1/v1", home, 60)
    # opencode quotes any message argument holding a space, so it gets the task word by word
    task = ["--", "the", "task"] if client == "opencode" else ["the task"]
    assert cmd == ["/bin/agent", *first, *task]
    assert env["HOME"] == str(home)
    written = sorted(p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file())
    assert written, "the client's configuration is written under its HOME"
    before = {p: p.read_text() for p in home.rglob("*") if p.is_file()}
    cmd, env2 = record_agent_tasks.agent_command(client, "/bin/agent", "next", "http://127.0.0.1:1/v1", home, 60,
                                                 resume=True)
    assert cmd == ["/bin/agent", *resumed, *(["--"] if client == "opencode" else []), "next"]
    assert {p: p.read_text() for p in home.rglob("*") if p.is_file()} == before
    assert {k: v for k, v in env2.items()} == {k: v for k, v in env.items()}


def test_every_task_has_four_follow_ups_naming_files_by_their_absolute_path(record_agent_tasks):
    repo = str(record_agent_tasks.REPO)
    assert set(record_agent_tasks.FOLLOW_UPS) == set(record_agent_tasks.TASKS)
    for task, follow_ups in record_agent_tasks.FOLLOW_UPS.items():
        assert len(follow_ups) == 4 and len(set(follow_ups)) == 4, task
        for text in follow_ups:
            for word in text.replace("`", " ").split():
                if word.endswith((".py", ".md", ".py.", ".md.")) and "/" in word:
                    assert word.startswith(repo), (task, word)


def test_opencode_gets_the_prompt_word_by_word_so_it_adds_no_quotes(record_agent_tasks, tmp_path):
    """opencode 1.18.33's ``run`` joins its message arguments and wraps each one holding a space in double quotes;
    the recorded opencode sessions before this fix show it: the user message was ``"Read the file ..."``."""
    opencode_message = record_agent_tasks.try_agents.opencode_message
    prompt = "Read the file /tmp/r/a.py and tell me\nwhat 'slugify' returns."
    words = opencode_message(prompt)
    assert words[0] == "--" and " ".join(words[1:]) == prompt and not any(" " in w for w in words)
    cmd, _ = record_agent_tasks.agent_command("opencode", "/bin/agent", prompt, "http://127.0.0.1:1/v1",
                                              tmp_path, 60)
    assert cmd[-len(words):] == words


def test_an_opencode_prompt_word_that_looks_like_an_option_stays_in_the_message(record_agent_tasks, tmp_path):
    """The test task says ``python3 -m unittest``: without ``--`` before the words opencode took ``-m`` for its
    ``--model`` and ended at once, sending no request."""
    cmd, _ = record_agent_tasks.agent_command("opencode", "/bin/agent", record_agent_tasks.TASKS["test"],
                                              "http://127.0.0.1:1/v1", tmp_path, 60)
    i = cmd.index("--")
    assert "-m" in cmd[i:] and "-m" not in cmd[:i]
