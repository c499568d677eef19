"""Run a matrix: every selected cell, every repeat, with progress, resume and a summary."""

from __future__ import annotations

import dataclasses
import logging
import random
import re
import secrets
import sqlite3
import statistics
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from fsmatrix import racing
from fsmatrix.agent import job, jsonfile, provenance
from fsmatrix.backends import Backend, hostinfo
from fsmatrix.errors import UserError
from fsmatrix.matrix import BuildSettings, Matrix, MatrixCell, RaceSettings, design, group_of
from fsmatrix.results import store
from fsmatrix.results.store import past_runs
from fsmatrix.results.store.database import StoreUnreachable
from fsmatrix.results.verdict import estimate

log = logging.getLogger("fsmatrix")
RESULT_FILE = re.compile(r"r\d+\.(json|log)")  # a repeat's result and its log in a cell's folder


@dataclass
class RunSummary:
    run_dir: Path
    counts: dict[str, int] = field(default_factory=dict)
    reused: int = 0
    docs: dict[str, list[store.Result]] = field(default_factory=dict)
    race: store.Race | None = None  # the stored race (race.json) when the run raced

    @property
    def ok(self) -> bool:
        return all(status in store.COMPLETE for status in self.counts if self.counts[status])


@dataclass(frozen=True)
class RunOptions:
    """Where a run goes and how it runs: its results in ``results_root``/``run_id``; ``plan`` a race or
    fixed repeats (``fsmatrix run``: ``racing.plan``; its line for people, when it has one, printed once
    the backend's checks passed); ``force``: run again what completed (default: resume); ``order``:
    fixed repeats cell by cell ("cells") or in rounds ("rounds", ``fsmatrix run``'s default; a race
    always runs in rounds); ``settings``: the build's settings (``run --settings``), recorded in each
    result's ``provenance.settings``."""

    results_root: Path
    run_id: str
    plan: racing.RunPlan
    force: bool = False
    order: str = "cells"
    settings: BuildSettings | None = None

    @property
    def run_dir(self) -> Path:
        return self.results_root / self.run_id


def run_matrix(
    matrix: Matrix,
    cells: list[MatrixCell],
    backend: Backend,
    options: RunOptions,
    console: Console,
    after_round: Callable[[], None] | None = None,
) -> RunSummary:
    """Every selected cell ``options.plan.repeat`` times, or, with a race planned, a race: rounds
    until the statistics leave one cell or one equivalent set per comparison group, its
    ``max_repeats`` or its budget (see ``racing.run_race``). ``after_round``: called after each round
    of a run in rounds or a race (``fsmatrix run --push`` pushes then)."""
    plan = options.plan
    run_dir = options.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    seed = order_seed(run_dir)
    todo = _todo(cells, plan, options.order, seed)
    record = matrix_record(matrix, cells, plan.repeat, plan.race, _order_record(todo, options.order, seed))
    jsonfile.write_atomic(run_dir / "matrix.json", record)
    backend.preflight(cells)
    try:
        index = store.RootStore(options.results_root)  # a store of another schema, or no store at all, says why itself
    except (sqlite3.Error, StoreUnreachable) as exc:
        # the root's own file, not a server away: a results root that takes no write is bad input (exit 2)
        raise UserError(
            f"--results {options.results_root}: cannot write its store.sqlite ({exc}): is the disk full?"
        ) from exc
    if plan.why:
        console.print(plan.why, markup=False, highlight=False)
    if options.force:
        _remove_earlier(run_dir, cells, console)
    found = cell_estimates(options.results_root, cells)
    left = [(c, r) for c, r in todo if options.force or not store.is_complete(store.result_path(run_dir, c.id, r))]
    eta = EstimatedTime(found, [c.id for c, _ in left]) if plan.race is None else None
    print_estimates(console, cells, found, left, plan.race)
    try:
        with Progress(*_columns(eta), console=console, transient=False) as progress:
            total = len(cells) * plan.race.max_repeats if plan.race is not None else len(todo)
            runner = _Runner(
                backend, options, index, found, _Bar(progress, progress.add_task("starting", total=total), eta)
            )
            if plan.race is not None:
                hooks = racing.RaceHooks(runner.one, runner.bar.remaining, progress.console, after_round)
                runner.summary.race = racing.run_race(run_dir, cells, plan.race, options.force, hooks)
            for i, (cell, r) in enumerate(todo):
                runner.one(cell, r, False)
                round_ends = options.order == "rounds" and (i + 1 == len(todo) or todo[i + 1][1] != r)
                if round_ends and after_round is not None:
                    after_round()
            progress.update(runner.bar.task, description="done")
    finally:
        index.close()
    return runner.summary


def _remove_earlier(run_dir: Path, cells: list[MatrixCell], console: Console) -> None:
    """``--force`` runs the cells again from repeat 1: their earlier results in this run go first, so no
    repeat of the earlier batch (beyond the new count, or one a race no longer reaches) joins the new
    batch's answer. The results root's store keeps them: they happened, and are history."""
    earlier = [p for c in cells for p in (run_dir / c.id).glob("r*.*") if RESULT_FILE.fullmatch(p.name)]
    for path in earlier:
        path.unlink()
    if earlier:
        console.print(
            f"--force: removed {len(earlier)} earlier result files of these cells from {run_dir} "
            "(the store keeps them)",
            markup=False,
            highlight=False,
        )


def _todo(cells: list[MatrixCell], plan: racing.RunPlan, order: str, seed: int) -> list[tuple[MatrixCell, int]]:
    """The fixed repeats to run, (cell, repeat) in order (a race: none; it chooses round by round)."""
    if plan.race is not None:
        return []
    if order == "rounds":
        # Round r runs every cell once: a drift of the machine's load spreads over every cell,
        # instead of landing on the cells that happened to run while it lasted. Within the round, an
        # order drawn afresh from the run's seed: a drift within a round lines up with no axis.
        return [(c, r) for r in range(1, plan.repeat + 1) for c in round_order(cells, seed, r)]
    return [(c, r) for c in cells for r in range(1, plan.repeat + 1)]


def round_order(cells: list[MatrixCell], seed: int, r: int) -> list[MatrixCell]:
    """Round ``r``'s cells in the order drawn from ``seed`` (the same seed and round: the same order)."""
    shuffled = list(cells)
    random.Random(f"{seed}/{r}").shuffle(shuffled)
    return shuffled


def order_seed(run_dir: Path) -> int:
    """The seed of the order within rounds: the one the run directory's matrix.json recorded (a resumed
    run keeps its order), else a new one."""
    found = store.load_run_matrix(run_dir) if (run_dir / "matrix.json").is_file() else None
    if found is not None and found.order is not None:
        return found.order.seed
    return secrets.randbits(32)


def stored_design(run_dir: Path) -> Mapping[str, Any] | None:
    """The fraction a run directory's matrix.json recorded (matrix/design.py's ``Fraction.record``),
    for expansion to take instead of building it again: a resumed run or a shard runs the cells it
    was given."""
    found = store.load_run_matrix(run_dir) if (run_dir / "matrix.json").is_file() else None
    return found.design if found is not None else None


def design_from(path: Path) -> Mapping[str, Any]:
    """The design ``fsmatrix run --design-from FILE`` takes: FILE holds a design's record (matrix/design.py,
    ``record()``: a mapping with its ``kind``), as a Slurm task or a GitHub shard is given it, or a run
    directory's matrix.json (its ``design``). UserError (exit 2) for anything else."""
    try:
        doc = jsonfile.read(path)
    except OSError as e:
        raise UserError(f"--design-from: cannot read it ({e.strerror or e})", file=str(path)) from None
    except ValueError as e:
        raise UserError(f"--design-from: not JSON ({e})", file=str(path)) from None
    record = doc.get("design", doc) if isinstance(doc, dict) and "cells" in doc else doc
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise UserError(
            "--design-from: no design in it; it takes a design record (a mapping with 'kind', as "
            "`fsmatrix matrix expand --format github` gives each shard) or a run's matrix.json of a design",
            file=str(path),
        )
    return record


def check_design_taken(m: Matrix, record: Mapping[str, Any], path: Path) -> None:
    """``--design-from``'s promise: the cells run are the recorded design's. UserError (exit 2) when the
    matrix has no design or the record was made for another ``design:``, other settings, or is not one
    fsmatrix wrote (expansion then built the design again: matrix/design.py, ``from_record``)."""
    if m.design is None:
        raise UserError(
            f"--design-from: {m.path} is a full cross (no design:), nothing to take; leave --design-from out",
            file=str(path),
        )
    if not design.is_recorded(m.design, record):
        raise UserError(
            f"--design-from: its {record.get('kind')} design was not made for {m.path}'s design: and settings "
            f"(the file changed since, or the record is not one fsmatrix wrote); expand the file again "
            f"(fsmatrix matrix expand --format github) and give the shards that design",
            file=str(path),
        )


def _order_record(todo: list[tuple[MatrixCell, int]], order: str, seed: int) -> store.RunOrder | None:
    """What matrix.json records of a run in rounds: the seed and each round's order of cell ids."""
    if order != "rounds" or not todo:
        return None
    rounds: dict[int, list[str]] = {}
    for cell, r in todo:
        rounds.setdefault(r, []).append(cell.id)
    return store.RunOrder(seed, tuple(tuple(ids) for _, ids in sorted(rounds.items())))


def _columns(eta: EstimatedTime | None) -> tuple[ProgressColumn, ...]:
    return (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        eta or TimeRemainingColumn(),
    )


@dataclass(frozen=True)
class _Bar:
    """The run's progress bar: its task, and the estimated time left (None: a race's, rich's own)."""

    progress: Progress
    task: TaskID
    eta: EstimatedTime | None

    def remaining(self, left: int) -> None:
        """The runs still to come: a race's changes as cells leave."""
        self.progress.update(self.task, total=int(self.progress.tasks[0].completed) + left)


class _Runner:
    """Runs one repeat of a cell at a time for ``run_matrix`` (and a race), counting into its summary."""

    def __init__(
        self,
        backend: Backend,
        options: RunOptions,
        index: store.RootStore,
        found: dict[str, estimate.Estimate],
        bar: _Bar,
    ) -> None:
        self.backend, self.options, self.index, self.found, self.bar = backend, options, index, found, bar
        self.summary = RunSummary(run_dir=options.run_dir)

    def one(self, cell: MatrixCell, r: int, stored: bool = False) -> store.Result:
        """Run ``cell``'s repeat ``r``, or reuse it when it completed (``stored``: whatever its status,
        as long as its result is there: a race's completed round)."""
        path = store.result_path(self.options.run_dir, cell.id, r)
        reused = (stored and path.exists()) or (not self.options.force and store.is_complete(path))
        if reused:
            doc = store.load_document(path)
            self.summary.reused += 1
        else:
            doc = self._run(cell, r, path)
        self.summary.counts[doc.status] = self.summary.counts.get(doc.status, 0) + 1
        self.summary.docs.setdefault(cell.id, []).append(doc)
        self._say(cell, r, doc, reused)
        return doc

    def _run(self, cell: MatrixCell, r: int, path: Path) -> store.Result:
        progress, eta = self.bar.progress, self.bar.eta
        progress.update(self.bar.task, description=f"{cell.id} r{r}")
        if eta is not None:
            eta.start(cell.id)
        settings = self.options.settings
        written = _run_one(
            self.backend,
            with_auto_timeout(cell, self.found),
            r,
            self.options.run_id,
            path,
            settings.record() if settings else None,
        )
        if eta is not None:
            eta.finish(cell.id)
        try:
            self.index.add(self.options.run_id, written, path)
        except (sqlite3.Error, UserError) as exc:
            # The result file is written; `fsmatrix results reindex` adds it to the store later.
            log.warning("%s: not added to the store (%s); run `fsmatrix results reindex`", path, exc)
        return store.Result.read(written, path)

    def _say(self, cell: MatrixCell, r: int, doc: store.Result, reused: bool) -> None:
        progress = self.bar.progress
        if doc.status not in store.COMPLETE:
            progress.console.print(f"[red]{cell.id} r{r}: {doc.status}[/red]: {doc.reason}")
        elif doc.status == "skipped" and r == 1:
            progress.console.print(f"[yellow]{cell.id}: skipped[/yellow]: {doc.reason}")
        progress.advance(self.bar.task)
        if not progress.console.is_terminal:  # a log file gets one line per run instead of a live bar
            done = int(progress.tasks[0].completed)
            progress.console.print(
                f"[{done}/{int(progress.tasks[0].total or 0)}] {cell.id} r{r}: {doc.status}"
                f" ({doc.duration_s or 0:.1f} s{', reused: not run again' if reused else ''})"
            )


# ---------------------------------------------------------------------------------------------
# estimates


def cell_estimates(results_root: Path, cells: list[MatrixCell]) -> dict[str, estimate.Estimate]:
    """Each cell's estimated duration from the passed runs stored under ``results_root`` on this host."""
    here, _ = hostinfo.machine_id()
    stored = past_runs.stored_runs(results_root, here, {c.workload_kind for c in cells}, [c.id for c in cells])
    return estimate.estimates(((c.id, c.params) for c in cells), stored)


def print_estimates(
    console: Console,
    cells: list[MatrixCell],
    found: dict[str, estimate.Estimate],
    left: list[tuple[MatrixCell, int]],
    race: RaceSettings | None,
) -> None:
    """Each cell's estimate, and the whole run's: the runs left (a resumed run's, not done yet) or a
    race's most."""
    for cell in cells:
        console.print(f"estimate {cell.id}: {found[cell.id].show()}", markup=False, highlight=False)
    if race is not None:
        whole = estimate.total(found, {c.id: race.max_repeats for c in cells})
        console.print(f"{whole.show(at_most=True)} (a race may stop earlier)", markup=False, highlight=False)
        return
    runs_left: dict[str, int] = {}
    for cell, _ in left:
        runs_left[cell.id] = runs_left.get(cell.id, 0) + 1
    console.print(estimate.total(found, runs_left).show(), markup=False, highlight=False)


def with_auto_timeout(cell: MatrixCell, found: dict[str, estimate.Estimate]) -> MatrixCell:
    """``cell`` with its limit derived from its stored runs here when it says ``timeout: auto``
    (estimate.auto_timeout: 3x its slowest passed run, at least a floor; without history the
    default); the id stays (it hashes "auto"), the job gets the number and why."""
    if not cell.spec.timeout_auto:
        return cell
    seconds, why = estimate.auto_timeout(found.get(cell.id) or estimate.Estimate(None, estimate.UNKNOWN))
    log.info("%s: timeout %d s (%s)", cell.id, seconds, why)
    return dataclasses.replace(cell, spec=dataclasses.replace(cell.spec, timeout=seconds, timeout_source=why))


class EstimatedTime(ProgressColumn):
    """The time left from the cells' estimates (results/verdict/estimate.py) rather than linear in runs: a
    matrix of one slow cell and many quick ones would otherwise be off by the ratio. Runs without an
    estimate count as the mean of the estimated ones; with none at all, rich's own (linear) ETA."""

    def __init__(self, found: dict[str, estimate.Estimate], left: list[str]) -> None:
        super().__init__()
        known = [e.seconds for e in found.values() if e.seconds is not None]
        mean = statistics.fmean(known) if known else None
        self.each = {cell_id: e.seconds if e.seconds is not None else mean for cell_id, e in found.items()}
        self.waiting = sum(self.each.get(c) or 0.0 for c in left)  # the runs not started yet
        self.current: tuple[float, float] | None = None  # (its estimate, when it started)
        self.linear = TimeRemainingColumn() if mean is None else None

    def start(self, cell_id: str) -> None:
        seconds = self.each.get(cell_id) or 0.0
        self.waiting = max(0.0, self.waiting - seconds)
        self.current = (seconds, time.monotonic())

    def finish(self, cell_id: str) -> None:
        self.current = None

    def seconds_left(self) -> float:
        running = 0.0
        if self.current is not None:
            seconds, since = self.current
            running = max(0.0, seconds - (time.monotonic() - since))
        return self.waiting + running

    def render(self, task: Task) -> Text:
        if self.linear is not None:
            return self.linear.render(task)
        if task.finished:
            return Text("0:00:00", style="progress.remaining")
        whole = round(self.seconds_left())
        return Text(f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}", style="progress.remaining")


def matrix_record(
    matrix: Matrix,
    cells: list[MatrixCell],
    repeat: int,
    race: RaceSettings | None = None,
    order: store.RunOrder | None = None,
) -> dict[str, Any]:
    """What a run directory's ``matrix.json`` holds: the matrix's name, file and repeats, and each
    selected cell with its settings, its comparison group (``group``: the key, ``group_label``: for
    people), whether it is its group's ``baseline``, and its ``runner`` labels when it names some;
    ``baseline_rule`` says how the baselines were chosen (``named`` by the file's ``baseline``, or
    ``defaults``) and ``baselines`` maps every group key of the whole matrix to its baseline's id (a
    selection may leave a baseline out). A race
    adds its settings (``race``; ``repeat`` is then its maximum repeats); fixed repeats in rounds, their
    ``order`` (the seed and each round's cell ids); a fraction, its ``design`` (design.Fraction.record)."""
    entries = []
    for c in cells:
        group = group_of(c.spec)
        entries.append(
            {
                "id": c.id,
                "params": c.params,
                "group": group.key,
                "group_label": group.label,
                "baseline": matrix.baselines.get(group.key) == c.id,
                **({"runner": {"labels": list(c.runner)}} if c.runner else {}),
            }
        )
    record = {
        "name": matrix.name,
        "file": matrix.path,
        "repeat": repeat,
        "cells": entries,
        "baseline_rule": matrix.baseline_rule,
        "baselines": dict(matrix.baselines),
    }
    if race is not None:
        record["race"] = race.to_dict()
    if order is not None:
        record["order"] = order.record()
    if matrix.design is not None:  # a fraction's generators: read back, never rebuilt (matrix/design.py)
        record["design"] = matrix.design.record()
    return record


def _run_one(
    backend: Backend,
    cell: MatrixCell,
    repeat: int,
    run_id: str,
    path: Path,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One repeat, its log captured next to its result; the result written atomically (with the
    build's ``settings`` as ``provenance.settings`` when the run was given some)."""
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
            job.CellRepeat(cell.spec, cell.id, repeat),
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
    if settings is not None:
        doc.setdefault("provenance", {})["settings"] = settings
    jsonfile.write_atomic(path, doc)
    return doc


def run_repeat(
    matrix: Matrix, cell: MatrixCell, backend: Backend, *, results_root: Path, run_id: str, repeat: int
) -> store.Result:
    """Exactly repeat ``repeat`` of ``cell`` under ``run_id``, whatever the state of its other repeats
    (``run_matrix`` would also retry the earlier ones that did not pass), stored and indexed like
    any run: for a caller that interleaves runs itself and decides after each (``fsmatrix bisect``)."""
    run_dir = results_root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(run_dir / "matrix.json", matrix_record(matrix, [cell], repeat))
    backend.preflight([cell])
    path = store.result_path(run_dir, cell.id, repeat)
    doc = _run_one(backend, with_auto_timeout(cell, cell_estimates(results_root, [cell])), repeat, run_id, path)
    try:
        index = store.RootStore(results_root)
        try:
            index.add(run_id, doc, path)
        finally:
            index.close()
    except (sqlite3.Error, UserError) as exc:
        log.warning("%s: not added to the store (%s); run `fsmatrix results reindex`", path, exc)
    return store.Result.read(doc, path)


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
        statuses = sorted({d.status for d in docs})
        metric = next(iter(docs[0].key_metrics), "") if docs else ""
        values = [v for d in docs if (v := d.metrics.get(metric)) is not None]
        median = f"{statistics.median(values):.4g}" if values else "-"
        spread = f"{min(values):.4g}..{max(values):.4g}" if len(values) > 1 else "-"
        colour = "green" if statuses and set(statuses) <= set(store.COMPLETE) else "red"
        status = f"[{colour}]{','.join(statuses)}[/{colour}]"
        mount = (cell.spec.mount_options,) if mounts else ()
        table.add_row(cell.id, *mount, cell.summary(), str(len(docs)), status, metric, median, spread)
    return table
