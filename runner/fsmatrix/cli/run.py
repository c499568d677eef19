"""``fsmatrix run`` and ``fsmatrix cleanup``."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from fsmatrix import matrix, slurm, workdirs
from fsmatrix.backends import BACKENDS, Backend
from fsmatrix.cli._common import writable_directory
from fsmatrix.cli.matrix import include_warnings
from fsmatrix.errors import UserError
from fsmatrix.results import store
from fsmatrix.results.store import database
from fsmatrix.results.store import url as store_urls

if TYPE_CHECKING:
    from fsmatrix.runs import RunSummary

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
    "--repeat",
    type=click.IntRange(1, matrix.MAX_REPEAT),
    default=None,
    help="Run every cell exactly N times: fixed repeats, no race (with --race: the race's maximum repeats).",
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
@click.option(
    "--design-from",
    "design_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Take the matrix's design (a fraction's generators, a screening design's rows, an optimal design's cells) "
    "from this file instead of building it: a design record, as `matrix expand --format github` gives each "
    "shard, or a run's matrix.json. Refused when it was made for another design: or other settings.",
)
@click.option("--force", is_flag=True, help="Run again what already completed (default: resume).")
@click.option(
    "--push",
    is_flag=True,
    help="Push the results to the store (--store) at the end, and after each round of a run in rounds or a race; "
    "a store it cannot reach leaves the push pending (`fsmatrix results push` completes it) and the exit status "
    "the runs'.",
)
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="The store --push pushes to (default: $FSMATRIX_STORE, else sqlite:///RESULTS/store.sqlite).",
)
@click.option(
    "--order",
    type=click.Choice(["rounds", "cells"]),
    default=None,
    help="Fixed repeats' order. rounds (the default): every cell once per round, so a change in the machine's "
    "load falls on all cells alike; cells: every repeat of a cell, then the next cell. A race always runs in "
    "rounds.",
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
    help="Race (the default for a matrix whose cells form a comparison group: two or more cells of one "
    "workload and input): rounds of every cell still in the race; after each round from the minimum repeats "
    "on, cells significantly worse than their group's best leave (a one-sided test at the race's level, the "
    "answer's 'worse'), and cells equivalent to it within ±delta stop; the race stops when every group is "
    "decided, at the maximum repeats or when the budget is spent "
    "(docs/statistics-and-gate.md, 'Racing'). Settings: the matrix's `race:`, else min the matrix's repeat "
    "(at least 3), max 10, delta 5 %, no budget. --no-race, or --repeat N without --race: fixed repeats. "
    "A matrix without a comparison group, and --executor slurm, run fixed repeats.",
)
@click.option(
    "--budget",
    "budget",
    default=None,
    metavar="DURATION",
    help="A race's time budget (e.g. 90s, 30m, 2h, or seconds): the race stops at the end of the first round "
    "after which its runs took this long in all; replaces the matrix's race.budget.",
)
@click.option("--yes", is_flag=True, help="Do not ask before formatting --device.")
@workdir_option("Scratch space for a run: loop image files and mount points (host), overlays and disks (qemu).")
@click.option(
    "--executor",
    type=click.Choice(["local", "slurm"]),
    default="local",
    show_default=True,
    help="local: run here; slurm: submit the shards as a Slurm job array (one task per shard on a whole node), "
    "then merge and report here (docs/slurm.md).",
)
@click.option(
    "--shared",
    type=click.Path(path_type=Path),
    default=None,
    help="slurm: a directory every node reads and writes at this same path (the tasks' results and logs).",
)
@click.option("--shard-size", type=click.IntRange(1), default=None, help="slurm: cells per array task (default: 1).")
@click.option(
    "--detach",
    is_flag=True,
    help="slurm: submit and return; then `fsmatrix slurm status` and `fsmatrix slurm collect`.",
)
@click.option(
    "--kvm-gres",
    default=slurm.DEFAULT_KVM_GRES,
    show_default=True,
    help="slurm: the generic resource (gres.conf) for /dev/kvm the tasks ask for when the backend runs guests; "
    f"'{slurm.NO_GRES}' asks for none.",
)
@click.option(
    "--sbatch-arg", "sbatch_args", multiple=True, help="slurm: one more sbatch option (repeatable), e.g. --partition=x."
)
def run(
    file: Path,
    backend: str,
    only: tuple[str, ...],
    results_root: Path,
    run_id: str | None,
    repeat: int | None,
    scale: str | None,
    settings_file: Path | None,
    design_file: Path | None,
    force: bool,
    push: bool,
    store_url: str | None,
    order: str | None,
    devices: tuple[str, ...],
    race: bool | None,
    budget: str | None,
    yes: bool,
    workdir: Path,
    executor: str,
    shared: Path | None,
    shard_size: int | None,
    detach: bool,
    kvm_gres: str,
    sbatch_args: tuple[str, ...],
) -> None:
    """Run the cells of matrix FILE and store one result per repeat."""
    from fsmatrix import racing, runs

    slurm_only = {"--shared": shared is not None, "--shard-size": shard_size is not None, "--detach": detach}
    _check_executor(executor, shared, devices, race, {**slurm_only, "--sbatch-arg": bool(sbatch_args)})
    budget_s = _budget(budget)
    build = matrix.read_settings(settings_file) if settings_file else None
    # A design a run of this run id recorded, or the one a shard was given, is taken as it was
    # (matrix/design.py): shards and a resumed run never build it again.
    given = runs.design_from(design_file) if design_file is not None else None
    m = matrix.load(file, scale, build, lambda name: given or runs.stored_design(results_root / (run_id or name)))
    if given is not None and design_file is not None:
        runs.check_design_taken(m, given, design_file)
    pusher = Pusher(store_urls.resolve(store_url, results_root)) if push else None  # bad URLs before any run
    if store_url is not None and not push:
        raise UserError("--store names where --push pushes: give --push too")
    cells = m.select(list(only))
    if not cells:
        raise UserError(f"--only {' '.join(only)} matches none of the {len(m.cells)} cells", file=str(file))
    plan = racing.plan(m, cells, race=race, repeat=repeat, budget_s=budget_s, one_machine=executor != "slurm")
    if plan.race is not None and order == "cells":
        raise UserError("--order cells is for fixed repeats; a race runs in rounds: give --no-race (or --repeat N) too")
    order = order or "rounds"
    for effect in m.includes:
        console.print(effect.describe(), markup=False, highlight=False)
    include_warnings(m)
    writable_directory(results_root, "--results")
    run_id = run_id or m.name
    if executor == "slurm" and shared is not None:
        console.print(plan.why, markup=False, highlight=False)
        args = ["--backend", backend, "--workdir", str(workdir.resolve()), "--repeat", str(plan.repeat)]
        args += ["--order", order, "--no-race", *(["--scale", scale] if scale else [])]
        request = slurm.SlurmRequest(
            matrix=m, cells=cells, shared=shared, run_id=run_id, backend=backend, repeat=plan.repeat,
            results_root=results_root, shard_size=shard_size, task_args=args, force=force,
            settings_file=settings_file,
        )  # fmt: skip
        sys.exit(_run_on_slurm(request, _SlurmSubmit(detach, kvm_gres, sbatch_args)))
    chosen = local_backend(backend, devices, yes, workdir)
    options = runs.RunOptions(results_root, run_id, plan, force, order, build)
    try:
        summary = runs.run_matrix(
            m, cells, chosen, options, console, (lambda: pusher.push(results_root / run_id)) if pusher else None
        )
    finally:
        chosen.close()  # e.g. the libvirt backend stops the daemons it started
    _report(f"{m.name} ({run_id})", cells, summary, pusher)
    sys.exit(0 if summary.ok else 1)


def _check_executor(
    executor: str,
    shared: Path | None,
    devices: tuple[str, ...],
    race: bool | None,
    slurm_only: dict[str, bool],
) -> None:
    """--executor slurm's own checks (``_check_slurm``); without it, UserError for the options that are
    for it only (``slurm_only``: option -> whether it was given)."""
    if executor == "slurm":
        _check_slurm(shared, devices, race)
        return
    given = [option for option, on in slurm_only.items() if on]
    if given:
        raise UserError(f"{', '.join(given)}: for --executor slurm only")


def local_backend(backend: str, devices: tuple[str, ...], yes: bool, workdir: Path) -> Backend:
    """The backend that runs here, made once --device is checked (and confirmed) and what dead runs
    left in ``workdir`` is reaped."""
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
    return entry.make(workdir, list(devices))


def _report(title: str, cells: list[matrix.MatrixCell], summary: RunSummary, pusher: Pusher | None) -> None:
    """After the runs: the summary table, the report written, the counts, the race, the push, the
    answer's first lines and the report's path, last."""
    from fsmatrix import racing, runs
    from fsmatrix.results.render import answer_text, markdown  # scipy, matplotlib: only for the report (slurm.py)

    console.print(runs.summary_table(summary, cells))
    path, found = markdown.write_report(summary.run_dir, title)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items()))
    console.print(f"{counts}{f' ({summary.reused} reused from an earlier run)' if summary.reused else ''}")
    if summary.race is not None:
        for line in racing.race_summary_lines(summary.race):
            click.echo(line)
    if pusher is not None:
        pusher.push(summary.run_dir, last=True)
    for line in answer_text.summary_lines(found):  # the answer's first lines, then the report's path, last
        click.echo(line)
    click.echo(f"report: {path.resolve()}")


class Pusher:
    """``run --push``: the run folder into the store after each round and at the end. A push that
    fails (the store unreachable) is said in one line and left pending; the run goes on."""

    def __init__(self, url: store_urls.StoreURL) -> None:
        self.url = url
        self.pending = False

    def push(self, run_dir: Path, last: bool = False) -> None:
        try:
            documents = store.run_documents([run_dir])
            with database.Store.open(self.url) as opened:
                done = opened.push(documents)
        except UserError as exc:
            self.pending = True
            console.print(f"push pending: {exc}", markup=False, highlight=False)
        else:
            self.pending = False
            if last:
                for line in done.lines(self.url.shown):
                    console.print(line, markup=False, highlight=False)
        if last and self.pending:
            console.print(
                f"the push is pending: `fsmatrix results push {run_dir} --store {self.url.shown}` completes it",
                markup=False,
                highlight=False,
            )


def _check_slurm(shared: Path | None, devices: tuple[str, ...], race: bool | None) -> None:
    """What --executor slurm refuses before reading the matrix: no Slurm here, no usable --shared
    directory, and the options that need one machine (--device, --race)."""
    slurm.check_installed()
    if shared is None:
        raise UserError("--executor slurm needs --shared DIR: a directory every node reads and writes at that path")
    writable_directory(shared, "--shared")
    if devices:
        raise UserError("--device names this machine's disks: not with --executor slurm (each task runs on a node)")
    if race:
        raise UserError("--race decides between rounds across every cell: not with --executor slurm")


@dataclass(frozen=True)
class _SlurmSubmit:
    """How the run's array is submitted: ``detach`` (return once submitted), the /dev/kvm gres, more
    sbatch options."""

    detach: bool
    kvm_gres: str
    sbatch_args: tuple[str, ...]


def _run_on_slurm(request: slurm.SlurmRequest, submit: _SlurmSubmit) -> int:
    """Submit the request's cells as a Slurm job array; unless ``detach``, wait, merge and report. The
    exit status."""
    sub = slurm.prepare(request)
    extra = [word for arg in submit.sbatch_args for word in shlex.split(arg)]
    with slurm.cancelled_on_interrupt(sub, console):  # from the submission on: Ctrl-C leaves no job behind
        job_id = slurm.submit(sub, slurm.gres_for(request.backend, submit.kvm_gres), extra)
        tasks = f"{len(sub.shards)} array tasks, {sub.total_runs} runs"
        console.print(f"submitted Slurm job {job_id}: {tasks} ({sub.directory})", markup=False, highlight=False)
        if submit.detach:
            click.echo(f"fsmatrix slurm status {sub.directory}")
            click.echo(f"fsmatrix slurm collect {sub.directory}")
            return 0
        slurm.wait(sub, console)
    return slurm.finish(slurm.collect(sub, request.results_root, console.print), click.echo)


def _budget(value: str | None) -> float | None:
    """``--budget``'s seconds (None: not given); UserError, one line, for what is not a duration > 0."""
    if value is None:
        return None
    seconds = matrix.parse_duration(value)
    if seconds is None:
        raise UserError(
            f"--budget {value!r} must be a duration > 0: seconds (e.g. 1800) or a number with s, m or h "
            "(e.g. 90s, 30m, 2h)"
        )
    return seconds


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
