"""Racing: runs in rounds, and after each round the cells that the statistics rule out leave.
``fsmatrix run`` races a matrix whose selected cells form a comparison group (two or more cells of
one workload and input, not a crash group) unless told otherwise (``design``: ``--repeat N`` or
``--no-race`` run fixed repeats). The orchestration and its record (``race.json``: every round's
runs and decisions, so the same command continues a race; why it stopped; each group decided or
not); the decisions are ``results.verdict.race``'s: ``race_step`` on one group after a round,
``race_look`` turning that step into who leaves. ``runs.run_matrix`` drives a race through
``run_race`` with its own way to run one cell."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError
from fsmatrix.matrix import Matrix, MatrixCell, RaceSettings, default_race
from fsmatrix.matrix import groups as matrix_groups
from fsmatrix.results import store
from fsmatrix.results.verdict import metrics

# The race's statistics (results.verdict.race and .stats) import scipy, a second of start-up: run_race
# imports them, so every command that imports runs starts without them (tests/cli/test_command_loading.py).

RACE_FILE = store.RACE_FILE
# 2: a cell is retired when shown worse than the best at all (``retire_margin`` 0, the answer's "worse");
# 1 retired it only when worse by more than δ. A race of another format is not continued (--force).
RACE_FORMAT = 2
RETIRE_MARGIN = 0.0
# Why a race stopped (race.json's ``stopped.reason``): every raced group decided, the last round
# (``max_repeats``) reached with some group undecided, or the time budget spent.
STOP_REASONS = ("decided", "max_repeats", "budget")


@dataclass
class RaceGroup:
    key: str
    label: str
    metric: str | None  # the workload's primary metric; None: a crash group (not raced)
    direction: str
    cells: list[MatrixCell]

    @property
    def raced(self) -> bool:
        """Whether the race decides between its cells: two or more, on a primary metric (a crash
        group's runs measure recoveries; a cell alone has nothing to race against)."""
        return self.metric is not None and len(self.cells) >= 2


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


@dataclass(frozen=True)
class Design:
    """What ``fsmatrix run`` runs: a race (``race``: its settings) or ``repeat`` fixed repeats of every
    cell (``race`` None), and one line for people saying which and why."""

    race: RaceSettings | None
    repeat: int  # fixed repeats a cell; a race's max_repeats
    why: str


def comparable(cells: list[MatrixCell]) -> bool:
    """Whether ``cells`` hold a comparison group to race: two or more cells of one group with a
    primary metric (``RaceGroup.raced``)."""
    return any(g.raced for g in race_groups(cells))


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:g} s"


def describe(settings: RaceSettings) -> str:
    """A race's settings in words: "3 to 10 repeats a cell, δ 5 %, budget 30 min"."""
    budget = f", budget {_duration(settings.budget_s)}" if settings.budget_s is not None else ", no time budget"
    return f"{settings.min_repeats} to {settings.max_repeats} repeats a cell, δ {settings.delta:.0%}{budget}"


def design(
    m: Matrix,
    cells: list[MatrixCell],
    *,
    race: bool | None = None,
    repeat: int | None = None,
    budget_s: float | None = None,
    one_machine: bool = True,
) -> Design:
    """What to run (``fsmatrix run``'s rule; docs/statistics-and-gate.md, 'Racing'):

    - ``--no-race`` (``race`` False), or ``--repeat N`` without ``--race``: fixed repeats (N, else the
      matrix's ``repeat``);
    - cells with no comparison group to race (``comparable``): fixed repeats, whatever was asked;
    - ``--executor slurm`` (not ``one_machine``): fixed repeats when the race is only the default (a
      race decides between rounds, across every cell, on one machine); an asked-for race is refused;
    - otherwise a race: the matrix's ``race:``, else ``default_race(repeat)`` (every cell at least the
      matrix's ``repeat`` runs, at least 3, and at most 10 or that minimum); with ``--race --repeat N`` at
      most N; ``budget_s`` (``--budget``) replaces the race's budget.

    UserError for what cannot be meant: ``--budget`` with fixed repeats asked for, a race's maximum
    below its minimum, a race asked for under Slurm."""
    fixed = race is False or (race is None and repeat is not None)
    if m.design is not None and not fixed:  # a fraction's cells run alike: a race would unbalance it
        if race or m.race is not None or budget_s is not None:
            raise UserError(
                "design: a fraction runs fixed repeats (a race would unbalance it): leave out --race, "
                "--budget and the matrix's race:"
            )
        return Design(None, repeat or m.repeat, f"fixed repeats: {repeat or m.repeat} a cell (a fraction)")
    if fixed:
        if budget_s is not None:
            given = "--no-race" if race is False else f"--repeat {repeat} (fixed repeats)"
            raise UserError(
                f"--budget limits a race, and {given} runs fixed repeats: leave --budget out, or give "
                "--race (--race --repeat N: a race of at most N repeats a cell)"
            )
        n = repeat or m.repeat
        return Design(None, n, f"fixed repeats: {n} a cell ({'--no-race' if race is False else f'--repeat {n}'})")
    n = repeat or m.repeat
    if not comparable(cells):
        unused = "; --budget does not apply" if budget_s is not None else ""
        return Design(None, n, f"fixed repeats: {n} a cell (no comparison group of two or more cells to race{unused})")
    asked = "--race" if race else "the matrix's race:" if m.race is not None else ""
    if not one_machine:
        if asked:
            raise UserError(
                f"the matrix races ({asked}), deciding across every cell: give --no-race for --executor slurm"
            )
        if budget_s is not None:
            raise UserError("--budget limits a race; --executor slurm runs fixed repeats (a race needs one machine)")
        return Design(
            None, n, f"fixed repeats: {n} a cell (--executor slurm: a race decides between rounds on one machine)"
        )
    settings = m.race or default_race(m.repeat)
    if repeat is not None:
        if repeat < settings.min_repeats:
            raise UserError(
                f"--repeat {repeat} is below the race's min_repeats ({settings.min_repeats}): with --race, --repeat "
                "is the race's maximum"
            )
        settings = dataclasses.replace(settings, max_repeats=repeat)
    if budget_s is not None:
        settings = dataclasses.replace(settings, budget_s=budget_s)
    source = asked or "the default with a comparison group; --repeat N or --no-race: fixed repeats"
    return Design(settings, settings.max_repeats, f"race: {describe(settings)} ({source})")


def _new_race(cells: list[MatrixCell], groups: list[RaceGroup], settings: RaceSettings, alpha: float) -> dict[str, Any]:
    return {
        "format_version": RACE_FORMAT,
        "retire_margin": RETIRE_MARGIN,
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
                "raced": g.raced,
                "decided": False if g.raced else None,
                "closed_after_round": None,
            }
            for g in groups
        ],
        "rounds": [],
        "left": {},
        "stopped": None,
        "runs_used": 0,
        "runs_fixed": len(cells) * settings.max_repeats,
    }


def _same_race(stored: dict[str, Any], fresh: dict[str, Any]) -> str | None:
    """The first key on which ``stored`` is another race than ``fresh`` (the budget may differ: it
    changes when the race stops, not what it decides), or None."""
    for key in ("format_version", "settings", "cells"):
        old, new = stored.get(key), fresh[key]
        if key == "settings" and isinstance(old, dict):
            old, new = {**old, "budget_s": None}, {**new, "budget_s": None}
        if old != new:
            return key
    return None


def _load_race(path: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """The race stored in ``path`` when it is this race (same settings but the budget, same cells), else
    UserError. It takes ``fresh``'s budget; a race the old budget stopped is reopened when the new one
    allows more (``_reopen``)."""
    try:
        stored: dict[str, Any] = jsonfile.read(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the stored race ({exc}); rerun with --force to start a new one") from exc
    other = _same_race(stored, fresh)
    if other is not None:
        raise UserError(
            f"{path}: the stored race has other {other} ({stored.get(other)!r}, now {fresh[other]!r}); "
            "rerun with --force to start a new race, or give another --run-id"
        )
    stored["left"] = {cell: store.current_left(entry) for cell, entry in (stored.get("left") or {}).items()}
    stored["settings"] = fresh["settings"]
    _reopen(stored)
    return stored


def _reopen(state: dict[str, Any]) -> None:
    """A race the budget stopped goes on when its budget now allows more (larger, or none): the cells
    the stop sent away undecided come back, and the race continues after its last round."""
    stopped = state.get("stopped")
    # A race of this format records why it stopped (older ones are not continued: _same_race).
    if stopped is None or stopped.get("reason") != "budget" or not state["rounds"]:
        return
    budget = state["settings"].get("budget_s")
    spent = float(state["rounds"][-1].get("runs_s") or 0.0)
    if budget is not None and spent >= budget:
        return
    last = int(stopped["after_round"])
    state["left"] = {
        cell: entry
        for cell, entry in state["left"].items()
        if not (entry.get("round") == last and entry.get("stopped_by") == "budget")
    }
    state["stopped"] = None


def _unraced(g: RaceGroup, left: dict[str, dict[str, Any]], r: int, settings: RaceSettings) -> int:
    """A group the race does not decide (a crash group, a cell alone): its cells run every round up
    to the race's minimum, then leave undecided. 1 while the group is still running, else 0."""
    if r < settings.min_repeats:
        return 1
    why = "a crash group is not raced" if g.metric is None else "the only cell of its comparison group: not raced"
    for c in g.cells:
        left.setdefault(c.id, {"round": r, "action": "remained", "reason": f"{why} (ran the race's minimum, {r})"})
    return 0


def _stop(
    state: dict[str, Any], cells: list[MatrixCell], bests: set[str | None], r: int, open_groups: int, spent: float
) -> None:
    """After round ``r``: whether the race stops, and why (``state["stopped"]``: ``after_round``, ``why``
    for people, ``reason`` one of ``STOP_REASONS``); a budget stop sends the cells still in the race away."""
    settings = state["settings"]
    left: dict[str, dict[str, Any]] = state["left"]
    if not open_groups:
        undecided = any(
            left.get(c, {}).get("action") == "remained" for g in state["groups"] if g["raced"] for c in g["cells"]
        )
        if undecided:
            state["stopped"] = {
                "after_round": r,
                "why": f"max_repeats ({settings['max_repeats']}) reached",
                "reason": "max_repeats",
            }
        else:
            why = "one cell or one equivalent set left in every comparison group"
            state["stopped"] = {"after_round": r, "why": why, "reason": "decided"}
    elif settings.get("budget_s") is not None and spent >= settings["budget_s"]:
        why = f"the budget ({settings['budget_s']:g} s) was spent: the runs took {spent:.0f} s"
        for c in cells:
            if c.id not in left:
                action, reason = ("best", f"{why}; the best median then") if c.id in bests else ("remained", why)
                left[c.id] = {"round": r, "action": action, "reason": reason, "stopped_by": "budget"}
        state["stopped"] = {"after_round": r, "why": why, "reason": "budget"}


def _mark_groups(state: dict[str, Any]) -> None:
    """Each group's ``decided`` (raced groups: every cell left, none undecided — retired, equivalent,
    the best or skipped, never "remained"; None for a group not raced) and ``closed_after_round`` (the
    round its last cell left after; None while one is still running)."""
    left: dict[str, dict[str, Any]] = state["left"]
    for g in state["groups"]:
        gone = [left[c] for c in g["cells"] if c in left]
        closed = len(gone) == len(g["cells"])
        g["closed_after_round"] = max(int(e["round"]) for e in gone) if closed and gone else None
        g["decided"] = (closed and all(e["action"] != "remained" for e in gone)) if g.get("raced") else None


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
    or ties leave. The race stops when every group is decided, at ``max_repeats``, or at the end of
    the first round after which the runs took ``budget_s``, whichever comes first. It is stored in
    ``run_dir``/race.json after every round, decisions included: the same command again continues
    it (completed rounds are read back, not rerun or decided again). Returns the stored race."""
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
            if not g.raced or g.metric is None:
                open_groups += _unraced(g, left, r, settings)
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
        _stop(state, cells, bests, r, open_groups, spent)
        _mark_groups(state)
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
