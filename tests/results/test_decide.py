"""The decisions over a comparison group (fsmatrix.results.verdict: groups, equivalence, power, race):
best / equivalent / not separated / worse read off one family of Welch intervals, TOST, the runs
that would settle a pair, and the racing rule with its error control, on seeded synthetic samples."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from fsmatrix.bench import answer as bench_answer
from fsmatrix.results.verdict import equivalence, groups, power, race, stats, welch

ALPHA = stats.ALPHA


def lognormal(rng: np.random.Generator, n: int, centre: float, sigma: float) -> list[float]:
    return [float(v) for v in centre * np.exp(rng.normal(0.0, sigma, n))]


def gmean_ratio(a: list[float], b: list[float]) -> float:
    return math.exp(float(np.mean(np.log(a)) - np.mean(np.log(b))))


# ------------------------------------------------------------------- best / equivalent / not separated / worse


def test_a_clear_winner_is_best_and_the_others_worse_with_intervals_excluding_one() -> None:
    rng = np.random.default_rng(1)
    group = {
        "ext4": lognormal(rng, 5, 12.0, 0.02),
        "xfs": lognormal(rng, 5, 10.0, 0.02),
        "btrfs": lognormal(rng, 5, 15.0, 0.02),
    }
    answer = groups.compare_group(group, "lower", baseline="ext4")
    assert answer.leader == answer.best == "xfs"
    assert answer.worse == ("ext4", "btrfs") and answer.not_separated == () and answer.equivalent == ()
    assert answer.family == 3
    for name in answer.worse:
        i = answer.standing(name).against_leader
        assert i is not None and i.other == "xfs" and i.ci_low > 1.0 and i.ratio > 1.15
        assert i.confidence == pytest.approx(1 - ALPHA / 3) and i.p_value < ALPHA / 3  # the test and the interval agree
    xfs = answer.standing("xfs").to_baseline
    assert xfs is not None and xfs.other == "ext4"
    assert xfs.ratio == pytest.approx(gmean_ratio(group["xfs"], group["ext4"]))  # a ratio of geometric means
    assert xfs.ci_high < 1.0 < answer.standing("btrfs").to_baseline.ci_low  # type: ignore[union-attr]
    base = answer.standing("ext4").to_baseline
    assert base is not None and (base.ratio, base.ci_low, base.ci_high) == (1.0, 1.0, 1.0)


def test_the_interval_is_welchs_on_logs_at_the_bonferroni_level() -> None:
    """Against scipy: Welch's t-test on logs at α/m gives the same p, and its interval the same ends."""
    a, b = [10.0, 10.4, 9.7, 10.1], [11.0, 10.5, 11.6, 11.2, 10.9]
    answer = groups.compare_group({"a": a, "b": b}, "lower", baseline="a")
    i = answer.standing("b").to_baseline
    assert i is not None
    res = sps.ttest_ind(np.log(b), np.log(a), equal_var=False)
    assert i.p_value == pytest.approx(res.pvalue)
    ci = res.confidence_interval(confidence_level=1 - ALPHA)
    assert (i.ci_low, i.ci_high) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))


def test_a_rate_metric_picks_the_highest_geometric_mean() -> None:
    rng = np.random.default_rng(2)
    group = {"a": lognormal(rng, 5, 200.0, 0.02), "b": lognormal(rng, 5, 260.0, 0.02)}
    answer = groups.compare_group(group, "higher")
    assert answer.best == "b" and answer.worse == ("a",)
    i = answer.standing("a").against_leader
    assert i is not None and i.ci_high < 1.0  # a rate: worse is below 1


def test_the_same_distribution_is_not_separated_and_never_ranked() -> None:
    rng = np.random.default_rng(3)
    group = {
        "ext4": lognormal(rng, 5, 8.2, 0.05),
        "xfs": lognormal(rng, 5, 8.2, 0.05),
        "jfs": lognormal(rng, 5, 12.9, 0.02),
    }
    answer = groups.compare_group(group, "lower")
    assert answer.leader in ("ext4", "xfs") and answer.best is None
    assert set(answer.not_separated) == {"ext4", "xfs"} and answer.worse == ("jfs",)
    assert answer.standing(answer.leader).status == "not separated"


def test_equivalent_only_when_the_interval_lies_inside_delta() -> None:
    rng = np.random.default_rng(5)
    close = {"a": lognormal(rng, 10, 10.0, 0.005), "b": lognormal(rng, 10, 10.05, 0.005)}
    answer = groups.compare_group(close, "lower")
    assert answer.best is None and answer.equivalent == ("a", "b")  # the leader too: nothing is worse
    other = "b" if answer.leader == "a" else "a"
    i = answer.standing(other).against_leader
    assert i is not None and i.ci_low > 1 / 1.05 and i.ci_high < 1.05
    # the same data, a minimum effect the interval does not fit inside: not separated
    tight = groups.compare_group(close, "lower", delta=0.001)
    assert tight.standing(other).status in ("not separated", "worse")
    assert tight.equivalent == ()


def test_not_enough_data_is_never_the_leader() -> None:
    group: dict[str, list[float | None]] = {
        "fast but two runs": [1.0, 1.01],
        "fast but a failed run": [1.0, 1.01, None, 0.99],
        "fast but a zero": [1.0, 0.0, 1.01],
        "slow": [2.0, 2.02, 1.98],
    }
    answer = groups.compare_group(group, "lower")
    assert answer.leader == "slow"
    assert answer.with_status("not enough data") == ("fast but two runs", "fast but a failed run", "fast but a zero")
    assert "1 of 4 runs failed" in answer.standing("fast but a failed run").reason
    assert "<= 0" in answer.standing("fast but a zero").reason
    assert groups.compare_group({"x": [1.0, math.nan, 1.0, 1.0]}, "lower").leader is None


def test_no_noise_at_all_separates_any_difference() -> None:
    answer = groups.compare_group({"a": [5.0, 5.0, 5.0], "b": [6.0, 6.0, 6.0], "c": [5.0, 5.0, 5.0]}, "lower")
    assert answer.worse == ("b",) and answer.equivalent == ("c",) and answer.best == "a"
    alike = groups.compare_group({"a": [5.0, 5.0, 5.0], "c": [5.0, 5.0, 5.0]}, "lower")
    assert alike.best is None and alike.equivalent == ("a", "c")


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="baseline"):
        groups.compare_group({"a": [1.0, 1.0, 1.0]}, "lower", baseline="b")
    with pytest.raises(ValueError, match="direction"):
        groups.compare_group({"a": [1.0, 1.0, 1.0]}, "faster")
    with pytest.raises(ValueError, match="delta"):
        groups.compare_group({"a": [1.0, 1.0, 1.0]}, "lower", delta=1.5)


def test_compare_group_and_the_vectorised_rule_agree() -> None:
    """The simulation's decide() is compare_group's: the same statuses on 200 seeded groups."""
    rng = np.random.default_rng(11)
    codes = {name: code for code, name in enumerate(groups.STATUSES)}
    for _ in range(200):
        k, n = int(rng.integers(2, 6)), int(rng.integers(3, 7))
        logs = rng.normal(0.0, 0.05, (k, n)) + rng.choice([0.0, 0.03, 0.2], size=k)[:, None]
        group = {f"c{i}": list(np.exp(logs[i])) for i in range(k)}
        answer = groups.compare_group(group, "lower")
        d = groups.decide(logs.mean(axis=1)[None], logs.var(axis=1, ddof=1)[None], np.full(k, n))
        assert [codes[s.status] for s in answer.standings] == d.status[0].tolist()


# ----------------------------------------------------------------------------------- the simulation


def test_the_simulation_pins_its_rows() -> None:
    """A few designs of `python -m fsmatrix.bench.answer`, seeded: the targets hold, and the figures
    are the ones docs/answer.md prints (2,000 trials here)."""
    rows = {
        (r.k, r.n, r.cv): r
        for r in (bench_answer.design(k, n, cv, 2000, 0) for k, n, cv in [(4, 3, 0.08), (2, 5, 0.08), (8, 10, 0.15)])
    }
    for r in rows.values():
        assert r.family_error <= 0.055 and r.coverage >= 0.94 and r.false_equivalent <= 0.05, r
    assert rows[(2, 5, 0.08)].power > rows[(4, 3, 0.08)].power  # fewer pairs and more runs: more power
    again = bench_answer.design(4, 3, 0.08, 2000, 0)
    assert again == rows[(4, 3, 0.08)]  # seeded


def test_the_simulation_sees_a_rule_without_the_family_correction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation can fail: the leader tested against the others at α each (no correction over
    the pairs) calls an equal configuration worse far more often than 5.5 % with 8 of them."""
    monkeypatch.setattr(groups, "family_size", lambda k: 1)
    row = bench_answer.design(8, 5, 0.08, 2000, 0)
    assert row.family_error > 0.2


def test_the_simulation_sees_intervals_narrower_than_labelled(monkeypatch: pytest.MonkeyPatch) -> None:
    real = welch.intervals

    def narrow(*args: np.ndarray, **kw: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        low, high, p = real(*args, **kw)  # type: ignore[arg-type]
        mid = (low + high) / 2
        return mid - (high - low) / 4, mid + (high - low) / 4, p

    monkeypatch.setattr(welch, "intervals", narrow)
    assert bench_answer.design(2, 5, 0.08, 2000, 0).coverage < 0.9


def test_the_simulation_bad_trials() -> None:
    assert bench_answer.main(["--trials", "2"]) == 2


# ----------------------------------------------------------------------------------- TOST


def test_tost_equivalent_within_five_percent_and_not_ten_percent_apart() -> None:
    rng = np.random.default_rng(5)
    base = lognormal(rng, 8, 100.0, 0.01)
    same = lognormal(rng, 8, 100.0, 0.01)
    apart = lognormal(rng, 8, 110.0, 0.01)
    eq = equivalence.tost(base, same, 0.05)
    assert eq.equivalent and eq.p_value < 1e-4 and eq.bound == pytest.approx(math.log(1.05))
    far = equivalence.tost(base, apart, 0.05)
    assert not far.equivalent and far.p_value > 0.5 and far.ratio == pytest.approx(1.10, abs=0.02)
    # symmetric in which side is BASE, and in the metric's direction (inverted values)
    assert equivalence.tost(same, base, 0.05).p_value == pytest.approx(eq.p_value)
    inverted = equivalence.tost([1 / v for v in base], [1 / v for v in same], 0.05)
    assert inverted.p_value == pytest.approx(eq.p_value)
    # the group's correction: decided at α/m
    near = lognormal(rng, 8, 103.0, 0.01)
    alone = equivalence.tost(base, near, 0.05)
    m = math.ceil(ALPHA / alone.p_value) + 1
    assert alone.equivalent and m > 1
    corrected = equivalence.tost(base, near, 0.05, comparisons=m)
    assert corrected.alpha == pytest.approx(ALPHA / m) and not corrected.equivalent


def test_tost_one_sided_p_values_are_welch_tests_against_the_shifted_bounds() -> None:
    rng = np.random.default_rng(6)
    base, head = lognormal(rng, 5, 10.0, 0.03), lognormal(rng, 6, 10.3, 0.05)
    eq = equivalence.tost(base, head, 0.05)
    lb, lh, bound = np.log(base), np.log(head), math.log(1.05)
    lower = sps.ttest_ind(lh + bound, lb, equal_var=False, alternative="greater").pvalue
    upper = sps.ttest_ind(lh - bound, lb, equal_var=False, alternative="less").pvalue
    assert eq.p_lower == pytest.approx(lower, rel=1e-9) and eq.p_upper == pytest.approx(upper, rel=1e-9)
    assert eq.p_value == max(eq.p_lower, eq.p_upper)
    with pytest.raises(ValueError, match="positive"):
        equivalence.tost([1.0, 0.0, 1.0], [1.0, 1.0, 1.0])


# ----------------------------------------------------------------------------------- n*


def test_pooled_log_sd() -> None:
    a, b = [1.0, math.e, math.e**2], [math.e, math.e**3]
    # sums of squares of the logs about their means: 2 and 2, over 3 + 2 - 2 degrees of freedom
    assert equivalence.pooled_log_sd(a, b) == pytest.approx(math.sqrt(4 / 3))
    assert equivalence.pooled_log_sd([5.0, 5.0, 5.0], [7.0, 7.0]) == 0.0


# ----------------------------------------------------------------------------------- the runs that would settle it


def test_settle_probability_against_a_direct_simulation() -> None:
    """The advice's draws of the means and variances give what Welch's interval on full samples gives."""
    rng = np.random.default_rng(12)
    n, sigma, delta, family = 6, 0.04, 0.05, 3
    bound = math.log1p(delta)
    equal = rng.normal(0.0, sigma, (4000, 2, n))
    apart = equal + np.array([0.0, bound])[None, :, None]
    rates = []
    for logs, want in ((equal, "equivalent"), (apart, "separated")):
        m, v = logs.mean(axis=2), logs.var(axis=2, ddof=1)
        nn = np.full(4000, float(n))
        low, high, _ = welch.intervals(m[:, 1] - m[:, 0], v[:, 0], nn, v[:, 1], nn, ALPHA / family)
        rates.append(np.mean((low > -bound) & (high < bound)) if want == "equivalent" else np.mean(low > 0))
    assert power.settle_probability(n, sigma, delta, ALPHA / family) == pytest.approx(min(rates), abs=0.03)


def test_n_star_pinned_and_first() -> None:
    """Pinned with the default seed and 4,000 draws; each is the first n that reaches 80 %."""
    assert power.repeats_needed(0.08, 0.12) == 12
    assert power.repeats_needed(0.03, 0.05, 3) == 12
    assert power.settle_probability(11, 0.08, 0.12) < 0.8 <= power.settle_probability(12, 0.08, 0.12)
    assert power.repeats_needed(0.10, 0.05) is None  # more than 30
    assert power.repeats_needed(0.0, 0.05) == power.N_MIN  # no noise: settled at once


def n_star(sigma: float, delta: float, family: int = 1) -> int:
    found = power.repeats_needed(sigma, delta, family)
    return 31 if found is None else found


def test_n_star_rises_with_noise_and_pairs_and_falls_with_the_effect() -> None:
    by_sigma = [n_star(s, 0.10) for s in (0.03, 0.05, 0.07)]
    by_family = [n_star(0.05, 0.10, m) for m in (1, 10, 50)]
    by_delta = [n_star(0.05, d) for d in (0.05, 0.10, 0.20)]
    for values in (by_sigma, by_family):
        assert values == sorted(values) and values[0] < values[-1], values
    assert by_delta == sorted(by_delta, reverse=True) and by_delta[0] > by_delta[-1], by_delta


def test_still_open_counts_the_runs_that_would_settle_each_pair_not_separated() -> None:
    rng = np.random.default_rng(7)
    group = {
        "a": lognormal(rng, 8, 10.0, 0.01),
        "c": [10.2, 9.8, 10.7],  # 3 runs, 4 % noise
        "d": lognormal(rng, 5, 14.0, 0.01),
    }
    answer = groups.compare_group(group, "lower")
    assert answer.worse == ("d",) and set(answer.not_separated) == {"a", "c"}
    pairs = power.still_open(answer, group, draws=1000)
    assert [p.config for p in pairs] == [n for n in answer.not_separated if n != answer.leader]
    assert pairs[0].repeats_needed is not None and pairs[0].repeats_needed > 3


# ----------------------------------------------------------------------------------- racing


def step(
    samples: dict[str, list[float | None]],
    after_round: int,
    *,
    max_rounds: int = 8,
    retired: frozenset[str] = frozenset(),
    **look: Any,
) -> race.RaceStep:
    return race.race_step(samples, "lower", race.Look(after_round, max_rounds, **look), retired)


def test_race_nothing_before_the_minimum() -> None:
    samples: dict[str, list[float | None]] = {"ext2": [1.0, 1.01], "btrfs": [10.0, 10.1], "ext3": [1.7, 1.71]}
    s = step(samples, 2)
    assert {d.action for d in s.decisions} == {"keep"} and s.retired == frozenset() and not s.finished
    assert all("nothing before the minimum" in d.reason for d in s.decisions)


def test_race_retires_a_cell_far_behind_after_the_minimum() -> None:
    rng = np.random.default_rng(8)
    samples: dict[str, list[float | None]] = {
        "ext2": list(lognormal(rng, 3, 1.0, 0.03)),
        "ext3": list(lognormal(rng, 3, 1.04, 0.03)),
        "btrfs": list(lognormal(rng, 3, 6.0, 0.03)),
    }
    s = step(samples, 3)
    assert s.best == "ext2"
    assert s.action("btrfs") == "retire" and s.retired == frozenset({"btrfs"})
    assert s.decisions[2].reason.endswith(": significantly worse")
    assert s.action("ext3") == "keep" and not s.finished  # 4 % apart at 3 runs: neither retired nor equivalent
    assert s.look_alpha == pytest.approx(race.sequential_level(ALPHA / 9, (3, 4, 5, 6, 7, 8)))


def test_race_ties_equivalent_cells_and_finishes() -> None:
    rng = np.random.default_rng(9)
    samples: dict[str, list[float | None]] = {
        "xfs": lognormal(rng, 6, 8.0, 0.005),
        "ext4": lognormal(rng, 6, 8.0, 0.005),
        "jfs": lognormal(rng, 6, 9.9, 0.005),
    }
    s = step(samples, 6)
    other = "ext4" if s.best == "xfs" else "xfs"
    assert (
        s.action(other) == "equivalent"
        and "equivalent to the best within ±5%" in s.decisions[list(samples).index(other)].reason
    )
    assert s.action("jfs") == "retire" and s.finished


def test_race_within_delta_but_significant_is_retired_as_worse_and_kept_with_a_margin() -> None:
    """3 % behind with very little noise: significantly worse, though within δ = 5 %: the race retires it
    as worse (the answer's word: worse and within ±δ is worse). With a margin of δ (bisect's regressions)
    it is not worse by more than δ, and stays."""
    samples: dict[str, list[float | None]] = {
        "a": [1.0, 1.001, 0.999, 1.0005, 0.9995],
        "b": [1.03, 1.031, 1.029, 1.0305, 1.0295],
    }
    s = step(samples, 5)
    assert s.action("b") == "retire" and s.decisions[1].reason.endswith(": significantly worse")
    assert step(samples, 5, margin=0.05).action("b") != "retire"
    assert stats.compare_samples(samples["a"], samples["b"], "lower").verdict == "slower"  # type: ignore[arg-type]


def test_a_retired_cell_never_comes_back() -> None:
    samples: dict[str, list[float | None]] = {"a": [1.0, 1.01, 0.99], "b": [0.9, 0.91, 0.89], "c": [1.0, 1.0, 1.01]}
    s = step(samples, 3, retired={"b"})
    assert s.action("b") == "retire" and "b" in s.retired and s.best == "a"  # b's median is best: ignored
    # before the minimum too
    assert step(samples, 2, retired={"b"}).retired == frozenset({"b"})
    with pytest.raises(ValueError, match="not in the group"):
        step(samples, 3, retired={"zz"})


def test_a_cell_whose_runs_fail_is_retired_and_never_best() -> None:
    samples: dict[str, list[float | None]] = {"a": [1.0, 1.01, 0.99], "fast": [0.5, None, 0.5], "c": [1.2, 1.2, 1.21]}
    s = step(samples, 3)
    assert s.best == "a" and s.action("fast") == "retire" and "never wins" in s.decisions[1].reason


def test_race_bad_input() -> None:
    samples: dict[str, list[float | None]] = {"a": [1.0, 1.0, 1.0]}
    for kw in ({"min_repeats": 2}, {"max_rounds": 2}, {"delta": 0.0}, {"delta": 1.0}):
        with pytest.raises(ValueError):
            step(samples, 2, **kw)
    with pytest.raises(ValueError, match="after_round"):
        step(samples, 9)


def simulate_race(
    rng: np.random.Generator,
    centres: dict[str, float],
    sigma: float,
    delta: float,
    *,
    min_repeats: int = 3,
    rounds: int = 8,
    margin: float = 0.0,
) -> list[race.RaceStep]:
    """One race, its steps: every cell neither retired nor equivalent runs once per round."""
    samples: dict[str, list[float | None]] = {c: [] for c in centres}
    actions = dict.fromkeys(centres, "keep")
    retired: frozenset[str] = frozenset()
    steps = []
    for r in range(1, rounds + 1):
        for cell, centre in centres.items():
            if actions[cell] == "keep":
                samples[cell].append(float(centre * math.exp(rng.normal(0.0, sigma))))
        s = race.race_step(samples, "lower", race.Look(r, rounds, min_repeats, delta, margin=margin), retired)
        steps.append(s)
        retired = s.retired
        actions = {d.cell: d.action for d in s.decisions}
        if s.finished:
            break
    return steps


def family_wise_rate(centres: dict[str, float], delta: float, races: int, seed: int) -> float:
    """The share of races that ever make a false decision: retiring a cell truly no worse than the best it
    was judged against, or tying two cells truly not within ±δ of each other."""
    bound = math.log1p(delta) * (1 - 1e-12)
    rng = np.random.default_rng(seed)
    errors = 0
    for _ in range(races):
        steps = simulate_race(rng, centres, 0.05, delta)
        wrong = False
        for before, s in zip([frozenset[str](), *(t.retired for t in steps)], steps, strict=False):
            for d in s.decisions:
                if s.best is None or d.cell in before:
                    continue
                gap = math.log(centres[d.cell] / centres[s.best])
                wrong |= d.action == "retire" and gap <= 0
                wrong |= d.action == "equivalent" and abs(gap) >= bound
        errors += wrong
    return errors / races


RACES = 600
BOUND = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / RACES)


def test_race_family_wise_false_retirements_under_the_null() -> None:
    """Four identical cells, 3 to 8 rounds. With a negligible margin (δ = 0.1 %) every retirement is
    false and the race tests as often as it can; with the default δ = 5 % too. And the simulation can
    see a rule without the correction: spending α/2 (one-sided α) at every look and pair, it retires
    far more often than α."""
    identical = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    assert family_wise_rate(identical, 0.001, RACES, seed=11) <= BOUND
    assert family_wise_rate(identical, 0.05, RACES, seed=12) <= BOUND


def test_the_null_simulation_sees_an_uncorrected_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(race, "look_alpha", lambda alpha, cells, looks, first: alpha / 2)
    assert family_wise_rate({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}, 0.001, 200, seed=13) > 0.15


def test_race_family_wise_error_on_the_boundary() -> None:
    """The least favourable case for ties: three cells exactly δ behind the best. Tying one is an error
    (not within ±δ); retiring one is right (it is worse)."""
    centres = {"best": 1.0, "b": 1.05, "c": 1.05, "d": 1.05}
    assert family_wise_rate(centres, 0.05, RACES, seed=14) <= BOUND


@pytest.mark.parametrize(("looks", "constant"), [(2, 2.178), (3, 2.289), (4, 2.361), (5, 2.413)])
def test_sequential_level_is_pococks(looks: int, constant: float) -> None:
    """Pocock's published constants for equally spaced looks at two-sided α = 0.05 (one-sided
    0.025): the level is the normal tail beyond the constant, to the table's three decimals."""
    level = race.sequential_level(0.025, tuple(range(1, looks + 1)))
    assert sps.norm.isf(level) == pytest.approx(constant, abs=0.0015)


def test_sequential_level_lies_between_bonferroni_and_one_look() -> None:
    sizes = tuple(range(3, 16))
    level = race.sequential_level(0.01, sizes)
    assert 0.01 / len(sizes) < level < 0.01
    assert race.sequential_level(0.01, (5,)) == 0.01
    # the crossing probability at that level's boundary is the budget, and grows with more looks
    c = sps.norm.isf(level)
    assert race.crossing_probability(c, sizes) == pytest.approx(0.01, rel=1e-6)
    assert race.crossing_probability(c, sizes[:5]) < 0.01


@pytest.mark.parametrize("sizes", [(), (3, 3), (4, 3), (0, 1)])
def test_crossing_probability_refuses_sizes_that_are_not_looks(sizes: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="positive and increasing"):
        race.crossing_probability(2.0, sizes)


@pytest.mark.system  # 2 x 600 races of up to 15 rounds: ~25 s, out of the fast tier
def test_race_error_per_sequence_with_many_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cells exactly δ apart, 3..15 rounds (13 looks, where Pocock's level is 2.5 times
    Bonferroni's over the looks), retiring only beyond a margin of δ (bisect's test): retiring either is
    wrong, and the race's budget for the sequence of the worse cell's retirement test is α/3 (K = 2:
    three sequences). The nominal-p approach keeps the rate there; spending that budget at every look
    instead (no correction over looks) does not."""
    budget = ALPHA / 3
    bound = budget + 3 * math.sqrt(budget * (1 - budget) / RACES)

    def wrong_retirements(seed: int) -> float:
        rng = np.random.default_rng(seed)
        centres = {"best": 1.0, "b": 1.05}
        races = (simulate_race(rng, centres, 0.05, 0.05, rounds=15, margin=0.05) for _ in range(RACES))
        return sum(bool(steps[-1].retired) for steps in races) / RACES

    assert wrong_retirements(21) <= bound
    monkeypatch.setattr(race, "look_alpha", lambda alpha, cells, looks, first: alpha / 3)
    assert wrong_retirements(21) > bound


def test_race_error_with_many_looks_on_equal_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race's own test (margin 0): two identical cells, 3..15 rounds. Retiring either is wrong; two of
    the three sequences (retire one, retire the other) can err, α/3 each. Without the correction over
    looks the rate is far above that."""
    budget = 2 * ALPHA / 3
    bound = budget + 3 * math.sqrt(budget * (1 - budget) / RACES)

    def wrong_retirements(seed: int) -> float:
        rng = np.random.default_rng(seed)
        races = (simulate_race(rng, {"a": 1.0, "b": 1.0}, 0.05, 0.05, rounds=15) for _ in range(RACES))
        return sum(bool(steps[-1].retired) for steps in races) / RACES

    assert wrong_retirements(22) <= bound
    monkeypatch.setattr(race, "look_alpha", lambda alpha, cells, looks, first: alpha / 3)
    assert wrong_retirements(22) > bound
