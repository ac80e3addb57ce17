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
    assert cmd == ["/bin/agent", *first, "the task"]
    assert env["HOME"] == str(home)
    written = sorted(p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file())
    assert written, "the client's configuration is written under its HOME"
    before = {p: p.read_text() for p in home.rglob("*") if p.is_file()}
    cmd, env2 = record_agent_tasks.agent_command(client, "/bin/agent", "next", "http://127.0.0.1:1/v1", home, 60,
                                                 resume=True)
    assert cmd == ["/bin/agent", *resumed, "next"]
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
