"""The answer's types: what the runs decided, per comparison group, in sentences a reader can act on.

Frozen dataclasses, built by ``answering.build`` (groups and names: ``configurations.py``; speed
verdicts: ``speed.py``; crash verdicts: ``crash.py``) and rendered by ``render/answer_text.py``
(Markdown, the run's closing lines, JSON: docs/answer.schema.json) and ``render/page.py`` (HTML,
forest plots). How it is computed, for people: docs/answer.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fsmatrix.results.verdict import groups

DELTA = groups.DELTA

VERSION = 2  # of the answer's JSON (docs/answer.schema.json): 2 has the four words, no "tied"
CRASH_VERDICTS = ("safe", "unsafe", "unsafe by design", "no verdict")
# A speed group: "best" (one configuration best, every other worse or equivalent within ±δ),
# "equivalent" (every configuration equivalent within ±δ to the leader), "not separated" (some
# configuration not separated from the leader), "single", "not enough data"; and "crash".
VERDICTS = ("best", "equivalent", "not separated", "single", "not enough data", "crash")


# ----------------------------------------------------------------------------------- the types


@dataclass(frozen=True)
class Ratio:
    """A ratio of geometric means (configuration / the other) with its interval, one of the group's
    ``family`` intervals that hold together at 1 - α (each at ``confidence`` = 1 - α/family)."""

    value: float
    ci_low: float
    ci_high: float
    confidence: float
    family: int

    def text(self) -> str:
        return f"{self.value:.2f}× [{self.ci_low:.2f}, {self.ci_high:.2f}]"


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
    to_baseline: Ratio | None
    to_leader: Ratio | None  # against the group's leader; None for the leader and without enough data
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
class Regime:
    overall: str  # "cpu", "io", "mixed" (each configuration the same), "varies", or "" (no samples)
    by_configuration: dict[str, str]
    storage_comparison: bool  # the group's configurations differ in the storage stack
    disks_not_bottleneck: bool  # a storage comparison in which every configuration was CPU-bound


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
    text: str


@dataclass(frozen=True)
class Open:
    """A pair not separated: the runs per configuration that would settle it (power.py)."""

    configurations: tuple[str, str]  # in the group's order
    sigma: float  # pooled standard deviation of the pair's logs
    repeats_needed: int | None  # n*; None when more than power.N_MAX
    runs: tuple[int, int]
    advice: str


@dataclass(frozen=True)
class GroupResult:
    key: str  # matrix.comparison_group's key
    label: str
    workload: str
    crash_mode: str | None
    metric: str | None  # the primary metric (None: a crash group)
    metric_words: str
    direction: str | None
    baseline: str | None  # a configuration's name
    baseline_cell: str | None
    baseline_rule: str  # a key of RULES
    verdict: str  # one of VERDICTS
    best: str | None  # the leader when nothing is left not separated from it
    leader: str | None  # the best geometric mean among those with enough data (not a ranking by itself)
    equivalent: tuple[str, ...]  # equivalent within ±δ to the leader (verdict "equivalent": the leader too)
    not_separated: tuple[str, ...]  # the leader and every one not separated from it, in the group's order
    worse: tuple[str, ...]
    not_enough_data: tuple[str, ...]
    configurations: tuple[Configuration, ...]
    regime: Regime
    why: Why | None
    crash: tuple[CrashVerdict, ...]
    still_open: tuple[Open, ...]
    race: str | None  # how the race decided this group (its rule and rounds); None: not raced
    headline: str
    details: tuple[str, ...]  # the other sentences, in the order the reports print them

    @property
    def sentences(self) -> tuple[str, ...]:
        return (self.headline, *self.details)

    def configuration(self, name: str) -> Configuration:
        for c in self.configurations:
            if c.name == name:
                return c
        raise KeyError(name)


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
