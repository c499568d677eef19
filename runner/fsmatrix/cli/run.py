"""``fsmatrix run`` and ``fsmatrix cleanup``."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from fsmatrix import matrix, workdirs
from fsmatrix.backends import BACKENDS
from fsmatrix.cli._common import writable_directory
from fsmatrix.cli.matrix import include_warnings
from fsmatrix.errors import UserError
from fsmatrix.results import answer, report

DEFAULT_WORKDIR = Path("/var/tmp/fsmatrix")

# Logs and progress go to stderr; wide tables when stderr is a log file rather than a terminal.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def workdir_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--workdir``, where runs keep their scratch files (the same default for every command)."""
    return click.option(
        "--workdir", type=click.Path(path_type=Path), default=DEFAULT_WORKDIR, show_default=True, help=help
    )


@click.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="host", show_default=True)
@click.option("--only", "only", multiple=True, help="Run cells whose id matches this glob (repeatable, or comma list).")
@click.option("--results", "results_root", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--run-id", default=None, help="Results go to RESULTS/RUN_ID (default: the matrix name).")
@click.option(
    "--repeat", type=click.IntRange(1, matrix.MAX_REPEAT), default=None, help="Override the matrix's repeat count."
)
@click.option("--scale", default=None, help="Run at this one of the file's `scales` (e.g. small; matrix/README.md).")
@click.option(
    "--settings",
    "settings_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Settings of the build under test (a YAML mapping, e.g. vm.kernel: /path/linux.deb, as a gate's prepare "
    "command prints them), laid over every cell's defaults; the cells keep their ids, so two builds' runs "
    "compare as the same cells (matrix/README.md, 'Settings of a build under test').",
)
@click.option("--force", is_flag=True, help="Run again what already completed (default: resume).")
@click.option(
    "--order",
    type=click.Choice(["cells", "rounds"]),
    default="cells",
    show_default=True,
    help="cells: every repeat of a cell, then the next cell; rounds: every cell once per round, so a change "
    "in the machine's load falls on all cells alike (use it when cells are compared with each other).",
)
@click.option(
    "--device",
    "devices",
    multiple=True,
    help="Format and use this block device instead of loop files (host) or image files (qemu: attached to the "
    "VM as its data disks, one per data disk of every cell) (repeatable). DESTROYS ITS DATA.",
)
@click.option(
    "--race/--no-race",
    "race",
    default=None,
    help="Race: rounds of every cell still in the race, and after each round from the minimum repeats on, "
    "cells significantly worse than their group's best by more than delta leave, and cells equivalent to it "
    "stop as tied (docs/statistics-and-gate.md, 'Racing'). Default: race when the matrix has `race:` "
    "(its settings; without it --race uses min 3, max the repeat count, delta 5 %, no budget). "
    "--repeat sets the maximum repeats of a race.",
)
@click.option("--yes", is_flag=True, help="Do not ask before formatting --device.")
@workdir_option("Scratch space for a run: loop image files and mount points (host), overlays and disks (qemu).")
def run(
    file: Path,
    backend: str,
    only: tuple[str, ...],
    results_root: Path,
    run_id: str | None,
    repeat: int | None,
    scale: str | None,
    settings_file: Path | None,
    force: bool,
    order: str,
    devices: tuple[str, ...],
    race: bool | None,
    yes: bool,
    workdir: Path,
) -> None:
    """Run the cells of matrix FILE and store one result per repeat."""
    from fsmatrix import runs

    m = matrix.load(file, scale, matrix.read_settings(settings_file) if settings_file else None)
    racing = _race_settings(m, file, race, repeat)
    cells = m.select(list(only))
    if not cells:
        raise UserError(f"--only {' '.join(only)} matches none of the {len(m.cells)} cells", file=str(file))
    for effect in m.includes:
        console.print(effect.describe(), markup=False, highlight=False)
    include_warnings(m)
    writable_directory(results_root, "--results")
    writable_directory(workdir, "--workdir")
    entry = BACKENDS[backend]
    if devices and not entry.takes_devices:
        takers = ", ".join(name for name, e in BACKENDS.items() if e.takes_devices)
        raise UserError(f"--device is for the {takers} backends; the {backend} backend makes its own disks")
    if devices:
        _confirm_devices(list(devices), yes)
    reaped = workdirs.reap(workdir)  # what runs that died (kill -9, OOM, power loss) left behind
    if reaped:
        console.print(f"removed what dead runs left in {workdir}: {'; '.join(reaped)}")
    chosen = entry.make(workdir, list(devices))
    run_id = run_id or m.name
    try:
        summary = runs.run_matrix(
            m,
            cells,
            chosen,
            results_root=results_root,
            run_id=run_id,
            repeat=repeat or m.repeat,
            force=force,
            console=console,
            order=order,
            race=racing,
        )
    finally:
        chosen.close()  # e.g. the libvirt backend stops the daemons it started
    console.print(runs.summary_table(summary, cells))
    path, found = report.write_report(summary.run_dir, f"{m.name} ({run_id})")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items()))
    console.print(f"{counts}{f' ({summary.reused} reused from an earlier run)' if summary.reused else ''}")
    if summary.race is not None:
        for line in runs.race_summary_lines(summary.race):
            click.echo(line)
    for line in answer.summary_lines(found):  # the answer's first lines, then the report's path, last
        click.echo(line)
    click.echo(f"report: {path.resolve()}")
    sys.exit(0 if summary.ok else 1)


def _race_settings(m: matrix.Matrix, file: Path, race: bool | None, repeat: int | None) -> matrix.RaceSettings | None:
    """The race to run: the matrix's ``race:`` (or the defaults with --race), its maximum repeats
    --repeat when given; None: the fixed design (--no-race, or no ``race:`` without --race)."""
    if race is False or (race is None and m.race is None):
        return None
    settings = m.race or matrix.RaceSettings(max_repeats=max(m.repeat, matrix.RACE_MIN_REPEATS))
    if repeat is not None:
        if repeat < settings.min_repeats:
            raise UserError(f"--repeat {repeat} is below the race's min_repeats ({settings.min_repeats})")
        settings = dataclasses.replace(settings, max_repeats=repeat)
    elif m.race is None and m.repeat < settings.min_repeats:
        raise UserError(
            f"--race: the matrix's repeat ({m.repeat}) is below the race's min_repeats ({settings.min_repeats}); "
            "give --repeat N (the race's maximum repeats, N >= 3) or a race: with max_repeats",
            file=str(file),
        )
    return settings


def _confirm_devices(devices: list[str], yes: bool) -> None:
    from fsmatrix.agent import storage

    blind = storage.host_view_problems()
    if blind:
        # In a container, other processes and the host's mounts would be invisible to the checks.
        raise UserError(
            f"--device refused: the device checks cannot see every user of a device here ({'; '.join(blind)}); "
            "run fsmatrix on the host, or in a container started with --pid=host"
        )
    for device in devices:
        try:
            storage.check_safe_to_format(device)
        except storage.UnsafeDevice as exc:
            raise UserError(f"refusing to use {device}: {exc}") from exc
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError(f"--device {' '.join(devices)} would be formatted; confirm with --yes (no terminal to ask on)")
    for device in devices:
        info = storage.describe_device(device)
        click.echo(f"{device}: {info.get('model') or 'unknown model'}, {info.get('size_bytes', 0) / 2**30:.1f} GiB")
    answer = click.prompt(f"ALL DATA on {', '.join(devices)} will be destroyed. Type 'yes' to continue", default="")
    if answer.strip() != "yes":
        raise UserError("not confirmed; nothing was changed")


@click.command("cleanup")
@workdir_option("The work directory whose dead runs to clean up.")
def cleanup(workdir: Path) -> None:
    """Remove what dead runs left in WORKDIR: their processes (QEMU, workload workers), mounts,
    loop devices and directories. A live run (its lock held) is never touched."""
    reaped = workdirs.reap(workdir)
    for item in reaped:
        click.echo(f"removed {item}")
    if not reaped:
        click.echo(f"nothing to clean up in {workdir}")
