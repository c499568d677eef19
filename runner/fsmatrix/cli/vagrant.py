"""``fsmatrix vagrant spec``: what vagrant/Vagrantfile boots, as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fsmatrix.backends.vagrant import DRIVER_ENV, DRIVERS, NETWORK_ENV, NETWORKS, spec


@click.group("vagrant")
def vagrant_group() -> None:
    """`vagrant up` of one cell (see vagrant/README.md)."""


@vagrant_group.command("spec")
@click.option("--matrix", "matrix_file", type=click.Path(path_type=Path), envvar="FSMATRIX_MATRIX", default=None)
@click.option("--cell", "cell_id", envvar="FSMATRIX_CELL", default=None, help="Cell id (or a glob matching one).")
@click.option(
    "--driver", type=click.Choice(DRIVERS), default=None, help=f"libvirt driver (default: ${DRIVER_ENV}, else probed)."
)
@click.option(
    "--network", type=click.Choice(NETWORKS), default=None, help=f"(default: ${NETWORK_ENV}, else management)"
)
def spec_command(matrix_file: Path | None, cell_id: str | None, driver: str | None, network: str | None) -> None:
    """Print the JSON vagrant/Vagrantfile boots: box, driver, VM size, data disks, the cell's job."""
    click.echo(json.dumps(spec(matrix_file, cell_id or None, driver, network), indent=1))
