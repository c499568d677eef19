"""**The runs that would settle it** (``repeats_needed``, ``still_open``): for a configuration not
separated from the group's leader, n* is the smallest n in 3..30 runs per configuration at which
the pair's interval (``groups``: Welch's, at 1 - α/m) would, in at least 80 % of draws each, show
the two *equivalent within ±δ* if they are equal and *separate* them if they are δ apart (the
interval inside ±ln(1+δ), resp. wholly above 0, on the log scale). None means more than 30.

The draws are of what the interval depends on: the difference of mean logs, normal with variance
σ²·2/n, and the two sample variances, s² = σ²·χ²(n-1)/(n-1) per side (independent of the means
under normal noise), with Welch's degrees of freedom from them exactly as the interval computes
them. σ is the pooled standard deviation of the pair's logs (``equivalence.pooled_log_sd``).
Seeded: the same spread always gives the same advice. No bootstrap, no test choice: the answer's
one method makes the advice a few thousand t-quantiles.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from fsmatrix.results.verdict import stats
from fsmatrix.results.verdict.equivalence import pooled_log_sd
from fsmatrix.results.verdict.groups import IntervalDecision, Values, split_runs

N_MIN, N_MAX = 3, 30  # the advice's range: more than N_MAX is "more than 30"

DRAWS = 4000  # seeded draws of the two variances per n

TARGET = 0.8  # the share of draws whose interval must be narrow enough


# Pure and seeded: a report builds the same answer for its Markdown, its JSON and its page.
@functools.lru_cache(maxsize=4096)
def settle_probability(
    n: int, sigma: float, delta: float, level: float = stats.ALPHA, *, draws: int = DRAWS, seed: int = 0
) -> float:
    """The smaller of two shares of ``draws`` seeded draws of two samples of n logs with standard
    deviation σ: with equal means, the Welch interval at 1 - ``level`` (α/m for one of a family of m)
    lies inside ±ln(1+δ); with means ln(1+δ) apart, it excludes 0."""
    if n < 2 or sigma < 0 or not 0 < delta < 1 or not 0 < level < 1:
        raise ValueError(
            f"settle_probability needs n >= 2, sigma >= 0, 0 < delta < 1, 0 < level < 1: {n}, {sigma}, {delta}, {level}"
        )
    if sigma == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    v1, v2 = (sigma**2 * rng.chisquare(n - 1, size=draws) / (n - 1) for _ in range(2))
    se2 = (v1 + v2) / n
    df = se2**2 / ((v1 / n) ** 2 / (n - 1) + (v2 / n) ** 2 / (n - 1))
    half = sps.t.isf(level / 2, df) * np.sqrt(se2)
    noise = rng.normal(0.0, sigma * math.sqrt(2 / n), size=draws)
    bound = math.log1p(delta)
    equivalent = np.abs(noise) + half < bound  # equal means
    separated = bound + noise - half > 0  # means δ apart
    return float(min(np.mean(equivalent), np.mean(separated)))


def repeats_needed(
    sigma: float, delta: float, family: int = 1, *, alpha: float = stats.ALPHA, draws: int = DRAWS, seed: int = 0
) -> int | None:
    """n*: the smallest n in N_MIN..N_MAX with ``settle_probability(n, ...) >= TARGET``; None: more."""
    if not 0 < delta < 1 or not sigma >= 0:
        raise ValueError(f"repeats_needed needs 0 < delta < 1 and sigma >= 0 (got {delta}, {sigma})")
    for n in range(N_MIN, N_MAX + 1):
        if settle_probability(n, sigma, delta, alpha / family, draws=draws, seed=seed) >= TARGET:
            return n
    return None


@dataclass(frozen=True)
class OpenPair:
    """A configuration not separated from the leader, and the runs that would settle the pair."""

    config: str
    leader: str
    sigma: float  # pooled sd of the pair's logs
    repeats_needed: int | None  # n*; None when more than N_MAX


def still_open(
    answer: IntervalDecision, group: Mapping[str, Values], *, draws: int = DRAWS, seed: int = 0
) -> tuple[OpenPair, ...]:
    """For each configuration ``compare_group`` left not separated from the leader: n* at the pair's
    pooled σ with the group's family of m intervals."""
    if answer.leader is None:
        return ()
    lead = split_runs(group[answer.leader])[0]
    out = []
    for name in answer.not_separated:
        if name == answer.leader:
            continue
        sigma = pooled_log_sd(lead, split_runs(group[name])[0])
        n_star = repeats_needed(sigma, answer.delta, answer.family, alpha=answer.alpha, draws=draws, seed=seed)
        out.append(OpenPair(name, answer.leader, sigma, n_star))
    return tuple(out)
