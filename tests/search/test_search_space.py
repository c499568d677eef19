"""The search's model (results/verdict/space.py): Scheffé's multiplier, the fit on log values, what it
cannot estimate, the settings' effects and their words. Runs drawn by the SIMULATED lab
(search_sim_lab.py): known true effects, so the intervals can be checked against them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fsmatrix.results.verdict.space import Observation, Space, SpaceModel, fit, scheffe, setting_effects
from search_sim_lab import SimulatedLab, additive, space_of

TRUE = {(0, 1): -0.3, (0, 2): 0.1, (1, 1): 0.2, (2, 1): 0.0}  # s0 of three levels, s1 and s2 of two


def _runs(
    space: Space, truth_effects: dict[tuple[int, int], float], repeats: int, sigma: float = 0.03
) -> list[Observation]:
    lab = SimulatedLab(space, additive(10.0, truth_effects), sigma=sigma, seed=3)
    return lab.measure("screen", space.configurations, repeats)


def _fitted(space: Space, observations: list[Observation], interacting: tuple[int, ...] = ()) -> SpaceModel:
    model = fit(space, observations, interacting)
    assert isinstance(model, SpaceModel), model
    return model


def test_scheffe_multiplier_against_hand_values() -> None:
    # p = 1: Scheffé's interval is the t interval; p = 2, df = 10: F(0.95; 2, 10) = 4.1028 (tables).
    assert scheffe(1, 10, 0.05) == pytest.approx(2.228139, abs=1e-6)
    assert scheffe(2, 10, 0.05) == pytest.approx(math.sqrt(2 * 4.102821), abs=1e-5)
    assert scheffe(5, 30, 0.05) > scheffe(2, 30, 0.05)  # more columns, wider
    with pytest.raises(ValueError, match="p >= 1"):
        scheffe(0, 10, 0.05)


def test_fit_recovers_known_effects_within_the_simultaneous_intervals() -> None:
    space = space_of([3, 2, 2])
    model = _fitted(space, _runs(space, TRUE, 3))
    assert model.terms == ("intercept", "s0=v0", "s0=v1", "s1=v0", "s2=v0")
    assert model.p == 4 and model.df_resid == 36 - 5 and model.cov_type == "HC3"
    truth = additive(10.0, TRUE)
    for c in model.contrasts(space, space.baseline, 0.05):
        true_ratio = math.exp(truth(c.config) - truth(space.baseline))
        assert c.ci_low <= true_ratio <= c.ci_high, c
    assert np.allclose(model.predict(space, [space.baseline]), [math.log(10.0)], atol=0.03)


def test_contrasts_shown_worse_follow_the_direction() -> None:
    lower = space_of([2, 2])
    runs = _runs(lower, {(0, 1): 0.4}, 3)  # s0=v1 is 49 % higher: worse when lower is better
    worse = {c.config: c.shown_worse for c in _fitted(lower, runs).contrasts(lower, lower.baseline, 0.05)}
    assert worse[(1, 0)] and worse[(1, 1)] and not worse[(0, 1)] and not worse[(0, 0)]
    higher = space_of([2, 2], direction="higher")
    flipped = {c.config: c.shown_worse for c in _fitted(higher, runs).contrasts(higher, (1, 0), 0.05)}
    assert flipped[(0, 0)] and flipped[(0, 1)] and not flipped[(1, 1)]


def test_a_column_the_runs_cannot_estimate_is_left_out_and_predicted_at_zero() -> None:
    space = space_of([2, 2])
    ran = [o for o in _runs(space, {(0, 1): 0.2, (1, 1): 0.1}, 3) if o.config != (1, 1)]
    model = _fitted(space, ran, interacting=(0, 1))
    assert model.terms == ("intercept", "s0=v0", "s1=v0")  # s0 × s1 needs the fourth corner
    pred = dict(zip(space.configurations, model.predict(space, space.configurations), strict=True))
    assert pred[(1, 1)] == pytest.approx(pred[(1, 0)] + pred[(0, 1)] - pred[(0, 0)])  # additive: the ASSUMPTION
    full = _fitted(space, _runs(space, {(0, 1): 0.2, (1, 1): 0.1}, 3), interacting=(0, 1))
    assert full.terms[-1] == "s0=v0 × s1=v0"  # planted: with the corner, the interaction is estimated


def test_fit_says_why_not() -> None:
    space = space_of([2, 2])
    once = _runs(space, {}, 1)
    assert fit(space, once, ()) == "not enough data: no configuration ran twice (the model's error needs replicates)"
    twice = _runs(space, {}, 2)
    assert isinstance(fit(space, twice, ()), SpaceModel)
    bad = [*twice[:-1], Observation((1, 1), 0.0, "screen", 1)]
    assert str(fit(space, bad, ())).startswith("not enough data: a value of 0 or less")
    few = [o for o in twice if o.config in ((0, 0), (1, 1))][:3]  # 3 runs of 2 configurations: 2 columns, df 1
    assert _fitted(space, few, (0, 1)).df_resid == 1
    assert fit(space, [], ()) == "not enough data: no run"


def test_a_run_alone_deciding_a_term_takes_the_classical_covariance() -> None:
    space = space_of([2, 2])
    runs = [o for o in _runs(space, {(0, 1): 0.2}, 3) if o.config in ((0, 0), (1, 0))]
    runs.append(Observation((0, 1), 10.0, "screen", 0))  # s1's only run at v1: leverage 1, HC3 0/0
    model = _fitted(space, runs)
    assert model.cov_type == "nonrobust" and np.all(np.isfinite(model.cov))
    runs.append(Observation((0, 1), 10.2, "screen", 1))  # planted: a second run, HC3 again
    assert _fitted(space, runs).cov_type == "HC3"


def test_setting_effects_words_and_bonferroni_intervals() -> None:
    space = space_of([3, 2, 2])
    rows = setting_effects(space, _runs(space, TRUE, 4, sigma=0.02), 0.05, 0.05)
    assert not isinstance(rows, str)
    by = {(e.setting, e.level): e for e in rows}
    assert list(by) == [("s0", "v1"), ("s0", "v2"), ("s1", "v1"), ("s2", "v1")]
    assert by[("s0", "v1")].words == "matters" and by[("s1", "v1")].words == "matters"
    assert by[("s2", "v1")].words == "equivalent"
    assert by[("s0", "v2")].words == "matters"  # +10.5 %, against δ 5 %
    for (name, level), e in by.items():
        true = math.exp(TRUE[(int(name[1]), int(level[1]))])
        assert e.ci_low <= true <= e.ci_high and e.default == "v0"
    # the Bonferroni family: t at 1 − α/(2·4) on the residual df
    model = _fitted(space, _runs(space, TRUE, 4, sigma=0.02))
    t = stats.t.ppf(1 - 0.05 / 8, model.df_resid)
    e = by[("s1", "v1")]
    assert math.log(e.ci_high / e.ratio) == pytest.approx(t * math.sqrt(4 * model.cov[3, 3]), rel=1e-9)


def test_a_level_that_never_ran_is_not_separated() -> None:
    space = space_of([3, 2])
    runs = [o for o in _runs(space, {(0, 1): -0.3}, 3) if o.config[0] != 2]
    rows = setting_effects(space, runs, 0.05, 0.05)
    assert not isinstance(rows, str)
    never = next(e for e in rows if e.level == "v2")
    assert never.words == "not separated" and math.isnan(never.ratio)
    assert next(e for e in rows if (e.setting, e.level) == ("s0", "v1")).words == "matters"
    assert (
        setting_effects(space, runs[:2], 0.05, 0.05)
        == "not enough data: no configuration ran twice (the model's error needs replicates)"
    )
