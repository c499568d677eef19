"""The answer's types: what the runs decided, per comparison group.

Frozen dataclasses, built by ``answering.build`` (groups and names: ``configurations.py``; speed
verdicts: ``speed.py``; crash verdicts: ``crash.py``). They hold decisions and numbers, no prose: the
sentences are the renderers' (``render/sentences.py``; Markdown, the run's closing lines and JSON:
``render/answer_text.py``, docs/answer.schema.json; HTML and forest plots: ``render/page.py``). How it is
computed, for people: docs/answer.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fsmatrix.results.verdict.configurations import Group, Regime
from fsmatrix.results.verdict.effects import Effects
from fsmatrix.results.verdict.groups import DELTA, STATUSES, Interval
from fsmatrix.results.verdict.outliers import Outlier
from fsmatrix.results.verdict.power import DRAWS
from fsmatrix.results.verdict.raced import RacedGroup
from fsmatrix.results.verdict.stats import ALPHA
from fsmatrix.results.verdict.work import Unflushed, Work

VERSION = 4  # of the answer's JSON (docs/answer.schema.json): 4 adds rule, design, effects and interactions; 3
# decided, work and outliers; 2 had no "tied"
CRASH_VERDICTS = ("safe", "unsafe", "unsafe by design", "no verdict")
# A group's verdict, in the words of its configurations' statuses (groups.STATUSES, which a race's
# decisions also end in: store.STATUS_OF_ACTION) but "worse": a speed group "best" (one configuration
# best, every other worse or equivalent within ±δ), "equivalent" (every configuration equivalent within
# ±δ to the leader), "not separated" (some configuration not separated from the leader), "not enough
# data"; and two of its own: "single" (one configuration with enough data) and "crash".
VERDICTS = (*(s for s in STATUSES if s != "worse"), "single", "crash")


# ----------------------------------------------------------------------------------- the types


@dataclass(frozen=True)
class Rule:
    """How the answer decides: the family error α of each group's claims, the minimum effect δ (of the
    equivalence test and the repeat advice), and the repeat advice's simulated draws per n and seed;
    ``work_delta``: the practical margin of the work answer's words (None: ``delta``)."""

    alpha: float = ALPHA
    delta: float = DELTA
    draws: int = DRAWS
    seed: int = 0
    work_delta: float | None = None


DEFAULT_RULE = Rule()


@dataclass(frozen=True)
class Configuration:
    """One cell of a group, as the answer names and places it."""

    name: str  # the settings that vary inside the group
    cell: str  # its cell id
    settings: dict[str, str]  # those settings, dotted key -> value as text
    status: str  # groups.STATUSES (a race's decision where the group was raced), or "crash" in a crash group
    runs: int  # passed runs with a value of the metric (a crash group: runs with a crash section)
    failed: int  # runs that did not pass (or passed without the metric)
    median: float | None
    to_baseline: Interval | None  # one of the group's intervals that hold together at 1 - α
    to_leader: Interval | None  # against the group's leader; None for the leader and without enough data
    decided_by: str  # "intervals" (groups.compare_group), "race" (the run's race.json), or "" (nothing decided)
    reason: str  # why this status, in words
    regime: str  # "cpu", "io", "mixed" or "" (no samples)
    unsafe: bool  # lost committed data or did not recover after a crash (here or in a crash group)


@dataclass(frozen=True)
class Factor:
    """A secondary metric: its median for ``Why.best`` over its median for ``Why.against``."""

    metric: str
    words: str
    ratio: float
    best_median: float
    against_median: float
    significant: bool  # the test ``compare`` uses separates the two


@dataclass(frozen=True)
class Why:
    best: str
    against: str
    measured: int  # the secondary metrics both sides have (SECONDARY, but the primary)
    factors: tuple[Factor, ...]  # the ones that differ most, by MIN_WHY_CHANGE or more


@dataclass(frozen=True)
class CrashVerdict:
    """What the crash runs of one configuration showed."""

    configuration: str
    verdict: str  # one of CRASH_VERDICTS
    runs: int  # runs with a crash section (skipped ones left out)
    recovered: int  # came back with every check passed
    lost_runs: int  # runs that lost acknowledged commits
    lost_commits: int | None  # summed over the runs that counted them
    acknowledged: int | None
    not_recovered: int  # runs where the database did not come back or a check failed (without a loss)
    infrastructure: int  # runs that ended in error or timeout without a loss: no verdict
    not_crashed: int  # runs whose crash never fired: no verdict
    recovery_s: float | None  # median over the runs that measured it
    mount_s: float | None
    allowed_by: tuple[str, ...]  # the settings that allow a loss ("synchronous_commit=off", "fsync=off")
    problems: tuple[str, ...]  # what went wrong, first line of each distinct reason
    infrastructure_statuses: tuple[str, ...]  # the statuses of the infrastructure failures, sorted
    damage_allowed: bool  # its settings allow a damaged database too (fsync=off), not only a loss
    not_crashed_why: tuple[str, ...] = ()  # the failed runs' reasons of those that never crashed (no flush point)


@dataclass(frozen=True)
class Open:
    """A pair not separated: the runs per configuration that would settle it (power.py)."""

    configurations: tuple[str, str]  # in the group's order
    sigma: float  # pooled standard deviation of the pair's logs
    repeats_needed: int | None  # n*; None when more than power.N_MAX
    runs: tuple[int, int]


@dataclass(frozen=True)
class Answered:
    """What every group's answer has: the group, and its configurations as the answer places them."""

    group: Group
    configurations: tuple[Configuration, ...]

    @property
    def label(self) -> str:
        return self.group.label

    @property
    def baseline(self) -> str:
        """The baseline configuration's name."""
        return self.group.baseline_name

    @property
    def regime(self) -> Regime:
        return self.group.regime

    def configuration(self, name: str) -> Configuration:
        for c in self.configurations:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass(frozen=True)
class SpeedGroup(Answered):
    """What the runs of a group without a crash block decided on the workload's primary metric."""

    metric: str | None  # the primary metric (None: no metric known: not enough data)
    metric_words: str
    direction: str
    verdict: str  # one of VERDICTS but "crash"
    best: str | None  # the leader when nothing is left not separated from it
    leader: str | None  # the best geometric mean among those with enough data (not a ranking by itself)
    equivalent: tuple[str, ...]  # equivalent within ±δ to the leader (verdict "equivalent": the leader too)
    not_separated: tuple[str, ...]  # the leader and every one not separated from it, in the group's order
    worse: tuple[str, ...]
    not_enough_data: tuple[str, ...]
    why: Why | None
    still_open: tuple[Open, ...]
    raced: RacedGroup | None  # the race's decisions when the race decided this group
    outliers: tuple[Outlier, ...]  # runs outside their configuration's other runs' spread (outliers.RULE), kept
    work: Work | None  # the work per operation, compared where time does not decide (not separated, equivalent)
    settle_s: float | None  # the run time the runs that would settle the open pairs would take (None: unknown)
    unsafe: Mapping[str, tuple[str, CrashVerdict]]  # configuration -> (crash group's label, its verdict there)
    rule: str  # how the words were decided: "pairs" or "mcb" (groups.compare_group, mcb.py), or "race"
    effects: Effects | None = None  # each setting's effect, where the configurations differ in two or more (effects.py)
    unflushed: Unflushed | None = None  # those that sent the device no flush request where others did (work.py)

    @property
    def decided_on_time(self) -> bool:
        """Every pair decided on the primary metric: one best (the others worse or equivalent), or all equivalent."""
        return self.verdict in ("best", "equivalent")

    @property
    def decided_on_work(self) -> tuple[str, ...]:
        """The work metrics on which every pair is decided (compared where time does not decide)."""
        return self.work.decided if self.work is not None else ()


@dataclass(frozen=True)
class CrashGroup(Answered):
    """What the crash runs of a group with a crash block showed, per configuration."""

    mode: str  # the crash mode
    crash: tuple[CrashVerdict, ...]  # in the group's order
    verdict = "crash"  # the group's verdict, as VERDICTS names it


GroupResult = SpeedGroup | CrashGroup


@dataclass(frozen=True)
class Answer:
    alpha: float  # the family error of each group's claims
    delta: float
    confidence: float  # 1 - α: all of a group's intervals together
    groups: tuple[GroupResult, ...] = field(default_factory=tuple)

    @property
    def unsafe(self) -> tuple[tuple[str, str], ...]:
        """(group label, configuration) of every configuration the answer calls UNSAFE."""
        return tuple((g.label, c.name) for g in self.groups for c in g.configurations if c.unsafe)

    def group(self, label: str) -> GroupResult:
        for g in self.groups:
            if g.label == label:
                return g
        raise KeyError(label)
