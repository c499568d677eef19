"""Racing: runs in rounds, and after each round the cells that the statistics rule out leave.
``fsmatrix run`` races a matrix whose selected cells form a comparison group (two or more cells of
one workload and input, not a crash group) unless told otherwise (``plan``, a ``RunPlan``: ``--repeat N`` or
``--no-race`` run fixed repeats). The orchestration and its record (``race.json``, typed as
``store.Race`` from its first write: every round's runs and decisions, so the same command continues
a race; why it stopped; each group decided or not); the decisions are ``results.verdict.race``'s:
``race_step`` on one group after a round, ``race_look`` turning that step into who leaves.
``runs.run_matrix`` drives a race through ``run_race`` with its own way to run one cell
(``RaceHooks``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError
from fsmatrix.matrix import Matrix, MatrixCell, RaceSettings, default_race
from fsmatrix.matrix import groups as matrix_groups
from fsmatrix.results import store
from fsmatrix.results.store.records import (
    GroupLook,
    Left,
    LookDecision,
    Race,
    RaceGroupRecord,
    RaceSettingsRecord,
    Round,
    Stopped,
)
from fsmatrix.results.verdict import metrics

# The race's statistics (results.verdict.race and .stats) import scipy, a second of start-up: run_race
# imports them, so every command that imports runs starts without them (tests/cli/test_command_loading.py).

RACE_FILE = store.RACE_FILE
# A cell is retired when shown worse than the best at all (the answer's "worse"); race.json of format 1
# retired it only when worse by more than δ, and is not continued (--force). Its format: store.RACE_FORMAT.
RETIRE_MARGIN = 0.0


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
class RunPlan:
    """What a run runs: a race (``race``: its settings) or ``repeat`` fixed repeats of every cell
    (``race`` None), and one line for people saying which and why ("": nothing to say)."""

    race: RaceSettings | None
    repeat: int  # fixed repeats a cell; a race's max_repeats
    why: str = ""

    @classmethod
    def fixed(cls, repeat: int) -> RunPlan:
        """``repeat`` fixed repeats of every cell, said to nobody (a caller that chose them itself)."""
        return cls(None, repeat)


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


def plan(
    m: Matrix,
    cells: list[MatrixCell],
    *,
    race: bool | None = None,
    repeat: int | None = None,
    budget_s: float | None = None,
    one_machine: bool = True,
) -> RunPlan:
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
    if m.design is not None and not fixed:  # a design's cells run alike: a race would unbalance it
        if race or m.race is not None or budget_s is not None:
            raise UserError(
                "design: a designed experiment runs fixed repeats (a race would unbalance it): leave out --race, "
                "--budget and the matrix's race:"
            )
        return RunPlan(None, repeat or m.repeat, f"fixed repeats: {repeat or m.repeat} a cell (a designed experiment)")
    if fixed:
        if budget_s is not None:
            given = "--no-race" if race is False else f"--repeat {repeat} (fixed repeats)"
            raise UserError(
                f"--budget limits a race, and {given} runs fixed repeats: leave --budget out, or give "
                "--race (--race --repeat N: a race of at most N repeats a cell)"
            )
        n = repeat or m.repeat
        return RunPlan(None, n, f"fixed repeats: {n} a cell ({'--no-race' if race is False else f'--repeat {n}'})")
    n = repeat or m.repeat
    if not comparable(cells):
        unused = "; --budget does not apply" if budget_s is not None else ""
        return RunPlan(None, n, f"fixed repeats: {n} a cell (no comparison group of two or more cells to race{unused})")
    asked = "--race" if race else "the matrix's race:" if m.race is not None else ""
    if not one_machine:
        if asked:
            raise UserError(
                f"the matrix races ({asked}), deciding across every cell: give --no-race for --executor slurm"
            )
        if budget_s is not None:
            raise UserError("--budget limits a race; --executor slurm runs fixed repeats (a race needs one machine)")
        return RunPlan(
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
    return RunPlan(settings, settings.max_repeats, f"race: {describe(settings)} ({source})")


def _new_race(cells: list[MatrixCell], groups: list[RaceGroup], settings: RaceSettings, alpha: float) -> Race:
    budget = float(settings.budget_s) if settings.budget_s is not None else None
    return Race(
        RaceSettingsRecord(settings.min_repeats, settings.max_repeats, float(settings.delta), budget),
        alpha,
        RETIRE_MARGIN,
        tuple(c.id for c in cells),
        tuple(
            RaceGroupRecord(
                g.key, g.label, g.metric, g.direction, tuple(c.id for c in g.cells), g.raced, False if g.raced else None
            )
            for g in groups
        ),
        rounds=(),
        left={},
        stopped=None,
        runs_used=0,
        runs_fixed=len(cells) * settings.max_repeats,
    )


def _other_race(stored: Race, fresh: Race) -> str | None:
    """What makes ``stored`` another race than ``fresh``, in words, or None. The budget may differ (it
    changes when the race stops, not what it decides), and so may the format: a race of format 2 goes
    on as format 3 (the same rule; ``Race.read`` puts its words in today's), one of format 1 does not
    (it retired a cell only when worse by more than δ)."""
    if stored.retire_margin != fresh.retire_margin:
        return (
            f"retire margin ({stored.retire_margin:g}, now {fresh.retire_margin:g}: a race.json of format 1 retired "
            "a cell only when worse by more than δ)"
        )
    if replace(stored.settings, budget_s=None) != replace(fresh.settings, budget_s=None):
        return f"settings ({asdict(stored.settings)!r}, now {asdict(fresh.settings)!r})"
    if stored.cells != fresh.cells:
        return f"cells ({list(stored.cells)!r}, now {list(fresh.cells)!r})"
    return None


def _load_race(path: Path, fresh: Race) -> Race:
    """The race stored in ``path`` when it is this race (``_other_race``), else UserError. It takes
    ``fresh``'s budget; a race the old budget stopped is reopened when the new one allows more
    (``_reopen``)."""
    try:
        stored = Race.read(jsonfile.read(path))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise UserError(f"{path}: cannot read the stored race ({exc}); rerun with --force to start a new one") from exc
    other = _other_race(stored, fresh)
    if other is not None:
        raise UserError(
            f"{path}: the stored race has other {other}; rerun with --force to start a new race, or give another "
            "--run-id"
        )
    return _reopen(replace(stored, settings=fresh.settings))


def _reopen(race: Race) -> Race:
    """A race the budget stopped goes on when its budget now allows more (larger, or none): the cells
    the stop sent away undecided come back, and the race continues after its last round."""
    stopped = race.stopped
    if stopped is None or stopped.reason != "budget" or not race.rounds:
        return race
    budget = race.settings.budget_s
    if budget is not None and (race.rounds[-1].runs_s or 0.0) >= budget:
        return race
    back = {c for c, e in race.left.items() if e.round == stopped.after_round and e.stopped_by == "budget"}
    return replace(race, left={c: e for c, e in race.left.items() if c not in back}, stopped=None)


def _unraced(g: RaceGroup, left: dict[str, Left], r: int, settings: RaceSettings) -> int:
    """A group the race does not decide (a crash group, a cell alone): its cells run every round up
    to the race's minimum, then leave undecided. 1 while the group is still running, else 0."""
    if r < settings.min_repeats:
        return 1
    why = "a crash group is not raced" if g.metric is None else "the only cell of its comparison group: not raced"
    for c in g.cells:
        left.setdefault(c.id, Left("remained", r, f"{why} (ran the race's minimum, {r})"))
    return 0


def _stop(race: Race, left: dict[str, Left], bests: set[str | None], open_groups: int, spent: float) -> Stopped | None:
    """After ``race``'s last round: whether the race stops, and why (``after_round``, ``why`` for people,
    ``reason`` one of ``store.records.STOP_REASONS``); a budget stop sends the cells still in the race away
    (``left``): the best median of a group as its "leader", the others as "remained"."""
    r, settings = len(race.rounds), race.settings
    if not open_groups:
        raced = (c for g in race.groups if g.raced for c in g.cells)
        if any(c in left and left[c].action == "remained" for c in raced):
            return Stopped(r, f"max_repeats ({settings.max_repeats}) reached", "max_repeats")
        return Stopped(r, "one cell or one equivalent set left in every comparison group", "decided")
    if settings.budget_s is not None and spent >= settings.budget_s:
        why = f"the budget ({settings.budget_s:g} s) was spent: the runs took {spent:.0f} s"
        for c in race.cells:
            if c not in left:
                leader = c in bests
                action, reason = ("leader", f"{why}; the best median then") if leader else ("remained", why)
                left[c] = Left(action, r, reason, "budget")
        return Stopped(r, why, "budget")
    return None


def _marked(groups: tuple[RaceGroupRecord, ...], left: Mapping[str, Left]) -> tuple[RaceGroupRecord, ...]:
    """Each group's ``decided`` (raced groups: every cell left, none undecided — retired, equivalent,
    failed, the best or skipped, never "remained" nor the "leader" of an undecided group; None for a
    group not raced) and ``closed_after_round`` (the round its last cell left after; None while one is
    still running)."""
    marked = []
    for g in groups:
        gone = [left[c] for c in g.cells if c in left]
        closed = len(gone) == len(g.cells)
        decided = (closed and all(e.action not in ("remained", "leader") for e in gone)) if g.raced else None
        last = max(e.round for e in gone) if closed and gone else None
        marked.append(replace(g, decided=decided, closed_after_round=last))
    return tuple(marked)


@dataclass(frozen=True)
class RaceHooks:
    """How a race runs its cells and says what it does (``runs.run_matrix`` gives its own)."""

    one: Callable[[MatrixCell, int, bool], store.Result]  # a cell's run r (True: a completed round's, read back)
    remaining: Callable[[int], None]  # the runs the race may still make
    console: Console  # who left, after each round
    after_round: Callable[[], None] | None = None  # e.g. `fsmatrix run --push` pushes then


def _look(
    groups: list[RaceGroup],
    docs: Mapping[str, list[store.Result]],
    left: dict[str, Left],
    r: int,
    settings: RaceSettings,
    alpha: float,
) -> tuple[dict[str, GroupLook], set[str | None], int]:
    """Every group's look after round ``r``: skipped cells leave, ``race.race_look`` decides each raced
    group (who leaves goes into ``left``), the others run to the minimum. Returns the raced groups'
    looks, their current bests and how many groups are still open."""
    from fsmatrix.results.verdict import race

    looks: dict[str, GroupLook] = {}
    bests: set[str | None] = set()
    open_groups = 0
    for g in groups:
        members = [c.id for c in g.cells]
        if all(m in left for m in members):
            continue
        for m in members:
            skipped = next((d for d in docs[m] if d.status == "skipped"), None)
            if m not in left and skipped is not None:
                left[m] = Left("skipped", r, f"skipped: {skipped.reason}")
        if not g.raced or g.metric is None:
            open_groups += _unraced(g, left, r, settings)
            continue
        samples = {m: race_values(docs[m], g.metric) for m in members}
        step, gone, still_open = race.race_look(samples, g.direction, left, r, settings, alpha)
        bests.add(step.best)
        decisions = tuple(LookDecision(**jsonfile.strict(asdict(d))) for d in step.decisions)
        looks[g.key] = GroupLook(step.best, step.look_alpha, decisions)
        left.update(gone)
        open_groups += still_open
    return looks, bests, open_groups


def run_race(run_dir: Path, cells: list[MatrixCell], settings: RaceSettings, force: bool, hooks: RaceHooks) -> Race:
    """Rounds of every live cell once, in the matrix's order; after each round from ``min_repeats``
    on, ``race.race_step`` per comparison group on the primary metric, and the cells it retires
    or ties leave. The race stops when every group is decided, at ``max_repeats``, or at the end of
    the first round after which the runs took ``budget_s``, whichever comes first. It is stored in
    ``run_dir``/race.json after every round, decisions included: the same command again continues
    it (completed rounds are read back, not rerun or decided again). Returns the stored race."""
    from fsmatrix.results.verdict import stats

    path = run_dir / RACE_FILE
    groups = race_groups(cells)
    state = _new_race(cells, groups, settings, stats.ALPHA)
    if path.exists() and not force:
        state = _load_race(path, state)
    by_id = {c.id: c for c in cells}
    docs: dict[str, list[store.Result]] = {c.id: [] for c in cells}
    for done in state.rounds:  # completed rounds: their runs read back, never run or decided again
        for cell_id in done.ran:
            docs[cell_id].append(hooks.one(by_id[cell_id], done.round, True))
    left = dict(state.left)
    r = len(state.rounds) + 1
    while state.stopped is None and r <= settings.max_repeats:
        live = [c for c in cells if c.id not in left]
        hooks.remaining(len(live) * (settings.max_repeats - r + 1))
        for cell in live:
            docs[cell.id].append(hooks.one(cell, r, False))
        looks, bests, open_groups = _look(groups, docs, left, r, settings, state.alpha)
        spent = sum(float(d.duration_s or 0) for ds in docs.values() for d in ds)
        done_round = Round(r, tuple(c.id for c in live), looks, round(spent, 3))
        state = replace(state, rounds=(*state.rounds, done_round), runs_used=state.runs_used + len(live))
        stopped = _stop(state, left, bests, open_groups, spent)
        state = replace(state, left=dict(left), stopped=stopped, groups=_marked(state.groups, left))
        jsonfile.write_atomic(path, state.record())
        for cell_id, leaving in left.items():
            if leaving.round == r:
                hooks.console.print(f"race: {cell_id} {leaving.action} after round {r}: {leaving.reason}")
        if hooks.after_round is not None:
            hooks.after_round()
        r += 1
    hooks.remaining(0)
    return state


def race_summary_lines(race: store.Race) -> list[str]:
    """The race for people: its rounds, who left when and why, and the runs it saved."""
    saved = race.runs_fixed - race.runs_used
    rounds = len(race.rounds)
    head = f"race: {rounds} round{'s' if rounds != 1 else ''}"
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
