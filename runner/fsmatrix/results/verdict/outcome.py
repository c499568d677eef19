"""The regression gate's three verdicts, and the looks of the gate that adds pairs until it decides.

- **FAIL**: a gated metric significantly worse with an estimated worsening above the threshold
  (``stats.is_regression``, Holm across the gated tests), as the gate always said.
- **PASS**: every gated metric *shown* not worse by the threshold T or more: a one-sided test of
  H0 "worse by T or more" (``bound_paired``: Student's t on the pairs' log ratios minus ln(1+T);
  ``bound_samples``: Welch's t on the logs, HEAD's shifted by ln(1+T)), rejected at the gate's level.
  Rejecting it is the same as the one-sided upper confidence bound of the worsening lying below T.
  PASS needs every gated test to reject its own H0 — an intersection-union test, whose error (a PASS
  while some metric is T or more worse) is at most the level without any correction for their number.
- **NOT DECIDED**: neither. The gate then says what the data do rule out (the upper bound: "at the
  measured pair spread of 14 %, 8 pairs rule out only regressions above 19 %") and about how many
  pairs would decide (``pairs_to_decide``).

**Looks** (``Looks``): the gate may add pairs in rounds and judge after each (looks after n1 < n2 <
... pairs) until PASS, FAIL or its budget. Each verdict is a one-sided test repeated at the looks
on accumulating pairs, so each gets Pocock's constant nominal level for those looks
(``race.sequential_level``, the race's boundary): PASS at α, FAIL at α/2 on the worse side (two-sided
2·that, the level ``stats.decide`` and Holm compare with: a fixed gate's two-sided α spends α/2 on
the worse side too). A gate stopped early (by its time budget) looked fewer times: it crossed no
more often. A look's verdict depends only on the pairs so far and the planned looks, so
``compare --looks`` judges any look again from the stored pairs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from fsmatrix.errors import UserError
from fsmatrix.results.verdict import race, stats, welch

PASS, FAIL, NOT_DECIDED = "PASS", "FAIL", "NOT DECIDED"
VERDICTS = (PASS, FAIL, NOT_DECIDED)
# What NOT DECIDED does to `compare`'s exit status (--not-decided): a status of its own (3; 2 is bad
# input), or the same as FAIL or PASS.
NOT_DECIDED_STATUS = 3
ON_NOT_DECIDED = {"distinct": NOT_DECIDED_STATUS, "fail": 1, "pass": 0}
POWER = 0.8  # pairs_to_decide: the pairs at which the verdict comes in at least this share of draws
MAX_ADVICE = 10_000  # more pairs than this: "no number of pairs in reach"


def exit_status(verdict: str | None, not_decided: str = "distinct") -> int:
    """0 for PASS or no gate, 1 for FAIL, and ``ON_NOT_DECIDED[not_decided]`` for NOT DECIDED."""
    if verdict == FAIL:
        return 1
    if verdict == NOT_DECIDED:
        return ON_NOT_DECIDED[not_decided]
    return 0


@dataclass(frozen=True)
class Looks:
    """The planned looks of a gate that adds pairs: after ``sizes`` pairs (increasing)."""

    sizes: tuple[int, ...]

    @staticmethod
    def parse(text: str) -> Looks:
        """``8`` (one look: the fixed gate), ``8:4:24`` (first, step, most: looks at 8, 12, ..., 24) or
        ``8,12,20``; UserError otherwise."""
        raw = text.strip()
        try:
            if ":" in raw:
                first, step, most = (int(x) for x in raw.split(":"))
                sizes = (*range(first, most + 1, step),) if step > 0 else ()
                if sizes and sizes[-1] != most:
                    sizes = (*sizes, most)
            else:
                sizes = tuple(int(x) for x in raw.split(","))
        except ValueError:
            sizes = ()
        if not sizes or sizes[0] < stats.MIN_SAMPLES or any(b <= a for a, b in itertools.pairwise(sizes)):
            raise UserError(
                f"--looks {text!r}: expected FIRST:STEP:MOST (e.g. 8:4:24) or increasing counts of pairs "
                f"(e.g. 8,12,16), each at least {stats.MIN_SAMPLES}"
            )
        return Looks(sizes)

    def pass_level(self, alpha: float) -> float:
        """The one-sided level of the PASS test at every look."""
        return race.sequential_level(alpha, self.sizes)

    def fail_level(self, alpha: float) -> float:
        """The two-sided level the FAIL test (``stats.decide``, after Holm) compares with at every look."""
        return 2 * race.sequential_level(alpha / 2, self.sizes)

    def __str__(self) -> str:
        return ", ".join(str(n) for n in self.sizes)


@dataclass(frozen=True)
class Bound:
    """The PASS test of one gated metric: is it shown not worse than the threshold?"""

    n: int  # pairs (unpaired: the smaller side's runs)
    spread: float  # exp(sd) - 1 of a pair's log ratio (unpaired: of one run's against one run's)
    estimate: float  # the estimated worsening (0.1: 10 % worse)
    upper: float  # the one-sided upper bound of the worsening at the level: regressions above it are ruled out
    threshold: float
    p_value: float  # one-sided p of H0 "worse by the threshold or more"
    level: float
    pairs_needed: int | None  # about how many would decide (PASS or FAIL); None: more than MAX_ADVICE

    @property
    def shown(self) -> bool:
        return self.p_value < self.level


def _badness(logs: np.ndarray, direction: str) -> np.ndarray:
    """Log ratios HEAD/BASE turned so that larger is worse."""
    return logs if direction == "lower" else -logs


def bound_paired(
    pairs: Sequence[tuple[float, float]], direction: str, threshold: float, level: float, *, alpha: float = stats.ALPHA
) -> Bound | None:
    """The PASS test on (BASE, HEAD) pairs: Student's one-sided t-test of the log ratios (larger is
    worse) against ln(1 + ``threshold``), at ``level``. None with fewer than ``stats.MIN_SAMPLES``
    pairs or a value <= 0 (no ratio). ``alpha``: the level ``pairs_to_decide`` plans the FAIL side at."""
    values = np.asarray(pairs, dtype=float).reshape(-1, 2)
    if len(values) < stats.MIN_SAMPLES or np.any(values <= 0):
        return None
    d = _badness(np.log(values[:, 1]) - np.log(values[:, 0]), direction)
    n, mean, sd = len(d), float(np.mean(d)), float(np.std(d, ddof=1))
    return _bound(n, mean, sd, sd / math.sqrt(n), n - 1, (threshold, level, alpha))


def bound_samples(
    base: Sequence[float],
    head: Sequence[float],
    direction: str,
    threshold: float,
    level: float,
    *,
    alpha: float = stats.ALPHA,
) -> Bound | None:
    """The PASS test on two independent samples: Welch's one-sided t-test on the logs (larger is worse)
    of H0 "HEAD worse by ln(1 + ``threshold``) or more". None as ``bound_paired``."""
    lb, lh = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    if min(lb.size, lh.size) < stats.MIN_SAMPLES or np.any(lb <= 0) or np.any(lh <= 0):
        return None
    bb, bh = _badness(np.log(lb), direction), _badness(np.log(lh), direction)
    se2, df = welch.moments(np.var(bb, ddof=1), np.array(bb.size), np.var(bh, ddof=1), np.array(bh.size))
    sd = math.sqrt(float(np.var(bb, ddof=1) + np.var(bh, ddof=1)))
    dof = float(df) if math.isfinite(float(df)) else float(bb.size + bh.size - 2)
    diff = float(bh.mean() - bb.mean())
    return _bound(min(bb.size, bh.size), diff, sd, math.sqrt(float(se2)), dof, (threshold, level, alpha))


def _bound(n: int, mean: float, sd: float, se: float, dof: float, levels: tuple[float, float, float]) -> Bound:
    threshold, level, alpha = levels
    margin = math.log1p(threshold)
    if se <= 1e-12:  # no noise at all (up to rounding): the estimate is the answer
        p, upper = (0.0 if mean < margin else 1.0), mean
    else:
        p = float(sps.t.cdf((mean - margin) / se, dof))
        upper = mean + float(sps.t.isf(level, dof)) * se
    needed = pairs_to_decide(sd, mean, threshold, level, alpha=alpha)
    return Bound(n, math.expm1(sd), math.expm1(mean), math.expm1(upper), threshold, p, level, needed)


def pairs_to_decide(
    sd: float, mean: float, threshold: float, level: float, *, alpha: float = stats.ALPHA
) -> int | None:
    """About how many pairs would decide, if the true log ratio were ``mean`` and the pairs' sd ``sd``:
    below the threshold, the n at which the PASS test (one-sided, ``level``) rejects with probability
    ``POWER``; at or above it, the n at which the FAIL test (significantly worse, two-sided ``alpha``)
    would. The normal approximation, ((z_level + z_power) · sd / gap)², gap the distance to what is
    tested against. None when more than ``MAX_ADVICE`` (an estimate at the threshold decides never)."""
    margin = math.log1p(threshold)
    z_power = float(sps.norm.ppf(POWER))
    if mean < margin:
        z, gap = float(sps.norm.isf(level)), margin - mean
    else:
        z, gap = float(sps.norm.isf(alpha / 2)), mean
    if sd <= 1e-12:
        return stats.MIN_SAMPLES
    if gap <= 0:
        return None
    n = math.ceil(((z + z_power) * sd / gap) ** 2)
    return max(n, stats.MIN_SAMPLES) if n <= MAX_ADVICE else None
