"""The ``fsmatrix`` command line."""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from fsmatrix import __version__, matrix, results, workdirs
from fsmatrix.agent import declare, workloads
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Workload
from fsmatrix.agent.standalone import run_in_directory
from fsmatrix.backends import BACKENDS
from fsmatrix.errors import UserError
from fsmatrix.matrix import schema
from fsmatrix.results import report

DEFAULT_WORKDIR = Path("/var/tmp/fsmatrix")

# Logs and progress go to stderr; wide tables when stderr is a log file rather than a terminal.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _terminate(signum: int, frame: FrameType | None) -> NoReturn:
    # SIGTERM takes the same path as Ctrl-C, so every context manager unmounts and detaches.
    raise KeyboardInterrupt(f"signal {signum}")


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
    signal.signal(signal.SIGTERM, _terminate)


# ----------------------------------------------------------------------------------- matrix


@main.group("matrix")
def matrix_group() -> None:
    """Inspect matrix files."""


@matrix_group.command("expand")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]), default="table", show_default=True)
@click.option(
    "--only", "only", multiple=True, help="Keep cells whose id matches this glob (repeatable, or comma list)."
)
@click.option(
    "--shard-size",
    type=click.IntRange(1),
    default=None,
    help="github: cells per job (default: 1, or as many as needed to stay within 256 jobs).",
)
@click.option("--scale", default=None, help="Expand at this one of the file's `scales` (e.g. small).")
def expand(file: Path, fmt: str, only: tuple[str, ...], shard_size: int | None, scale: str | None) -> None:
    """Expand FILE into cells with stable ids."""
    m = matrix.load(file, scale)
    cells = m.select(list(only))
    if fmt == "json":
        click.echo(json.dumps([{"id": c.id, **c.params} for c in cells], indent=1, ensure_ascii=False))
    elif fmt == "github":
        click.echo(json.dumps(github_matrix(cells, shard_size)))
    else:
        table = Table(title=f"{m.name}: {len(cells)} cells × {m.repeat} repeats")
        for header in ("id", "filesystem", "mount", "layout", "device", "workload", "database"):
            table.add_column(header)
        for c in cells:
            spec = c.spec
            layout = spec.storage.layout
            if spec.storage.striped:
                layout += f" {spec.storage.stripe_disks}×{spec.storage.stripe_size}"
            device = f"{spec.device.profile} {spec.device.bus}"
            database = " ".join(b.summary(spec.settings[b.name]) for b in spec.declaration.settings)
            table.add_row(c.id, spec.filesystem, spec.mount_options, layout, device, c.summary(), database)
        Console(width=None if sys.stdout.isatty() else 200).print(table)


def github_matrix(cells: list[matrix.MatrixCell], shard_size: int | None = None) -> dict[str, Any]:
    """``strategy.matrix`` for GitHub Actions: one entry per shard, at most 256 shards."""
    size = shard_size or max(1, -(-len(cells) // matrix.MAX_JOBS_PER_MATRIX))
    shards = [cells[i : i + size] for i in range(0, len(cells), size)]
    if len(shards) > matrix.MAX_JOBS_PER_MATRIX:
        raise UserError(f"{len(shards)} shards exceed GitHub's {matrix.MAX_JOBS_PER_MATRIX} jobs; raise --shard-size")
    return {"include": [{"shard": i, "cells": ",".join(c.id for c in shard)} for i, shard in enumerate(shards)]}


@matrix_group.command("settings")
def settings() -> None:
    """List every setting a matrix may use, with its default and what it allows."""
    table = Table(title="settings")
    for header in ("setting", "default", "allowed", "what it is"):
        table.add_column(header)
    for path in schema.setting_paths():
        spec = schema.spec_at(path) or {}
        if spec.get("type") == "object":
            continue
        default = spec.get("default", "(required)" if path.startswith("workload.") else "")
        shown = json.dumps(default) if default != "(required)" else default
        table.add_row(path, shown, schema.describe(spec), spec.get("description", ""))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


# ----------------------------------------------------------------------------------- run


def workdir_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--workdir``, where runs keep their scratch files (the same default for every command)."""
    return click.option(
        "--workdir", type=click.Path(path_type=Path), default=DEFAULT_WORKDIR, show_default=True, help=help
    )


@main.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="host", show_default=True)
@click.option("--only", "only", multiple=True, help="Run cells whose id matches this glob (repeatable, or comma list).")
@click.option("--results", "results_root", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--run-id", default=None, help="Results go to RESULTS/RUN_ID (default: the matrix name).")
@click.option(
    "--repeat", type=click.IntRange(1, matrix.MAX_REPEAT), default=None, help="Override the matrix's repeat count."
)
@click.option("--scale", default=None, help="Run at this one of the file's `scales` (e.g. small; matrix/README.md).")
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
    force: bool,
    order: str,
    devices: tuple[str, ...],
    yes: bool,
    workdir: Path,
) -> None:
    """Run the cells of matrix FILE and store one result per repeat."""
    from fsmatrix import runs

    m = matrix.load(file, scale)
    cells = m.select(list(only))
    if not cells:
        raise UserError(f"--only {' '.join(only)} matches none of the {len(m.cells)} cells", file=str(file))
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
        )
    finally:
        chosen.close()  # e.g. the libvirt backend stops the daemons it started
    console.print(runs.summary_table(summary, cells))
    path = report.write_report(summary.run_dir, f"{m.name} ({run_id})")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items()))
    console.print(f"{counts}{f' ({summary.reused} reused from an earlier run)' if summary.reused else ''}")
    click.echo(f"report: {path.resolve()}")
    sys.exit(0 if summary.ok else 1)


def writable_directory(path: Path, option: str) -> None:
    """Create ``path`` if missing and prove it takes a file, or refuse with one line (exit 2)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UserError(f"{option} {path}: not a writable directory ({exc.strerror or exc})") from exc


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


@main.command("cleanup")
@workdir_option("The work directory whose dead runs to clean up.")
def cleanup(workdir: Path) -> None:
    """Remove what dead runs left in WORKDIR: their processes (QEMU, workload workers), mounts,
    loop devices and directories. A live run (its lock held) is never touched."""
    reaped = workdirs.reap(workdir)
    for item in reaped:
        click.echo(f"removed {item}")
    if not reaped:
        click.echo(f"nothing to clean up in {workdir}")


@main.group("results")
def results_group() -> None:
    """Manage results roots: merge CI artifacts, rebuild the index."""


@results_group.command("merge")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--into",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The results root to merge into (created if missing).",
)
def merge_cmd(sources: tuple[Path, ...], root: Path) -> None:
    """Copy the result documents under SOURCES (e.g. downloaded shard artifacts) into one results root."""
    copied, same = results.merge(list(sources), root)
    click.echo(f"merged {copied} result documents into {root} ({same} already there)")


@results_group.command("reindex")
@click.argument("root", type=click.Path(exists=True, file_okay=False, path_type=Path))
def reindex_cmd(root: Path) -> None:
    """Rebuild ROOT/index.sqlite from the result documents under ROOT."""
    click.echo(f"indexed {results.reindex(root)} result documents in {root / 'index.sqlite'}")


# ----------------------------------------------------------------------------------- workload


@main.group("workload")
def workload_group() -> None:
    """Run one workload directly in a directory (no matrix, no mkfs)."""


def _print_outcome(outcome: Any, as_json: bool) -> None:
    doc = {"metrics": outcome.metrics, "verification": outcome.verification, "versions": outcome.versions}
    if as_json:
        click.echo(json.dumps({**outcome.metrics, **doc}, indent=1, ensure_ascii=False))
        return
    for key, value in outcome.metrics.items():
        click.echo(f"{key}: {value}")
    click.echo(f"verification: {outcome.verification.get('status')} {outcome.verification.get('message', '')}")
    if outcome.verification.get("status") == "failed":
        sys.exit(1)


def _params(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``key=value`` options into parameters; values are read as YAML scalars (8, true, 1G)."""
    import yaml

    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--set {pair!r}: expected KEY=VALUE")
        try:
            params[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "not a YAML value"
            raise UserError(
                f"--set {pair!r}: {problem}; expected KEY=VALUE with a YAML scalar (8, true, 1G, text)"
            ) from exc
    return params


def _click_type(f: declare.Field) -> Any:
    if f.spec.choices:
        return click.Choice([str(c) for c in f.spec.choices])
    if f.kind is int:
        return click.IntRange(None if f.spec.minimum is None else int(f.spec.minimum))
    types: dict[type, click.ParamType[Any]] = {bool: click.BOOL, float: click.FLOAT}
    return types.get(f.kind, click.STRING)


def _workload_command(workload: Workload[Any]) -> click.Command:
    """``fsmatrix workload NAME``, built from the workload's declaration: its ``cli`` parameters are
    arguments, every other one an option (default: the declared one), ``--set`` reaches the rest
    (``--set gtm.journal=off`` for a settings block the workload owns)."""
    fields = declare.fields(workload.params)

    def command(directory: Path, pairs: tuple[str, ...], timeout: float, as_json: bool, **given: Any) -> None:
        values: dict[str, Any] = {}
        blocks: dict[str, dict[str, Any]] = {}
        for key, value in _params(pairs).items():
            block, dot, name = key.partition(".")
            if dot:
                blocks.setdefault(block, {})[name] = value
            else:
                values[key] = value
        for f in fields:
            if given.get(f.name) is not None:
                raw = given[f.name]
                values[f.name] = f.kind(raw) if f.spec.choices else raw
        writable_directory(directory, "--dir")
        try:
            cell = Cell.standalone(workload.name, values, **blocks)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        try:
            outcome = run_in_directory(workload, cell, directory, timeout)
        except (FileExistsError, NotADirectoryError, ValueError) as exc:
            raise UserError(f"{directory}: {exc}") from exc
        except FileNotFoundError as exc:  # a tool the workload needs (GT.M, sysbench, fio) is missing
            raise UserError(f"{workload.name}: {exc}") from exc
        _print_outcome(outcome, as_json)

    params: list[click.Parameter] = []
    for f in fields:
        if f.spec.cli:
            params.append(click.Argument([f.name], type=_click_type(f)))
        else:
            params.append(click.Option([f"--{f.name.replace('_', '-')}", f.name], type=_click_type(f), default=None,
                                       help=f"{f.spec.help} [default: {f.default}]"))  # fmt: skip
    params += [
        click.Option(
            ["--dir", "directory"],
            type=click.Path(path_type=Path),
            required=True,
            help="Directory on the filesystem to test (created if missing).",
        ),
        click.Option(
            ["--set", "pairs"],
            multiple=True,
            metavar="KEY=VALUE",
            help="A parameter or a settings-block value (gtm.journal=off), repeatable; see `fsmatrix matrix settings`.",
        ),
        click.Option(["--timeout"], type=click.FloatRange(1), default=3600, show_default=True),
        click.Option(["--json", "as_json"], is_flag=True, help="Print the result as JSON."),
    ]
    return click.Command(workload.name, callback=command, params=params, help=workload.help)


for _workload in workloads.all_workloads():
    workload_group.add_command(_workload_command(_workload))


def _register_subcommands() -> None:
    from fsmatrix.backends.image import image_group
    from fsmatrix.backends.libvirtd import libvirt_group
    from fsmatrix.cli.results import calibrate_cmd, compare_cmd, report_cmd
    from fsmatrix.container import container_group

    main.add_command(image_group, "image")
    main.add_command(container_group, "container")
    main.add_command(libvirt_group, "libvirt")
    main.add_command(report_cmd, "report")
    main.add_command(compare_cmd, "compare")
    main.add_command(calibrate_cmd, "calibrate")
    from fsmatrix.backends.vagrant import vagrant_group

    main.add_command(vagrant_group, "vagrant")


_register_subcommands()
