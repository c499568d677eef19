"""The CLI imports a command's module only when the command is asked for (``fsmatrix.cli.COMMANDS``):
every command still resolves, and starting ``fsmatrix`` imports no statistics (numpy, scipy), which
every command-line test (a new ``python -m fsmatrix`` each) would otherwise pay for."""

from __future__ import annotations

import subprocess
import sys

import click

from fsmatrix import cli


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
