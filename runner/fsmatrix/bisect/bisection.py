"""The search and its decisions: pure functions and a small state machine, no I/O (docs/bisect.md).

Commits are numbered along the range: 0 is the good end, N the bad end, 1..N-1 the commits between
(``git rev-list --first-parent --reverse GOOD..BAD``). The first bad commit is one of 1..N.

**Decisions** reuse the race (``race.race_step``: its one-sided tests, its TOST and its per-look
level ``race.look_alpha``), on the runs of the metric the bisect follows, in its direction:

- ``judge_ends``: a race of the two ends. The bad end retired (slower than the good end by more than
  the threshold δ) is a regression to find; the good end retired (the bad end faster), or the two
  equivalent within ±δ, is none; undecided at the last round, none shown.
- ``judge_step``: two races of two cells each, on the step's own rounds (each round runs the tested
  commit and a fresh run of both ends, interleaved): the commit against the good end, and the commit
  against the bad end with the direction reversed, each at α_step / 2. The commit is **bad** when it is
  slower than the good end by more than δ (the first race retires it), or equivalent to the bad end
  within ±δ, or slower than it by more than δ (the second race ties it or retires the bad end), and
  no signal says good; **good** when it is faster than the bad end by more than δ (the second race
  retires it), or equivalent to the good end, or faster than it by more than δ, and no signal says
  bad. Slower than the good end is bad whatever else holds (the first commit worse than the good end
  by more than δ is what the bisect names); a commit both slower than the good end and faster than
  the bad end lies between the ends (``between``: more than one change in the range). Any other
  conflict is no decision yet.

**Error control** (``step_alpha``): under one step change of at least δ in the range, a wrong
verdict at a step needs some race to make a wrong decision (retire a cell not worse by more than δ,
or tie one not within ±δ), whose probability over all its looks the race bounds by its α; each step
runs two races at α_step / 2, and the bisect makes at most ``planned_steps`` decided steps at
α_step = α / planned_steps: Bonferroni bounds the probability of any wrong verdict, hence of naming a
wrong commit, by α.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from fsmatrix.results.verdict import race, stats

VERDICTS = ("good", "bad", "skip")
GOOD_END, BAD_END, COMMIT = "good", "bad", "commit"


def flip(direction: str) -> str:
    return "higher" if direction == "lower" else "lower"


# ----------------------------------------------------------------------------------- the range


def planned_steps(candidates: int, max_skips: int) -> int:
    """The decided steps a bisect of ``candidates`` commits (1..N, the bad end included) may make:
    binary search needs ceil(log2 N); each skipped commit may cost one more."""
    return math.ceil(math.log2(candidates)) + max_skips if candidates > 1 else 0


def step_alpha(alpha: float, candidates: int, max_skips: int) -> float:
    """α_step = α / planned_steps: the error budget of one step (Bonferroni across the steps)."""
    return alpha / max(planned_steps(candidates, max_skips), 1)


@dataclass
class Search:
    """Binary search over commits 0..``last`` (0 good, ``last`` bad), with skips (``git bisect skip``)."""

    last: int
    good: int = 0
    bad: int = -1
    skipped: set[int] = field(default_factory=set)
    verdicts: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.last < 1:
            raise ValueError(f"a range needs at least one commit after the good end, not {self.last}")
        if self.bad < 0:
            self.bad = self.last

    def next(self) -> int | None:
        """The commit to test next: of the untested, unskipped ones strictly between the last good
        and the first bad, the nearest to the middle (the lower of two); None when none is left."""
        middle = (self.good + self.bad) / 2
        left = [i for i in range(self.good + 1, self.bad) if i not in self.skipped]
        return min(left, key=lambda i: (abs(i - middle), i)) if left else None

    def mark(self, index: int, verdict: str) -> None:
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {verdict!r}")
        if not self.good < index < self.bad:
            raise ValueError(f"commit {index} is not between the last good ({self.good}) and first bad ({self.bad})")
        self.verdicts[index] = verdict
        if verdict == "good":
            self.good = index
        elif verdict == "bad":
            self.bad = index
        else:
            self.skipped.add(index)

    @property
    def culprit(self) -> int | None:
        """The first bad commit when the search pinned it down (its parent good), else None."""
        return self.bad if self.bad - self.good == 1 else None

    @property
    def candidates(self) -> list[int]:
        """The commits the first bad one may still be: after the last good, up to the first bad."""
        return list(range(self.good + 1, self.bad + 1))


# ----------------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Judgement:
    """One look's verdict on a step or on the ends."""

    verdict: str  # step: good, bad or open; ends: regression, improvement, no change or open
    reason: str
    ratio_good: float  # median(commit) / median(good end) (ends: bad / good)
    ratio_bad: float  # median(commit) / median(bad end) (ends: nan)
    look_alpha: float  # the one-sided level of each test at this look
    p_value: float = math.nan  # ends: the p-value of "bad is slower by more than δ" (picks the metric)
    between: bool = False  # step: slower than the good end and faster than the bad one


def _ratio(base: Sequence[float], head: Sequence[float]) -> float:
    return stats.ratio_of_medians(list(base), list(head)) if base and head else math.nan


@dataclass(frozen=True, kw_only=True)
class JudgeLook:
    """The look a judgement is made at: after round ``after_round`` of at most ``max_rounds``
    (nothing decided before ``min_rounds``), a regression beyond ``delta``, at level ``alpha``."""

    after_round: int
    max_rounds: int
    delta: float
    alpha: float
    min_rounds: int = stats.MIN_SAMPLES


def _race(samples: dict[str, Sequence[float]], direction: str, look: JudgeLook) -> race.RaceStep:
    at = race.Look(look.after_round, look.max_rounds, look.min_rounds, look.delta, look.alpha, margin=look.delta)
    return race.race_step({k: list(v) for k, v in samples.items()}, direction, at)  # a regression beyond δ


def judge_ends(good: Sequence[float], bad: Sequence[float], direction: str, look: JudgeLook) -> Judgement:
    """Is the bad end slower than the good end by more than ``look.delta``? A race of the two ends at ``look.alpha``."""
    step = _race({GOOD_END: good, BAD_END: bad}, direction, look)
    ratio = _ratio(good, bad)
    bad_d = next(d for d in step.decisions if d.cell == BAD_END)
    good_d = next(d for d in step.decisions if d.cell == GOOD_END)
    p = bad_d.p_retire if step.best == GOOD_END else math.nan
    if bad_d.action == "retire":
        return Judgement("regression", bad_d.reason, ratio, math.nan, step.look_alpha, p)
    if good_d.action == "retire":
        return Judgement("improvement", "the bad end is faster: " + good_d.reason, ratio, math.nan, step.look_alpha)
    if "equivalent" in (bad_d.action, good_d.action):
        why = bad_d.reason if bad_d.action == "equivalent" else good_d.reason
        return Judgement("no change", why, ratio, math.nan, step.look_alpha)
    why = next((d.reason for d in step.decisions if d.cell != step.best), "not decided yet")
    return Judgement("open", why, ratio, math.nan, step.look_alpha, p)


def judge_step(
    good: Sequence[float], bad: Sequence[float], tested: Sequence[float], direction: str, look: JudgeLook
) -> Judgement:
    """Is the tested commit good or bad? Two races at ``look.alpha`` / 2 each (see the module's
    docstring). The values are the passed runs' (a failed run is the caller's to handle: a skip)."""
    half, delta = dataclasses.replace(look, alpha=look.alpha / 2), look.delta
    vs_good = _race({GOOD_END: good, COMMIT: tested}, direction, half)
    vs_bad = _race({BAD_END: bad, COMMIT: tested}, flip(direction), half)
    bad_signals, good_signals = [], []
    slower_than_good = vs_good.action(COMMIT) == "retire"
    if slower_than_good:
        bad_signals.append(f"slower than the good end by more than {delta:.0%}")
    if vs_good.action(GOOD_END) == "retire":
        good_signals.append(f"faster than the good end by more than {delta:.0%}")
    if "equivalent" in (vs_good.action(COMMIT), vs_good.action(GOOD_END)):
        good_signals.append(f"equivalent to the good end within ±{delta:.0%}")
    faster_than_bad = vs_bad.action(COMMIT) == "retire"
    if faster_than_bad:
        good_signals.append(f"faster than the bad end by more than {delta:.0%}")
    if vs_bad.action(BAD_END) == "retire":
        bad_signals.append(f"slower than the bad end by more than {delta:.0%}")
    if "equivalent" in (vs_bad.action(COMMIT), vs_bad.action(BAD_END)):
        bad_signals.append(f"equivalent to the bad end within ±{delta:.0%}")
    ratio_good, ratio_bad = _ratio(good, tested), _ratio(bad, tested)
    figures = f"×{ratio_good:.3f} the good end, ×{ratio_bad:.3f} the bad end, α' {vs_good.look_alpha:.2g}"
    level = vs_good.look_alpha
    between = slower_than_good and faster_than_bad
    if slower_than_good:
        why = "; ".join(bad_signals) + (" (and faster than the bad end: between the ends)" if between else "")
        return Judgement("bad", f"{why} ({figures})", ratio_good, ratio_bad, level, between=between)
    if bad_signals and not good_signals:
        return Judgement("bad", f"{'; '.join(bad_signals)} ({figures})", ratio_good, ratio_bad, level)
    if good_signals and not bad_signals:
        return Judgement("good", f"{'; '.join(good_signals)} ({figures})", ratio_good, ratio_bad, level)
    if good_signals and bad_signals:
        why = f"conflicting: {'; '.join(good_signals + bad_signals)} ({figures})"
        return Judgement("open", why, ratio_good, ratio_bad, level)
    return Judgement("open", f"not decided yet ({figures})", ratio_good, ratio_bad, level)
