"""A run directory's two records beside its results, typed once here: ``matrix.json`` (``RunMatrix``:
the expanded matrix a run was made from, its cells' groups and baselines) and ``race.json`` (``Race``:
what `fsmatrix run --race` decided, round by round). Their writers (runs.py, racing.py) keep the JSON;
every reader takes these types, so no reader picks a raw dict apart.

One status vocabulary: races written before the answer's version 2 said "tied" (and "tied set") for
what is now "equivalent"; ``Race.read`` translates them, and nothing after it sees the old word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError
from fsmatrix.results.store.files import RACE_FILE

# A race's "left" actions, what racing.py writes when a cell leaves the race, and the answer's status
# each one is (verdict/groups.STATUSES): the race's words for what happened, the answer's for what it means.
STATUS_OF_ACTION = {
    "retired": "worse",
    "equivalent": "equivalent",
    "best": "best",
    "remained": "not separated",
    "skipped": "not enough data",
}


def current_words(text: str) -> str:
    """A stored race's text in today's words ("tied set" -> "equivalent set")."""
    return text.replace("tied set", "equivalent set").replace("retired or tied", "retired or equivalent")


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
class RunMatrix:
    """``matrix.json``: the matrix's name and file, its cells in the matrix's order, and how the
    baselines were chosen (``baseline_rule``: "named", "defaults", or None when not recorded)."""

    name: str | None
    file: str | None
    cells: tuple[MatrixEntry, ...]
    baseline_rule: str | None
    design: Mapping[str, Any] | None = None  # a fraction's record (matrix/design.py: Fraction.record)

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
        )

    def entry(self, cell_id: str) -> MatrixEntry | None:
        return next((e for e in self.cells if e.id == cell_id), None)


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


@dataclass(frozen=True)
class Left:
    """How and when a cell left the race: ``action`` a key of STATUS_OF_ACTION, after ``round``."""

    action: str
    round: int
    reason: str

    @property
    def status(self) -> str | None:
        """The answer's status for this action (None: an action this fsmatrix does not know)."""
        return STATUS_OF_ACTION.get(self.action)


@dataclass(frozen=True)
class Stopped:
    after_round: int
    why: str  # for people
    reason: str | None  # "decided", "max_repeats" or "budget" (None: a race.json from before it was recorded)


@dataclass(frozen=True)
class Race:
    """``race.json``: the race's settings and α, its cells and groups, the level of each group's tests
    at each look (``look_alpha``: group key -> α' per round), who left when, why it stopped (None: not
    finished), and the runs it used against the fixed design's."""

    settings: RaceSettingsRecord
    alpha: float
    retire_margin: float  # a cell was retired when worse than the best by more than this (0: worse at all)
    cells: tuple[str, ...]
    groups: tuple[RaceGroupRecord, ...]
    rounds: int
    look_alpha: Mapping[str, tuple[float, ...]]
    left: Mapping[str, Left]
    stopped: Stopped | None
    runs_used: int
    runs_fixed: int

    @classmethod
    def read(cls, record: Mapping[str, Any]) -> Race:
        settings = _mapping(record.get("settings"))
        rounds = [r for r in _list(record.get("rounds")) if isinstance(r, Mapping)]
        looks: dict[str, list[float]] = {}
        for r in rounds:
            for key, g in _mapping(r.get("groups")).items():
                if isinstance(g, Mapping) and g.get("look_alpha") is not None:
                    looks.setdefault(str(key), []).append(float(g["look_alpha"]))
        stopped = record.get("stopped")
        return cls(
            RaceSettingsRecord(
                _int(settings.get("min_repeats")),
                _int(settings.get("max_repeats")),
                float(settings.get("delta") or 0.05),
                float(settings["budget_s"]) if isinstance(settings.get("budget_s"), int | float) else None,
            ),
            float(record.get("alpha") or 0.05),
            # races of format 1 retired a cell only when worse by more than δ
            float(record["retire_margin"])
            if isinstance(record.get("retire_margin"), int | float)
            else (float(settings.get("delta") or 0.05)),
            tuple(str(c) for c in _list(record.get("cells"))),
            tuple(_group(g) for g in _list(record.get("groups")) if isinstance(g, Mapping)),
            len(rounds),
            {k: tuple(v) for k, v in looks.items()},
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


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
    )


def current_left(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A stored "left" entry of race.json in today's words: for `fsmatrix run --race` continuing a race
    stored before the answer's version 2 ("tied" -> "equivalent")."""
    action = str(entry.get("action"))
    reason = current_words(str(entry.get("reason") or ""))
    return {**entry, "action": "equivalent" if action == "tied" else action, "reason": reason}


def _left(v: Mapping[str, Any]) -> Left:
    entry = current_left(v)
    return Left(entry["action"], int(entry.get("round") or 0), entry["reason"])


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
