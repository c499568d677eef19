"""Welch's t-test on the logs of two samples, in one place: the statistic's standard error and degrees
of freedom (``moments``), and from them the two-sided interval with its p-value (``intervals``, on
arrays: the answer's every pair, the simulation's many groups), the one-sided p (``one_sided``: the
race's retire test, TOST) and the two-sided p (``two_sided``: ``compare``'s test on logs).

Welch's, not Student's: benchmark variances differ between configurations (a stack that queues IO is
noisier than one that does not), and Welch's test does not assume them equal. On logs: effects are
ratios, and benchmark noise is closer to log-normal than normal.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special
from scipy import stats as sps


def moments(var_a: np.ndarray, n_a: np.ndarray, var_b: np.ndarray, n_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The squared standard error of mean(b) - mean(a) and Welch-Satterthwaite's degrees of freedom,
    elementwise, from each side's sample variance and size (df is nan where both variances are 0)."""
    ea, eb = var_a / n_a, var_b / n_b
    se2 = ea + eb
    with np.errstate(divide="ignore", invalid="ignore"):
        df = se2**2 / (ea**2 / (n_a - 1) + eb**2 / (n_b - 1))
    return se2, df


def intervals(
    diff: np.ndarray, var_a: np.ndarray, n_a: np.ndarray, var_b: np.ndarray, n_b: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Welch's two-sided interval of a difference of means ``diff`` = mean(b) - mean(a) at confidence
    1 - ``level``, and its two-sided p-value, elementwise: (low, high, p). Sample variances of 0 on
    both sides (no noise at all) give a point interval, and p 1 or 0: any difference is real."""
    se2, df = moments(var_a, n_a, var_b, n_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        half = sps.t.isf(level / 2, df) * np.sqrt(se2)
        p = 2 * sps.t.sf(np.abs(diff) / np.sqrt(se2), df)
    quiet = se2 <= 1e-24
    half = np.where(quiet, 0.0, half)
    p = np.where(quiet, np.where(np.abs(diff) <= 1e-12, 1.0, 0.0), p)
    return diff - half, diff + half, p


def _t_df(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(mean(x) - mean(y), its squared standard error, df) of two samples (at least 2 values each)."""
    se2, df = moments(np.var(y, ddof=1), np.array(y.size), np.var(x, ddof=1), np.array(x.size))
    return float(np.mean(x) - np.mean(y)), float(se2), float(df)


def one_sided(x: np.ndarray, y: np.ndarray, alternative: str) -> float:
    """p of Welch's t-test that mean(x) is greater (or less) than mean(y); without any noise, 0 or 1.
    The formula ``scipy.stats.ttest_ind(x, y, equal_var=False, alternative=...)`` uses, without its
    per-call overhead (a race makes thousands of these; the tests check the two agree)."""
    diff, se2, df = _t_df(x, y)
    if se2 == 0:
        holds = diff > 0 if alternative == "greater" else diff < 0
        return 0.0 if holds else 1.0
    t = diff / math.sqrt(se2)
    return float(special.stdtr(df, -t if alternative == "greater" else t))


def two_sided(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p of Welch's t-test of mean(x) = mean(y) (nan without any noise: the caller decides)."""
    diff, se2, df = _t_df(x, y)
    if se2 == 0:
        return math.nan
    return float(2 * special.stdtr(df, -abs(diff) / math.sqrt(se2)))
