"""The CLI imports a command's module only when the command is asked for (``fsmatrix.cli.COMMANDS``):
every command still resolves, and starting ``fsmatrix`` imports no statistics (numpy, scipy), which
every command-line test (a new ``python -m fsmatrix`` each) would otherwise pay for; nor do the commands
that compute no statistics (a bad matrix is refused in a third of a second, not a second and a half)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import invoke
from fsmatrix import cli
from fsmatrix.cli import results as store_cli
from fsmatrix.results.store import url as store_urls


def test_every_command_resolves_and_is_listed() -> None:
    ctx = click.Context(cli.main)
    assert cli.main.list_commands(ctx) == sorted(cli.COMMANDS)
    for name in cli.COMMANDS:
        command = cli.main.get_command(ctx, name)
        assert isinstance(command, click.Command), name
    assert cli.main.get_command(ctx, "no-such-command") is None


def test_starting_the_cli_imports_no_statistics() -> None:
    probe = "import sys, fsmatrix.cli; print(sorted(m for m in ('numpy', 'scipy') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


# The commands' modules that must not import numpy, scipy or matplotlib: their reports and races import
# them where they are written or decided (fsmatrix.racing, fsmatrix.slurm, cli/run.py).
LIGHT_COMMANDS = ["run", "matrix", "results", "workload", "image", "container", "libvirt", "vagrant", "slurm"]


@pytest.mark.parametrize("module", LIGHT_COMMANDS)
def test_commands_without_statistics_import_none(module: str) -> None:
    heavy = "('numpy', 'scipy', 'matplotlib')"
    probe = f"import sys, fsmatrix.cli.{module}; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_the_probe_sees_a_command_that_computes() -> None:
    probe = "import sys, fsmatrix.cli.compare; print('scipy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "True"


def test_invoke_in_process_fails_on_what_would_be_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """conftest.invoke: a user's error is one line and exit status 2, as from the installed command;
    an exception that would print a traceback fails the test; the store URL it took is put back."""
    refused = invoke("results", "reindex", str(tmp_path / "missing"))
    assert refused.returncode == 2 and "does not exist" in refused.stderr and "Traceback" not in refused.stderr
    monkeypatch.setattr(store_cli.store, "reindex", lambda root: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        invoke("results", "reindex", str(tmp_path), env={store_urls.ENV: "sqlite:///elsewhere.sqlite"})
    assert store_urls._taken == []
