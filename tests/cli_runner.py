"""Run the ``localspec`` command line in-process (the CLI tests of every directory)."""

from localspec import cli


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``localspec ARGV``: (exit code, stdout, stderr); never a traceback on stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err
