"""The ``fsmatrix`` command line: the top group ``main`` and its command groups, one module each.

run.py        run, cleanup
bisect.py     bisect
search.py     search
matrix.py     matrix expand / settings
workload.py   workload NAME (generated from each workload's declaration)
results.py    compare, report, calibrate
store.py      results push / list / merge / reindex
history.py    history
image.py      image build / path / list / prune / probe-accel
container.py  container build / tag / prune
libvirt.py    libvirt start / stop / status
vagrant.py    vagrant spec
slurm.py      slurm status / collect
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from fsmatrix import __version__
from fsmatrix.errors import INTERRUPTED, UserError, interrupt_on_sigterm
from fsmatrix.results.store import url as store_url

# Each command: its module in fsmatrix.cli and the command there, imported when it is asked for (run,
# or listed by --help): `fsmatrix matrix expand` does not import numpy and scipy for bisect's and the
# reports' statistics, and every command starts in a fraction of the time.
COMMANDS: dict[str, tuple[str, str]] = {
    "matrix": ("matrix", "matrix_group"),
    "run": ("run", "run"),
    "cleanup": ("run", "cleanup"),
    "results": ("results", "results_group"),
    "workload": ("workload", "workload_group"),
    "image": ("image", "image_group"),
    "container": ("container", "container_group"),
    "libvirt": ("libvirt", "libvirt_group"),
    "report": ("compare", "report_cmd"),
    "compare": ("compare", "compare_cmd"),
    "calibrate": ("compare", "calibrate_cmd"),
    "vagrant": ("vagrant", "vagrant_group"),
    "bisect": ("bisect", "bisect"),
    "search": ("search", "search"),
    "slurm": ("slurm", "slurm_group"),
    "history": ("history", "history"),
}


class _Group(click.Group):
    """Turns UserError into one line on stderr and exit status 2; Ctrl-C into exit status 130.
    Its commands are imported when asked for (``COMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, name = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(f"fsmatrix.cli.{module}"), name)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"fsmatrix: error: {exc}", err=True)
            sys.exit(exc.exit_status)
        except OSError as exc:
            # A file or directory the user named that cannot be read or written: one line, not a traceback.
            where = f": {exc.filename}" if exc.filename else ""
            click.echo(f"fsmatrix: error: {exc.strerror or exc}{where}", err=True)
            sys.exit(UserError.exit_status)
        except KeyboardInterrupt:
            click.echo(f"fsmatrix: {INTERRUPTED} (re-run the same command to resume)", err=True)
            sys.exit(130)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="fsmatrix")
@click.option("-v", "--verbose", is_flag=True, help="Log every command fsmatrix runs.")
def main(verbose: bool) -> None:
    """Which filesystem, mount options and database settings make a database fastest."""
    # The root logger passes everything (each run's log file wants DEBUG); the terminal gets warnings.
    handler = logging.StreamHandler()
    handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(message)s", handlers=[handler])
    interrupt_on_sigterm()
    store_url.take_from_environment()  # a store's password: for this process, never its children
