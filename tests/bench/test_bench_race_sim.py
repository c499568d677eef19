"""The default race against fixed repeats, simulated (issue 45, item 1): ``python -m
fsmatrix.bench.race_sim``. A few designs pinned (seeded: the same numbers every time), the count of
wrong decisions shown to catch rules without error control, and the command's output. No runs, no
root: a few seconds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fsmatrix.bench import race_sim
from fsmatrix.results.verdict import groups, race


def outcomes(row: race_sim.Row) -> dict[str, tuple[float, float, float]]:
    """Each rule's (mean runs, decided, wrong), rounded: the figures a row of the table prints."""
    rules = {"race": row.race, **{f"fixed {n}": o for n, o in row.fixed.items()}}
    return {name: (round(o.runs, 2), round(o.decided, 3), round(o.wrong, 3)) for name, o in rules.items()}


def test_a_clear_loser_leaves_early_and_every_rule_decides_rightly() -> None:
    # 3 configurations 20 % apart at 3 % noise: the race retires the losers at its first looks, 10.4
    # runs of the 30 that 10 repeats take; 3 repeats leave a tenth of the groups undecided.
    assert outcomes(race_sim.design(3, 0.03, 0.20, trials=60)) == {
        "race": (10.4, 1.0, 0.0),
        "fixed 3": (9.0, 0.9, 0.0),
        "fixed 5": (15.0, 1.0, 0.0),
        "fixed 10": (30.0, 1.0, 0.0),
    }


def test_equal_configurations_are_shown_equivalent_or_left_open() -> None:
    # Two equal configurations: at 3 % noise the race shows half of them equivalent (within ±5 %) with
    # 17.5 runs; at 8 % it almost never can by 10 runs and runs them all. Any "worse" is wrong here.
    assert outcomes(race_sim.design(2, 0.03, 0.0, trials=60)) == {
        "race": (17.47, 0.533, 0.033),
        "fixed 3": (6.0, 0.1, 0.033),
        "fixed 5": (10.0, 0.417, 0.017),
        "fixed 10": (20.0, 0.95, 0.033),
    }
    assert outcomes(race_sim.design(2, 0.08, 0.0, trials=60))["race"] == (19.93, 0.017, 0.017)


def test_the_same_seed_gives_the_same_rows() -> None:
    a, b = (race_sim.design(2, 0.15, 0.10, trials=20, seed=3) for _ in range(2))
    assert a == b
    assert race_sim.design(2, 0.15, 0.10, trials=20, seed=4) != a


def test_wrong_decisions_are_caught_in_a_race_without_its_error_control(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four equal configurations at 15 % noise: the race's own level keeps wrong retirements under α;
    every test at the unadjusted 5 %, over 8 looks and the best chosen from the data, does not."""
    row = race_sim.design(4, 0.15, 0.0, trials=100)
    assert row.race.wrong <= race_sim.ALPHA
    monkeypatch.setattr(race, "look_alpha", lambda *args, **kwargs: race_sim.ALPHA)
    loose = race_sim.design(4, 0.15, 0.0, trials=100)
    assert loose.race.wrong_ci[0] > race_sim.ALPHA, loose.race


def test_wrong_decisions_are_caught_at_fixed_repeats_without_the_family_correction() -> None:
    rng = np.random.default_rng(0)
    k, n = 4, 10
    mu = race_sim.true_logs(k, 0.0)
    logs = rng.normal(0.0, math.sqrt(math.log1p(0.15**2)), size=(4000, k, n))
    _, wrong = race_sim.fixed_rule(logs, mu, n)
    assert wrong.mean() <= race_sim.ALPHA + 0.01
    _, uncorrected = race_sim.fixed_rule(logs, mu, n, alpha=race_sim.ALPHA * groups.family_size(k))
    assert uncorrected.mean() > 2 * race_sim.ALPHA


def test_a_claim_is_wrong_only_against_the_truth() -> None:
    bound = math.log1p(0.05)
    assert race_sim.wrong_claim("worse", 0.0, 0.0, bound) and not race_sim.wrong_claim("worse", 0.01, 0.0, bound)
    assert race_sim.wrong_claim("equivalent", bound, 0.0, bound)  # exactly δ apart is not within ±δ
    assert not race_sim.wrong_claim("equivalent", 0.0, 0.0, bound)


def test_the_command_prints_every_design(capsys: pytest.CaptureFixture[str]) -> None:
    assert race_sim.main(["--trials", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 36 and doc["race"] == {"min_repeats": 3, "max_repeats": 10}
    assert set(doc["rows"][0]["fixed"]) == {"3", "5", "10"}
    assert race_sim.main(["--trials", "1", "--max-repeats", "5"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| k | CV | Δ | race (3..5): runs | decided | runs per decided | wrong [95 % CI] |")
    assert table[0].endswith(" best fixed: runs per decided |")
    assert "Runs per decided group, over the designs" in table[-1]
    assert len([line for line in table if line.startswith("| ")]) == 37
    assert race_sim.main(["--trials", "0"]) == 2 and "--trials 0" in capsys.readouterr().err
    assert race_sim.main(["--max-repeats", "11"]) == 2


def test_runs_per_decided_group_is_runs_over_the_share_decided() -> None:
    o = race_sim.Outcome(runs=12.0, decided=0.5, wrong=0.0, wrong_ci=(0.0, 0.1))
    assert race_sim.per_decided(o) == 24.0
    assert math.isinf(race_sim.per_decided(race_sim.Outcome(6.0, 0.0, 0.0, (0.0, 0.1))))
