"""**The repeats still needed** (``repeats_needed``, ``power``): n* is the smallest n in 3..30 such that
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
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from fsmatrix.results.verdict import stats
from fsmatrix.results.verdict.equivalence import Equivalence, pooled_log_sd, tost
from fsmatrix.results.verdict.groups import DELTA, GroupAnswer, Values, _check_direction, split_runs

N_MIN, N_MAX = 3, 30  # the repeat advice's range: more than N_MAX is "more than 30"

DRAWS = 4000  # seeded draws per n in the repeat advice's simulation


TARGET_POWER = 0.8


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


# Pure and seeded: a report builds the same answer for its Markdown, its JSON and its page, and a
# repeat advice scans n upwards again for every tied pair of the same spread.
@functools.lru_cache(maxsize=4096)
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
