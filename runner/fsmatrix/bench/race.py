"""How often does a race end with the decision the full data gives, and how many runs does it use?
``python -m fsmatrix.bench.race RUN_DIR [RUN_DIR ...]``

Replays races from runs already stored: each RUN_DIR is a directory ``fsmatrix run`` wrote
(``matrix.json`` and one ``<cell>/r<N>.json`` per run) with at least 15 passed runs of every cell
(``fsmatrix run FILE --repeat 15 --order rounds``). Runs nothing new; needs no root.

Per comparison group (the cells ``fsmatrix run --race`` would race against each other:
``racing.race_groups``, on the workload's primary metric in its direction; a crash group is not
raced and is left out; failed and skipped runs are left out, the replay draws from the passed
runs):

- **The full-data decision**: the cells that the race's own rule, applied once to all the stored
  runs of every cell, does not retire: ``race.race_step`` with every run at a single look
  (``after_round = max_rounds = min_repeats = R``, R the stored runs of the group's cell with the
  fewest): the same δ, and one look's error budget α / (3 · K(K-1)/2), as the fixed design of R
  runs a cell looks once. That is {the best} ∪
  the cells equivalent to it within ±δ ∪ the cells the data cannot place (neither shown worse nor
  equivalent) — the counterpart of a race's survivors (best, equivalent, and the "leader" and
  "remained" at ``max_repeats``): the cells *not shown worse than the best* on all the data.
  ``groups.compare_group``'s answer (one look at α/m over the pairs, not the race's level) is printed
  beside the decision for reference, never compared with the replays.
- **Replays** (``--replays``, default 200, seeded with ``--seed``): each draws, per cell, a random
  order of its stored runs (without replacement) and plays the race exactly as ``fsmatrix run
  --race`` does — rounds of every cell still in the race, and after each round
  ``race.race_look`` (which calls ``race.race_step``: the same function, settings and
  bookkeeping as the runner's) with ``--min-repeats`` (default 3), ``--max-repeats`` (default R,
  the stored runs of the group's cell with the fewest: a replay never uses more than the full
  data) and ``--delta`` (default 5 %); retired and equivalent cells get no more runs. A replay's
  survivors are the cells not retired when its race stops.

Prints Markdown: a provenance line (date, git commit, the run directories, their repeats and
where and when their runs were made), then per group the full-data decision, the agreement (the
share of replays whose survivors equal it, with its 95 % Clopper-Pearson interval), the runs used
as a share of cells × max repeats (median, min..max), the rounds, and the disagreements by kind.
A directory that does not exist, holds no usable runs, or has a cell with fewer than 15 passed
runs stops the command with one line (exit status 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from fsmatrix import racing
from fsmatrix.agent import provenance
from fsmatrix.errors import UserError, exit_with
from fsmatrix.matrix import MatrixCell, RaceSettings
from fsmatrix.results import store
from fsmatrix.results.store.records import Left
from fsmatrix.results.verdict import groups, race, stats

MIN_STORED = 15  # passed runs per cell: fewer leaves the full data too close to what a race sees
REPLAYS = 200
AGREE = "agrees"
KINDS = (
    AGREE,
    "retired the full-data best",
    "retired a cell the full data keeps",
    "kept an extra cell",
    "kept and retired other cells",
)


@dataclass(frozen=True)
class StoredGroup:
    """One comparison group's stored runs: the passed values of its primary metric per cell, in the
    group's order (the matrix's)."""

    label: str
    metric: str
    direction: str  # "lower" or "higher" is better
    samples: Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class Replay:
    survivors: frozenset[str]
    runs_used: int
    rounds: int
    kind: str  # one of KINDS


@dataclass
class GroupReplays:
    group: StoredGroup
    settings: RaceSettings
    decision: frozenset[str]  # the full-data decision: the cells one look at all runs does not retire
    best: str | None  # the full data's best median
    answer: tuple[str, ...]  # compare_group on all runs: the leader and the cells not worse than it
    replays: list[Replay] = field(default_factory=list)

    @property
    def runs_fixed(self) -> int:
        return len(self.group.samples) * self.settings.max_repeats

    @property
    def agreeing(self) -> int:
        return sum(r.kind == AGREE for r in self.replays)


def full_data_decision(
    group: StoredGroup, delta: float, alpha: float = stats.ALPHA
) -> tuple[frozenset[str], str | None]:
    """The cells the race's rule does not retire at one look at all the stored runs, and the best."""
    n = min(len(v) for v in group.samples.values())
    step = race.race_step(group.samples, group.direction, race.Look(n, n, n, delta, alpha))
    return frozenset(d.cell for d in step.decisions if d.action != "retire"), step.best


def kind_of(survivors: frozenset[str], decision: frozenset[str], best: str | None) -> str:
    """How a replay's survivors differ from the full-data decision (one of ``KINDS``)."""
    if survivors == decision:
        return AGREE
    if best is not None and best not in survivors:
        return KINDS[1]
    if survivors < decision:
        return KINDS[2]
    if survivors > decision:
        return KINDS[3]
    return KINDS[4]


def replay_once(
    group: StoredGroup, settings: RaceSettings, rng: np.random.Generator, alpha: float = stats.ALPHA
) -> tuple[frozenset[str], int, int]:
    """One race over ``group``'s runs in a random order per cell (drawn without replacement): its
    survivors, the runs it used and its rounds. Each round gives every cell still in the race its next
    run, then ``race.race_look`` decides as ``fsmatrix run --race`` does after that round."""
    order = {
        c: [float(v) for v in rng.permutation(np.asarray(values, dtype=float))] for c, values in group.samples.items()
    }
    drawn: dict[str, list[float | None]] = {c: [] for c in group.samples}
    left: dict[str, Left] = {}
    used = 0
    r = 0
    for r in range(1, settings.max_repeats + 1):
        for c in group.samples:
            if c not in left:
                drawn[c].append(order[c][len(drawn[c])])
                used += 1
        _, leaving, still_open = race.race_look(drawn, group.direction, left, r, settings, alpha)
        left.update(leaving)
        if not still_open:
            break
    survivors = frozenset(c for c in group.samples if c not in left or left[c].action != "retired")
    return survivors, used, r


@dataclass(frozen=True)
class ReplayPlan:
    """How ``measure`` replays a group: ``replays`` seeded races of ``min_repeats`` to ``max_repeats``
    rounds (None: the stored runs per cell), minimum effect ``delta``, family error ``alpha``."""

    replays: int = REPLAYS
    seed: int = 0
    min_repeats: int = 3
    max_repeats: int | None = None
    delta: float = groups.DELTA
    alpha: float = stats.ALPHA


def measure(group: StoredGroup, plan: ReplayPlan | None = None) -> GroupReplays:
    """The full-data decision of ``group`` and ``plan.replays`` seeded replays of its race (see the
    module's docstring). UserError when a cell has fewer than ``MIN_STORED`` runs, or the settings
    cannot be raced on these runs."""
    plan = plan or ReplayPlan()
    replays, seed, min_repeats, max_repeats = plan.replays, plan.seed, plan.min_repeats, plan.max_repeats
    delta, alpha = plan.delta, plan.alpha
    if len(group.samples) < 2:
        raise UserError(f"group {group.label!r}: {len(group.samples)} cell; a race needs at least 2")
    few = {c: len(v) for c, v in group.samples.items() if len(v) < MIN_STORED}
    if few:
        listed = ", ".join(f"{c} ({n})" for c, n in few.items())
        raise UserError(
            f"group {group.label!r}: fewer than {MIN_STORED} passed runs in {listed}; "
            f"replaying needs at least {MIN_STORED} per cell (fsmatrix run FILE --repeat {MIN_STORED} --order rounds)"
        )
    stored = min(len(v) for v in group.samples.values())
    top = stored if max_repeats is None else max_repeats
    if not stats.MIN_SAMPLES <= min_repeats <= top <= stored:
        raise UserError(
            f"group {group.label!r}: need {stats.MIN_SAMPLES} <= --min-repeats ({min_repeats}) <= --max-repeats "
            f"({top}) <= the stored runs of its cell with the fewest ({stored})"
        )
    if not 0 < delta < 1:
        raise UserError(f"--delta {delta} must be in (0, 1)")
    if replays < 1:
        raise UserError(f"--replays {replays} must be at least 1")
    settings = RaceSettings(min_repeats=min_repeats, max_repeats=top, delta=delta)
    decision, best = full_data_decision(group, delta, alpha)
    answer = groups.compare_group(group.samples, group.direction, alpha=alpha)
    kept = tuple(s.config for s in answer.standings if s.status in ("best", "equivalent", "not separated"))
    out = GroupReplays(group, settings, decision, best, kept)
    rng = np.random.default_rng(seed)
    for _ in range(replays):
        survivors, used, rounds = replay_once(group, settings, rng, alpha)
        out.replays.append(Replay(survivors, used, rounds, kind_of(survivors, decision, best)))
    return out


# ----------------------------------------------------------------------------------- stored runs


@dataclass(frozen=True)
class RunDir:
    path: Path
    groups: list[StoredGroup]
    runs: int  # passed runs replayed from
    repeats: tuple[int, int]  # passed runs per cell: fewest, most
    hosts: tuple[str, ...]
    commits: tuple[str, ...]  # the fsmatrix commits the runs were made with
    started: str  # the first run's start .. the last run's end
    matrix_file: str


def load_run_dir(path: Path) -> RunDir:
    """The raced comparison groups of a stored run (``matrix.json`` and its result documents), each
    cell's passed values of the primary metric in repeat order. UserError when it is not one."""
    matrix = store.run_matrix(path)
    try:
        cells = [MatrixCell.from_params(e.id, dict(e.params)) for e in matrix.cells]
    except ValueError as exc:
        raise UserError(f"{path}/matrix.json: cannot read its cells ({exc})") from exc
    docs = store.load_results(path)
    by_cell: dict[str, list[store.Result]] = {c.id: [] for c in cells}
    for doc in sorted(docs, key=lambda d: d.repeat):
        if doc.cell_id in by_cell:
            by_cell[doc.cell_id].append(doc)
    groups = []
    counts = []
    for g in racing.race_groups(cells):
        if g.metric is None:
            continue
        samples = {}
        for c in g.cells:
            samples[c.id] = [v for v in racing.race_values(by_cell[c.id], g.metric) if v is not None]
            counts.append(len(samples[c.id]))
        groups.append(StoredGroup(g.label, g.metric, g.direction, samples))
    if not groups:
        raise UserError(f"{path}: no comparison group to race (only crash groups)")
    passed = [d for ds in by_cell.values() for d in ds if d.status == "passed"]
    hosts = tuple(sorted({str(d.provenance.section.get("hostname", "?")) for d in passed}))
    commits = tuple(sorted({(d.provenance.git_sha or "?")[:10] for d in passed}))
    times = sorted(t for d in passed for t in (d.started_at, d.finished_at) if t)
    started = f"{times[0]} .. {times[-1]}" if times else "?"
    file = str(matrix.file)
    return RunDir(path, groups, len(passed), (min(counts), max(counts)), hosts, commits, started, file)


# ----------------------------------------------------------------------------------- the report


def _share(x: float) -> str:
    return f"{x:.0%}"


def group_lines(g: GroupReplays) -> list[str]:
    """One group's replays as a Markdown table and notes."""
    n = len(g.replays)
    low, high = stats.clopper_pearson(g.agreeing, n)
    shares = [r.runs_used / g.runs_fixed for r in g.replays]
    rounds = [r.rounds for r in g.replays]
    kinds = Counter(r.kind for r in g.replays if r.kind != AGREE)
    s = g.settings
    cells = list(g.group.samples)
    medians = {c: statistics.median(v) for c, v in g.group.samples.items()}
    ref = medians[g.best] if g.best else None
    lines = [
        f"#### {g.group.label}",
        "",
        f"{len(cells)} cells, {g.group.metric} ({g.group.direction} is better); race: min {s.min_repeats}, "
        f"max {s.max_repeats} repeats, δ {s.delta:.0%}; {n} replays.",
        "",
        "| cell | stored runs | median | × the best | full-data decision | survived replays |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        kept = sum(c in r.survivors for r in g.replays)
        ratio = f"{medians[c] / ref:.3f}" if ref else "-"
        mark = ("best" if c == g.best else "kept") if c in g.decision else "retired"
        lines.append(f"| {c} | {len(g.group.samples[c])} | {medians[c]:.4g} | {ratio} | {mark} | {kept}/{n} |")
    lines += [
        "",
        f"- agreement with the full-data decision: {g.agreeing}/{n} ({_share(g.agreeing / n)}, "
        f"95 % CI {_share(low)}-{_share(high)})",
        f"- runs used, share of cells × max ({len(cells)} × {s.max_repeats} = {g.runs_fixed}): median "
        f"{_share(statistics.median(shares))} ({_share(min(shares))}..{_share(max(shares))})",
        f"- rounds: median {statistics.median(rounds):g} ({min(rounds)}..{max(rounds)})",
        "- disagreements: "
        + ("; ".join(f"{kind} {count}/{n}" for kind, count in kinds.most_common()) if kinds else "none"),
        f"- for reference, the answer on all runs (groups.compare_group: the best and the cells not "
        f"significantly different from it, no δ): {', '.join(g.answer) or '-'}",
    ]
    return lines


def markdown(dirs: Sequence[tuple[RunDir, list[GroupReplays]]], replays: int, seed: int) -> str:
    git = provenance.git_source()
    sha = str(git.get("sha") or "unknown")[:10] + (" (with local changes)" if git.get("dirty") else "")
    sources = "; ".join(
        f"{d.path} ({d.matrix_file}: {d.runs} passed runs, {d.repeats[0]}"
        + (f"..{d.repeats[1]}" if d.repeats[1] != d.repeats[0] else "")
        + f" a cell, made on {', '.join(d.hosts)} at git {', '.join(d.commits)}, {d.started})"
        for d, _ in dirs
    )
    lines = [
        f"Race replay: {replays} replays a group, seed {seed}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"git {sha}; from {sources}",
    ]
    for d, looked in dirs:
        lines += ["", f"### {d.path}"]
        for g in looked:
            lines += ["", *group_lines(g)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="a directory `fsmatrix run` wrote")
    parser.add_argument("--replays", type=int, default=REPLAYS, help="races replayed per group")
    parser.add_argument("--seed", type=int, default=0, help="the replays' random orders")
    parser.add_argument("--min-repeats", type=int, default=3, help="no decision before this many runs a cell")
    parser.add_argument(
        "--max-repeats", type=int, default=None, help="the race's last round (default: the stored runs per cell)"
    )
    parser.add_argument("--delta", type=float, default=groups.DELTA, help="the minimum effect (0.05: 5 %%)")
    args = parser.parse_args(argv)
    try:
        done = []
        for path in args.run_dirs:
            run = load_run_dir(path)
            try:
                measured = [
                    measure(g, ReplayPlan(args.replays, args.seed, args.min_repeats, args.max_repeats, args.delta))
                    for g in run.groups
                ]
            except UserError as exc:
                raise UserError(f"{path}: {exc}") from exc
            done.append((run, measured))
    except UserError as exc:
        print(f"bench.race: error: {exc}", file=sys.stderr)
        return 2
    print(markdown(done, args.replays, args.seed))
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.race")
