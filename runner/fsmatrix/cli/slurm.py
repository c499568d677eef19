"""``fsmatrix slurm status`` and ``fsmatrix slurm collect``: a run submitted with ``--detach``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fsmatrix import slurm
from fsmatrix.cli.run import console


@click.group("slurm")
def slurm_group() -> None:
    """Runs submitted to Slurm (`fsmatrix run --executor slurm --detach`)."""


_SUBMISSION = click.argument("submission", type=click.Path(path_type=Path))


@slurm_group.command("status")
@_SUBMISSION
def status(submission: Path) -> None:
    """The Slurm job of SUBMISSION (the --shared directory's RUN_ID folder): each task and the runs written."""
    slurm.check_installed()
    for line in slurm.describe_submission(slurm.Submission.load(submission)):
        click.echo(line)


@slurm_group.command("collect")
@_SUBMISSION
@click.option(
    "--results",
    "results_root",
    type=click.Path(path_type=Path),
    default=None,
    help="Merge into this results root (default: the one given when it was submitted).",
)
@click.option("--wait", "wait_", is_flag=True, help="Wait for the job's tasks first (default: refuse while they run).")
def collect(submission: Path, results_root: Path | None, wait_: bool) -> None:
    """Merge the shards of SUBMISSION into the results root and write the report, as `fsmatrix run` does
    at its end. Exit status 0 when every task ended with 0, 1 otherwise, 2 while tasks still run."""
    slurm.check_installed()
    sub = slurm.Submission.load(submission)
    if wait_ and sub.job_id:
        slurm.wait(sub, console)
    sys.exit(slurm.finish(slurm.collect(sub, results_root, console.print), click.echo))
