"""The ``fsmatrix`` command line."""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from fsmatrix import __version__, matrix, results
from fsmatrix.errors import UserError
from fsmatrix.matrix import schema
from fsmatrix.results import report

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
def expand(file: Path, fmt: str, only: tuple[str, ...], shard_size: int | None) -> None:
    """Expand FILE into cells with stable ids."""
    m = matrix.load(file)
    cells = m.select(list(only))
    if fmt == "json":
        click.echo(json.dumps([{"id": c.id, **c.params} for c in cells], indent=1, ensure_ascii=False))
    elif fmt == "github":
        click.echo(json.dumps(github_matrix(cells, shard_size)))
    else:
        table = Table(title=f"{m.name}: {len(cells)} cells × {m.repeat} repeats")
        for header in ("id", "filesystem", "mount", "layout", "device", "workload", "gtm"):
            table.add_column(header)
        for c in cells:
            p = c.params
            gtm = p.get("gtm")
            gtm_text = f"{gtm['access_method']} jnl={gtm['journal']} gb={gtm['global_buffers']}" if gtm else ""
            layout = p["storage"]["layout"]
            if layout in schema.STRIPED_LAYOUTS:
                layout += f" {p['storage']['stripe_disks']}×{p['storage']['stripe_size']}"
            device = f"{p['device']['profile']} {p['device']['bus']}"
            table.add_row(c.id, p["filesystem"], p["mount_options"], layout, device, c.summary(), gtm_text)
        Console(width=None if sys.stdout.isatty() else 200).print(table)


def github_matrix(cells: list[matrix.Cell], shard_size: int | None = None) -> dict[str, Any]:
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
    for header in ("setting", "default", "allowed"):
        table.add_column(header)
    for path in schema.setting_paths():
        spec = schema.spec_at(path) or {}
        if spec.get("type") == "object":
            continue
        default = spec.get("default", "(required)" if path.startswith("workload.") else "")
        table.add_row(path, json.dumps(default) if default != "(required)" else default, schema.describe(spec))
    Console().print(table)


# ----------------------------------------------------------------------------------- run


@main.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--backend", type=click.Choice(["host", "qemu", "libvirt"]), default="host", show_default=True)
@click.option("--only", "only", multiple=True, help="Run cells whose id matches this glob (repeatable, or comma list).")
@click.option("--results", "results_root", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--run-id", default=None, help="Results go to RESULTS/RUN_ID (default: the matrix name).")
@click.option("--repeat", type=click.IntRange(1), default=None, help="Override the matrix's repeat count.")
@click.option("--force", is_flag=True, help="Run again what already completed (default: resume).")
@click.option(
    "--device",
    "devices",
    multiple=True,
    help="Format and use this block device instead of loop files (host) or image files (qemu: attached to the "
    "VM as its data disks, one per data disk of every cell) (repeatable). DESTROYS ITS DATA.",
)
@click.option("--yes", is_flag=True, help="Do not ask before formatting --device.")
@click.option(
    "--workdir",
    type=click.Path(path_type=Path),
    default=Path("/var/tmp/fsmatrix"),
    show_default=True,
    help="Scratch space for a run: loop image files and mount points (host), overlays and disks (qemu).",
)
def run(
    file: Path,
    backend: str,
    only: tuple[str, ...],
    results_root: Path,
    run_id: str | None,
    repeat: int | None,
    force: bool,
    devices: tuple[str, ...],
    yes: bool,
    workdir: Path,
) -> None:
    """Run the cells of matrix FILE and store one result per repeat."""
    from fsmatrix import runs
    from fsmatrix.backends import Backend
    from fsmatrix.backends.host import HostBackend

    m = matrix.load(file)
    cells = m.select(list(only))
    if not cells:
        raise UserError(f"--only {' '.join(only)} matches none of the {len(m.cells)} cells", file=str(file))
    if devices and backend == "libvirt":
        raise UserError("--device is for the host and qemu backends; the libvirt backend makes its own disks")
    if devices:
        _confirm_devices(list(devices), yes)
    chosen: Backend
    if backend == "qemu":
        from fsmatrix.backends.qemu import QemuBackend

        chosen = QemuBackend(workdir=workdir, devices=list(devices))
    elif backend == "libvirt":
        from fsmatrix.backends.libvirt import LibvirtBackend

        chosen = LibvirtBackend(workdir=workdir)
    else:
        chosen = HostBackend(devices=list(devices), workdir=workdir)
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
        )
    finally:
        close = getattr(chosen, "close", None)
        if close is not None:
            close()  # the libvirt backend stops the daemons it started
    console.print(runs.summary_table(summary, cells))
    path = report.write_report(summary.run_dir, f"{m.name} ({run_id})")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items()))
    console.print(f"{counts}{f' ({summary.reused} reused from an earlier run)' if summary.reused else ''}")
    click.echo(f"report: {path.resolve()}")
    sys.exit(0 if summary.ok else 1)


def _confirm_devices(devices: list[str], yes: bool) -> None:
    from fsmatrix.agent import storage

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


@workload_group.command("threen1")
@click.argument("start", type=click.IntRange(1))
@click.argument("end", type=click.IntRange(1))
@click.option("--workers", type=click.IntRange(1), default=4, show_default=True)
@click.option("--block", type=click.IntRange(1), default=5000, show_default=True)
@click.option("--keys", type=click.Choice(["spelled", "integer"]), default="spelled", show_default=True)
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory for the database and journal (created; must not hold a database already).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def threen1_cmd(start: int, end: int, workers: int, block: int, keys: str, directory: Path, as_json: bool) -> None:
    """The 3n+1 benchmark on GT.M for START..END."""
    from fsmatrix.agent.workloads import threen1

    if end < start:
        raise UserError(f"END {end} is below START {start}")
    directory.mkdir(parents=True, exist_ok=True)
    try:
        outcome = threen1.run_standalone(start, end, workers, block, keys, directory)
    except (FileExistsError, ValueError) as exc:
        raise UserError(f"{directory}: {exc}") from exc
    _print_outcome(outcome, as_json)


def _params(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``key=value`` options into parameters; values are read as YAML scalars (8, true, 1G)."""
    import yaml

    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--set {pair!r}: expected KEY=VALUE")
        params[key.strip()] = yaml.safe_load(value)
    return params


def _file_workload(
    kind: str, first_key: str, first: str, directory: Path, pairs: tuple[str, ...], timeout: float, as_json: bool
) -> None:
    from fsmatrix.agent.workloads import fio, sysbench

    module = sysbench if kind == "sysbench" else fio
    directory.mkdir(parents=True, exist_ok=True)
    try:
        outcome = module.run_standalone({first_key: first, **_params(pairs)}, directory, timeout)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    _print_outcome(outcome, as_json)


_DIR_OPTION = click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory on the filesystem to test (its test files are removed afterwards).",
)
_SET_OPTION = click.option(
    "--set",
    "pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A workload parameter (see `fsmatrix matrix settings`), repeatable.",
)
_TIMEOUT_OPTION = click.option("--timeout", type=click.FloatRange(1), default=3600, show_default=True)
_JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


@workload_group.command("sysbench")
@click.argument("mode", type=click.Choice(schema.SYSBENCH_MODES))
@_DIR_OPTION
@_SET_OPTION
@_TIMEOUT_OPTION
@_JSON_OPTION
def sysbench_cmd(mode: str, directory: Path, pairs: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """sysbench fileio MODE in a directory: prepare, drop caches, run, cleanup."""
    _file_workload("sysbench", "mode", mode, directory, pairs, timeout, as_json)


@workload_group.command("fio")
@click.argument("pattern", type=click.Choice(schema.FIO_PATTERNS))
@_DIR_OPTION
@_SET_OPTION
@_TIMEOUT_OPTION
@_JSON_OPTION
def fio_cmd(pattern: str, directory: Path, pairs: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """An iozone-style fio PATTERN in a directory (seed 001)."""
    _file_workload("fio", "pattern", pattern, directory, pairs, timeout, as_json)


def _register_subcommands() -> None:
    from fsmatrix.backends.image import image_group
    from fsmatrix.backends.libvirtd import libvirt_group
    from fsmatrix.cli_results import calibrate_cmd, compare_cmd, report_cmd

    main.add_command(image_group, "image")
    main.add_command(libvirt_group, "libvirt")
    main.add_command(report_cmd, "report")
    main.add_command(compare_cmd, "compare")
    main.add_command(calibrate_cmd, "calibrate")
    from fsmatrix.backends.vagrant import vagrant_group

    main.add_command(vagrant_group, "vagrant")


_register_subcommands()
