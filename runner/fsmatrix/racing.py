"""Racing (``fsmatrix run --race``): runs in rounds, and after each round the cells that the
statistics rule out leave. The orchestration and its record (``race.json``: every round's runs and
decisions, so the same command continues a race); the decisions are ``results.verdict.race``'s:
``race_step`` on one group after a round, ``race_look`` turning that step into who leaves.
``runs.run_matrix`` drives a race through ``run_race`` with its own way to run one cell."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell, RaceSettings
from fsmatrix.matrix import groups as matrix_groups
from fsmatrix.results import store
from fsmatrix.results.verdict import metrics

# The race's statistics (results.verdict.race and .stats) import scipy, a second of start-up: run_race
# imports them, so every command that imports runs starts without them (tests/cli/test_command_loading.py).

RACE_FILE = store.RACE_FILE
RACE_FORMAT = 1


@dataclass
class RaceGroup:
    key: str
    label: str
    metric: str | None  # the workload's primary metric; None: a crash group (not raced)
    direction: str
    cells: list[MatrixCell]


def race_groups(cells: list[MatrixCell]) -> list[RaceGroup]:
    """The comparison groups of ``cells`` in order of their first cell, each with its primary metric
    (none for a crash group: its runs measure recoveries)."""
    raced = []
    for group, members in matrix_groups(cells).values():
        spec = members[0].spec
        primary = spec.declaration.primary_metric
        if spec.crash is None:
            raced.append(RaceGroup(group.key, group.label, primary.name, primary.better, list(members)))
        else:
            raced.append(RaceGroup(group.key, group.label, None, "lower", list(members)))
    return raced


def race_values(docs: list[store.Result], metric: str) -> list[float | None]:
    """The primary metric of each run: a failed run (or a passed one without the metric) is None."""
    return [metrics.metric_value(d, metric) if d.status == "passed" else None for d in docs]


def _new_race(cells: list[MatrixCell], groups: list[RaceGroup], settings: RaceSettings, alpha: float) -> dict[str, Any]:
    return {
        "format_version": RACE_FORMAT,
        "settings": settings.to_dict(),
        "alpha": alpha,
        "cells": [c.id for c in cells],
        "groups": [
            {
                "key": g.key,
                "label": g.label,
                "metric": g.metric,
                "direction": g.direction,
                "cells": [c.id for c in g.cells],
                "raced": g.metric is not None,
            }
            for g in groups
        ],
        "rounds": [],
        "left": {},
        "stopped": None,
        "runs_used": 0,
        "runs_fixed": len(cells) * settings.max_repeats,
    }


def _load_race(path: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """The race stored in ``path`` when it is this race (same settings and cells), else UserError."""
    try:
        stored: dict[str, Any] = jsonfile.read(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the stored race ({exc}); rerun with --force to start a new one") from exc
    for key in ("format_version", "settings", "cells"):
        if stored.get(key) != fresh[key]:
            raise UserError(
                f"{path}: the stored race has other {key} ({stored.get(key)!r}, now {fresh[key]!r}); "
                "rerun with --force to start a new race, or give another --run-id"
            )
    stored["left"] = {cell: store.current_left(entry) for cell, entry in (stored.get("left") or {}).items()}
    return stored


def run_race(
    run_dir: Path,
    cells: list[MatrixCell],
    settings: RaceSettings,
    force: bool,
    one: Callable[[MatrixCell, int, bool], store.Result],
    remaining: Callable[[int], None],
    console: Console,
    after_round: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Rounds of every live cell once, in the matrix's order; after each round from ``min_repeats``
    on, ``race.race_step`` per comparison group on the primary metric, and the cells it retires
    or ties leave. The race is stored in ``run_dir``/race.json after every round, decisions
    included: the same command again continues it (completed rounds are read back, not rerun or
    decided again). Returns the stored race."""
    from fsmatrix.results.verdict import race, stats

    path = run_dir / RACE_FILE
    groups = race_groups(cells)
    state = _new_race(cells, groups, settings, stats.ALPHA)
    if path.exists() and not force:
        state = _load_race(path, state)
    by_id = {c.id: c for c in cells}
    docs: dict[str, list[store.Result]] = {c.id: [] for c in cells}
    for done in state["rounds"]:  # completed rounds: their runs read back, never run or decided again
        for cell_id in done["ran"]:
            docs[cell_id].append(one(by_id[cell_id], done["round"], True))
    left: dict[str, dict[str, Any]] = state["left"]
    r = len(state["rounds"]) + 1
    while state["stopped"] is None and r <= settings.max_repeats:
        live = [c for c in cells if c.id not in left]
        remaining(len(live) * (settings.max_repeats - r + 1))
        for cell in live:
            docs[cell.id].append(one(cell, r, False))
        record: dict[str, Any] = {"round": r, "ran": [c.id for c in live], "groups": {}}
        open_groups = 0
        bests: set[str | None] = set()
        for g in groups:
            members = [c.id for c in g.cells]
            if all(m in left for m in members):
                continue
            for m in members:
                skipped = next((d for d in docs[m] if d.status == "skipped"), None)
                if m not in left and skipped is not None:
                    left[m] = {"round": r, "action": "skipped", "reason": f"skipped: {skipped.reason}"}
            if g.metric is None:  # a crash group: its runs measure recoveries; every round, nothing decided
                if r >= settings.max_repeats:
                    for m in members:
                        left.setdefault(m, {"round": r, "action": "remained", "reason": "a crash group is not raced"})
                else:
                    open_groups += 1
                continue
            samples = {m: race_values(docs[m], g.metric) for m in members}
            step, gone, still_open = race.race_look(samples, g.direction, left, r, settings, state["alpha"])
            bests.add(step.best)
            record["groups"][g.key] = {
                "best": step.best,
                "look_alpha": step.look_alpha,
                "decisions": [jsonfile.strict(asdict(d)) for d in step.decisions],
            }
            left.update(gone)
            open_groups += still_open
        state["runs_used"] += len(live)
        spent = sum(float(d.duration_s or 0) for ds in docs.values() for d in ds)
        record["runs_s"] = round(spent, 3)
        state["rounds"].append(record)
        if not open_groups:
            why = (
                f"max_repeats ({settings.max_repeats}) reached"
                if r >= settings.max_repeats
                else "one cell or one equivalent set left in every comparison group"
            )
            state["stopped"] = {"after_round": r, "why": why}
        elif settings.budget_s is not None and spent >= settings.budget_s:
            why = f"the budget ({settings.budget_s:g} s) was spent: the runs took {spent:.0f} s"
            for c in cells:
                if c.id not in left:
                    if c.id in bests:
                        left[c.id] = {"round": r, "action": "best", "reason": f"{why}; the best median then"}
                    else:
                        left[c.id] = {"round": r, "action": "remained", "reason": why}
            state["stopped"] = {"after_round": r, "why": why}
        jsonfile.write_atomic(path, state)
        for cell_id, leaving in left.items():
            if leaving["round"] == r:
                console.print(f"race: {cell_id} {leaving['action']} after round {r}: {leaving['reason']}")
        if after_round is not None:
            after_round()
        r += 1
    remaining(0)
    return state


def race_summary_lines(race: store.Race) -> list[str]:
    """The race for people: its rounds, who left when and why, and the runs it saved."""
    saved = race.runs_fixed - race.runs_used
    head = f"race: {race.rounds} round{'s' if race.rounds != 1 else ''}"
    head += f", stopped: {race.stopped.why}" if race.stopped else ", not finished (run the same command again to go on)"
    share = saved / max(race.runs_fixed, 1)
    lines = [head + f"; {race.runs_used} runs of the fixed design's {race.runs_fixed} ({saved} saved, {share:.0%})"]
    for cell_id in race.cells:
        leaving = race.left.get(cell_id)
        if leaving:
            lines.append(f"  {cell_id}: {leaving.action} after round {leaving.round}: {leaving.reason}")
        else:
            lines.append(f"  {cell_id}: still racing")
    return lines
