"""What the runs decided over one comparison group: the best, the configurations not separated from
it, the clearly worse; and a report row's entries ranked the same way (``rank``). Pure functions, no
I/O. The equivalence test is ``equivalence.py``, the repeats still needed ``power.py``, the race's
rule ``race.py``.

A *comparison group* is the cells that answer the same question (same workload and input): a
mapping ``{configuration: run values}`` of one metric, with the metric's direction (``lower`` or
``higher`` is better). A failed run is ``None`` (or a value that is not finite). All comparisons are
``stats.compare_samples`` — ratio of medians, percentile bootstrap interval, Mann-Whitney or Welch's
t-test on logs — so a verdict here is the verdict ``fsmatrix compare`` would give.

**Best, tied, worse** (``compare_group``). The best is the configuration with the best median among
those with at least ``MIN_SAMPLES`` runs and no failed run; every other one is compared with it
(BASE = the best, HEAD = the other), the p-values are Holm-adjusted across the group's m = k - 1
comparisons, and a configuration is *worse* when its verdict at the adjusted p-value is "slower",
*tied* otherwise (tied ones are never ranked among themselves). The test is chosen at the
Bonferroni level α/m — the level Holm's first step applies — so that Mann-Whitney runs only when
its smallest p-value can reach it, and Welch's t-test on logs otherwise (``stats.choose_test``
chooses from the level it is given: at the unadjusted α it would pick a Mann-Whitney that can
never be significant after the correction, and nothing could ever be called). Each
configuration's ratio to a named baseline comes with its 95 % bootstrap interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fsmatrix.results.verdict import stats

DELTA = 0.05  # the default minimum effect: 5 %
STATUSES = ("best", "tied", "worse", "not enough data")

Values = Sequence[float | None]


def _check_direction(direction: str) -> None:
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', not {direction!r}")


def split_runs(values: Values) -> tuple[list[float], int]:
    """The passed runs' values, and how many runs failed (``None`` or not finite)."""
    passed = [float(v) for v in values if v is not None and math.isfinite(v)]
    return passed, len(values) - len(passed)


def _better(a: float, b: float, direction: str) -> bool:
    return a < b if direction == "lower" else a > b


# ----------------------------------------------------------------------------------- best / tied / worse


@dataclass(frozen=True)
class BaselineRatio:
    """median(configuration) / median(baseline), with a bootstrap interval (the baseline itself: 1 [1, 1])."""

    baseline: str
    ratio: float
    ci_low: float
    ci_high: float
    confidence: float


@dataclass(frozen=True)
class Standing:
    """One configuration of a group: its status against the best and its ratio to the baseline."""

    config: str
    status: str  # one of STATUSES
    n: int  # passed runs
    failed: int  # failed runs
    median: float  # of the passed runs (nan without any)
    reason: str
    against_best: stats.Comparison | None  # BASE = the best, HEAD = this one; verdict at the Holm p-value
    p_holm: float  # nan for the best and for "not enough data"
    to_baseline: BaselineRatio | None  # None when either side has not enough data


@dataclass(frozen=True)
class GroupAnswer:
    direction: str
    alpha: float
    baseline: str | None
    best: str | None  # None when no configuration has enough data
    comparisons: int  # m: the comparisons against the best, Holm-adjusted together
    test_alpha: float  # α/m: the level the test choice follows
    standings: tuple[Standing, ...]  # in the group's order

    def standing(self, config: str) -> Standing:
        for s in self.standings:
            if s.config == config:
                return s
        raise KeyError(config)

    def with_status(self, status: str) -> tuple[str, ...]:
        return tuple(s.config for s in self.standings if s.status == status)

    @property
    def tied(self) -> tuple[str, ...]:
        return self.with_status("tied")

    @property
    def worse(self) -> tuple[str, ...]:
        return self.with_status("worse")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_group(
    group: Mapping[str, Values],
    direction: str,
    *,
    baseline: str | None = None,
    alpha: float = stats.ALPHA,
    min_samples: int = stats.MIN_SAMPLES,
    seed: int = 0,
    resamples: int = stats.BOOTSTRAP_RESAMPLES,
) -> GroupAnswer:
    """The best configuration of ``group`` by median, the ones tied with it and the ones worse (see the
    module's docstring). A configuration with fewer than ``min_samples`` passed runs or any failed run
    is "not enough data" and never best (its surviving runs are a biased sample of a stack that did
    not always work). Ties in the best median go to the first in the group's order."""
    _check_direction(direction)
    if baseline is not None and baseline not in group:
        raise ValueError(f"baseline {baseline!r} is not in the group ({', '.join(group)})")
    runs = {name: split_runs(values) for name, values in group.items()}
    eligible = [name for name, (passed, failed) in runs.items() if failed == 0 and len(passed) >= min_samples]
    best: str | None = None
    for name in eligible:
        if best is None or _better(stats.median(runs[name][0]), stats.median(runs[best][0]), direction):
            best = name
    m = max(len(eligible) - 1, 1)
    test_alpha = alpha / m
    against: dict[str, stats.Comparison] = {}
    if best is not None:
        for name in eligible:
            if name != best:
                b, h = runs[best][0], runs[name][0]
                test = stats.choose_test(len(b), len(h), test_alpha)
                against[name] = stats.compare_samples(
                    b, h, direction, alpha=alpha, min_samples=min_samples, test=test, seed=seed, resamples=resamples
                )
    names = list(against)
    p_holm = dict(zip(names, stats.holm([against[n].p_value for n in names]), strict=True))
    base_ok = baseline is not None and baseline in eligible
    standings = []
    for name, (passed, failed) in runs.items():
        med = stats.median(passed) if passed else math.nan
        to_base = None
        if base_ok and name in eligible and baseline is not None:
            if name == baseline:
                to_base = BaselineRatio(baseline, 1.0, 1.0, 1.0, 1 - alpha)
            else:
                bv = runs[baseline][0]
                low, high = stats.bootstrap_ratio_ci(bv, passed, confidence=1 - alpha, resamples=resamples, seed=seed)
                to_base = BaselineRatio(baseline, stats.ratio_of_medians(bv, passed), low, high, 1 - alpha)
        if name not in eligible:
            why = f"{failed} of {len(passed) + failed} runs failed" if failed else f"{len(passed)} runs"
            why += f" (at least {min_samples} passed runs and no failed one needed)"
            standings.append(Standing(name, "not enough data", len(passed), failed, med, why, None, math.nan, to_base))
        elif name == best:
            why = f"best median of {len(eligible)} configurations with enough data"
            standings.append(Standing(name, "best", len(passed), 0, med, why, None, math.nan, to_base))
        else:
            c = stats.decide(against[name], p_holm[name], alpha=alpha)
            status = "worse" if c.verdict == "slower" else "tied"
            why = (
                f"{c.ratio:.3f}x the best [{c.ci_low:.3f}, {c.ci_high:.3f}], {c.test} p = {c.p_value:.3g}, "
                f"Holm p = {p_holm[name]:.3g} over {m} comparisons: "
                + ("significantly worse" if status == "worse" else "not distinguishable from the best")
            )
            standings.append(Standing(name, status, len(passed), 0, med, why, c, p_holm[name], to_base))
    return GroupAnswer(direction, alpha, baseline, best, len(names), test_alpha, tuple(standings))


# ----------------------------------------------------------------------------------- equivalence


# ----------------------------------------------------------------------------------- the repeats still needed


# ----------------------------------------------------------------------------------- racing


@dataclass(frozen=True)
class Ranked:
    """One entry of a report row, placed against the row's best median."""

    median: float
    spread: str  # " ±5%" (half the range, relative to the median), "" for one run
    ratio: float  # how many times worse than the best median (1.0 for the best)
    mark: str  # "best": separated from every other entry; "tied": not separated from the best; ""


def rank(entries: dict[str, list[float] | str], direction: str) -> dict[str, Ranked]:
    """The entries that have values, each placed against the best median. The best, and which entries
    are separated from it, are the answer's (compare_group: Holm-adjusted across the entries'
    comparisons with the best); an entry it does not call worse is "tied" with the best, and so is
    the best then. With too few runs for any decision, the best median leads and everything ties."""
    values = {col: v for col, v in entries.items() if isinstance(v, list) and v}
    if not values:
        return {}
    medians = {col: statistics.median(v) for col, v in values.items()}
    pick = min if direction == "lower" else max
    answer = compare_group(values, direction)
    leader = answer.best or pick(medians, key=lambda col: medians[col])
    best = medians[leader]
    tied = {col for col in values if col != leader and col not in answer.worse}
    out = {}
    for col, vals in values.items():
        med = medians[col]
        spread = f" ±{100 * (max(vals) - min(vals)) / 2 / med:.0f}%" if len(vals) > 1 and med else ""
        ratio = _times_worse(med, best, direction)
        if col == leader:
            mark = "tied" if tied else "best" if len(values) > 1 else ""
        else:
            mark = "tied" if col in tied else ""
        out[col] = Ranked(med, spread, 1.0 if col == leader else ratio, mark)
    return out


def _times_worse(value: float, best: float, direction: str) -> float:
    """How many times worse ``value`` is than ``best`` (1.0: as good; inf: the best is 0 s or this rate 0)."""
    worse, better = (value, best) if direction == "lower" else (best, value)
    if better == 0:
        return 1.0 if worse == 0 else float("inf")
    return worse / better
