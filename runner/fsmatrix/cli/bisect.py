"""``fsmatrix bisect``: the first commit of a git range that made a cell slower (docs/bisect.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fsmatrix import workdirs
from fsmatrix.backends import BACKENDS
from fsmatrix.bisect import driver
from fsmatrix.bisect import git as bisect_git
from fsmatrix.bisect.lab import one_cell
from fsmatrix.cli._common import echo_err, writable_directory
from fsmatrix.cli.run import workdir_option
from fsmatrix.errors import UserError
from fsmatrix.results.verdict import gate


@click.command("bisect")
@click.option(
    "--repo", type=click.Path(path_type=Path), required=True, help="The git repository whose history to walk."
)
@click.option("--good", required=True, help="A commit (any revision) where the cell was fast.")
@click.option("--bad", required=True, help="A later commit where it is slower.")
@click.option("--matrix", "matrix_file", type=click.Path(path_type=Path), required=True, help="The matrix file.")
@click.option("--only", required=True, help="The one cell of --matrix to follow (an id glob matching exactly one).")
@click.option(
    "--prepare",
    default=None,
    help="A command run in each commit's clone (bash -c) that builds what is under test and prints the "
    "settings to apply to the cell as YAML (e.g. 'vm.kernel: /path/linux.deb'); failing: the commit is skipped.",
)
@click.option(
    "--settings-file", default=None, help="Without --prepare: a YAML file of settings in each commit (repo-relative)."
)
@click.option("--metric", default=None, help="Decide on this metric (default: the gated one the ends show regressed).")
@click.option("--threshold", default="5%", show_default=True, help="A regression is worse by more than this.")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Bound on naming a wrong commit.")
@click.option(
    "--max-rounds", type=int, default=20, show_default=True, help="Rounds at most per step (the budget; then skip)."
)
@click.option("--max-skips", type=int, default=3, show_default=True, help="Skipped commits before the search stops.")
@click.option(
    "--confirm-rounds", type=int, default=8, show_default=True, help="Fresh pairs of the culprit and its parent."
)
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="host", show_default=True)
@click.option(
    "--results",
    "results_root",
    type=click.Path(path_type=Path),
    default=Path("results/bisect"),
    show_default=True,
    help="Where the runs, bisect.md and bisect.json go; the same command again resumes from them.",
)
@workdir_option("Scratch space for runs; the commits' temporary clones go under WORKDIR/bisect/.")
def bisect(
    repo: Path,
    good: str,
    bad: str,
    matrix_file: Path,
    only: str,
    prepare: str | None,
    settings_file: str | None,
    metric: str | None,
    threshold: str,
    alpha: float,
    max_rounds: int,
    max_skips: int,
    confirm_rounds: int,
    backend: str,
    results_root: Path,
    workdir: Path,
) -> None:
    """Find the first commit between --good and --bad that made the cell --only slower: each tested
    commit in a temporary clone, prepared, run interleaved with fresh runs of both ends, decided with
    the race's statistics. Exit 0: a culprit named and confirmed; 1: none (no regression, a range, or
    not confirmed); 2: bad input; 130: interrupted (the same command resumes)."""
    plan = driver.Plan(
        threshold=gate.parse_threshold(threshold),
        alpha=alpha,
        max_rounds=max_rounds,
        max_skips=max_skips,
        confirm_rounds=confirm_rounds,
        metric=metric,
    )
    plan.check()
    if (prepare is None) == (settings_file is None):
        raise UserError("give --prepare CMD or --settings-file FILE (one of them): how each commit sets up the cell")
    base = one_cell(matrix_file, only)
    commits = bisect_git.commits(repo, good, bad)
    writable_directory(results_root, "--results")
    writable_directory(workdir, "--workdir")
    reaped = workdirs.reap(workdir)
    if reaped:
        echo_err(f"removed what dead runs left in {workdir}: {'; '.join(reaped)}")
    from fsmatrix.bisect import session
    from fsmatrix.bisect.lab import LabSetup

    chosen = BACKENDS[backend].make(workdir, [])
    echo_err(f"bisect: {len(commits) - 1} commits after {commits[0].short}, cell {base.id}; results in {results_root}")
    try:
        setup = LabSetup(
            repo=repo,
            base=base,
            matrix_file=matrix_file,
            prepare=prepare,
            settings_file=settings_file,
            results_root=results_root,
            workdir=workdir,
        )
        report = session.run(setup, commits, chosen, plan, say=echo_err)
    finally:
        chosen.close()
    click.echo(report["markdown"], nl=False)
    confirmed = report["finding"] == "culprit" and (report["confirmation"] or {}).get("confirmed")
    sys.exit(0 if confirmed else 1)
