"""**Equivalence** (``tost``): two one-sided Welch t-tests on the logs, against the bounds
-ln(1+δ) and +ln(1+δ) of the difference of mean logs (the ratio of geometric means inside
(1/(1+δ), 1+δ): symmetric in which side is BASE and in the metric's direction); the TOST p-value is
the larger of the two; equivalent when it is below α (α/m, or Holm across the group).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fsmatrix.results.verdict import stats, welch
from fsmatrix.results.verdict.groups import DELTA


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
    p_lower = welch.one_sided(lh + bound, lb, "greater")
    p_upper = welch.one_sided(lh - bound, lb, "less")
    p = max(p_lower, p_upper)
    level = alpha / comparisons
    ratio = float(math.exp(lh.mean() - lb.mean()))
    return Equivalence(delta, bound, ratio, p_lower, p_upper, p, level, p < level)


def pooled_log_sd(a: Sequence[float], b: Sequence[float]) -> float:
    """The pooled standard deviation of the logs of two samples:
    sqrt(((n1-1)·s1² + (n2-1)·s2²) / (n1 + n2 - 2)), s the sample standard deviation of ln values."""
    la, lb = _logs(a, "a"), _logs(b, "b")
    ss = float(np.sum((la - la.mean()) ** 2) + np.sum((lb - lb.mean()) ** 2))
    return math.sqrt(ss / (la.size + lb.size - 2))
