"""What the runs decided over one comparison group, in four words that mean one thing each:
*best*, *equivalent within ±δ*, *not separated*, *worse by x [lo, hi]*; and a report row's entries
placed the same way (``rank``). Pure functions, no I/O. The repeats that would settle what is not
separated: ``power.py``; the race's rule: ``race.py``.

A *comparison group* is the cells that answer the same question (same workload and input): a
mapping ``{configuration: run values}`` of one metric, with the metric's direction (``lower`` or
``higher`` is better). A failed run is ``None`` (or a value that is not finite).

**One method for every claim** (``compare_group``; ``decide`` is the same on arrays of many groups
at once, for the simulation ``python -m fsmatrix.bench.answer``). The configurations with enough
data — at least ``MIN_SAMPLES`` passed runs, no failed run, every value > 0 — are k; each of their
k(k-1)/2 pairs gets Welch's interval of the difference of mean logs at the Bonferroni level
1 - α/m, m = k(k-1)/2, shown as a ratio of geometric means exp(d) [exp(lo), exp(hi)]. All m
intervals hold together with probability at least 1 - α (Bonferroni's inequality; each is Welch's,
exact under log-normal noise up to Welch's approximation of its degrees of freedom), and every
claim is read off them:

- the *leader* is the configuration with the best geometric mean (the first of equals in the
  group's order);
- another configuration is *worse* when its interval against the leader lies wholly on the worse
  side of 1 — the same as Welch's two-sided test at α/m rejecting, so "separated" and "the interval
  excludes 1" never disagree;
- *equivalent within ±δ* when that interval lies inside (1/(1+δ), 1+δ);
- *not separated* otherwise: the interval holds 1 and reaches beyond ±δ (``power.settle``: the runs
  per configuration that would settle it);
- the leader is *best* when no configuration is left not separated from it and some are worse (the
  others equivalent), *equivalent* when every other is equivalent to it, else *not separated* with
  the others.

A wrong claim needs an interval that misses its true ratio, so the chance of any wrong "worse" or
"equivalent" (or of a best named when all are equal) is at most α for the whole group, whichever
configuration the data made the leader: the leader is chosen from the data, but every pair it can
form was in the family. Each configuration's ratio to a named baseline is that pair's interval.
The simulation shows what this costs and keeps (docs/answer.md).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from fsmatrix.results.verdict import mcb, stats, welch

DELTA = 0.05  # the default minimum effect: 5 %
STATUSES = ("best", "equivalent", "not separated", "worse", "not enough data")
# decide()'s status codes, in STATUSES' order
BEST, EQUIVALENT, NOT_SEPARATED, WORSE, NOT_ENOUGH = range(5)

Values = Sequence[float | None]


def check_direction(direction: str) -> None:
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', not {direction!r}")


def split_runs(values: Values) -> tuple[list[float], int]:
    """The passed runs' values, and how many runs failed (``None`` or not finite)."""
    passed = [float(v) for v in values if v is not None and math.isfinite(v)]
    return passed, len(values) - len(passed)


def better(a: float, b: float, direction: str) -> bool:
    return a < b if direction == "lower" else a > b


def family_size(k: int) -> int:
    """m: the pairs among k configurations, every one of which the leader could be part of."""
    return max(k * (k - 1) // 2, 1)


def family_of(k: int, rule: str) -> int:
    """m of a group of k under its rule: all pairs (``family_size``) or MCB's k-1."""
    return mcb.family(k) if rule == "mcb" else family_size(k)


# ----------------------------------------------------------------------------------- the intervals


@dataclass(frozen=True)
class Decisions:
    """``decide``'s output for T groups of k configurations (arrays, T first)."""

    leader: np.ndarray  # (T,) the leader's index
    low: np.ndarray  # (T, k) the interval of (badness logs) this - leader; 0 for the leader
    high: np.ndarray  # (T, k)
    p: np.ndarray  # (T, k) Welch's two-sided p against the leader (unadjusted); nan for the leader
    status: np.ndarray  # (T, k) codes: BEST, EQUIVALENT, NOT_SEPARATED, WORSE
    rule: str  # mcb.RULES: "pairs" (this module's) or "mcb" (comparisons with the best)


def decide(
    means: np.ndarray,
    variances: np.ndarray,
    counts: np.ndarray,
    *,
    alpha: float = stats.ALPHA,
    delta: float = DELTA,
    rule: str | None = None,
) -> Decisions:
    """The module's rule for T groups at once: ``means`` and ``variances`` (T, k) of each
    configuration's *badness* logs (ln value, negated when higher is better: larger is worse),
    ``counts`` (k,) or (T, k) their runs (each >= 2). The interval of every configuration against
    the leader at 1 - α/m, m = k(k-1)/2, and the statuses read off it; above ``mcb.PAIRS_UP_TO``
    configurations (or with ``rule="mcb"``), at 1 - α/(k-1) and each judged against the set that holds
    the best (``mcb.py``)."""
    t, k = means.shape
    rule = rule or mcb.rule_for(k)
    counts = np.broadcast_to(np.asarray(counts, dtype=float), (t, k))
    level = alpha / family_of(k, rule)
    leader = np.argmin(means, axis=1)  # the first of equals: argmin's first minimum
    rows = np.arange(t)
    lm, lv, ln = means[rows, leader][:, None], variances[rows, leader][:, None], counts[rows, leader][:, None]
    low, high, p = welch.intervals(means - lm, lv, ln, variances, counts, level)
    is_leader = np.zeros((t, k), dtype=bool)
    is_leader[rows, leader] = True
    low, high = np.where(is_leader, 0.0, low), np.where(is_leader, 0.0, high)
    p = np.where(is_leader, np.nan, p)
    bound = math.log1p(delta)
    status = np.full((t, k), NOT_SEPARATED)
    if rule == "mcb":
        _, worse, equivalent = mcb.against_the_set(means, variances, counts, level, bound)
        status[equivalent] = EQUIVALENT
        status[worse] = WORSE
    else:
        status[(low > -bound) & (high < bound)] = EQUIVALENT
        status[low > 0] = WORSE
    others = ~is_leader
    open_ = ((status == NOT_SEPARATED) & others).any(axis=1)
    beaten = ((status == WORSE) & others).any(axis=1) | (k == 1)
    status[is_leader] = np.where(open_, NOT_SEPARATED, np.where(beaten, BEST, EQUIVALENT))
    return Decisions(leader, low, high, p, status, rule)


# ----------------------------------------------------------------------------------- one group


@dataclass(frozen=True)
class Interval:
    """exp of a pair's interval: the ratio of geometric means (this / other) with its ends, at
    ``confidence`` = 1 - α/``family`` each, so that all ``family`` intervals of the group hold at once
    with probability >= 1 - α (the other itself: 1 [1, 1])."""

    other: str
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float  # Welch's two-sided p on logs, unadjusted (nan: the other itself)
    confidence: float  # each interval's own level, 1 - α/family
    family: int  # m


@dataclass(frozen=True)
class IntervalStanding:
    """One configuration as the group's intervals place it: its status and its intervals against the
    leader and the baseline (the answer's ``Configuration`` is built from it, or from the race's decision)."""

    config: str
    status: str  # one of STATUSES
    n: int  # passed runs
    failed: int  # failed runs
    median: float  # of the passed runs (nan without any)
    reason: str
    against_leader: Interval | None  # None for "not enough data" (and a group without a leader)
    to_baseline: Interval | None  # None when either side has not enough data


@dataclass(frozen=True)
class IntervalDecision:
    """What a group's intervals decide (``compare_group``): the leader and every configuration's standing."""

    direction: str
    alpha: float
    delta: float
    baseline: str | None
    leader: str | None  # the best geometric mean among those with enough data; None without any
    family: int  # m = k(k-1)/2 (MCB: k-1): the intervals α is divided among
    standings: tuple[IntervalStanding, ...]  # in the group's order
    rule: str = "pairs"  # mcb.RULES: all pairs, or comparisons with the best (more than mcb.PAIRS_UP_TO)

    def standing(self, config: str) -> IntervalStanding:
        for s in self.standings:
            if s.config == config:
                return s
        raise KeyError(config)

    def with_status(self, status: str) -> tuple[str, ...]:
        return tuple(s.config for s in self.standings if s.status == status)

    @property
    def best(self) -> str | None:
        """The leader when it is best (nothing left not separated from it, something worse)."""
        return self.leader if self.leader is not None and self.standing(self.leader).status == "best" else None

    @property
    def worse(self) -> tuple[str, ...]:
        return self.with_status("worse")

    @property
    def equivalent(self) -> tuple[str, ...]:
        return self.with_status("equivalent")

    @property
    def not_separated(self) -> tuple[str, ...]:
        """The leader and the configurations not separated from it (empty when the leader is best)."""
        return self.with_status("not separated")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Family:
    """A group's intervals: the badness sign (-1 when higher is better), m, and α."""

    sign: float
    m: int
    alpha: float

    def interval(self, other: str, low: float, high: float, diff: float, p: float) -> Interval:
        """A badness-log interval as a ratio of the metric's values (the sign undone)."""
        ends = sorted((math.exp(self.sign * low), math.exp(self.sign * high)))
        return Interval(other, math.exp(self.sign * diff), ends[0], ends[1], p, 1 - self.alpha / self.m, self.m)


def compare_group(
    group: Mapping[str, Values],
    direction: str,
    *,
    baseline: str | None = None,
    alpha: float = stats.ALPHA,
    delta: float = DELTA,
    min_samples: int = stats.MIN_SAMPLES,
) -> IntervalDecision:
    """The statuses of ``group``'s configurations and their intervals (see the module's docstring).
    A configuration with fewer than ``min_samples`` passed runs, a failed run or a value <= 0 (no
    ratio) is "not enough data" and never the leader: a stack that did not always work is not an
    answer, and its surviving runs are a biased sample."""
    check_direction(direction)
    if baseline is not None and baseline not in group:
        raise ValueError(f"baseline {baseline!r} is not in the group ({', '.join(group)})")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), not {delta}")
    runs = {name: split_runs(values) for name, values in group.items()}
    eligible = [
        name
        for name, (passed, failed) in runs.items()
        if failed == 0 and len(passed) >= min_samples and min(passed) > 0
    ]
    sign = 1.0 if direction == "lower" else -1.0  # badness: larger is worse
    logs = {name: sign * np.log(runs[name][0]) for name in eligible}
    rule = mcb.rule_for(len(eligible))
    m = family_of(len(eligible), rule)
    family = _Family(sign, m, alpha)
    leader: str | None = None
    statuses: dict[str, str] = {}
    against: dict[str, Interval] = {}
    if eligible:
        means = np.array([[logs[n].mean() for n in eligible]])
        variances = np.array([[logs[n].var(ddof=1) for n in eligible]])
        counts = np.array([logs[n].size for n in eligible])
        d = decide(means, variances, counts, alpha=alpha, delta=delta, rule=rule)
        leader = eligible[int(d.leader[0])]
        for i, name in enumerate(eligible):
            statuses[name] = STATUSES[int(d.status[0, i])]
            diff = float(means[0, i] - means[0, int(d.leader[0])])
            against[name] = family.interval(leader, float(d.low[0, i]), float(d.high[0, i]), diff, float(d.p[0, i]))
    to_base: dict[str, Interval] = {}
    if baseline in logs:
        lb = logs[baseline]
        for name in eligible:
            x = logs[name]
            low, high, p = welch.intervals(
                np.array(x.mean() - lb.mean()), np.array(lb.var(ddof=1)), np.array(lb.size),
                np.array(x.var(ddof=1)), np.array(x.size), alpha / m,
            )  # fmt: skip
            if name == baseline:
                to_base[name] = Interval(baseline, 1.0, 1.0, 1.0, math.nan, 1 - alpha / m, m)
                continue
            diff = float(x.mean() - lb.mean())
            to_base[name] = family.interval(baseline, float(low), float(high), diff, float(p))
    standings = []
    for name, (passed, failed) in runs.items():
        med = stats.median(passed) if passed else math.nan
        if name not in statuses:
            why = _not_enough(passed, failed)
            why += f" (at least {min_samples} passed runs, none failed, needed)"
            standings.append(
                IntervalStanding(name, "not enough data", len(passed), failed, med, why, None, to_base.get(name))
            )
            continue
        status, a = statuses[name], against[name]
        if name == leader:
            why = f"the best geometric mean of {len(eligible)} configurations with enough data"
        else:
            why = _placed(a, status, rule, alpha)
        standings.append(IntervalStanding(name, status, len(passed), failed, med, why, a, to_base.get(name)))
    return IntervalDecision(direction, alpha, delta, baseline, leader, m, tuple(standings), rule)


def _placed(a: Interval, status: str, rule: str, alpha: float) -> str:
    """Why a configuration other than the leader has its status: its interval against the leader."""
    interval = f"{a.ratio:.3f}x the leader [{a.ci_low:.3f}, {a.ci_high:.3f}] ({_pct_text(a.confidence)} each"
    if rule == "mcb":
        best = f"comparisons with the best, {a.family} intervals of the best at {_pct_text(1 - alpha)} together"
        return f"{interval}; {best}): {_mcb_words(status)}"
    return f"{interval}, {a.family} intervals at {_pct_text(1 - alpha)} together), Welch p = {a.p_value:.3g}: {status}"


def _mcb_words(status: str) -> str:
    """A status under MCB: against the set that holds the best, not the leader alone."""
    return {
        "worse": "worse (separated from every configuration that may be best)",
        "equivalent": "equivalent (within ±δ of every configuration that may be best)",
    }.get(status, status)


def _not_enough(passed: list[float], failed: int) -> str:
    """Why a configuration has not enough data, the first of: failed runs, a value <= 0, too few runs."""
    if failed:
        return f"{failed} of {len(passed) + failed} runs failed"
    if passed and min(passed) <= 0:
        return "a run measured <= 0, which has no ratio"
    return f"{len(passed)} runs"


def _pct_text(fraction: float) -> str:
    return f"{float(f'{fraction * 100:.4g}'):g} %"


# ----------------------------------------------------------------------------------- a report row


@dataclass(frozen=True)
class Ranked:
    """One entry of a report row, placed against the row's leader."""

    median: float
    spread: str  # " ±5%" (half the range, relative to the median), "" for one run
    ratio: float  # how many times worse than the row's best median (1.0 for that one)
    mark: str  # the entry's status (STATUSES but "not enough data"), or "" when nothing was decided


def rank(entries: dict[str, list[float] | str], direction: str) -> dict[str, Ranked]:
    """The entries that have values, each placed against the leader with the answer's words
    (``compare_group`` over the row's entries). With too little data for any decision, the best
    median leads and nothing is marked."""
    out = placed(entries, direction)
    if not out:
        return {}
    values = {col: v for col, v in entries.items() if isinstance(v, list) and v}
    answer = compare_group(values, direction)
    compared = len(values) - len(answer.with_status("not enough data"))  # fewer than 2: nothing to mark
    for col, r in out.items():
        status = answer.standing(col).status
        out[col] = replace(r, mark="" if status == "not enough data" or compared < 2 else status)
    return out


def placed(entries: dict[str, list[float] | str], direction: str) -> dict[str, Ranked]:
    """The entries that have values: each one's median, spread and times worse than the best median,
    unmarked (``rank`` marks them with time's words, ``work.rank`` with the work answer's)."""
    values = {col: v for col, v in entries.items() if isinstance(v, list) and v}
    if not values:
        return {}
    medians = {col: statistics.median(v) for col, v in values.items()}
    pick = min if direction == "lower" else max
    best = medians[pick(medians, key=lambda col: medians[col])]  # the times shown are of medians
    out = {}
    for col, vals in values.items():
        med = medians[col]
        spread = f" ±{100 * (max(vals) - min(vals)) / 2 / med:.0f}%" if len(vals) > 1 and med else ""
        out[col] = Ranked(med, spread, _times_worse(med, best, direction), "")
    return out


def _times_worse(value: float, best: float, direction: str) -> float:
    """How many times worse ``value`` is than ``best`` (1.0: as good; inf: the best is 0 s or this rate 0)."""
    worse, better = (value, best) if direction == "lower" else (best, value)
    if better == 0:
        return 1.0 if worse == 0 else float("inf")
    return worse / better
