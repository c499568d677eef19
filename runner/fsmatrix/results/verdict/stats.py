"""Statistics for comparing benchmark samples: pure functions, no I/O.

Benchmark repeats are few (3 to 10), skewed (a run can only be slowed down, not sped up, by a
noisy neighbour) and multiplicative (a change is "10 % slower", not "0.3 s slower"). So:

- the effect is the **ratio of medians** HEAD/BASE, with a percentile **bootstrap** confidence
  interval (resampling each side independently, seeded so the same data always gives the same
  answer) from 5 runs a side: what it really covers was measured (log-normal noise, no change;
  tests/results/test_stats.py): 97-98 % at 5 and 10 runs, but about 90 % at 3 and 93 % at 4, where the
  median takes few distinct values. So below 5 runs a side the interval is the **range of the runs'
  ratios** [min HEAD / max BASE, max HEAD / min BASE], and called that (``interval`` = "range"):
  at 3 runs it is what the bootstrap gave anyway, without a coverage it does not have. The interval is
  one of three conditions for a verdict, never the only one;
- the significance test is **Mann-Whitney U** (rank-based: no normality assumed, one wild run moves
  it little) when the sample sizes let it reach half the significance level — with 3 runs a side
  its smallest two-sided p is 0.1, with 4 it is 0.029, with 5 0.008 — and otherwise **Welch's
  t-test on log values** (a ratio test that works with 3 runs a side, at the price of assuming
  log-normal noise; values <= 0 have no logarithm, so Mann-Whitney runs then, and is named);
- a change is called only when the test is significant, the interval excludes 1, and the change is
  bigger than the noise floor (e.g. the between-batch floor measured by calibration).

**Paired runs** (``compare_paired``): when BASE and HEAD ran in pairs — the regression gate runs
base and head interleaved, repeat i of each back to back — the pairs share the machine's state at
that moment, and the drift between pairs cancels in each pair's ratio. The effect is then the
**geometric mean of the pairs' ratios** HEAD_i/BASE_i, the test **Student's paired t-test on the log
ratios** ("paired-log"; the signed-rank test cannot reach p < 0.06 with 5 pairs) and the interval
its t-interval, exp(mean ± t·sd/√n): it excludes 1 exactly when the test is significant at the
interval's level.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy import stats as sps

from fsmatrix.results.verdict import welch

ALPHA = 0.05
MIN_SAMPLES = 3
BOOTSTRAP_RESAMPLES = 2000
VERDICTS = ("faster", "slower", "no change", "not enough data")
# What a Comparison's interval is: the percentile bootstrap's 1 - α interval; the range of the runs'
# ratios, [min HEAD / max BASE, max HEAD / min BASE], when a side has fewer than BOOTSTRAP_MIN runs
# (there the bootstrap interval covers less than it is labelled: about 90 % at 3 runs a side, 93 %
# at 4, where it is [min/max, max/min] or close to it); the paired t-interval; "-": none.
INTERVALS = ("bootstrap", "range", "paired-t", "-")
BOOTSTRAP_MIN = 5


@dataclass(frozen=True)
class Bootstrap:
    """The percentile bootstrap's resamples per interval and its seed (the same data, the same interval)."""

    resamples: int = BOOTSTRAP_RESAMPLES
    seed: int = 0


DEFAULT_BOOTSTRAP = Bootstrap()


@dataclass(frozen=True)
class Comparison:
    """One metric of one cell, BASE against HEAD."""

    n_base: int
    n_head: int
    median_base: float
    median_head: float
    ratio: float  # HEAD median / BASE median
    ci_low: float
    ci_high: float
    p_value: float
    test: str  # "mann-whitney", "welch-log", "paired-log" or "-" (not run)
    worse_by: float  # relative worsening in the metric's own direction: 0.1 = 10 % worse, -0.1 = 10 % better
    verdict: str  # one of VERDICTS
    significant: bool
    interval: str = "bootstrap"  # one of INTERVALS: what [ci_low, ci_high] is

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def median(values: list[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def ratio_of_medians(base: list[float], head: list[float]) -> float:
    mb, mh = median(base), median(head)
    if mb == 0:
        return 1.0 if mh == 0 else math.inf
    return mh / mb


def bootstrap_ratio_ci(
    base: list[float],
    head: list[float],
    *,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(head)/median(base), each side resampled on its own."""
    rng = np.random.default_rng(seed)
    b = np.asarray(base, dtype=float)
    h = np.asarray(head, dtype=float)
    mb = np.median(rng.choice(b, size=(resamples, b.size), replace=True), axis=1)
    mh = np.median(rng.choice(h, size=(resamples, h.size), replace=True), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(mb == 0, np.where(mh == 0, 1.0, np.inf), mh / np.where(mb == 0, 1.0, mb))
    tail = (1 - confidence) / 2 * 100
    with np.errstate(invalid="ignore"):  # interpolating between two infinite ratios
        low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low) if not np.isnan(low) else math.inf, float(high) if not np.isnan(high) else math.inf


def min_mann_whitney_p(n1: int, n2: int) -> float:
    """The smallest two-sided p-value Mann-Whitney U can give for these sample sizes (no ties)."""
    return 2.0 / math.comb(n1 + n2, n1)


def choose_test(n1: int, n2: int, alpha: float = ALPHA) -> str:
    """Mann-Whitney when it can reach ``alpha`` at these sizes (and with some room), else Welch on logs."""
    return "mann-whitney" if min_mann_whitney_p(n1, n2) <= alpha / 2 else "welch-log"


def p_value(base: list[float], head: list[float], test: str) -> float:
    """Two-sided p-value of ``test`` for BASE vs HEAD; 1.0 when the samples cannot differ.
    Welch's test on logs needs positive values: callers switch to Mann-Whitney first (compare_samples)."""
    if test == "welch-log" and min(min(base), min(head)) <= 0:
        raise ValueError("welch-log needs positive values; use mann-whitney")
    if test == "mann-whitney":
        if len(set(base) | set(head)) == 1:
            return 1.0
        return float(sps.mannwhitneyu(base, head, alternative="two-sided").pvalue)
    lb, lh = np.log(base), np.log(head)
    if np.ptp(lb) == 0 and np.ptp(lh) == 0:
        return 1.0 if lb[0] == lh[0] else 0.0  # no noise at all: any difference is real
    p = welch.two_sided(lb, lh)
    return 1.0 if math.isnan(p) else p


def worse_by(ratio: float, direction: str) -> float:
    """How much worse HEAD is than BASE (0.1 = 10 % worse); negative when it is better."""
    if direction == "lower":
        return ratio - 1.0
    if ratio == 0:
        return math.inf
    return 1.0 / ratio - 1.0


def compare_samples(
    base: list[float],
    head: list[float],
    direction: str,
    *,
    alpha: float = ALPHA,
    noise_floor: float = 0.0,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> Comparison:
    """Compare two samples of one metric; ``direction`` is ``lower`` or ``higher`` (which is better).

    ``noise_floor`` (relative, 0.05 = 5 %): a change smaller than this is never significant.
    """
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', not {direction!r}")
    base = [float(v) for v in base]
    head = [float(v) for v in head]
    nb, nh = len(base), len(head)
    if nb < MIN_SAMPLES or nh < MIN_SAMPLES:
        mb = median(base) if base else math.nan
        mh = median(head) if head else math.nan
        ratio = ratio_of_medians(base, head) if base and head else math.nan
        return Comparison(
            nb, nh, mb, mh, ratio, math.nan, math.nan, math.nan, "-", math.nan, "not enough data", False, "-"
        )
    ratio = ratio_of_medians(base, head)
    interval = "bootstrap" if min(nb, nh) >= BOOTSTRAP_MIN else "range"
    if interval == "bootstrap":
        low, high = bootstrap_ratio_ci(
            base, head, confidence=1 - alpha, resamples=bootstrap.resamples, seed=bootstrap.seed
        )
    else:
        low, high = _runs_range(base, head)
    chosen = choose_test(nb, nh, alpha)
    if chosen == "welch-log" and min(min(base), min(head)) <= 0:
        chosen = "mann-whitney"  # logs need positive values: name the test that really ran
    p = p_value(base, head, chosen)
    change = worse_by(ratio, direction)
    c = Comparison(
        nb, nh, median(base), median(head), ratio, low, high, p, chosen, change, "no change", False, interval
    )
    return decide(c, p, alpha=alpha, noise_floor=noise_floor)


def _runs_range(base: list[float], head: list[float]) -> tuple[float, float]:
    """[min HEAD / max BASE, max HEAD / min BASE]: every ratio of one run to another lies inside."""
    low = min(head) / max(base) if max(base) > 0 else math.inf
    high = max(head) / min(base) if min(base) > 0 else math.inf
    return low, high


def compare_paired(
    pairs: list[tuple[float, float]],
    direction: str,
    *,
    alpha: float = ALPHA,
    noise_floor: float = 0.0,
) -> Comparison:
    """Compare (BASE, HEAD) pairs of one metric (see the module's docstring): the geometric mean of the
    pairs' ratios, its t-interval and the paired t-test on the log ratios. A pair with a value <= 0 has
    no ratio: then the pairs are compared as two independent samples (``compare_samples``), which names
    its test."""
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', not {direction!r}")
    base = [float(b) for b, _ in pairs]
    head = [float(h) for _, h in pairs]
    n = len(pairs)
    if n < MIN_SAMPLES or min(base + head) <= 0:
        return compare_samples(base, head, direction, alpha=alpha, noise_floor=noise_floor)
    logs = np.log(np.asarray(head)) - np.log(np.asarray(base))
    mean, sd = float(np.mean(logs)), float(np.std(logs, ddof=1))
    if sd <= 1e-12:  # no noise at all (up to rounding): any difference is real
        p = 1.0 if abs(mean) <= 1e-12 else 0.0
        low = high = math.exp(mean)
    else:
        se = sd / math.sqrt(n)
        p = float(2 * sps.t.sf(abs(mean) / se, n - 1))
        half = float(sps.t.ppf(1 - alpha / 2, n - 1)) * se
        low, high = math.exp(mean - half), math.exp(mean + half)
    ratio = math.exp(mean)
    c = Comparison(
        n,
        n,
        median(base),
        median(head),
        ratio,
        low,
        high,
        p,
        "paired-log",
        worse_by(ratio, direction),
        "no change",
        False,
        "paired-t",
    )
    return decide(c, p, alpha=alpha, noise_floor=noise_floor)


def decide(c: Comparison, p: float, *, alpha: float = ALPHA, noise_floor: float = 0.0) -> Comparison:
    """``c`` with its verdict taken at p-value ``p`` (its own, or one adjusted for multiple comparisons):
    significant when p < alpha, the interval excludes 1 and the change exceeds the noise floor."""
    if c.verdict == "not enough data":
        return c
    significant = p < alpha and not (c.ci_low <= 1.0 <= c.ci_high) and abs(c.worse_by) > noise_floor
    verdict = "no change" if not significant else "slower" if c.worse_by > 0 else "faster"
    return replace(c, verdict=verdict, significant=significant)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment: p-values that keep the family-wise error rate at alpha when every
    one is compared with alpha (NaN stays NaN and does not count as a test)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


def is_regression(c: Comparison, threshold: float) -> bool:
    """The gate's and bisect's confirmation rule (in words: ``regression_rule``): significantly worse, and the
    *estimated* worsening above ``threshold`` (relative: 0.05 = 5 %). The estimate, not a test, is
    compared with the threshold: a tested "worse by more than 5 %" (the race's shifted test) would
    have caught about 7 of 40 planted stand-in regressions where this rule catches 36 or more."""
    return c.significant and c.worse_by > threshold


def regression_rule(threshold: float, alpha: float = ALPHA) -> str:
    """The rule of ``is_regression`` in words, as the gate's and bisect's outputs print it."""
    return (
        f"significantly worse (p < {alpha:g}, the interval excluding 1) with an estimated worsening above "
        f"{threshold:.1%} (the estimate, not a test, is compared with the threshold)"
    )


def clopper_pearson(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a rate ``hits``/``n``: it never covers less than
    ``confidence``, which matters with the handful of trials a benchmark affords. (nan, nan) for n = 0."""
    if n == 0:
        return math.nan, math.nan
    ci = sps.binomtest(hits, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


# The slowdowns a calibration tries, smallest first, to find the smallest one the gate catches.
EFFECT_GRID = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
