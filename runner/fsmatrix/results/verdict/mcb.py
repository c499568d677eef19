"""Multiple comparisons with the best (Hsu's MCB, in the form of Edwards and Hsu 1983 with Welch's
intervals for unequal variances): the rule of a group of more than ``PAIRS_UP_TO`` configurations,
where the k(k-1)/2 intervals of all pairs are too wide to settle anything. Pure numpy, no I/O; the
group's rule is chosen in ``groups.decide`` (``rule_for``).

Each pair (i, j) gets Welch's two-sided interval of the difference of mean badness logs at
1 - α/(k-1) (not α/m, m = k(k-1)/2). Let b be a configuration with the truly best mean: its k-1
intervals hold together with probability at least 1 - α (Bonferroni), and on that event

- b is in the **set** S = {i: no interval of i against another lies wholly on i's worse side}: the
  set that holds the best at 1 - α;
- a configuration whose interval against *every other member of S* lies wholly on the worse side of
  0 is **worse** than b (b is one of them): the claim is right, ties at the top included, so an equal
  configuration is called worse with probability at most α — the same word, and the same family
  error, as the all-pairs rule;
- one whose intervals against every other member of S lie inside ±ln(1 + δ) is **equivalent within
  ±δ** to b.

Everything else is *not separated* from the best. The leader (the best mean) is always in S, so a
configuration called worse has its interval against the leader wholly on the worse side as well.
The simulation (``python -m fsmatrix.bench.answer``) measures what this keeps and gains.
"""

from __future__ import annotations

import numpy as np

from fsmatrix.results.verdict import welch

PAIRS_UP_TO = 8  # groups of at most this many configurations: all pairs; more: MCB (docs/answer.md)
RULES = ("pairs", "mcb")


def rule_for(k: int) -> str:
    """The rule of a group of k configurations with enough data."""
    return "pairs" if k <= PAIRS_UP_TO else "mcb"


def family(k: int) -> int:
    """MCB's k-1: the intervals of the best against the others, among which α is divided."""
    return max(k - 1, 1)


def against_the_set(
    means: np.ndarray, variances: np.ndarray, counts: np.ndarray, level: float, bound: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For T groups of k configurations ((T, k) arrays of badness-log means and variances, counts
    (T, k)): which are in the set S that holds the best, which are worse than every other member of S,
    and which are within ±``bound`` (on logs) of every other member — each (T, k) boolean, every pair's
    interval at 1 - ``level``."""
    t, k = means.shape
    # pair (i, j): the interval of mean_i - mean_j, shape (T, k, k)
    low, high, _ = welch.intervals(
        means[:, :, None] - means[:, None, :],
        variances[:, None, :],
        counts[:, None, :],
        variances[:, :, None],
        counts[:, :, None],
        level,
    )
    other = np.logical_not(np.eye(k, dtype=bool))[None, :, :]
    in_set = np.all(np.logical_or(low <= 0, ~other), axis=2)
    against = np.logical_and(other, in_set[:, None, :])  # (i, j): j another member of S
    has = np.any(against, axis=2)
    worse = np.logical_and(has, np.all(np.logical_or(low > 0, ~against), axis=2))
    inside = np.logical_and(low > -bound, high < bound)
    equivalent = np.logical_and(has, np.all(np.logical_or(inside, ~against), axis=2))
    return in_set, worse, equivalent
