"""A run directory's two records beside its results, typed once here: ``matrix.json`` (``RunMatrix``:
the expanded matrix a run was made from, its cells' groups and baselines) and ``race.json`` (``Race``:
what `fsmatrix run --race` decided, round by round). ``Race`` is also what racing.py
makes and writes round by round; every reader takes these types, so no reader picks a raw dict apart.

One status vocabulary: ``STATUS_OF_ACTION`` names every way a cell leaves a race and the answer's
status for it. ``Race.read`` reads race.json of any format in today's words (format 1's "tied",
format 2's "best" for an undecided race's leader and "retired" for a cell whose runs failed), and
nothing after it sees the old ones; ``Race.record`` writes format 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError
from fsmatrix.results.store.files import RACE_FILE


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class MatrixEntry:
    """One selected cell of the matrix: its comparison group (as the matrix grouped it) and whether it
    is its group's baseline (None: the record does not say)."""

    id: str
    params: Mapping[str, Any]
    group: str | None
    group_label: str | None
    baseline: bool | None


@dataclass(frozen=True)
class RunOrder:
    """The order fixed repeats ran in, round by round (``matrix.json``'s ``order``): the seed each
    round's order was drawn from (runs.round_order) and each round's cell ids in the order they ran."""

    seed: int
    rounds: tuple[tuple[str, ...], ...]

    @classmethod
    def read(cls, record: Any) -> RunOrder | None:
        """None when ``record`` is no order (a run of an older fsmatrix, cell by cell, or a race)."""
        if not isinstance(record, Mapping):
            return None
        seed = record.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            return None
        rounds = [tuple(str(i) for i in r) for r in _list(record.get("rounds")) if isinstance(r, list)]
        return cls(seed, tuple(rounds))

    def record(self) -> dict[str, Any]:
        return {"seed": self.seed, "rounds": [list(r) for r in self.rounds]}


@dataclass(frozen=True)
class RunMatrix:
    """``matrix.json``: the matrix's name and file, its cells in the matrix's order, and how the
    baselines were chosen (``baseline_rule``: "named", "defaults", or None when not recorded)."""

    name: str | None
    file: str | None
    cells: tuple[MatrixEntry, ...]
    baseline_rule: str | None
    design: Mapping[str, Any] | None = None  # a fraction's record (matrix/design.py: Fraction.record)
    order: RunOrder | None = None  # the order within rounds (runs.py), when the run recorded one

    @classmethod
    def read(cls, record: Mapping[str, Any]) -> RunMatrix:
        entries: dict[str, MatrixEntry] = {}
        for e in _list(record.get("cells")):
            if not isinstance(e, Mapping) or not isinstance(e.get("id"), str) or e["id"] in entries:
                continue
            group, label, flag = e.get("group"), e.get("group_label"), e.get("baseline")
            entries[e["id"]] = MatrixEntry(
                e["id"],
                _mapping(e.get("params")),
                group if isinstance(group, str) and group else None,
                label if isinstance(label, str) and label else None,
                flag if isinstance(flag, bool) else None,
            )
        rule = record.get("baseline_rule")
        name, file = record.get("name"), record.get("file")
        return cls(
            name if isinstance(name, str) else None,
            file if isinstance(file, str) else None,
            tuple(entries.values()),
            rule if isinstance(rule, str) else None,
            record["design"] if isinstance(record.get("design"), Mapping) else None,
            RunOrder.read(record.get("order")),
        )

    def entry(self, cell_id: str) -> MatrixEntry | None:
        return next((e for e in self.cells if e.id == cell_id), None)


# ----------------------------------------------------------------------------------- race.json

# race.json's format: 3 names the two ways a cell leaves that 2 called otherwise ("leader": the best
# median when the race ran out, 2's "best" beside a "remained" cell; "failed": a cell whose runs
# failed, 2's "retired"); 2 retired a cell shown worse at all (``retire_margin`` 0); 1 retired it only
# when worse by more than δ and said "tied" for "equivalent". ``Race.read`` reads all three in today's
# words; ``Race.record`` writes 3.
RACE_FORMAT = 3

# How a cell left the race (race.json's ``left[].action``), each with the answer's status for it
# (verdict/groups.STATUSES): the race's words for what happened, the answer's for what it means. The
# one table between the two.
STATUS_OF_ACTION = {
    "retired": "worse",  # shown worse than its group's best
    "equivalent": "equivalent",  # shown equivalent within ±δ to its group's best
    "best": "best",  # decided best: every other cell of its group retired or equivalent
    "leader": "not separated",  # the best median when the race ran out (max_repeats or the budget), undecided
    "remained": "not separated",  # still undecided when the race ran out (or a group the race does not decide)
    "failed": "not enough data",  # a run failed (or measured <= 0): never wins, and is not shown worse either
    "skipped": "not enough data",  # its runs were skipped
}
LEFT_ACTIONS = tuple(STATUS_OF_ACTION)
# Why a race stopped (``stopped.reason``): every raced group decided, the last round (``max_repeats``)
# reached with some group undecided, or the time budget spent.
STOP_REASONS = ("decided", "max_repeats", "budget")


def current_words(text: str) -> str:
    """A stored race's text in today's words ("tied set" -> "equivalent set")."""
    return text.replace("tied set", "equivalent set").replace("retired or tied", "retired or equivalent")


@dataclass(frozen=True)
class RaceSettingsRecord:
    min_repeats: int | None
    max_repeats: int | None
    delta: float
    budget_s: float | None


@dataclass(frozen=True)
class RaceGroupRecord:
    key: str
    label: str
    metric: str | None  # None: a crash group, which is not raced
    direction: str
    cells: tuple[str, ...]
    raced: bool
    decided: bool | None  # every cell left decided (None: not raced, or a race.json from before it was recorded)
    closed_after_round: int | None = None  # the round its last cell left after (None: one still runs)


@dataclass(frozen=True)
class Left:
    """How and when a cell left the race: ``action`` one of LEFT_ACTIONS, after ``round``;
    ``stopped_by`` "budget" when a budget stop sent it away undecided (a larger budget brings it back)."""

    action: str
    round: int
    reason: str
    stopped_by: str | None = None

    @property
    def status(self) -> str | None:
        """The answer's status for this action (None: an action this fsmatrix does not know)."""
        return STATUS_OF_ACTION.get(self.action)


@dataclass(frozen=True)
class LookDecision:
    """One cell's decision at one look (``verdict/race.CellDecision``, nan stored as None)."""

    cell: str
    action: str  # verdict/race.ACTIONS: "keep", "retire", "equivalent"
    reason: str
    n: int
    ratio: float | None
    p_retire: float | None
    p_equivalent: float | None


@dataclass(frozen=True)
class GroupLook:
    """One raced group's look after a round: its current best, Pocock's level α' and each cell's decision."""

    best: str | None
    look_alpha: float | None
    decisions: tuple[LookDecision, ...]


@dataclass(frozen=True)
class Round:
    """One completed round: the cells it ran, each raced group's look, and the runs' seconds so far."""

    round: int
    ran: tuple[str, ...]
    groups: Mapping[str, GroupLook]  # by group key
    runs_s: float | None


@dataclass(frozen=True)
class Stopped:
    after_round: int
    why: str  # for people
    reason: str | None  # one of STOP_REASONS (None: a race.json from before it was recorded)


@dataclass(frozen=True)
class Race:
    """``race.json``: the race's settings and α, its cells and groups, its completed rounds, who left
    when, why it stopped (None: not finished), and the runs it used against the fixed design's. The
    one type of a race: `fsmatrix run` makes it, writes it after every round (``record``) and reads it
    back (``read``, any format in today's words); the report and the answer read it."""

    settings: RaceSettingsRecord
    alpha: float
    retire_margin: float  # a cell was retired when worse than the best by more than this (0: worse at all)
    cells: tuple[str, ...]
    groups: tuple[RaceGroupRecord, ...]
    rounds: tuple[Round, ...]
    left: Mapping[str, Left]
    stopped: Stopped | None
    runs_used: int
    runs_fixed: int

    @property
    def look_alpha(self) -> dict[str, tuple[float, ...]]:
        """Each raced group's α' at each of its looks (group key -> one per round it was looked at)."""
        looks: dict[str, list[float]] = {}
        for r in self.rounds:
            for key, look in r.groups.items():
                if look.look_alpha is not None:
                    looks.setdefault(key, []).append(look.look_alpha)
        return {k: tuple(v) for k, v in looks.items()}

    @classmethod
    def read(cls, record: Mapping[str, Any]) -> Race:
        """A race.json of any format, in today's words (see RACE_FORMAT)."""
        settings = _mapping(record.get("settings"))
        delta = float(settings.get("delta") or 0.05)
        stopped = record.get("stopped")
        race = cls(
            RaceSettingsRecord(
                _int(settings.get("min_repeats")),
                _int(settings.get("max_repeats")),
                delta,
                float(settings["budget_s"]) if _number(settings.get("budget_s")) else None,
            ),
            float(record.get("alpha") or 0.05),
            # races of format 1 retired a cell only when worse by more than δ
            float(record["retire_margin"]) if _number(record.get("retire_margin")) else delta,
            tuple(str(c) for c in _list(record.get("cells"))),
            tuple(_group(g) for g in _list(record.get("groups")) if isinstance(g, Mapping)),
            tuple(_round(r) for r in _list(record.get("rounds")) if isinstance(r, Mapping)),
            {str(c): _left(v) for c, v in _mapping(record.get("left")).items() if isinstance(v, Mapping)},
            Stopped(
                int(stopped.get("after_round") or 0),
                current_words(str(stopped.get("why") or "stopped")),
                str(stopped["reason"]) if stopped.get("reason") else None,
            )
            if isinstance(stopped, Mapping)
            else None,
            int(record.get("runs_used") or 0),
            int(record.get("runs_fixed") or 0),
        )
        return race if record.get("format_version") == RACE_FORMAT else _in_format_3(race)

    def record(self) -> dict[str, Any]:
        """race.json, format 3 (``jsonfile.write_atomic`` writes it)."""
        return {
            "format_version": RACE_FORMAT,
            "retire_margin": self.retire_margin,
            "settings": asdict(self.settings),
            "alpha": self.alpha,
            "cells": list(self.cells),
            "groups": [{**asdict(g), "cells": list(g.cells)} for g in self.groups],
            "rounds": [_round_record(r) for r in self.rounds],
            "left": {cell: _left_record(e) for cell, e in self.left.items()},
            "stopped": asdict(self.stopped) if self.stopped is not None else None,
            "runs_used": self.runs_used,
            "runs_fixed": self.runs_fixed,
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _float(value: Any) -> float | None:
    return float(value) if _number(value) else None


def _group(g: Mapping[str, Any]) -> RaceGroupRecord:
    metric = g.get("metric")
    return RaceGroupRecord(
        str(g.get("key")),
        str(g.get("label") or ""),
        str(metric) if metric else None,
        str(g.get("direction") or "lower"),
        tuple(str(c) for c in _list(g.get("cells"))),
        bool(g.get("raced")),
        g["decided"] if isinstance(g.get("decided"), bool) else None,
        _int(g.get("closed_after_round")),
    )


def _round(r: Mapping[str, Any]) -> Round:
    looks = {}
    for key, g in _mapping(r.get("groups")).items():
        if isinstance(g, Mapping):
            best = g.get("best")
            decisions = tuple(_decision(d) for d in _list(g.get("decisions")) if isinstance(d, Mapping))
            looks[str(key)] = GroupLook(str(best) if best is not None else None, _float(g.get("look_alpha")), decisions)
    return Round(_int(r.get("round")) or 0, tuple(str(c) for c in _list(r.get("ran"))), looks, _float(r.get("runs_s")))


def _decision(entry: Mapping[str, Any]) -> LookDecision:
    p_equivalent = entry.get("p_equivalent", entry.get("p_tied"))  # format 1: p_tied
    action = str(entry.get("action"))
    return LookDecision(
        str(entry.get("cell")),
        "equivalent" if action == "tied" else action,  # format 1
        current_words(str(entry.get("reason") or "")),
        _int(entry.get("n")) or 0,
        _float(entry.get("ratio")),
        _float(entry.get("p_retire")),
        _float(p_equivalent),
    )


def _left(v: Mapping[str, Any]) -> Left:
    action = str(v.get("action"))
    by = v.get("stopped_by")
    return Left(
        "equivalent" if action == "tied" else action,  # format 1
        int(v.get("round") or 0),
        current_words(str(v.get("reason") or "")),
        str(by) if by else None,
    )


# format 2's words for what format 3 calls "failed": a cell retired because its runs failed
_FAILED_REASON = "a cell whose runs fail never wins"


def _in_format_3(race: Race) -> Race:
    """A race of format 1 or 2 in format 3's actions: "retired" for failing runs is "failed", and the
    "best" of a group the race left undecided (a cell "remained") is its "leader"."""
    left = dict(race.left)
    for cell, e in race.left.items():
        if e.action == "retired" and _FAILED_REASON in e.reason:
            left[cell] = replace(e, action="failed")
    for g in race.groups:
        if any(left[c].action == "remained" for c in g.cells if c in left):
            left.update(
                {c: replace(left[c], action="leader") for c in g.cells if c in left and left[c].action == "best"}
            )
    return replace(race, left=left)


def _round_record(r: Round) -> dict[str, Any]:
    groups = {
        key: {"best": g.best, "look_alpha": g.look_alpha, "decisions": [asdict(d) for d in g.decisions]}
        for key, g in r.groups.items()
    }
    return {"round": r.round, "ran": list(r.ran), "groups": groups, "runs_s": r.runs_s}


def _left_record(e: Left) -> dict[str, Any]:
    entry: dict[str, Any] = {"round": e.round, "action": e.action, "reason": e.reason}
    return {**entry, "stopped_by": e.stopped_by} if e.stopped_by is not None else entry


# ----------------------------------------------------------------------------------- reading them


def load_run_matrix(directory: Path) -> RunMatrix | None:
    """The expanded matrix a run was made from (``<run>/matrix.json``), for the answer's baselines and
    the cells' order. Under a results root, every run's ``matrix.json`` in one: the cells of all of
    them (a cell id once, the first run's), and the ``baseline_rule`` when they agree. None when
    there is none or it cannot be read: the answer then chooses baselines by cell id."""
    own = directory / "matrix.json"
    found = []
    for path in [own] if own.is_file() else sorted(directory.glob("*/matrix.json")):
        try:
            doc = jsonfile.read(path)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("cells"), list):
            found.append(RunMatrix.read(doc))
    if len(found) <= 1:
        return found[0] if found else None
    cells: dict[str, MatrixEntry] = {}
    for m in found:
        for e in m.cells:
            cells.setdefault(e.id, e)
    rules = {m.baseline_rule for m in found}
    rule = rules.pop() if len(rules) == 1 else None
    return RunMatrix(", ".join(str(m.name) for m in found), None, tuple(cells.values()), rule)


def run_matrix(run_dir: Path) -> RunMatrix:
    """The expanded matrix of one stored run (``RUN_DIR/matrix.json``), each of its cells checked to
    have an ``id`` and ``params``. UserError when ``run_dir`` is not a directory `fsmatrix run` wrote."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    path = run_dir / "matrix.json"
    try:
        doc = jsonfile.read(path) if path.is_file() else None
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        raise UserError(f"{run_dir}: no matrix.json; expected a directory `fsmatrix run` wrote (RESULTS/RUN_ID)")
    bad = [c for c in doc["cells"] if not (isinstance(c, dict) and "id" in c and "params" in c)]
    if bad:
        raise UserError(f"{run_dir}/matrix.json: cannot read its cells (one without an id and params: {bad[0]!r:.80})")
    return RunMatrix.read(doc)


def load_race(run_dir: Path) -> Race | None:
    """The race a run ran (``RUN_DIR/race.json``, written by `fsmatrix run --race`), or None."""
    path = run_dir / RACE_FILE
    return Race.read(jsonfile.read(path)) if path.exists() else None
