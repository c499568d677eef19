"""The work a storage stack did per unit of work, where time does not decide: bytes and IOs at the device,
flushes, fsync calls, CPU instructions, context switches per operation (the agent's ``WORK_METRICS``).
These vary far less than wall time between runs, so they often separate what time cannot: "xfs and
ext4 are not separated on elapsed time; ext4 writes 1.90× [1.88, 1.92] xfs's device bytes per
operation".

The same rule as the time answer (``groups.compare_group``: Welch's intervals on logs, Bonferroni over
the pairs), once per work metric, with α split evenly over the metrics compared (Bonferroni again):
every work interval of a group, over every metric, holds together with probability at least 1 - α,
as a family of its own beside the time answer's. Only runs that measured a metric count for it (a
metric not available in a guest, such as CPU instructions under TCG, is absent, never 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.results.verdict import groups, metrics, stats
from fsmatrix.results.verdict.configurations import Group
from fsmatrix.results.verdict.groups import Interval


@dataclass(frozen=True)
class WorkDifference:
    """One work metric on which some configuration does more work than the one doing least."""

    metric: str
    words: str
    least: str  # the configuration with the least work (the best geometric mean)
    more: tuple[tuple[str, Interval], ...]  # the configurations separated from it: ratio to ``least``, interval
    equivalent: tuple[str, ...]  # shown within ±δ of ``least``


@dataclass(frozen=True)
class Work:
    """The group's work comparison: the metrics compared (each at α/len(compared)), and what separated."""

    compared: tuple[str, ...]
    differences: tuple[WorkDifference, ...]
    decided: tuple[str, ...]  # the compared metrics on which every pair is decided (none left not separated)
    confidence: float  # 1 - α: every interval over every compared metric together


def work(group: Group, names: Sequence[str], *, alpha: float, delta: float) -> Work:
    """The work comparison of the configurations ``names`` (those with enough data on time)."""
    cells = {group.name(c): c for c in group.cells if group.name(c) in names}
    per_metric: dict[str, dict[str, groups.Values]] = {}
    for metric in (m.name for m in WORK_METRICS):
        values = {n: metrics.metric_values(list(c.docs), metric) for n, c in cells.items()}
        # Compared where two configurations or more can be (enough runs that measured it, none <= 0):
        # which metrics count is fixed by what was measured, never by what the values show.
        measured: dict[str, groups.Values] = {
            n: v for n, v in values.items() if len(v) >= stats.MIN_SAMPLES and min(v) > 0
        }
        if len(measured) >= 2:
            per_metric[metric] = measured
    if not per_metric:
        return Work((), (), (), 1 - alpha)
    level = alpha / len(per_metric)
    found, settled = [], []
    for metric, measured_values in per_metric.items():
        decided = groups.compare_group(measured_values, "lower", alpha=level, delta=delta)
        difference = _difference(metric, decided)
        if difference is not None:
            found.append(difference)
        if decided.leader is not None and not decided.not_separated:
            settled.append(metric)
    return Work(tuple(per_metric), tuple(found), tuple(settled), 1 - alpha)


def _difference(metric: str, decided: groups.IntervalDecision) -> WorkDifference | None:
    if decided.leader is None or not decided.worse:
        return None
    more = tuple(
        (s.config, s.against_leader) for s in decided.standings if s.status == "worse" and s.against_leader is not None
    )
    equivalent = tuple(s.config for s in decided.standings if s.status == "equivalent")
    return WorkDifference(metric, words_of(metric), decided.leader, more, equivalent)


def words_of(metric: str) -> str:
    """A work metric in the answer's words ("device bytes written per operation", "CPU instructions ...")."""
    title = next((m.title for m in WORK_METRICS if m.name == metric), metric)
    return title if title[:2].isupper() else title[:1].lower() + title[1:]
