"""The bisect's search and decisions (fsmatrix.bisect.bisection): pure, no I/O."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fsmatrix.bisect import bisection
from fsmatrix.results.verdict import race


def lognormal(median: float, sigma: float, n: int, seed: int) -> list[float]:
    return [float(v) for v in median * np.exp(np.random.default_rng(seed).normal(0, sigma, n))]


# ----------------------------------------------------------------------------------- the range


def test_binary_search_halves_the_range_and_pins_the_culprit() -> None:
    s = bisection.Search(16)
    tested = []
    culprit = 11
    while (i := s.next()) is not None:
        tested.append(i)
        s.mark(i, "bad" if i >= culprit else "good")
    assert tested == [8, 12, 10, 11]
    assert s.culprit == culprit and s.candidates == [culprit]
    assert len(tested) == math.ceil(math.log2(16)) == bisection.planned_steps(16, 0)


def test_a_skipped_commit_is_replaced_by_its_nearest_neighbour() -> None:
    s = bisection.Search(16)
    assert s.next() == 8
    s.mark(8, "skip")
    assert s.next() == 7  # 7 and 9 are as near the middle: the lower
    s.mark(7, "skip")
    assert s.next() == 9


def test_only_skipped_commits_left_gives_the_range_not_a_culprit() -> None:
    s = bisection.Search(4)
    s.mark(2, "good")
    s.mark(3, "skip")
    assert s.next() is None
    assert s.culprit is None and s.candidates == [3, 4]


def test_a_range_of_one_commit_needs_no_step() -> None:
    s = bisection.Search(1)
    assert s.next() is None and s.culprit == 1
    assert bisection.planned_steps(1, 3) == 0 and bisection.step_alpha(0.05, 1, 3) == 0.05


def test_marking_outside_the_range_or_an_unknown_verdict_is_refused() -> None:
    s = bisection.Search(8)
    s.mark(4, "good")
    with pytest.raises(ValueError, match="not between"):
        s.mark(2, "bad")
    with pytest.raises(ValueError, match="verdict"):
        s.mark(6, "maybe")
    with pytest.raises(ValueError, match="at least one commit"):
        bisection.Search(0)


def test_the_error_budget_is_split_over_the_planned_steps() -> None:
    # 16 commits: 4 steps of binary search plus one per allowed skip
    assert bisection.planned_steps(16, 3) == 7
    assert bisection.step_alpha(0.05, 16, 3) == pytest.approx(0.05 / 7)
    assert bisection.planned_steps(17, 0) == 5


# ----------------------------------------------------------------------------------- decisions


def _look(after_round: int) -> bisection.JudgeLook:
    return bisection.JudgeLook(after_round=after_round, max_rounds=10, delta=0.05, alpha=0.01)


def test_a_commit_like_the_bad_end_is_bad_and_one_like_the_good_end_is_good() -> None:
    good, bad = lognormal(1.0, 0.02, 5, 1), lognormal(1.3, 0.02, 5, 2)
    slow = bisection.judge_step(good, bad, lognormal(1.3, 0.02, 5, 3), "lower", _look(5))
    fast = bisection.judge_step(good, bad, lognormal(1.0, 0.02, 5, 4), "lower", _look(5))
    assert slow.verdict == "bad" and "slower than the good end" in slow.reason
    assert fast.verdict == "good" and "faster than the bad end" in fast.reason
    assert slow.ratio_good == pytest.approx(1.3, rel=0.05) and fast.ratio_bad == pytest.approx(1 / 1.3, rel=0.05)


def test_a_higher_is_better_metric_is_judged_in_its_direction() -> None:
    good, bad = lognormal(100, 0.02, 5, 1), lognormal(70, 0.02, 5, 2)  # a rate that fell
    assert bisection.judge_step(good, bad, lognormal(70, 0.02, 5, 3), "higher", _look(5)).verdict == "bad"
    assert bisection.judge_step(good, bad, lognormal(100, 0.02, 5, 4), "higher", _look(5)).verdict == "good"


def test_nothing_is_decided_before_the_minimum_rounds_or_on_noise() -> None:
    good, bad = lognormal(1.0, 0.02, 2, 1), lognormal(2.0, 0.02, 2, 2)
    early = bisection.judge_step(good, bad, lognormal(2.0, 0.02, 2, 3), "lower", _look(2))
    assert early.verdict == "open"
    noisy = bisection.judge_step(
        lognormal(1.0, 0.02, 3, 1),
        lognormal(1.3, 0.02, 3, 2),
        lognormal(1.3, 0.6, 3, 3),
        "lower",
        _look(3),
    )
    assert noisy.verdict == "open"


def test_a_commit_between_the_ends_is_bad_and_says_so() -> None:
    good, bad = lognormal(1.0, 0.01, 8, 1), lognormal(1.6, 0.01, 8, 2)
    middle = bisection.judge_step(good, bad, lognormal(1.25, 0.01, 8, 3), "lower", _look(8))
    assert middle.verdict == "bad" and middle.between and "between the ends" in middle.reason


def test_each_race_of_a_step_runs_at_half_the_steps_alpha_at_the_races_level() -> None:
    good, bad = lognormal(1.0, 0.02, 5, 1), lognormal(1.3, 0.02, 5, 2)
    look = _look(5)
    j = bisection.judge_step(good, bad, lognormal(1.3, 0.02, 5, 3), "lower", look)
    looks = look.max_rounds - 3 + 1
    assert j.look_alpha == pytest.approx(race.look_alpha(look.alpha / 2, 2, looks))


def test_the_ends_regression_improvement_and_no_change() -> None:
    good = lognormal(1.0, 0.02, 5, 1)
    reg = bisection.judge_ends(good, lognormal(1.3, 0.02, 5, 2), "lower", _look(5))
    better = bisection.judge_ends(good, lognormal(0.7, 0.02, 5, 2), "lower", _look(5))
    same = bisection.judge_ends(good, lognormal(1.0, 0.002, 10, 2), "lower", _look(10))
    assert reg.verdict == "regression" and reg.p_value < reg.look_alpha
    assert better.verdict == "improvement"
    assert same.verdict in ("no change", "open") and same.verdict != "regression"
