"""**Racing** (``race_step``): after each round of a race, within one comparison group of K cells
(every cell of the group, retired ones included: K is fixed before the race starts), with a
planned maximum of R rounds and a minimum of r0 repeats (>= ``MIN_SAMPLES``):

- before round r0 every cell is kept: nothing is decided before the minimum;
- a cell with a failed run (or a value <= 0, which has no ratio) is retired: a cell whose runs fail
  never wins (a rule, not a statistical decision: it spends no α);
- the current best is the cell with the best median among the others; each other cell j is
  *retired* when it is significantly worse than the best by more than the look's ``margin`` — a
  one-sided test of the null hypothesis "j is at most that much worse" (on logs, in the metric's
  direction: H0: μj - μbest <= ln(1 + margin)), Welch's t-test on logs shifted by ln(1 + margin), or
  Mann-Whitney on them when the test choice at the adjusted level allows it; the race's margin is 0
  (shown worse: the answer's "worse"), bisect's δ (a regression is slower by more than δ) — and
  *equivalent* when TOST shows it within ±δ of the best and it is not retired; otherwise kept. A
  retired cell never comes back (the caller passes the retired set;
  it is returned unchanged plus the new ones).

Error control across rounds and cells. A wrong decision is the rejection of a true null hypothesis:
retiring a cell that is not worse than the current best by more than the margin, or tying one that is not
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
α. No cell is truly better than the truly best, so the truly best cell (and, with a margin, every
cell within the margin of it) survives the race with probability at least 1 - α.

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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import optimize
from scipy import stats as sps

from fsmatrix.results.store.records import Left
from fsmatrix.results.verdict import stats, welch
from fsmatrix.results.verdict.equivalence import tost
from fsmatrix.results.verdict.groups import DELTA, Values, better, check_direction, split_runs

if TYPE_CHECKING:
    from fsmatrix.matrix import RaceSettings

# What a look decides for a cell (``race_step``; bisect reads them too). How a cell leaves the race is
# ``race_look``'s, in the words of ``store.LEFT_ACTIONS``.
ACTIONS = ("keep", "retire", "equivalent")


@dataclass(frozen=True)
class CellDecision:
    cell: str
    action: str  # one of ACTIONS
    reason: str
    n: int  # passed runs
    ratio: float  # median ratio to the current best (this / best), nan when not compared
    p_retire: float  # one-sided p of "worse than the best by more than the margin", nan when not tested
    p_equivalent: float  # TOST p against the best, nan when not tested


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
        """The race is over: the last round, or every cell left is the best or equivalent to it."""
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
    return welch.one_sided(shifted, best, "greater"), test


@dataclass(frozen=True)
class Look:
    """One look of a race at a group: after round ``after_round`` of at most ``max_rounds``, deciding
    nothing before ``min_repeats`` runs, with the minimum effect δ and the race's family error α."""

    after_round: int
    max_rounds: int
    min_repeats: int = stats.MIN_SAMPLES
    delta: float = DELTA
    alpha: float = stats.ALPHA
    margin: float = 0.0  # retire a cell worse than the best by more than this (0: worse at all, the answer's "worse")

    def check(self) -> None:
        if self.min_repeats < stats.MIN_SAMPLES:
            raise ValueError(f"min_repeats must be at least {stats.MIN_SAMPLES}, not {self.min_repeats}")
        if self.max_rounds < self.min_repeats:
            raise ValueError(f"max_rounds ({self.max_rounds}) must be at least min_repeats ({self.min_repeats})")
        if not 1 <= self.after_round <= self.max_rounds:
            raise ValueError(f"after_round must be in 1..{self.max_rounds}, not {self.after_round}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), not {self.delta}")


def race_step(
    samples: Mapping[str, Values], direction: str, look: Look, retired: Collection[str] = frozenset()
) -> RaceStep:
    """The decisions of ``look`` at one comparison group (see the module's docstring). ``samples`` holds
    every cell of the group, retired ones included (they keep their runs, and the group's size K fixes
    the error budget); ``retired`` the cells retired before."""
    check_direction(direction)
    look.check()
    unknown = set(retired) - set(samples)
    if unknown:
        raise ValueError(f"retired cells not in the group: {', '.join(sorted(unknown))}")
    level = look_alpha(look.alpha, len(samples), look.max_rounds - look.min_repeats + 1, look.min_repeats)
    before = frozenset(retired)
    runs = {cell: split_runs(values) for cell, values in samples.items()}
    if look.after_round < look.min_repeats:
        early = tuple(
            _record(c, runs, "retire", "retired earlier")
            if c in before
            else _record(c, runs, "keep", f"nothing before the minimum of {look.min_repeats} runs")
            for c in samples
        )
        return RaceStep(look.after_round, look.max_rounds, None, level, early, before)
    decided, eligible = _undecidable(runs, before, look.min_repeats)
    best: str | None = None
    for cell in eligible:
        if best is None or better(stats.median(runs[cell][0]), stats.median(runs[best][0]), direction):
            best = cell
    if best is not None:
        decided[best] = _record(best, runs, "keep", f"current best of {len(eligible)}", (1.0, math.nan, math.nan))
        for cell in (c for c in eligible if c != best):
            decided[cell] = _against_best(cell, best, runs, direction, (look.delta, look.margin, level))
    decisions = tuple(decided[c] for c in samples)
    now_retired = before | {d.cell for d in decisions if d.action == "retire"}
    return RaceStep(look.after_round, look.max_rounds, best, level, decisions, frozenset(now_retired))


Runs = Mapping[str, tuple[list[float], int]]  # cell -> (passed runs' values, failed runs)


def _record(
    cell: str, runs: Runs, action: str, reason: str, figures: tuple[float, float, float] | None = None
) -> CellDecision:
    ratio, p_retire, p_equivalent = figures or (math.nan, math.nan, math.nan)
    return CellDecision(cell, action, reason, len(runs[cell][0]), ratio, p_retire, p_equivalent)


def _failing(passed: Sequence[float], failed: int) -> int:
    return failed + sum(v <= 0 for v in passed)


def failing_runs(values: Values) -> int:
    """The runs that keep a cell from ever winning a race: failed ones, and values <= 0 (no ratio)."""
    return _failing(*split_runs(values))


def _undecidable(runs: Runs, before: frozenset[str], min_repeats: int) -> tuple[dict[str, CellDecision], list[str]]:
    """The decisions that need no test (retired earlier, failing runs, too few runs), and the cells left."""
    decided: dict[str, CellDecision] = {}
    eligible = []
    for cell, (passed, failed) in runs.items():
        bad = _failing(passed, failed)
        if cell in before:
            decided[cell] = _record(cell, runs, "retire", "retired earlier")
        elif bad:
            why = f"{bad} of {len(passed) + failed} runs failed or measured <= 0: a cell whose runs fail never wins"
            decided[cell] = _record(cell, runs, "retire", why)
        elif len(passed) < min_repeats:
            decided[cell] = _record(
                cell, runs, "keep", f"{len(passed)} runs: nothing before the minimum of {min_repeats}"
            )
        else:
            eligible.append(cell)
    return decided, eligible


def _against_best(cell: str, best: str, runs: Runs, direction: str, levels: tuple[float, float, float]) -> CellDecision:
    """One cell against the current best: retired, equivalent or kept (``levels``: δ, the retire margin
    and α'). Worse and within ±δ at once (a cell 2 % behind, shown so): worse, as the answer says it."""
    delta, margin, level = levels
    sign = 1.0 if direction == "lower" else -1.0  # "badness": larger is worse
    values = runs[cell][0]
    ratio = stats.ratio_of_medians(runs[best][0], values)
    p_retire, test = _retire_p(sign * np.log(runs[best][0]), sign * np.log(values), math.log1p(margin), level)
    p_equivalent = tost(runs[best][0], values, delta).p_value
    worse = f"worse by more than {margin:.0%}" if margin else "worse"
    text = (
        f"{ratio:.3f}x the best, p = {p_retire:.2g} ({test}) for {worse}, "
        f"TOST p = {p_equivalent:.2g}, α' = {level:.2g}: "
    )
    if margin and p_retire < level and p_equivalent < level:
        action, text = "keep", text + "conflicting tests, no decision"
    elif p_retire < level:
        action, text = "retire", text + f"significantly {worse}"
    elif p_equivalent < level:
        action, text = "equivalent", text + f"equivalent to the best within ±{delta:.0%}"
    else:
        action, text = "keep", text + "not decided yet"
    return _record(cell, runs, action, text, (ratio, p_retire, p_equivalent))


def race_look(
    samples: Mapping[str, Sequence[float | None]],
    direction: str,
    left: Mapping[str, Left],
    r: int,
    settings: RaceSettings,
    alpha: float,
) -> tuple[RaceStep, dict[str, Left], bool]:
    """One comparison group's look after round ``r`` of a race: ``race_step`` on the group's
    ``samples`` (every member's primary-metric values so far, in the group's order), with the cells
    ``left`` records as retired, failed or skipped passed as retired. Returns the step, the cells that
    leave now (or change how they left: an equivalent cell retired later) as ``left`` entries, and
    whether the group is still open (some cell other than the best is undecided and ``r`` is not the
    last round). How a cell leaves is one of ``store.LEFT_ACTIONS``: a retired cell whose runs failed
    is "failed"; a closed group's remaining cells leave as "best" (decided), "leader" (the best median
    of an undecided group) or "remained". Pure: ``left`` is not changed. ``fsmatrix run --race``
    (``fsmatrix.racing``) and the replay benchmark (``fsmatrix.bench.race``) both decide with it."""
    members = list(samples)
    out = {m for m in members if m in left and left[m].action in ("retired", "failed", "skipped")}
    step = race_step(
        samples, direction, Look(r, settings.max_repeats, settings.min_repeats, settings.delta, alpha), out
    )
    leaving: dict[str, Left] = {}
    for d in step.decisions:
        now = left.get(d.cell)
        if d.action == "retire" and now is None and failing_runs(samples[d.cell]):
            leaving[d.cell] = Left("failed", r, d.reason)
        elif d.action == "retire" and (now is None or now.action == "equivalent"):
            earlier = f"equivalent after round {now.round}; now " if now else ""
            leaving[d.cell] = Left("retired", r, earlier + d.reason)
        elif d.action == "equivalent" and now is None:
            leaving[d.cell] = Left("equivalent", r, d.reason)
    still = [m for m in members if m not in left and m not in leaving]
    undecided = [m for m in still if m != step.best]
    if r < settings.max_repeats and undecided:
        return step, leaving, True
    for m in still:
        if m != step.best:
            leaving[m] = Left("remained", r, f"not decided at max_repeats ({settings.max_repeats})")
        elif undecided:
            leaving[m] = Left("leader", r, f"the best median at max_repeats ({settings.max_repeats})")
        else:
            leaving[m] = Left("best", r, "the best; every other cell retired or equivalent")
    return step, leaving, False
