"""Statistics of the gate on synthetic samples of known effect with realistic noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import typed
from fsmatrix.results.store import sides
from fsmatrix.results.verdict import stats


def noisy(rng: np.random.Generator, n: int, centre: float, cv: float = 0.02, outlier: float = 0.1) -> list[float]:
    """Benchmark-like times: log-normal noise of ``cv``, and now and then one run slowed by a neighbour."""
    values = centre * np.exp(rng.normal(0.0, cv, n))
    if rng.random() < outlier:
        values[rng.integers(n)] *= 1.15
    return [float(v) for v in values]


def regression_rate(effect: float, n: int, *, trials: int = 200, threshold: float = 0.0, seed: int = 1) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for t in range(trials):
        base = noisy(rng, n, 10.0)
        head = noisy(rng, n, 10.0 * (1 + effect))
        c = stats.compare_samples(base, head, "lower", bootstrap=stats.Bootstrap(resamples=500, seed=t))
        hits += stats.is_regression(c, threshold)
    return hits / trials


def test_aa_samples_give_no_change_at_most_alpha() -> None:
    assert regression_rate(0.0, 5) <= 0.05
    assert regression_rate(0.0, 3) <= 0.05


@pytest.mark.parametrize(("effect", "low", "high"), [(0.03, 0.2, 0.9), (0.10, 0.85, 1.0), (0.30, 1.0, 1.0)])
def test_known_slowdowns_are_detected_by_size(effect: float, low: float, high: float) -> None:
    """With 2 % noise and 5 runs a side: 3 % is sometimes seen, 10 % nearly always, 30 % always."""
    rate = regression_rate(effect, 5)
    assert low <= rate <= high, rate


def test_verdicts_for_each_effect() -> None:
    rng = np.random.default_rng(7)
    base = noisy(rng, 8, 100.0, outlier=0)
    assert stats.compare_samples(base, noisy(rng, 8, 100.0, outlier=0), "lower").verdict == "no change"
    assert stats.compare_samples(base, noisy(rng, 8, 110.0, outlier=0), "lower").verdict == "slower"
    assert stats.compare_samples(base, noisy(rng, 8, 130.0, outlier=0), "lower").verdict == "slower"
    assert stats.compare_samples(base, noisy(rng, 8, 70.0, outlier=0), "lower").verdict == "faster"
    # a rate: higher is better, so a lower value is slower
    assert stats.compare_samples(base, noisy(rng, 8, 70.0, outlier=0), "higher").verdict == "slower"
    assert stats.compare_samples(base, noisy(rng, 8, 130.0, outlier=0), "higher").verdict == "faster"


def test_threshold_separates_small_from_large_regressions() -> None:
    base = [10.0, 10.1, 9.9, 10.05, 9.95]
    small = stats.compare_samples(base, [v * 1.03 for v in base], "lower")
    large = stats.compare_samples(base, [v * 1.10 for v in base], "lower")
    assert small.significant and large.significant
    assert not stats.is_regression(small, 0.05)
    assert stats.is_regression(large, 0.05)
    assert large.worse_by == pytest.approx(0.10)
    better = stats.compare_samples(base, [v * 0.8 for v in base], "lower")
    assert better.verdict == "faster" and not stats.is_regression(better, 0.0)


def test_rate_metric_worse_by_is_relative_to_the_rate() -> None:
    c = stats.compare_samples([100.0, 101, 99, 100.5, 99.5], [80.0, 80.8, 79.2, 80.4, 79.6], "higher")
    assert c.ratio == pytest.approx(0.8)
    assert c.worse_by == pytest.approx(0.25)  # 1/0.8 - 1: takes 25 % longer per operation
    assert c.verdict == "slower"


def test_not_enough_data() -> None:
    c = stats.compare_samples([1.0, 1.1], [2.0, 2.1, 2.2], "lower")
    assert c.verdict == "not enough data" and not c.significant and c.test == "-"
    assert stats.compare_samples([], [], "lower").verdict == "not enough data"


def test_identical_and_zero_samples_are_no_change() -> None:
    assert stats.compare_samples([5.0] * 4, [5.0] * 4, "lower").verdict == "no change"
    zero = stats.compare_samples([0.0] * 4, [0.0] * 4, "lower")
    assert zero.verdict == "no change" and zero.ratio == 1.0


def test_noise_floor_hides_changes_smaller_than_the_spread() -> None:
    base = [10.0, 10.1, 9.9, 10.05, 9.95]
    head = [v * 1.04 for v in base]
    assert stats.compare_samples(base, head, "lower").verdict == "slower"
    assert stats.compare_samples(base, head, "lower", noise_floor=0.05).verdict == "no change"


def test_test_choice_follows_what_mann_whitney_can_reach() -> None:
    assert stats.min_mann_whitney_p(3, 3) == pytest.approx(0.1)
    assert stats.choose_test(3, 3) == "welch-log"
    assert stats.choose_test(5, 5) == "mann-whitney"


def test_bootstrap_interval_covers_the_true_ratio() -> None:
    rng = np.random.default_rng(3)
    covered = 0
    for seed in range(100):
        base, head = noisy(rng, 10, 10.0, outlier=0), noisy(rng, 10, 12.0, outlier=0)
        low, high = stats.bootstrap_ratio_ci(base, head, seed=seed, resamples=500)
        covered += low <= 1.2 <= high
    assert covered >= 80  # percentile bootstrap of medians at n=10 is a little narrow, not wildly so


def test_bad_direction_is_refused() -> None:
    with pytest.raises(ValueError, match="direction"):
        stats.compare_samples([1.0] * 3, [1.0] * 3, "sideways")


def test_holm_adjustment() -> None:
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5]) == [0.5]
    adjusted = stats.holm([0.02, math.nan])
    assert adjusted[0] == 0.02 and math.isnan(adjusted[1])


def test_the_test_that_ran_is_the_one_named() -> None:
    """Welch's test on logs cannot take a zero: Mann-Whitney runs, and the result says so."""
    c = stats.compare_samples([0.0, 1.0, 2.0], [5.0, 6.0, 7.0], "lower")
    assert c.test == "mann-whitney"
    assert stats.compare_samples([1.0, 1.1, 1.2], [5.0, 6.0, 7.0], "lower").test == "welch-log"


def test_bootstrap_interval_coverage_is_what_the_docs_say() -> None:
    """README and stats.py: the nominal 95 % interval covers about 90 % at 3 runs a side (log-normal
    noise, true ratio 1) and at least 95 % from 5 runs a side. Measured, so the claim can fail."""
    rng = np.random.default_rng(7)

    def coverage(n: int, trials: int = 400) -> float:
        hits = 0
        for t in range(trials):
            base, head = list(np.exp(rng.normal(0, 0.05, n))), list(np.exp(rng.normal(0, 0.05, n)))
            low, high = stats.bootstrap_ratio_ci(base, head, seed=t, resamples=500)
            hits += low <= 1.0 <= high
        return hits / trials

    assert 0.85 <= coverage(3) <= 0.94
    assert coverage(5) >= 0.94


def test_bench_gate_scaling_and_rates() -> None:
    """The gate benchmark's injected slowdown touches only the gated metrics, in their worse direction."""
    from fsmatrix.bench import gate as bench_gate

    doc = {
        **{"cell_id": "c", "repeat": 1, "status": "passed"},
        "workload": "threen1",
        "metrics": {"elapsed_s": 10.0, "cpu_busy_s": 2.0, "updates_per_s": 5.0},
        "key_metrics": {"elapsed_s": "lower", "cpu_busy_s": "lower"},
    }
    slower = bench_gate.scaled(sides.Side("b", typed([doc])), 0.2).docs[0].metrics
    assert slower == {"elapsed_s": pytest.approx(12.0), "cpu_busy_s": pytest.approx(2.4), "updates_per_s": 5.0}
    fio = {"cell_id": "f", "repeat": 1, "status": "passed", "workload": "fio", "metrics": {"iops": 100.0}}
    fio["key_metrics"] = {"iops": "higher"}
    assert bench_gate.scaled(sides.Side("b", typed([fio])), 0.25).docs[0].metrics["iops"] == pytest.approx(80.0)
    assert bench_gate.rate([True] + [False] * 19) == "1/20 (5%, 95 % CI 0%-25%)"
