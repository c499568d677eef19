"""The ``fsmatrix`` command line: the top group ``main`` and its command groups, one module each.

run.py        run, cleanup
bisect.py     bisect
matrix.py     matrix expand / settings
workload.py   workload NAME (generated from each workload's declaration)
results.py    compare, report, calibrate, results merge / reindex / push / list
history.py    history
image.py      image build / path / list / prune / probe-accel
container.py  container build / tag / prune
libvirt.py    libvirt start / stop / status
vagrant.py    vagrant spec
slurm.py      slurm status / collect
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from fsmatrix import __version__
from fsmatrix.cli import bisect, container, history, image, libvirt, matrix, results, run, slurm, vagrant, workload
from fsmatrix.errors import UserError, interrupt_on_sigterm
from fsmatrix.results.store import url as store_url


class _Group(click.Group):
    """Turns UserError into one line on stderr and exit status 2; Ctrl-C into exit status 130."""

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
            click.echo("fsmatrix: interrupted; cleaned up (re-run the same command to resume)", err=True)
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


main.add_command(matrix.matrix_group, "matrix")
main.add_command(run.run, "run")
main.add_command(run.cleanup, "cleanup")
main.add_command(results.results_group, "results")
main.add_command(workload.workload_group, "workload")
main.add_command(image.image_group, "image")
main.add_command(container.container_group, "container")
main.add_command(libvirt.libvirt_group, "libvirt")
main.add_command(results.report_cmd, "report")
main.add_command(results.compare_cmd, "compare")
main.add_command(results.calibrate_cmd, "calibrate")
main.add_command(vagrant.vagrant_group, "vagrant")
main.add_command(bisect.bisect, "bisect")
main.add_command(slurm.slurm_group, "slurm")
main.add_command(history.history, "history")
