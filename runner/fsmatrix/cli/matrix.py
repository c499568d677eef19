"""``fsmatrix matrix expand`` and ``fsmatrix matrix settings``."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from fsmatrix import image_definitions, matrix, racing, runs
from fsmatrix.agent import kernel
from fsmatrix.backends import image
from fsmatrix.errors import UserError
from fsmatrix.matrix import schema
from fsmatrix.results.verdict import estimate


@click.group("matrix")
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
@click.option(
    "--results",
    "results_root",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="table: estimate each cell's duration from the runs stored here (its store.sqlite) on this host.",
)
def expand(
    file: Path, fmt: str, only: tuple[str, ...], shard_size: int | None, scale: str | None, results_root: Path
) -> None:
    """Expand FILE into cells with stable ids."""
    m = matrix.load(file, scale)
    cells = m.select(list(only))
    if fmt == "json":
        entries = [
            {
                "id": c.id,
                "group": matrix.group_of(c.spec).key,
                "baseline": m.is_baseline(c),
                **c.params,
                **({"runner": {"labels": list(c.runner)}} if c.runner else {}),
            }
            for c in cells
        ]
        click.echo(json.dumps(entries, indent=1, ensure_ascii=False))
    elif fmt == "github":
        record = m.design.record() if m.design is not None else None
        click.echo(json.dumps(github_matrix(cells, shard_size, record)))
    else:
        named = m.baseline_rule == matrix.NAMED_RULE
        rule = "named by the file's baseline" if named else "fewest settings off their defaults"
        plan = racing.plan(m, cells)  # what `fsmatrix run` runs without --race, --no-race or --repeat
        repeats = f"{m.repeat} repeats"
        if plan.race is not None:
            r = plan.race
            budget = f", budget {r.budget_s:g} s" if r.budget_s is not None else ""
            repeats = f"a race of {r.min_repeats} to {r.max_repeats} repeats (delta {r.delta:g}{budget})"
        table = Table(
            title=f"{m.name}: {len(cells)} cells × {repeats}",
            caption=f"* the baseline of its comparison group ({rule})",
        )
        found = runs.cell_estimates(results_root, cells)
        headers = ["id", "baseline", "image", "filesystem", "mount", "layout", "device", "workload", "database"]
        for header in [*headers, "estimate"]:
            table.add_column(header)
        for c in cells:
            spec = c.spec
            layout = spec.storage.layout
            if spec.storage.striped:
                layout += f" {spec.storage.stripe_disks}×{spec.storage.stripe_size}"
            device = f"{spec.device.profile} {spec.device.bus}"
            database = " ".join(b.summary(spec.settings[b.name]) for b in spec.declaration.settings)
            mark = "*" if m.is_baseline(c) else ""
            table.add_row(
                c.id,
                mark,
                spec.image,
                spec.filesystem,
                spec.mount_options,
                layout,
                device,
                c.summary(),
                database,
                found[c.id].show(),
            )
        Console(width=None if sys.stdout.isatty() else 200).print(table)
        whole = estimate.total(found, {c.id: plan.repeat for c in cells})
        shape = f"{len(cells)} cells × {plan.repeat}"
        click.echo(
            f"{whole.show(at_most=plan.race is not None)} ({shape}), from the runs in {results_root} on this host"
        )
        click.echo(plan.why)
        for line in m.design.describe() if m.design is not None else []:
            click.echo(line)
        for effect in m.includes:
            click.echo(effect.describe())
    include_warnings(m)
    capability_warnings(cells)


def capability_warnings(cells: list[matrix.MatrixCell]) -> None:
    """One line on stderr for the cells the kernel of their image cannot run (a filesystem, a layout's
    driver, a crash mode's target it lacks: a VM backend would record them as skipped), from the
    manifests of the images built for the current sources (an image not built yet says nothing)."""
    manifests = {}
    for name in dict.fromkeys(c.spec.image for c in cells):
        if not image_definitions.defined(name):
            continue  # fsmatrix without its source tree builds no image (it runs on the host backend)
        paths = image.image_paths(image=name)
        if paths.complete():
            manifests[name] = json.loads(paths.manifest.read_text())
    specs = [c.spec for c in cells]
    warning = kernel.report(specs, [c.id for c in cells], lambda spec: kernel.lacking_in_image(spec, manifests))
    if warning:
        click.echo(f"fsmatrix: warning: on a VM backend, {warning}", err=True)


def include_warnings(m: matrix.Matrix) -> None:
    """One line on stderr per ``include`` entry that extended cells by a setting no axis has (so
    machine-read output on stdout stays clean)."""
    for effect in m.includes:
        if effect.warning:
            where = f"{m.path}:{effect.line}" if effect.line is not None else m.path
            click.echo(f"fsmatrix: warning: {where}: {effect.warning}", err=True)


def github_matrix(
    cells: list[matrix.MatrixCell], shard_size: int | None = None, design: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``strategy.matrix`` for GitHub Actions: one entry per shard, at most 256 shards; a shard whose
    cells name runner labels (``runner.labels``) carries them as ``labels``, matrix.yml's ``runs-on``;
    with the matrix's ``design`` record, every entry carries it as JSON (``design``: run-shard.sh gives
    it to ``fsmatrix run --design-from``, so no shard builds a design of its own)."""
    shards = matrix.shards(cells, shard_size)
    if len(shards) > matrix.MAX_JOBS_PER_MATRIX:
        raise UserError(f"{len(shards)} shards exceed GitHub's {matrix.MAX_JOBS_PER_MATRIX} jobs; raise --shard-size")
    entries: list[dict[str, Any]] = []
    for i, shard in enumerate(shards):
        entry: dict[str, Any] = {"shard": i, "cells": ",".join(c.id for c in shard)}
        if shard[0].runner:  # every cell of a shard needs the same labels (matrix.shards)
            entry["labels"] = list(shard[0].runner)
        if design is not None:
            entry["design"] = json.dumps(design, separators=(",", ":"))
        entries.append(entry)
    return {"include": entries}


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
