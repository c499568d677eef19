"""The simulation benchmark of ``fsmatrix search`` (bench/search.py, bench/search_sim.py).

The real engine (``search.stages.run_search``) is written apart from this harness; these tests run the
harness on stand-in engines (``standin``: a few configurations, a race, a confirmation; ``worst``:
the worst configuration, planted), which is why ``simulate`` and ``main`` take the engine."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fsmatrix.bench import search as bench
from fsmatrix.bench import search_sim as sim
from fsmatrix.matrix import SearchSettings
from fsmatrix.results.verdict.search import Ratio, SearchAnswer
from fsmatrix.results.verdict.space import ASSUMPTION, Config, Space
from fsmatrix.search.stages import SearchLab


def answer(
    space: Space, best: Config | None, observed: Ratio | None, runs: int, reason: str | None = None
) -> SearchAnswer:
    return SearchAnswer(
        space,
        0.05,
        0.05,
        best,
        observed,
        None,
        None,
        (),
        (),
        (),
        0,
        None,
        None,
        ASSUMPTION,
        runs,
        space.full_cross_runs(3),
        (),
        reason,
    )


def standin(space: Space, settings: SearchSettings, lab: SearchLab, alpha: float) -> SearchAnswer:
    """A trivial search: 8 configurations and the baseline twice, the best three raced, the winner confirmed."""
    rng = np.random.default_rng(settings.seed)
    picked = [space.configurations[int(j)] for j in rng.choice(len(space.configurations), 8, replace=False)]
    configs = list(dict.fromkeys([space.baseline, *picked]))
    seen = lab.measure("screen", configs, settings.repeats)
    mean = {c: np.mean([math.log(o.value) for o in seen if o.config == c]) for c in configs}
    raced = lab.race(sorted(configs, key=lambda c: mean[c])[:3], settings.max_repeats, settings.delta)
    best = raced.best
    assert best is not None
    confirm = lab.measure("confirm", [best, space.baseline], settings.confirm)
    interval = bench.welch_ratio(
        [o.value for o in confirm if o.config == best], [o.value for o in confirm if o.config == space.baseline], alpha
    )
    assert interval is not None
    return answer(space, best, Ratio(1.0, *interval), lab.runs_used())


def worst(space: Space, settings: SearchSettings, lab: SearchLab, alpha: float) -> SearchAnswer:
    """Planted: the truly worst configuration (read from the simulated lab's truth), after 20 runs."""
    assert isinstance(lab, sim.SimulatedLab)
    lab.measure("screen", [space.baseline], 20)
    return answer(space, space.configurations[int(np.argmax(lab.truth.logs))], Ratio(1.0, 0.5, 2.0), lab.runs_used())


def refuses(space: Space, settings: SearchSettings, lab: SearchLab, alpha: float) -> SearchAnswer:
    lab.measure("screen", [space.baseline], 4)
    return answer(space, None, None, lab.runs_used(), "planted: no answer")


@pytest.mark.parametrize("band", sim.BANDS)
def test_spaces_have_the_asked_size_and_heredity(band: tuple[int, int]) -> None:
    for i in range(5):
        truth = sim.true_space([7, i], "holds", 0.08, band)
        levels = [len(s.levels) for s in truth.space.settings]
        assert 5 <= len(levels) <= 10 and all(2 <= n <= 4 for n in levels)
        assert band[0] <= len(truth.space.configurations) == math.prod(levels) <= min(band[1], sim.MAX_CONFIGS)
        assert truth.space.baseline == (0,) * len(levels) and truth.space.configurations[
            truth.index((1,) * len(levels))
        ] == (1,) * len(levels)


def test_interactions_only_among_settings_with_main_effects() -> None:
    """Heredity where the model holds: the log metric less its main effects varies with the active settings only."""
    levels = [2, 3, 2, 4, 2, 3]
    k = len(levels)
    for i in range(10):
        logs, active = sim.true_logs(np.random.default_rng([3, i]), levels, None)
        cube = logs.reshape(levels)
        additive = np.full(levels, cube.flat[0])
        for j, n in enumerate(levels):  # a setting's main effect: its levels with every other at its default
            line = (
                np.array([cube[tuple(level if a == j else 0 for a in range(k))] for level in range(n)]) - cube.flat[0]
            )
            additive = additive + line.reshape([n if a == j else 1 for a in range(k)])
        rest = cube - additive
        assert 2 <= len(active) <= 4
        for j in set(range(k)) - set(active):
            assert np.allclose(np.diff(rest, axis=j), 0.0)  # an inactive setting interacts with nothing
        assert np.abs(rest).max() > 0.01  # a two-setting interaction is there
        wrong, _ = sim.true_logs(np.random.default_rng([3, i]), levels, "three-way")
        assert not np.allclose(wrong, logs)


def test_noise_has_the_asked_cv() -> None:
    truth = sim.true_space([1], "holds", 0.15, sim.BANDS[0])
    lab = sim.SimulatedLab(truth, [2])
    values = np.array([lab.draw(truth.space.baseline) for _ in range(4000)])
    assert lab.runs_used() == 4000
    assert values.std() / values.mean() == pytest.approx(0.15, rel=0.08)
    assert np.median(values) == pytest.approx(math.exp(truth.logs[0]), rel=0.02)
    mixed = sim.true_space([1], "holds", "mixed", sim.BANDS[1])
    assert set(np.round(mixed.cvs, 2)) == {0.03, 0.08, 0.15}
    noisy = sim.true_space([1], "wrong", 0.08, sim.BANDS[1], "unequal noise")
    assert set(np.round(noisy.cvs, 2)) == {0.08, 0.24}


def test_lab_measures_in_rounds_and_races_to_the_best() -> None:
    truth = sim.true_space([4], "holds", 0.03, sim.BANDS[0])
    lab = sim.SimulatedLab(truth, [5])
    configs = truth.space.configurations[:3]
    seen = lab.measure("screen", configs, 2)
    assert (
        [o.round for o in seen] == [1, 1, 1, 2, 2, 2]
        and lab.runs_used() == 6
        and {o.config for o in seen} == set(configs)
    )
    order = np.argsort(truth.logs)
    best, far = truth.space.configurations[order[0]], truth.space.configurations[order[-1]]
    assert truth.ratio(far, best) > 1.2  # a clear case
    result = lab.race([far, best], 10, 0.05)
    assert result.best == best and result.decided and result.equivalent == ()
    assert lab.runs_used() == 6 + len(result.observations) and all(o.stage == "race" for o in result.observations)
    again = sim.SimulatedLab(truth, [5])
    again.measure("screen", configs, 2)
    assert again.race([far, best], 10, 0.05) == result  # deterministic for a seed
    assert lab.runs_of(3600.0) is None


@pytest.mark.parametrize("method", [bench.random_search, bench.optuna_search])
def test_baselines_return_an_existing_configuration_within_the_budget(method: object) -> None:
    truth = sim.true_space([9], "holds", 0.08, sim.BANDS[1])
    assert callable(method)
    pick = method(truth, 40, [1], 0.05)
    assert pick.config in truth.space.configurations and 40 - bench.RANDOM_REPEATS < pick.runs <= 40
    assert pick.interval is not None and pick.interval[0] <= pick.interval[1]


def test_baselines_stay_within_budget_and_find_the_best_of_a_small_space() -> None:
    truth = sim.true_space([2], "holds", 0.03, sim.BANDS[0])
    n = len(truth.space.configurations)
    pick = bench.random_search(truth, 3 + 3 * n, [1], 0.05)  # every configuration: the best median wins
    assert pick.config is not None and truth.ratio(pick.config, truth.best()) <= 1.05
    for budget in (1, 7, 25):
        for method in (bench.random_search, bench.optuna_search):
            assert method(truth, budget, [budget], 0.05).runs <= budget


def test_harness_table_on_a_standin_engine() -> None:
    results = bench.simulate(2, seed=3, engine=standin)
    assert len(results) == 4 and [r.kind for r in results] == ["holds", "holds", "wrong", "wrong"]
    assert all(r.runs > 0 and set(r.methods) == set(bench.METHODS) for r in results)
    table = bench.rows(results)
    text = bench.markdown(table, results)
    assert text.splitlines()[0].startswith(
        "| group | n | no answer | runs / full cross (median) | search: within δ [95 % CI] |"
    )
    assert "random: covers [95 % CI]" in text and "optuna: within δ" in text and "| holds, CV 3 % | 1 |" in text
    doc = bench.to_json(table, results, 3)
    assert set(doc) == {"delta", "alpha", "seed", "methods", "rows", "spaces"}
    assert set(doc["rows"][0]) == {"by", "group", "n", "runs_median", "no_answer", "within", "covers"}
    assert len(json.loads(json.dumps(doc, allow_nan=False))["spaces"]) == 4
    assert bench.simulate(2, seed=3, engine=standin) == results  # deterministic for a seed


def test_a_planted_worst_engine_is_never_within_delta() -> None:
    results = bench.simulate(2, seed=0, engine=worst)
    for r in bench.rows(results):
        assert r.within["search"].hits == 0 and r.within["search"].n == r.n
        assert r.within["search"].ci is not None and r.within["search"].ci[0] == 0.0
    refused = bench.simulate(1, seed=0, engine=refuses)
    assert [r.methods["search"].reason for r in refused] == ["planted: no answer"] * 2
    assert "2 × planted: no answer" in bench.markdown(bench.rows(refused), refused)


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--spaces", "0"]) == 2
    assert "--spaces 0" in capsys.readouterr().err
    assert bench.main(["--spaces", "1", "--format", "json"], engine=standin) == 0
    assert json.loads(capsys.readouterr().out)["methods"] == ["search", "random", "optuna"]


def test_a_wrong_space_asked_without_a_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="variant"):
        sim.true_space([0], "wrong", 0.08, sim.BANDS[0])
    with pytest.raises(ValueError, match="cv"):
        sim.true_space([0], "holds", 0.05, sim.BANDS[0])
