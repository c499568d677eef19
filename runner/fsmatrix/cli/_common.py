"""Helpers shared by several command modules of ``fsmatrix.cli``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from fsmatrix.errors import UserError


def writable_directory(path: Path, option: str) -> None:
    """Create ``path`` if missing and prove it takes a file, or refuse with one line (exit 2)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UserError(f"{option} {path}: not a writable directory ({exc.strerror or exc})") from exc


def echo_err(message: str) -> None:
    """A progress or status line on stderr (stdout keeps what scripts read: a path, a name)."""
    click.echo(message, err=True)


RESULTS_OPTION = click.option(
    "--results",
    "results_root",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Results root: where run ids are looked up, and calibrations stored.",
)

STORE_OPTION = click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="The database store: sqlite:///PATH or postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (libpq's forms too). "
    "Default: $FSMATRIX_STORE, else sqlite:///RESULTS/store.sqlite. A password is never shown.",
)

# Store-wide selections: `results list`, `history`, `calibrate`.
ONLY_OPTION = click.option(
    "--only", "only", multiple=True, help="Cells whose id matches this glob (repeatable, or comma list)."
)
SINCE_OPTION = click.option(
    "--since", default=None, metavar="DATE", help="Runs started on or after DATE (YYYY-MM-DD[THH:MM], UTC)."
)
