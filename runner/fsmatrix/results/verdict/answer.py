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

CRASH_VERDICTS = ("safe", "unsafe", "unsafe by design", "no verdict")
VERDICTS = ("fastest", "tie", "single", "not enough data", "crash")


# ----------------------------------------------------------------------------------- the types


@dataclass(frozen=True)
class Ratio:
    """median(configuration) / median(baseline), with its bootstrap interval."""

    value: float
    ci_low: float
    ci_high: float
    confidence: float

    def text(self) -> str:
        return f"{self.value:.2f}× [{self.ci_low:.2f}, {self.ci_high:.2f}]"


@dataclass(frozen=True)
class Configuration:
    """One cell of a group, as the answer names and places it."""

    name: str  # the settings that vary inside the group
    cell: str  # its cell id
    settings: dict[str, str]  # those settings, dotted key -> value as text
    status: str  # groups.STATUSES, or "crash" in a crash group
    runs: int  # passed runs with a value of the metric (a crash group: runs with a crash section)
    failed: int  # runs that did not pass (or passed without the metric)
    median: float | None
    to_baseline: Ratio | None
    p_holm: float | None  # against the best, Holm-adjusted; None for the best and without enough data
    test: str | None  # the test that compared it with the best
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
    """A pair the statistics could not separate: equivalent within ±δ, or the runs that would settle it."""

    configurations: tuple[str, str]  # in the group's order
    sigma: float  # pooled standard deviation of the pair's logs
    equivalent: bool
    tost_p: float  # Holm-adjusted across the group's tied pairs
    repeats_needed: int | None  # n*; None when equivalent or more than power.N_MAX
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
    fastest: str | None  # only when one configuration is better than every other
    leader: str | None  # the best median among those with enough data (with ties: not a ranking)
    tied: tuple[str, ...]  # with ties: the leader and every one tied with it, in the group's order
    worse: tuple[str, ...]
    not_enough_data: tuple[str, ...]
    configurations: tuple[Configuration, ...]
    regime: Regime
    why: Why | None
    crash: tuple[CrashVerdict, ...]
    still_open: tuple[Open, ...]
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
    alpha: float
    delta: float
    confidence: float
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


# ----------------------------------------------------------------------------------- building


# ----------------------------------------------------------------------------------- crash groups


# ----------------------------------------------------------------------------------- rendering
