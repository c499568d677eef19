"""``fsmatrix workload NAME``: one command per workload, generated from its declaration."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from fsmatrix.agent import declare, workloads
from fsmatrix.agent.contract import Workload
from fsmatrix.agent.parsing import standalone_cell
from fsmatrix.agent.standalone import run_in_directory
from fsmatrix.cli._common import writable_directory
from fsmatrix.errors import UserError


@click.group("workload")
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


def _workload_command(workload: Workload[Any, Any]) -> click.Command:
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
            cell = standalone_cell(workload.name, values, **blocks)
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
