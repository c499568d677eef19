"""Run a matrix: every selected cell, every repeat, with progress, resume and a summary."""

from __future__ import annotations

import logging
import sqlite3
import statistics
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from fsmatrix import results
from fsmatrix.agent import job, jsonfile, provenance
from fsmatrix.backends import Backend
from fsmatrix.errors import UserError
from fsmatrix.matrix import Matrix, MatrixCell, comparison_group

log = logging.getLogger("fsmatrix")


@dataclass
class RunSummary:
    run_dir: Path
    counts: dict[str, int] = field(default_factory=dict)
    reused: int = 0
    docs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(status in results.COMPLETE for status in self.counts if self.counts[status])


def run_matrix(
    matrix: Matrix,
    cells: list[MatrixCell],
    backend: Backend,
    *,
    results_root: Path,
    run_id: str,
    repeat: int,
    force: bool,
    console: Console,
    order: str = "cells",
) -> RunSummary:
    run_dir = results_root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(run_dir / "matrix.json", matrix_record(matrix, cells, repeat))
    backend.preflight(cells)
    try:
        index = results.Index(results_root)
    except sqlite3.Error as exc:
        raise UserError(f"--results {results_root}: cannot open its index.sqlite ({exc}): is the disk full?") from exc
    summary = RunSummary(run_dir=run_dir)
    if order == "rounds":
        # Round r runs every cell once: a drift of the machine's load spreads over every cell,
        # instead of landing on the cells that happened to run while it lasted.
        todo = [(c, r) for r in range(1, repeat + 1) for c in cells]
    else:
        todo = [(c, r) for c in cells for r in range(1, repeat + 1)]
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("starting", total=len(todo))
            for cell, r in todo:
                path = results.result_path(run_dir, cell.id, r)
                if not force and results.is_complete(path):
                    doc = jsonfile.read(path)
                    summary.reused += 1
                else:
                    progress.update(task, description=f"{cell.id} r{r}")
                    doc = _run_one(backend, cell, r, run_id, path)
                    try:
                        index.add(run_id, doc, path)
                    except sqlite3.Error as exc:
                        # The result file is written; `fsmatrix results reindex` rebuilds the index later.
                        log.warning("%s: not added to the index (%s); run `fsmatrix results reindex`", path, exc)
                summary.counts[doc["status"]] = summary.counts.get(doc["status"], 0) + 1
                summary.docs.setdefault(cell.id, []).append(doc)
                if doc["status"] not in results.COMPLETE:
                    progress.console.print(f"[red]{cell.id} r{r}: {doc['status']}[/red]: {doc.get('reason')}")
                elif doc["status"] == "skipped" and r == 1:
                    progress.console.print(f"[yellow]{cell.id}: skipped[/yellow]: {doc.get('reason')}")
                progress.advance(task)
                if not console.is_terminal:  # a log file gets one line per run instead of a live bar
                    done = int(progress.tasks[0].completed)
                    progress.console.print(
                        f"[{done}/{len(todo)}] {cell.id} r{r}: {doc['status']}" f" ({doc.get('duration_s') or 0:.1f} s)"
                    )
            progress.update(task, description="done")
    finally:
        index.close()
    return summary


def matrix_record(matrix: Matrix, cells: list[MatrixCell], repeat: int) -> dict[str, Any]:
    """What a run directory's ``matrix.json`` holds: the matrix's name, file and repeats, and each
    selected cell with its settings, its comparison group (``group``: the key, ``group_label``: for
    people) and whether it is its group's ``baseline``; ``baseline_rule`` says how the baselines were
    chosen (``named`` by the file's ``baseline``, or ``defaults``) and ``baselines`` maps every group
    key of the whole matrix to its baseline's id (a selection may leave a baseline out)."""
    entries = []
    for c in cells:
        group = comparison_group(c.spec)
        entries.append(
            {
                "id": c.id,
                "params": c.params,
                "group": group.key,
                "group_label": group.label,
                "baseline": matrix.baselines.get(group.key) == c.id,
            }
        )
    return {
        "name": matrix.name,
        "file": matrix.path,
        "repeat": repeat,
        "cells": entries,
        "baseline_rule": matrix.baseline_rule,
        "baselines": dict(matrix.baselines),
    }


def _run_one(backend: Backend, cell: MatrixCell, repeat: int, run_id: str, path: Path) -> dict[str, Any]:
    """One repeat, its log captured next to its result; the result written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path.with_suffix(".log"), mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.setLevel(logging.DEBUG)
    logger = logging.getLogger("fsmatrix")
    logger.addHandler(handler)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    try:
        doc = backend.run(cell, repeat)
    except UserError:
        raise  # a configuration error stops the matrix: every other run would fail the same way
    except Exception as exc:
        # Anything else on the host side (losetup, an image file, ENOSPC, qemu-img): this run is
        # recorded as failed with its reason, and the matrix goes on.
        log.error("%s r%d failed on the host: %s", cell.id, repeat, exc)
        log.debug("%s", traceback.format_exc())
        doc = job.result_document(
            cell.spec,
            cell_id=cell.id,
            repeat=repeat,
            status="error",
            reason=f"host side of the run failed: {type(exc).__name__}: {exc}",
            started_at=started_at,
            provenance={**provenance.collect(), **backend.environment(), "tools": {}},
        )
        doc.update(
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
            duration_s=round(time.monotonic() - started, 3),
        )
    finally:
        logger.removeHandler(handler)
        handler.close()
    doc["run_id"] = run_id
    jsonfile.write_atomic(path, doc)
    return doc


def summary_table(summary: RunSummary, cells: list[MatrixCell]) -> Table:
    """One row per cell: statuses and the median of its first key metric."""
    table = Table(title=f"results in {summary.run_dir}")
    # Mount options are not in a cell id's readable part: shown when they tell cells apart.
    mounts = any(cell.spec.mount_options for cell in cells)
    for header in (
        "cell",
        *(("mount",) if mounts else ()),
        "workload",
        "runs",
        "status",
        "metric",
        "median",
        "min..max",
    ):
        table.add_column(header, no_wrap=header in ("cell", "min..max"))
    for cell in cells:
        docs = summary.docs.get(cell.id, [])
        statuses = sorted({d["status"] for d in docs})
        metric = next(iter(docs[0]["key_metrics"]), "") if docs else ""
        values = [d["metrics"][metric] for d in docs if metric in d.get("metrics", {})]
        median = f"{statistics.median(values):.4g}" if values else "-"
        spread = f"{min(values):.4g}..{max(values):.4g}" if len(values) > 1 else "-"
        colour = "green" if statuses and set(statuses) <= set(results.COMPLETE) else "red"
        status = f"[{colour}]{','.join(statuses)}[/{colour}]"
        mount = (cell.spec.mount_options,) if mounts else ()
        table.add_row(cell.id, *mount, cell.summary(), str(len(docs)), status, metric, median, spread)
    return table
