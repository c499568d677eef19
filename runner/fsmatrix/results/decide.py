"""What the runs decided, over one comparison group: the best, the ties, the repeats still needed, and
the rule that retires cells during a race. Pure functions, no I/O; the reports and the runner use them.

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

**Equivalence** (``tost``): two one-sided Welch t-tests on the logs, against the bounds
-ln(1+δ) and +ln(1+δ) of the difference of mean logs (the ratio of geometric means inside
(1/(1+δ), 1+δ): symmetric in which side is BASE and in the metric's direction); the TOST p-value is
the larger of the two; equivalent when it is below α (α/m, or Holm across the group).

**The repeats still needed** (``repeats_needed``, ``power``): n* is the smallest n in 3..30 such that
fsmatrix's own comparison — the test it would choose at that n with the group's correction, the
bootstrap interval, the verdict — says "slower" in at least 80 % of seeded draws of n values per
side from LogNormal(0, σ) and LogNormal(ln(1+δ), σ); None means more than 30. σ is the pooled
standard deviation of the logs of the pair's runs (``pooled_log_sd``). The group's correction for
one pair among m comparisons is Bonferroni's α/m: the level Holm applies to the smallest p-value
and the strictest it applies to any; Holm rejects whenever Bonferroni does, so its power is at
least this and n* errs on the side of more repeats. The simulation takes no shortcut: it computes,
for all draws at once, exactly the verdict ``compare_samples`` gives on each draw's values in
ascending order (the draws are independent and identically distributed, so their order carries no
information; sorting only fixes which bootstrap resamples meet which values). The bootstrap uses
the same seeded resample indices as ``compare_samples``; on sorted values a resample's median is
an order statistic picked by the sorted indices, so the 2,000 bootstrap medians of every draw are
one gather; the interval's ends are read from counts of ratios <= 1 and < 1 and computed with
``np.percentile`` only for the few draws where the count is within a rank or two of the percentile's.
``slower_verdicts`` is that computation; the tests check it draw by draw against
``compare_samples``. Where Welch's test is chosen its power is known exactly, which the tests also
check the simulation against (±0.03): with equal n, Welch's statistic is Student's t (noncentral,
2n - 2 degrees of freedom); only the degrees of freedom differ, (n-1)(1+F)²/(1+F²) with F = s1²/s2²,
which under normality is independent of the statistic — so the power is the noncentral-t tail
averaged over F ~ F(n-1, n-1). Student's power alone ("Welch ≈ Student") overstates Welch's at
these n: 0.27 against 0.20 at n = 3, σ = 8 %, δ = 12 % (Welch's degrees of freedom fall to n - 1).

**Racing** (``race_step``): after each round of a race, within one comparison group of K cells
(every cell of the group, retired ones included: K is fixed before the race starts), with a
planned maximum of R rounds and a minimum of r0 repeats (>= ``MIN_SAMPLES``):

- before round r0 every cell is kept: nothing is decided before the minimum;
- a cell with a failed run (or a value <= 0, which has no ratio) is retired: a cell whose runs fail
  never wins (a rule, not a statistical decision: it spends no α);
- the current best is the cell with the best median among the others; each other cell j is
  *retired* when it is significantly worse than the best by more than δ — a one-sided test of the
  null hypothesis "j is at most δ worse" (on logs, in the metric's direction: H0: μj - μbest <=
  ln(1+δ)), Welch's t-test on logs shifted by ln(1+δ), or Mann-Whitney on them when the test
  choice at the adjusted level allows it — and *tied* when TOST shows it equivalent to the best
  within ±δ; otherwise kept. A retired cell never comes back (the caller passes the retired set;
  it is returned unchanged plus the new ones).

Error control across rounds and cells. A wrong decision is the rejection of a true null hypothesis:
retiring a cell that is not worse than the current best by more than δ, or tying one that is not
within ±δ of it. The current best is chosen from the data, so each comparison "j against the
current best" is one of the K(K-1)/2 unordered pairs, and for a pair the race can make three
decisions (retire one, retire the other, tie), each a one-sided test (TOST's rejection needs both of
its one-sided tests, so it rejects only when its one-sided test on the true side does). So every
wrong decision is a crossing by one of 3 · K(K-1)/2 *sequences* of one-sided tests — a pair's test
repeated at the looks after rounds r0, r0 + 1, ..., R on the pair's accumulating runs (r runs per
cell after round r). Bonferroni's inequality over the sequences (no independence needed) gives each
sequence α / (3 · K(K-1)/2); within a sequence the looks see overlapping data, and the level that
keeps the chance of ever crossing at that share is Pocock's (``sequential_level``): the constant
boundary c on the standardised statistic with P(Z_k > c at some look) = the share, for Z_k
correlated √(n_i/n_j) as a mean's statistic on n_i and n_j runs is, computed by numerical
integration (``crossing_probability``). Every one-sided test at every look then runs at
α' = 1 - Φ(c) (``look_alpha``). A test made at only some of the looks (the pair is compared only
while one of its cells is the best) crosses no more often. So the family-wise error — the
probability that a race ever retires or ties a cell wrongly, over all rounds and cells — is at most
α. A cell within δ of the truly best cell is, a fortiori, within δ of the current best (no cell is
truly better than the truly best), so the truly best cell and every cell within δ of it survive the
race with probability at least 1 - α.

What this rests on: Pocock's boundary is exact for normal statistics with known variance; the race
applies its nominal level α' to each look's p-value (Welch's t on logs, or Mann-Whitney), the
nominal-p approach of group-sequential practice. Each look's test is exact at α' under its usual
assumptions (log-normal noise for Welch's, a shift on the log scale for Mann-Whitney's), and the
looks' correlation is the means'; the tests check the resulting error rate by simulation (races
of two cells exactly δ apart, and of equal cells). Pocock spends the budget evenly over the looks,
which favours early decisions — what racing is for — over the last look's power. With K = 3, r0 = 3
and R = 15 (13 looks), α' = 0.0011, against 0.00043 for a Bonferroni correction over the looks; with
K = 4, r0 = 3, R = 8, α' = 0.00081 (0.05 / 108 = 0.00046 with Bonferroni). So early decisions still
need large effects or low noise, which is what racing is for (the cell six times slower than the
best after three runs).
The test is chosen at that level: ``stats.choose_test(n1, n2, 2α')`` — 2α' is the two-sided level
whose one-sided half is α' — so Mann-Whitney runs only when its smallest one-sided p-value can
reach α'.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from fsmatrix.results import stats

DRAWS = 4000  # seeded draws per n in the repeat advice's simulation
TARGET_POWER = 0.8
N_MIN, N_MAX = 3, 30  # the repeat advice's range: more than N_MAX is "more than 30"
DELTA = 0.05  # the default minimum effect: 5 %
STATUSES = ("best", "tied", "worse", "not enough data")
ACTIONS = ("keep", "retire", "tied")

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


@dataclass(frozen=True)
class Equivalence:
    """TOST on logs: is exp(mean ln HEAD - mean ln BASE) within (1/(1+δ), 1+δ)?"""

    delta: float
    bound: float  # ln(1+δ): the null hypotheses are d <= -bound and d >= +bound, d the difference of mean logs
    ratio: float  # exp(d̂): the ratio of geometric means HEAD/BASE
    p_lower: float  # one-sided Welch p of H0: d <= -bound
    p_upper: float  # one-sided Welch p of H0: d >= +bound
    p_value: float  # max(p_lower, p_upper): the TOST p-value
    alpha: float  # the level it was decided at
    equivalent: bool  # p_value < alpha


def _welch_one_sided(x: np.ndarray, y: np.ndarray, alternative: str) -> float:
    """p of Welch's t-test that mean(x) is greater (or less) than mean(y); without any noise, 0 or 1.
    The formula ``scipy.stats.ttest_ind(x, y, equal_var=False, alternative=...)`` uses, without its
    per-call overhead (a race makes thousands of these; the tests check the two agree)."""
    vx, vy = float(np.var(x, ddof=1)) / x.size, float(np.var(y, ddof=1)) / y.size
    diff = float(np.mean(x) - np.mean(y))
    if vx + vy == 0:
        holds = diff > 0 if alternative == "greater" else diff < 0
        return 0.0 if holds else 1.0
    t = diff / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return float(special.stdtr(df, -t if alternative == "greater" else t))


def _logs(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        raise ValueError(f"{what}: at least 2 values needed, got {arr.size}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{what}: ratios need finite positive values")
    logs: np.ndarray = np.log(arr)
    return logs


def tost(
    base: Sequence[float],
    head: Sequence[float],
    delta: float = DELTA,
    *,
    alpha: float = stats.ALPHA,
    comparisons: int = 1,
) -> Equivalence:
    """Two one-sided Welch t-tests on the logs: HEAD equivalent to BASE within ±δ when both
    H0: d <= -ln(1+δ) and H0: d >= +ln(1+δ) are rejected at α/``comparisons`` (d = mean ln HEAD -
    mean ln BASE). Symmetric: swapping BASE and HEAD, or inverting every value, gives the same p."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), not {delta}")
    lb, lh = _logs(base, "base"), _logs(head, "head")
    bound = math.log1p(delta)
    p_lower = _welch_one_sided(lh + bound, lb, "greater")
    p_upper = _welch_one_sided(lh - bound, lb, "less")
    p = max(p_lower, p_upper)
    level = alpha / comparisons
    ratio = float(math.exp(lh.mean() - lb.mean()))
    return Equivalence(delta, bound, ratio, p_lower, p_upper, p, level, p < level)


# ----------------------------------------------------------------------------------- the repeats still needed


def pooled_log_sd(a: Sequence[float], b: Sequence[float]) -> float:
    """The pooled standard deviation of the logs of two samples:
    sqrt(((n1-1)·s1² + (n2-1)·s2²) / (n1 + n2 - 2)), s the sample standard deviation of ln values."""
    la, lb = _logs(a, "a"), _logs(b, "b")
    ss = float(np.sum((la - la.mean()) ** 2) + np.sum((lb - lb.mean()) ** 2))
    return math.sqrt(ss / (la.size + lb.size - 2))


def _bootstrap_order(n: int, rng: np.random.Generator, resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """For sorted values, the positions whose mean is each resample's median (the same position twice
    for odd n), with the indices ``bootstrap_ratio_ci`` draws from ``rng``."""
    idx = np.sort(rng.choice(n, size=(resamples, n), replace=True), axis=1)
    return idx[:, (n - 1) // 2], idx[:, n // 2]


def _boot_medians(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    medians: np.ndarray = values[:, lo] if np.array_equal(lo, hi) else (values[:, lo] + values[:, hi]) / 2
    return medians


def slower_verdicts(
    base: np.ndarray,
    head: np.ndarray,
    direction: str = "lower",
    *,
    alpha: float = stats.ALPHA,
    comparisons: int = 1,
    seed: int = 0,
    resamples: int = stats.BOOTSTRAP_RESAMPLES,
    chunk: int = 512,
) -> np.ndarray:
    """For each row i of the 2-D arrays ``base`` and ``head`` (positive values, each row sorted
    ascending, no ties), whether ``stats.compare_samples(base[i], head[i], direction, alpha=alpha,
    test=stats.choose_test(n1, n2, alpha / comparisons), seed=seed)`` with its verdict taken at the
    Bonferroni p-value min(1, comparisons·p) says "slower" — computed for all rows at once."""
    _check_direction(direction)
    rows, n1 = base.shape
    n2 = head.shape[1]
    test = stats.choose_test(n1, n2, alpha / comparisons)
    if test == "welch-log":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            p = sps.ttest_ind(np.log(base), np.log(head), axis=1, equal_var=False).pvalue
    else:
        p = sps.mannwhitneyu(base, head, axis=1, alternative="two-sided").pvalue
    ratio = np.median(head, axis=1) / np.median(base, axis=1)
    worse = ratio > 1 if direction == "lower" else ratio < 1
    candidates = np.flatnonzero((np.minimum(1.0, comparisons * p) < alpha) & worse)
    slower = np.zeros(rows, dtype=bool)
    if candidates.size == 0:
        return slower
    # The same resample indices as bootstrap_ratio_ci: BASE's drawn first, then HEAD's.
    rng = np.random.default_rng(seed)
    b_lo, b_hi = _bootstrap_order(n1, rng, resamples)
    h_lo, h_hi = _bootstrap_order(n2, rng, resamples)
    confidence = 1 - alpha
    tail = (1 - confidence) / 2 * 100  # as bootstrap_ratio_ci computes it
    k_low = math.floor((resamples - 1) * tail / 100)  # np.percentile's rank below the interval's ends
    k_high = math.floor((resamples - 1) * (100 - tail) / 100)
    for start in range(0, candidates.size, chunk):
        rows_here = candidates[start : start + chunk]
        ratios = _boot_medians(head[rows_here], h_lo, h_hi) / _boot_medians(base[rows_here], b_lo, b_hi)
        at_most_1 = np.count_nonzero(ratios <= 1, axis=1)
        below_1 = np.count_nonzero(ratios < 1, axis=1)
        # np.percentile interpolates between the sorted ratios at ranks k and k + 1: the low end is > 1
        # when both are (fewer than k ratios <= 1) and <= 1 when both are <= 1 (the high end alike,
        # with < 1). Near the boundary (a rank of margin either side): np.percentile itself.
        low_above = at_most_1 <= k_low - 1
        high_below = below_1 >= k_high + 3
        unsure = ((at_most_1 >= k_low - 1) & (at_most_1 <= k_low + 2)) | (
            (below_1 >= k_high - 1) & (below_1 <= k_high + 2)
        )
        excludes = low_above | high_below
        if unsure.any():
            low, high = np.percentile(ratios[unsure], [tail, 100 - tail], axis=1)
            excludes[unsure] = (low > 1) | (high < 1)
        slower[rows_here] = excludes
    return slower


def power(
    n: int,
    sigma: float,
    delta: float,
    comparisons: int = 1,
    *,
    alpha: float = stats.ALPHA,
    direction: str = "lower",
    draws: int = DRAWS,
    seed: int = 0,
    resamples: int = stats.BOOTSTRAP_RESAMPLES,
) -> float:
    """The share of ``draws`` seeded draws of n values per side — BASE from LogNormal(0, σ), HEAD from
    LogNormal(±ln(1+δ), σ), worse in the metric's ``direction`` (+ for lower, - for higher) — in
    which fsmatrix's comparison says "slower" with the test chosen at α/``comparisons`` and p
    compared with α/``comparisons`` (see the module's docstring). δ = 0: the rate of false "slower"."""
    _check_direction(direction)
    if n < 2 or sigma < 0 or delta < 0 or comparisons < 1:
        raise ValueError(
            f"power needs n >= 2, sigma, delta >= 0 and comparisons >= 1: {n}, {sigma}, {delta}, {comparisons}"
        )
    rng = np.random.default_rng(seed)
    shift = math.log1p(delta) if direction == "lower" else -math.log1p(delta)
    base = np.sort(np.exp(rng.normal(0.0, sigma, size=(draws, n))), axis=1)
    head = np.sort(np.exp(rng.normal(shift, sigma, size=(draws, n))), axis=1)
    verdicts = slower_verdicts(base, head, direction, alpha=alpha, comparisons=comparisons, resamples=resamples)
    return float(np.mean(verdicts))


def repeats_needed(
    sigma: float,
    delta: float,
    comparisons: int = 1,
    *,
    target: float = TARGET_POWER,
    alpha: float = stats.ALPHA,
    direction: str = "lower",
    draws: int = DRAWS,
    seed: int = 0,
    n_min: int = N_MIN,
    n_max: int = N_MAX,
) -> int | None:
    """n*: the smallest n in ``n_min``..``n_max`` with ``power(n, ...) >= target``; None: more than ``n_max``.
    The first such n, scanning upwards (power is not monotone in n: the test choice changes with it)."""
    if not delta > 0 or not sigma >= 0:
        raise ValueError(f"repeats_needed needs delta > 0 and sigma >= 0 (got {delta}, {sigma})")
    for n in range(n_min, n_max + 1):
        if power(n, sigma, delta, comparisons, alpha=alpha, direction=direction, draws=draws, seed=seed) >= target:
            return n
    return None


@dataclass(frozen=True)
class OpenPair:
    """A configuration tied with the best: equivalent within ±δ, or the repeats that would separate them."""

    config: str
    best: str
    sigma: float  # pooled sd of the pair's logs
    equivalence: Equivalence  # decided at the TOST p-value Holm-adjusted across the group's tied pairs
    p_holm: float
    repeats_needed: int | None  # n* when not equivalent; None when equivalent or more than N_MAX

    @property
    def advice(self) -> str:
        if self.equivalence.equivalent:
            return f"equivalent within ±{self.equivalence.delta:.0%}"
        if self.repeats_needed is None:
            return f"more than {N_MAX} runs per configuration to detect {self.equivalence.delta:.0%}"
        return f"{self.repeats_needed} runs per configuration to detect {self.equivalence.delta:.0%} with 80 % power"


def still_open(
    answer: GroupAnswer,
    group: Mapping[str, Values],
    *,
    delta: float = DELTA,
    draws: int = DRAWS,
    seed: int = 0,
) -> tuple[OpenPair, ...]:
    """For each configuration ``compare_group`` found tied with the best: TOST against the best
    (p-values Holm-adjusted across the tied ones), and when not equivalent, n* at the pair's pooled σ
    with the group's ``comparisons``. Values <= 0 have no logs: such a pair is left out."""
    if answer.best is None:
        return ()
    best = split_runs(group[answer.best])[0]
    pairs = []
    for name in answer.tied:
        other = split_runs(group[name])[0]
        if min(best + other) > 0:
            pairs.append((name, other, tost(best, other, delta, alpha=answer.alpha)))
    adjusted = stats.holm([t.p_value for _, _, t in pairs])
    result = []
    for (name, other, t), p in zip(pairs, adjusted, strict=True):
        equivalence = Equivalence(
            t.delta, t.bound, t.ratio, t.p_lower, t.p_upper, t.p_value, answer.alpha, p < answer.alpha
        )
        sigma = pooled_log_sd(best, other)
        n_star = None
        if not equivalence.equivalent:
            m = max(answer.comparisons, 1)
            n_star = repeats_needed(
                sigma, delta, m, alpha=answer.alpha, direction=answer.direction, draws=draws, seed=seed
            )
        result.append(OpenPair(name, answer.best, sigma, equivalence, p, n_star))
    return tuple(result)


# ----------------------------------------------------------------------------------- racing


@dataclass(frozen=True)
class CellDecision:
    cell: str
    action: str  # one of ACTIONS
    reason: str
    n: int  # passed runs
    ratio: float  # median ratio to the current best (this / best), nan when not compared
    p_retire: float  # one-sided p of "worse than the best by more than δ", nan when not tested
    p_tied: float  # TOST p against the best, nan when not tested


@dataclass(frozen=True)
class RaceStep:
    after_round: int
    max_rounds: int
    best: str | None
    look_alpha: float  # α': the one-sided level of every test at this look
    decisions: tuple[CellDecision, ...]  # in the group's order
    retired: frozenset[str]  # the cells retired before this round, and the ones retired now

    def action(self, cell: str) -> str:
        for d in self.decisions:
            if d.cell == cell:
                return d.action
        raise KeyError(cell)

    @property
    def finished(self) -> bool:
        """The race is over: the last round, or every cell left is the best or tied with it."""
        if self.after_round >= self.max_rounds:
            return True
        return self.best is not None and all(d.action != "keep" for d in self.decisions if d.cell != self.best)


def crossing_probability(c: float, sizes: Sequence[int], *, points_per_sd: int = 160, tail: float = 9.0) -> float:
    """P(Z_k > c at some look k) for Z_k = S(n_k)/√n_k, S a standard Brownian motion: the chance that
    a one-sided statistic computed on accumulating data (n_1 < n_2 < ... observations, the Z_k
    correlated √(n_i/n_j)) ever crosses a constant boundary c under its null hypothesis. Computed by
    numerical integration over looks (Armitage, McPherson and Rowe's recursion): the density of S
    kept below the boundary at one look, convolved with the increment's N(0, n_{k+1} - n_k), gives
    the next; the mass beyond the boundary is what crosses there. A grid of ``points_per_sd`` points
    per standard deviation of the first look's S, truncated at ``tail`` standard deviations."""
    n = np.asarray(sizes, dtype=float)
    if n.size == 0 or n[0] <= 0 or np.any(np.diff(n) <= 0):
        raise ValueError(f"look sizes must be positive and increasing, not {list(sizes)}")
    h = math.sqrt(n[0]) / points_per_sd
    s = np.arange(-tail * math.sqrt(n[-1]), c * math.sqrt(n[-1]) + h, h)
    density = sps.norm.pdf(s, scale=math.sqrt(n[0]))
    crossed = float(sps.norm.sf(c))
    density[s > c * math.sqrt(n[0])] = 0.0
    for before, now in itertools.pairwise(n):
        sd = math.sqrt(now - before)
        boundary = c * math.sqrt(now)
        crossed += h * float(np.sum(density * sps.norm.sf((boundary - s) / sd)))
        m = math.ceil(tail * sd / h)
        kernel = sps.norm.pdf(h * np.arange(-m, m + 1), scale=sd) * h
        density = np.convolve(density, kernel)[m : m + s.size]
        density[s > boundary] = 0.0
    return crossed


@functools.lru_cache(maxsize=256)
def sequential_level(alpha: float, sizes: tuple[int, ...]) -> float:
    """Pocock's nominal level: the one-sided level α' at which a test repeated at every look
    (``sizes``: the observations per cell at each look) rejects a true null hypothesis at some look
    with probability α overall — the constant boundary c with ``crossing_probability(c) = α``,
    α' = 1 - Φ(c). Between α / looks (Bonferroni) and α (a single look)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), not {alpha}")
    if len(sizes) == 1:
        return alpha
    c = optimize.brentq(
        lambda c: crossing_probability(c, sizes) - alpha,
        float(sps.norm.isf(alpha)),
        float(sps.norm.isf(alpha / len(sizes))),
        xtol=1e-9,
    )
    return float(sps.norm.sf(c))


def look_alpha(alpha: float, cells: int, looks: int, first: int = stats.MIN_SAMPLES) -> float:
    """α': the one-sided level of each test at each look of a race over ``cells`` cells whose looks
    come after rounds ``first``, ``first`` + 1, ... (``looks`` of them): Pocock's nominal level for
    those looks at α / (3 · cells(cells-1)/2) (see the module's docstring)."""
    pairs = cells * (cells - 1) // 2
    return sequential_level(alpha / (3 * max(pairs, 1)), tuple(range(first, first + looks)))


def _retire_p(best: np.ndarray, cell: np.ndarray, bound: float, level: float) -> tuple[float, str]:
    """One-sided p of H0: mean(cell) - mean(best) <= bound, on "badness" logs (larger is worse), with
    the test ``choose_test`` picks at the two-sided level 2·``level``."""
    test = stats.choose_test(best.size, cell.size, 2 * level)
    shifted = cell - bound
    if test == "mann-whitney":
        if np.ptp(np.concatenate([shifted, best])) == 0:
            return 1.0, test
        return float(sps.mannwhitneyu(shifted, best, alternative="greater").pvalue), test
    return _welch_one_sided(shifted, best, "greater"), test


def race_step(
    samples: Mapping[str, Values],
    direction: str,
    *,
    after_round: int,
    max_rounds: int,
    retired: Collection[str] = frozenset(),
    delta: float = DELTA,
    alpha: float = stats.ALPHA,
    min_repeats: int = stats.MIN_SAMPLES,
) -> RaceStep:
    """The decisions after round ``after_round`` of a race over one comparison group (see the module's
    docstring). ``samples`` holds every cell of the group, retired ones included (they keep their
    runs, and the group's size K fixes the error budget); ``retired`` the cells retired before."""
    _check_direction(direction)
    if min_repeats < stats.MIN_SAMPLES:
        raise ValueError(f"min_repeats must be at least {stats.MIN_SAMPLES}, not {min_repeats}")
    if max_rounds < min_repeats:
        raise ValueError(f"max_rounds ({max_rounds}) must be at least min_repeats ({min_repeats})")
    if not 1 <= after_round <= max_rounds:
        raise ValueError(f"after_round must be in 1..{max_rounds}, not {after_round}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), not {delta}")
    unknown = set(retired) - set(samples)
    if unknown:
        raise ValueError(f"retired cells not in the group: {', '.join(sorted(unknown))}")
    looks = max_rounds - min_repeats + 1
    level = look_alpha(alpha, len(samples), looks, min_repeats)
    before = frozenset(retired)
    runs = {cell: split_runs(values) for cell, values in samples.items()}

    def record(cell: str, action: str, reason: str, figures: tuple[float, float, float] | None = None) -> CellDecision:
        ratio, p_retire, p_tied = figures or (math.nan, math.nan, math.nan)
        return CellDecision(cell, action, reason, len(runs[cell][0]), ratio, p_retire, p_tied)

    if after_round < min_repeats:
        early = tuple(
            record(c, "retire", "retired earlier")
            if c in before
            else record(c, "keep", f"nothing before the minimum of {min_repeats} runs")
            for c in samples
        )
        return RaceStep(after_round, max_rounds, None, level, early, before)

    decided: dict[str, CellDecision] = {}
    eligible = []
    for cell, (passed, failed) in runs.items():
        bad = failed + sum(v <= 0 for v in passed)
        if cell in before:
            decided[cell] = record(cell, "retire", "retired earlier")
        elif bad:
            why = f"{bad} of {len(passed) + failed} runs failed or measured <= 0: a cell whose runs fail never wins"
            decided[cell] = record(cell, "retire", why)
        elif len(passed) < min_repeats:
            decided[cell] = record(cell, "keep", f"{len(passed)} runs: nothing before the minimum of {min_repeats}")
        else:
            eligible.append(cell)
    best: str | None = None
    for cell in eligible:
        if best is None or _better(stats.median(runs[cell][0]), stats.median(runs[best][0]), direction):
            best = cell
    if best is not None:
        sign = 1.0 if direction == "lower" else -1.0  # "badness": larger is worse
        best_bad = sign * np.log(runs[best][0])
        bound = math.log1p(delta)
        decided[best] = record(best, "keep", f"current best of {len(eligible)}", (1.0, math.nan, math.nan))
        for cell in eligible:
            if cell == best:
                continue
            values = runs[cell][0]
            ratio = stats.ratio_of_medians(runs[best][0], values)
            p_retire, test = _retire_p(best_bad, sign * np.log(values), bound, level)
            p_tied = tost(runs[best][0], values, delta).p_value
            text = (
                f"{ratio:.3f}x the best, p = {p_retire:.2g} ({test}) for worse by more than {delta:.0%}, "
                f"TOST p = {p_tied:.2g}, α' = {level:.2g}: "
            )
            if p_retire < level and p_tied < level:
                action, text = "keep", text + "conflicting tests, no decision"
            elif p_retire < level:
                action, text = "retire", text + f"significantly worse by more than {delta:.0%}"
            elif p_tied < level:
                action, text = "tied", text + f"equivalent to the best within ±{delta:.0%}"
            else:
                action, text = "keep", text + "not decided yet"
            decided[cell] = record(cell, action, text, (ratio, p_retire, p_tied))
    decisions = tuple(decided[c] for c in samples)
    now_retired = before | {d.cell for d in decisions if d.action == "retire"}
    return RaceStep(after_round, max_rounds, best, level, decisions, frozenset(now_retired))
