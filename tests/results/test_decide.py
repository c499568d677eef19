"""The decisions over a comparison group (fsmatrix.results.verdict: groups, equivalence, power, race):
best / tied / worse, TOST, the repeat advice n* and its power, and the racing rule with its error
control, on seeded synthetic samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from fsmatrix.results.verdict import equivalence, groups, power, race, stats

ALPHA = stats.ALPHA


def lognormal(rng: np.random.Generator, n: int, centre: float, sigma: float) -> list[float]:
    return [float(v) for v in centre * np.exp(rng.normal(0.0, sigma, n))]


# ----------------------------------------------------------------------------------- best / tied / worse


def test_a_clear_winner_is_named_and_the_others_are_worse_with_intervals_excluding_one() -> None:
    rng = np.random.default_rng(1)
    group = {
        "ext4": lognormal(rng, 5, 12.0, 0.02),
        "xfs": lognormal(rng, 5, 10.0, 0.02),
        "btrfs": lognormal(rng, 5, 15.0, 0.02),
    }
    answer = groups.compare_group(group, "lower", baseline="ext4")
    assert answer.best == "xfs"
    assert answer.worse == ("ext4", "btrfs") and answer.tied == ()
    assert answer.comparisons == 2 and answer.test_alpha == pytest.approx(ALPHA / 2)
    for name in answer.worse:
        c = answer.standing(name).against_best
        assert c is not None and c.verdict == "slower"
        assert c.ci_low > 1.0 and c.ratio > 1.15
    raw = [answer.standing(n).against_best.p_value for n in ("ext4", "btrfs")]  # type: ignore[union-attr]
    assert [answer.standing(n).p_holm for n in ("ext4", "btrfs")] == stats.holm(raw)
    # the ratio to the baseline, with its interval: xfs is about 0.83x ext4's time, the interval excludes 1
    xfs = answer.standing("xfs").to_baseline
    assert xfs is not None and xfs.baseline == "ext4"
    assert xfs.ratio == pytest.approx(stats.median(group["xfs"]) / stats.median(group["ext4"]))
    assert xfs.ci_high < 1.0 < answer.standing("btrfs").to_baseline.ci_low  # type: ignore[union-attr]
    assert answer.standing("ext4").to_baseline == groups.BaselineRatio("ext4", 1.0, 1.0, 1.0, 0.95)


def test_a_rate_metric_picks_the_highest_median() -> None:
    rng = np.random.default_rng(2)
    group = {"a": lognormal(rng, 5, 200.0, 0.02), "b": lognormal(rng, 5, 260.0, 0.02)}
    answer = groups.compare_group(group, "higher")
    assert answer.best == "b" and answer.worse == ("a",)


def test_two_configurations_from_the_same_distribution_are_tied_not_ranked() -> None:
    rng = np.random.default_rng(3)
    group = {
        "ext4": lognormal(rng, 5, 8.2, 0.05),
        "xfs": lognormal(rng, 5, 8.2, 0.05),
        "jfs": lognormal(rng, 5, 9.9, 0.02),
    }
    answer = groups.compare_group(group, "lower")
    assert answer.best in ("ext4", "xfs")
    other = "xfs" if answer.best == "ext4" else "ext4"
    assert answer.standing(other).status == "tied"
    assert answer.tied == (other,) and answer.worse == ("jfs",)
    assert "not distinguishable" in answer.standing(other).reason


def test_not_enough_data_is_never_best() -> None:
    group: dict[str, list[float | None]] = {
        "fast but two runs": [1.0, 1.01],
        "fast but a failed run": [1.0, 1.01, None, 0.99],
        "slow": [2.0, 2.02, 1.98],
    }
    answer = groups.compare_group(group, "lower")
    assert answer.best == "slow"
    assert answer.with_status("not enough data") == ("fast but two runs", "fast but a failed run")
    assert "1 of 4 runs failed" in answer.standing("fast but a failed run").reason
    assert groups.compare_group({"x": [1.0, math.nan, 1.0, 1.0]}, "lower").best is None


def test_the_test_choice_follows_the_adjusted_alpha() -> None:
    """Nine clearly different configurations, 5 runs each: Mann-Whitney's smallest p (0.008) times 8
    comparisons is 0.063, so with the test chosen from the unadjusted α nothing could ever be called;
    chosen from α/8, Welch on logs runs and every one is worse."""
    rng = np.random.default_rng(4)
    group = {f"c{i}": lognormal(rng, 5, 10.0 * 1.3**i, 0.02) for i in range(9)}
    answer = groups.compare_group(group, "lower")
    assert answer.best == "c0" and len(answer.worse) == 8
    assert {answer.standing(n).against_best.test for n in answer.worse} == {"welch-log"}  # type: ignore[union-attr]
    unadjusted = [stats.compare_samples(group["c0"], group[n], "lower") for n in answer.worse]
    assert {c.test for c in unadjusted} == {"mann-whitney"}
    assert min(stats.holm([c.p_value for c in unadjusted])) > ALPHA


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="baseline"):
        groups.compare_group({"a": [1.0, 1.0, 1.0]}, "lower", baseline="b")
    with pytest.raises(ValueError, match="direction"):
        groups.compare_group({"a": [1.0, 1.0, 1.0]}, "faster")


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


@pytest.mark.parametrize(
    ("n", "comparisons", "direction", "sigma", "delta"),
    [
        (3, 1, "lower", 0.08, 0.12),  # Welch on logs
        (8, 1, "lower", 0.08, 0.12),  # Mann-Whitney, exact p, even n: medians of two values
        (9, 3, "higher", 0.05, 0.05),  # Mann-Whitney, normal approximation, a rate
        (5, 4, "lower", 0.05, 0.08),  # Welch, chosen because of the correction
    ],
)
def test_the_simulation_gives_compare_samples_verdict_on_every_draw(
    n: int, comparisons: int, direction: str, sigma: float, delta: float
) -> None:
    """No shortcut: the vectorised verdicts equal compare_samples's, bootstrap interval included."""
    rng = np.random.default_rng(10 + n)
    shift = math.log1p(delta) * (1 if direction == "lower" else -1)
    base = np.sort(np.exp(rng.normal(0.0, sigma, (250, n))), axis=1)
    head = np.sort(np.exp(rng.normal(shift, sigma, (250, n))), axis=1)
    fast = power.slower_verdicts(base, head, direction, comparisons=comparisons)
    test = stats.choose_test(n, n, ALPHA / comparisons)
    slow = []
    for b, h in zip(base, head, strict=True):
        c = stats.compare_samples(list(b), list(h), direction, test=test)
        slow.append(stats.decide(c, min(1.0, comparisons * c.p_value)).verdict == "slower")
    assert fast.tolist() == slow
    assert 0.1 < fast.mean() < 0.9  # both verdicts occur: the comparison is not vacuous


def test_power_at_the_issues_scale() -> None:
    """Issue 24: at σ = 8 % and δ = 12 % the power is about 0.17 at n = 3 and 0.68 at n = 8."""
    assert power.power(3, 0.08, 0.12) == pytest.approx(0.17, abs=0.05)
    assert power.power(8, 0.08, 0.12) == pytest.approx(0.68, abs=0.05)


def welch_log_power(n: int, sigma: float, delta: float, alpha: float, quantiles: int = 4000) -> float:
    """The exact power of the two-sided Welch t-test at level ``alpha`` to see a shift ln(1+δ) of normal
    logs, n per side, equal σ, in the direction of the shift (the "slower" side only). With equal n,
    Welch's statistic is Student's t exactly — noncentral t with 2n-2 degrees of freedom and
    noncentrality ln(1+δ)/σ·sqrt(n/2) — and only the degrees of freedom differ: Welch's are
    (n-1)(1+F)²/(1+F²), F = s1²/s2² ~ F(n-1, n-1), which under normality is independent of the
    statistic (the ratio of two independent chi-squares is independent of their sum). So the power is
    the noncentral-t tail averaged over F. (Student's power alone, with 2n-2 degrees of freedom,
    overstates Welch's at these n: 0.27 against 0.20 at n = 3, σ = 8 %, δ = 12 %.)"""
    df_student = 2 * n - 2
    ncp = math.log1p(delta) / sigma * math.sqrt(n / 2)
    f = sps.f.ppf((np.arange(quantiles) + 0.5) / quantiles, n - 1, n - 1)
    df_welch = (n - 1) * (1 + f) ** 2 / (1 + f**2)
    return float(np.mean(sps.nct.sf(sps.t.ppf(1 - alpha / 2, df_welch), df_student, ncp)))


@pytest.mark.parametrize(
    ("n", "sigma", "delta", "comparisons"),
    [(3, 0.08, 0.12, 1), (4, 0.05, 0.10, 1), (5, 0.05, 0.10, 10), (6, 0.05, 0.10, 20)],
)
def test_where_welch_is_chosen_the_simulated_power_is_the_noncentral_t_power(
    n: int, sigma: float, delta: float, comparisons: int
) -> None:
    assert stats.choose_test(n, n, ALPHA / comparisons) == "welch-log"
    simulated = power.power(n, sigma, delta, comparisons)
    analytic = welch_log_power(n, sigma, delta, ALPHA / comparisons)
    assert 0.1 < analytic < 0.9
    assert simulated == pytest.approx(analytic, abs=0.03)


def test_n_star_pinned() -> None:
    """Pinned with the default seed and 4,000 draws; and each is the first n whose power reaches 80 %."""
    assert power.repeats_needed(0.08, 0.12) == 12
    assert power.repeats_needed(0.03, 0.05, 3) == 11
    assert power.power(11, 0.08, 0.12) < 0.8 <= power.power(12, 0.08, 0.12)
    assert power.power(10, 0.03, 0.05, 3) < 0.8 <= power.power(11, 0.03, 0.05, 3)
    assert power.repeats_needed(0.10, 0.05) is None  # more than 30


def n_star(sigma: float, delta: float, comparisons: int = 1) -> int:
    found = power.repeats_needed(sigma, delta, comparisons)
    return 31 if found is None else found


def test_n_star_rises_with_noise_and_comparisons_and_falls_with_the_effect() -> None:
    by_sigma = [n_star(s, 0.10) for s in (0.03, 0.05, 0.07)]
    by_comparisons = [n_star(0.05, 0.10, m) for m in (1, 10, 50)]
    by_delta = [n_star(0.05, d) for d in (0.05, 0.10, 0.20)]
    for values in (by_sigma, by_comparisons):
        assert values == sorted(values) and values[0] < values[-1], values
    assert by_delta == sorted(by_delta, reverse=True) and by_delta[0] > by_delta[-1], by_delta


@pytest.mark.parametrize(("n", "comparisons"), [(3, 1), (5, 1), (8, 5), (12, 3)])
def test_without_an_effect_slower_is_said_at_most_alpha_over_m(n: int, comparisons: int) -> None:
    rate = power.power(n, 0.05, 0.0, comparisons)
    level = ALPHA / comparisons
    assert rate <= level + 3 * math.sqrt(level * (1 - level) / power.DRAWS), rate


def test_still_open_says_equivalent_or_how_many_runs() -> None:
    rng = np.random.default_rng(7)
    group = {
        "a": lognormal(rng, 8, 10.0, 0.01),
        "b": lognormal(rng, 8, 10.0, 0.01),
        "c": [10.2, 9.8, 10.7],  # 3 runs, 4 % noise
        "d": lognormal(rng, 5, 14.0, 0.01),
    }
    answer = groups.compare_group(group, "lower")
    assert answer.best in ("a", "b", "c") and answer.worse == ("d",)
    pairs = {p.config: p for p in power.still_open(answer, group, draws=1000)}
    assert set(pairs) == set(answer.tied)
    settled = [p for p in pairs.values() if p.equivalence.equivalent]
    assert [p.config for p in settled] in (["a"], ["b"])  # a and b: 8 runs each, 1 % noise
    assert settled[0].advice == "equivalent within ±5%" and settled[0].repeats_needed is None
    open_pair = pairs["c"]  # 3 runs at 4 % noise: not equivalent, a count of runs that would separate
    assert not open_pair.equivalence.equivalent
    assert open_pair.repeats_needed is not None and open_pair.repeats_needed > 3
    assert f"{open_pair.repeats_needed} runs per configuration" in open_pair.advice


# ----------------------------------------------------------------------------------- racing


def step(samples: dict[str, list[float | None]], after_round: int, **kw: object) -> race.RaceStep:
    return race.race_step(samples, "lower", after_round=after_round, max_rounds=kw.pop("max_rounds", 8), **kw)  # type: ignore[arg-type]


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
    assert "significantly worse by more than 5%" in s.decisions[2].reason
    assert s.action("ext3") == "keep" and not s.finished  # 4 % apart at 3 runs: neither retired nor tied
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
        s.action(other) == "tied"
        and "equivalent to the best within ±5%" in s.decisions[list(samples).index(other)].reason
    )
    assert s.action("jfs") == "retire" and s.finished


def test_race_within_delta_but_significant_is_not_retired() -> None:
    """3 % behind with very little noise: significantly worse, but not by more than δ = 5 %."""
    samples: dict[str, list[float | None]] = {
        "a": [1.0, 1.001, 0.999, 1.0005, 0.9995],
        "b": [1.03, 1.031, 1.029, 1.0305, 1.0295],
    }
    s = step(samples, 5)
    assert s.action("b") != "retire"
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
) -> list[race.RaceStep]:
    """One race, its steps: every cell neither retired nor tied runs once per round."""
    samples: dict[str, list[float | None]] = {c: [] for c in centres}
    actions = dict.fromkeys(centres, "keep")
    retired: frozenset[str] = frozenset()
    steps = []
    for r in range(1, rounds + 1):
        for cell, centre in centres.items():
            if actions[cell] == "keep":
                samples[cell].append(float(centre * math.exp(rng.normal(0.0, sigma))))
        s = race.race_step(
            samples, "lower", after_round=r, max_rounds=rounds, retired=retired, delta=delta, min_repeats=min_repeats
        )
        steps.append(s)
        retired = s.retired
        actions = {d.cell: d.action for d in s.decisions}
        if s.finished:
            break
    return steps


def family_wise_rate(centres: dict[str, float], delta: float, races: int, seed: int) -> float:
    """The share of races that ever make a false decision, where no cell is truly worse than another by
    more than δ: any retirement, or a tie of two cells truly not within ±δ of each other."""
    assert max(centres.values()) <= min(centres.values()) * (1 + delta) * (1 + 1e-12)
    bound = math.log1p(delta) * (1 - 1e-12)
    rng = np.random.default_rng(seed)
    errors = 0
    for _ in range(races):
        steps = simulate_race(rng, centres, 0.05, delta)
        false_tie = any(
            d.action == "tied" and s.best is not None and abs(math.log(centres[d.cell] / centres[s.best])) >= bound
            for s in steps
            for d in s.decisions
        )
        errors += bool(steps[-1].retired) or false_tie
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
    """The least favourable case: three cells exactly δ behind the best. Retiring one is an error (not
    worse by *more* than δ), and so is tying one (not within ±δ)."""
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
    Bonferroni's over the looks): retiring either is wrong, and the race's budget for the sequence of
    the worse cell's retirement test is α/3 (K = 2: three sequences). The nominal-p approach keeps
    the rate there; spending that budget at every look instead (no correction over looks) does not."""
    budget = ALPHA / 3
    bound = budget + 3 * math.sqrt(budget * (1 - budget) / RACES)

    def wrong_retirements(seed: int) -> float:
        rng = np.random.default_rng(seed)
        races = (simulate_race(rng, {"best": 1.0, "b": 1.05}, 0.05, 0.05, rounds=15) for _ in range(RACES))
        return sum(bool(steps[-1].retired) for steps in races) / RACES

    assert wrong_retirements(21) <= bound
    monkeypatch.setattr(race, "look_alpha", lambda alpha, cells, looks, first: alpha / 3)
    assert wrong_retirements(21) > bound
