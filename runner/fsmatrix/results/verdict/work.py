"""The work a storage stack did per unit of work, where time does not decide: bytes and IOs at the device,
flushes, fsync calls, CPU instructions, context switches per operation (the agent's ``WORK_METRICS``).
These vary far less than wall time between runs, so they often separate what time cannot: "xfs and
ext4 are not separated on elapsed time; ext4 writes 1.90× [1.88, 1.92] xfs's device bytes per
operation".

The same intervals as the time answer (``groups.compare_group``: Welch's intervals on logs, Bonferroni
over the pairs), once per work metric, with α split evenly over the metrics compared (Bonferroni again):
every work interval of a group, over every metric, holds together with probability at least 1 - α,
as a family of its own beside the time answer's. Only runs that measured a metric count for it (a
metric not available in a guest, such as CPU instructions under TCG, is absent, never 0).

Work counts are so steady that an interval excludes 1 for differences of a percent no one would act
on, so each configuration's interval against the least is read with a practical margin δ (the
answer's δ unless ``work_delta`` is set), in ``WORDS``: *more work* when it lies wholly beyond 1+δ,
*equivalent* (within ±δ) when it lies inside, *shown, size unsettled* when it excludes 1 and reaches
past 1+δ, *not separated* otherwise. Only "more work" and "equivalent" decide. Each configuration whose
runs all measured 0 does none of that work (the least, "least; does none", every one of them: none is
"equivalent" to nothing; the others do more, with no ratio); one with zero and non-zero runs has *not
enough data* on that metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.results.verdict import groups, metrics, stats
from fsmatrix.results.verdict.configurations import Group
from fsmatrix.results.verdict.groups import Interval, Ranked

# QEMU cache modes whose disk tells the guest it has no volatile write cache: the block layer sends it no
# flush, whatever the filesystem, and needs none (``Device.cache``).
NO_VOLATILE_CACHE = ("writethrough", "directsync")

LEAST, NONE, MORE, EQUIVALENT, UNSETTLED, NOT_SEPARATED, NOT_ENOUGH = (
    "least",
    "least; does none",
    "more work",
    "equivalent",
    "shown, size unsettled",
    "not separated",
    "not enough data",
)
WORDS = (LEAST, NONE, MORE, EQUIVALENT, UNSETTLED, NOT_SEPARATED, NOT_ENOUGH)
DECIDING = (LEAST, NONE, MORE, EQUIVALENT, NOT_ENOUGH)  # what leaves a metric decided


@dataclass(frozen=True)
class WorkStanding:
    """One configuration on one work metric: its words (``WORDS``) and its interval against the least
    (None for the least, for a ratio to or of none, and without enough data)."""

    configuration: str
    words: str
    against_least: Interval | None


@dataclass(frozen=True)
class WorkDifference:
    """One work metric on which some configuration is shown to do more work than the one doing least."""

    metric: str
    words: str
    least: str  # the configuration with the least work (the best geometric mean, or one doing none)
    standings: tuple[WorkStanding, ...]  # every configuration compared, the least first

    def with_words(self, words: str) -> tuple[str, ...]:
        return tuple(s.configuration for s in self.standings if s.words == words)

    @property
    def more(self) -> tuple[tuple[str, Interval | None], ...]:
        """The configurations doing more work (beyond 1+δ): their ratio to ``least`` (None against none)."""
        return tuple((s.configuration, s.against_least) for s in self.standings if s.words == MORE)

    @property
    def unsettled(self) -> tuple[tuple[str, Interval], ...]:
        """Shown to do more, by how much not settled (the interval excludes 1 and reaches past 1+δ)."""
        return tuple(
            (s.configuration, s.against_least)
            for s in self.standings
            if s.words == UNSETTLED and s.against_least is not None
        )

    @property
    def equivalent(self) -> tuple[str, ...]:
        """Within ±δ of ``least``."""
        return self.with_words(EQUIVALENT)

    @property
    def none(self) -> tuple[str, ...]:
        """The configurations doing none of this work (all their runs measured 0), ``least`` first."""
        return self.with_words(NONE)

    @property
    def does_none(self) -> bool:
        return self.standings[0].words == NONE


@dataclass(frozen=True)
class Work:
    """The group's work comparison: the metrics compared (each at α/len(compared)), and what separated."""

    compared: tuple[str, ...]
    differences: tuple[WorkDifference, ...]
    decided: tuple[str, ...]  # the compared metrics on which every configuration is "more work" or "equivalent"
    confidence: float  # 1 - α: every interval over every compared metric together
    delta: float = 0.05  # the practical margin δ of the words


def work(group: Group, names: Sequence[str], *, alpha: float, delta: float) -> Work:
    """The work comparison of the configurations ``names`` (those with enough data on time)."""
    cells = {group.name(c): c for c in group.cells if group.name(c) in names}
    per_metric: dict[str, dict[str, list[float]]] = {}
    for metric in (m.name for m in WORK_METRICS):
        values = {n: metrics.metric_values(list(c.docs), metric) for n, c in cells.items()}
        if comparable(values):
            per_metric[metric] = values
    if not per_metric:
        return Work((), (), (), 1 - alpha, delta)
    level = alpha / len(per_metric)
    found, settled = [], []
    for metric, values in per_metric.items():
        standings = _standings(values, level, delta)
        if standings is None:
            continue
        if all(s.words in DECIDING for s in standings):
            settled.append(metric)
        if any(s.words in (MORE, UNSETTLED) for s in standings) or (
            standings[0].words == NONE and any(s.words != NONE for s in standings[1:])
        ):
            found.append(WorkDifference(metric, words_of(metric), standings[0].configuration, standings))
    return Work(tuple(per_metric), tuple(found), tuple(settled), 1 - alpha, delta)


@dataclass(frozen=True)
class Unflushed:
    """Configurations that sent the device no flush request in any run, where others of the group sent
    some in every run. Not a work saving: a flush is what empties a disk's volatile write cache, so on
    such a disk their fsync leaves acknowledged writes where a power cut loses them (jfs: its log and
    its fsync never ask for one; docs/answer.md, "No flush request"). A fact of the runs, no test: one
    run is enough to show a request was never sent. A disk that tells the guest it has no volatile cache
    (``device.cache`` writethrough or directsync) is sent no flush and needs none: never named."""

    none: tuple[str, ...]  # sent no flush request in any of their runs
    flushing: tuple[str, ...]  # sent some in every run
    runs: tuple[int, ...]  # the runs of each of ``none`` that measured flushes


def unflushed(group: Group, names: Sequence[str]) -> Unflushed | None:
    """The configurations among ``names`` that sent no flush request where others did (None: no such)."""
    values = {group.name(c): metrics.metric_values(list(c.docs), metrics.FLUSHES) for c in group.cells}
    values = {n: v for n, v in values.items() if n in names and v}
    cached = {group.name(c) for c in group.cells if str(c.flat.get("device.cache")) not in NO_VOLATILE_CACHE}
    none = tuple(n for n, v in values.items() if max(v) == 0 and n in cached)
    flushing = tuple(n for n, v in values.items() if min(v) > 0)
    if not none or not flushing:
        return None
    return Unflushed(none, flushing, tuple(len(values[n]) for n in none))


def comparable(values: dict[str, list[float]]) -> bool:
    """Whether a work metric is compared: two configurations or more can be (enough runs that measured
    it) and some run did any of that work (none reading the device: nothing to compare)."""
    enough = [v for v in values.values() if len(v) >= stats.MIN_SAMPLES]
    return len(enough) >= 2 and any(max(v) > 0 for v in enough)


# A report table's mark for each of WORDS ("best": bold, as the least or one doing none)
MARKS = {LEAST: "best", NONE: "best", MORE: MORE, EQUIVALENT: EQUIVALENT, UNSETTLED: UNSETTLED}
MARKS |= {NOT_SEPARATED: NOT_SEPARATED, NOT_ENOUGH: ""}


def rank(entries: dict[str, list[float] | str], *, level: float, delta: float) -> dict[str, Ranked]:
    """A report row of one work metric (``groups.rank``'s entries) marked with the work answer's words:
    its intervals at ``level`` (the answer's α over the work metrics compared), read with the margin δ."""
    values = {c: v for c, v in entries.items() if isinstance(v, list) and v}
    words = {s.configuration: s.words for s in _standings(values, level, delta) or ()}
    if NOT_SEPARATED in words.values():  # the least is bold only when shown to do least
        words = {c: NOT_SEPARATED if w == LEAST else w for c, w in words.items()}
    return {
        c: replace(r, mark=MARKS.get(words.get(c, NOT_ENOUGH), "")) for c, r in groups.placed(entries, "lower").items()
    }


def _standings(values: dict[str, list[float]], level: float, delta: float) -> tuple[WorkStanding, ...] | None:
    """Every configuration's words on one metric, the least first (None: fewer than two usable)."""
    enough = {n: v for n, v in values.items() if len(v) >= stats.MIN_SAMPLES}
    none = [n for n, v in enough.items() if max(v) == 0]
    some: dict[str, groups.Values] = {n: v for n, v in enough.items() if min(v) > 0}
    short = tuple(WorkStanding(n, NOT_ENOUGH, None) for n in values if n not in none and n not in some)
    if none:  # those doing none of this work are the least; the others do more, by no ratio
        return (
            *(WorkStanding(n, NONE, None) for n in none),
            *(WorkStanding(n, MORE, None) for n in some),
            *short,
        )
    if len(some) < 2:
        return None
    decided = groups.compare_group(some, "lower", alpha=level, delta=delta)
    if decided.leader is None:
        return None
    out = [WorkStanding(decided.leader, LEAST, None)]
    for s in decided.standings:
        if s.config != decided.leader and s.against_leader is not None:
            out.append(WorkStanding(s.config, words_for(s.against_leader, delta), s.against_leader))
    return (*out, *short)


def words_for(interval: Interval, delta: float) -> str:
    """``WORDS`` for a configuration's interval against the least (ratio this / least, so >= 1 is more)."""
    low, high, bound = interval.ci_low, interval.ci_high, 1 + delta
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_SEPARATED
    if low > bound:
        return MORE
    if 1 / bound < low and high < bound:
        return EQUIVALENT
    if low > 1:
        return UNSETTLED
    return NOT_SEPARATED


def words_of(metric: str) -> str:
    """A work metric in the answer's words ("device bytes written per operation", "CPU instructions ...")."""
    title = next((m.title for m in WORK_METRICS if m.name == metric), metric)
    return title if title[:2].isupper() else title[:1].lower() + title[1:]
