"""The bisect's loop (fsmatrix.bisect.driver) against the stand-in lab, whose run values come from
known distributions (tests/bisect/bisect_standin.py): the decisions, not the machine."""

from __future__ import annotations

import random

import pytest

from bisect_standin import METRIC, StandInLab, commits, step_change
from fsmatrix.bisect import driver
from fsmatrix.errors import UserError
from fsmatrix.results.verdict import stats

N = 16  # commits after the good end
PLAN = driver.Plan(threshold=0.05)


def bisect(lab: StandInLab, n: int = N, plan: driver.Plan = PLAN) -> dict:
    return driver.Bisector(commits(n), lab, plan, cell="standin-cell").run()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sixteen_commits_with_the_change_at_a_random_commit(seed: int) -> None:
    culprit = random.Random(seed).randint(1, N)
    lab = StandInLab(step_change(N, culprit, 0.2), sigma=0.03, seed=seed)
    report = bisect(lab)
    assert report["finding"] == "culprit", report["first_line"]
    assert report["culprit"]["index"] == culprit
    assert report["metric"] == METRIC and report["ends"]["metrics"][METRIC]["verdict"] == "regression"
    conf = report["confirmation"]
    assert conf["confirmed"] and conf["ratio"] == pytest.approx(1.2, rel=0.06)
    assert conf["ci_low"] < conf["ratio"] < conf["ci_high"]
    line = report["first_line"]
    assert line.startswith(f"fsmatrix bisect noticed a {conf['worse_by']:.1%} regression of {METRIC} in standin-cell")
    assert f'at commit {commits(N)[culprit].short} "commit {culprit}"' in line and "confirmed by a re-run" in line
    assert len([s for s in report["steps"] if s["verdict"] != "skip"]) <= 5
    # Every run asked for is counted; all of them went through the lab, each under its own phase's run id.
    assert report["runs"]["total"] == lab.made
    assert {run_id.split("-")[0] for run_id, _ in lab.stored} >= {"ends", "s1", "confirm"}
    assert driver.markdown(report).splitlines()[0] == line


def test_no_change_at_all_refuses_with_the_figures() -> None:
    lab = StandInLab([1.0] * (N + 1), sigma=0.01, seed=5)
    report = bisect(lab)
    assert report["finding"] == "no regression" and report["steps"] == [] and report["culprit"] is None
    line = report["first_line"]
    assert line.startswith("No regression to find in standin-cell")
    assert f"{METRIC} bad/good ×" in line and "95 % CI" in line and "more than 5%" in line
    # Only the ends ran.
    assert {run_id.split("-")[0] for run_id, _ in lab.stored} == {"ends"}


def test_an_improvement_is_not_a_regression_to_find() -> None:
    report = bisect(StandInLab(step_change(N, 5, -0.3), sigma=0.02, seed=6))
    assert report["finding"] == "no regression"
    assert report["ends"]["metrics"][METRIC]["verdict"] == "improvement"


def test_a_commit_whose_prepare_fails_is_skipped_and_the_culprit_still_found() -> None:
    culprit = 11
    lab = StandInLab(step_change(N, culprit, 0.3), sigma=0.02, seed=7, unprepared={8})
    report = bisect(lab)
    assert report["steps"][0]["sha"] == commits(N)[8].sha and report["steps"][0]["verdict"] == "skip"
    assert "--prepare failed: make: *** [vmlinux] Error 2" in report["steps"][0]["reason"]
    assert [s["sha"] for s in report["skipped"]] == [commits(N)[8].sha]
    assert report["culprit"]["index"] == culprit
    assert "1 skipped" in report["first_line"]
    assert not any(run_id.endswith(commits(N)[8].short) for run_id, _ in lab.stored)  # never ran


def test_a_commit_whose_runs_fail_is_skipped() -> None:
    lab = StandInLab(step_change(N, 3, 0.3), sigma=0.02, seed=8, failing={8})
    report = bisect(lab)
    assert report["steps"][0]["verdict"] == "skip" and "its run r1 failed" in report["steps"][0]["reason"]
    assert report["culprit"]["index"] == 3


def test_when_the_culprit_is_skipped_the_range_is_reported() -> None:
    lab = StandInLab(step_change(N, 12, 0.3), sigma=0.02, seed=9, unprepared={12})
    report = bisect(lab)
    assert report["finding"] == "range" and report["culprit"] is None
    assert report["candidates"] == [commits(N)[12].sha, commits(N)[13].sha]
    assert "the first bad commit is one of 2" in report["first_line"]


def test_a_noisy_middle_commit_gets_more_rounds_then_a_decision_or_a_skip() -> None:
    culprit = 13
    lab = StandInLab(step_change(N, culprit, 0.2), sigma=0.02, seed=10, sigmas={8: 0.25})
    report = bisect(lab)
    noisy = report["steps"][0]
    assert noisy["index"] == 8
    others = [s["rounds"] for s in report["steps"][1:]]
    assert noisy["rounds"] > max(others), report["steps"]
    assert noisy["verdict"] in ("good", "skip")  # commit 8 is before the change: never bad here
    if noisy["verdict"] == "skip":
        assert f"not decided within {PLAN.max_rounds} rounds" in noisy["reason"]
    assert report["culprit"]["index"] == culprit


def test_too_many_skips_stop_the_search_with_the_range() -> None:
    lab = StandInLab(step_change(8, 5, 0.3), sigma=0.02, seed=11, unprepared={1, 2, 3, 4, 6, 7})
    report = bisect(lab, n=8, plan=driver.Plan(max_skips=1))
    assert report["finding"] == "stopped" and "max-skips" in report["stopped"]


def test_an_end_whose_runs_fail_stops_with_one_line() -> None:
    lab = StandInLab(step_change(N, 5, 0.3), failing={0})
    with pytest.raises(UserError, match="the good end .* runs fail"):
        bisect(lab)
    with pytest.raises(UserError, match="the bad end .* cannot be tested"):
        bisect(StandInLab(step_change(N, 5, 0.3), unprepared={N}))


def test_an_unknown_metric_is_refused_naming_the_ones_there_are() -> None:
    with pytest.raises(UserError, match=f"--metric iops: not a metric of cell standin-cell; it has: {METRIC}"):
        bisect(StandInLab(step_change(N, 5, 0.3)), plan=driver.Plan(metric="iops"))


def test_interrupted_and_resumed_it_makes_no_run_twice_and_finds_the_same() -> None:
    whole = StandInLab(step_change(N, 6, 0.2), sigma=0.03, seed=12)
    expected = bisect(whole)
    lab = StandInLab(step_change(N, 6, 0.2), sigma=0.03, seed=12, interrupt_after=20)
    with pytest.raises(KeyboardInterrupt):
        bisect(lab)
    assert lab.made == 20
    lab.interrupt_after = None
    resumed = bisect(lab)  # the same command again: the stored runs are returned, not made again
    assert lab.made == whole.made
    assert resumed["culprit"] == expected["culprit"] and resumed["steps"] == expected["steps"]


def test_clones_are_released_once_their_commit_cannot_be_confirmed() -> None:
    lab = StandInLab(step_change(N, 6, 0.3), sigma=0.02, seed=13)
    report = bisect(lab)
    tested = {s["sha"] for s in report["steps"]}
    assert tested <= set(lab.released)


# ----------------------------------------------------------------------------------- the promise

TRIALS = 60


def test_over_many_seeded_trials_the_culprit_is_found_at_the_promised_rate() -> None:
    """The design promises: under one step change larger than the threshold, a wrong commit is named
    with probability at most α (0.05); with an effect well above the noise (20 % at 3 %), every step
    decides, so the culprit is named in the rest. Checked with the exact binomial interval."""
    found = wrong = 0
    for seed in range(TRIALS):
        culprit = random.Random(1000 + seed).randint(1, N)
        report = bisect(StandInLab(step_change(N, culprit, 0.2), sigma=0.03, seed=1000 + seed))
        named = (report["culprit"] or {}).get("index")
        found += named == culprit
        wrong += named is not None and named != culprit
    low_wrong, _ = stats.clopper_pearson(wrong, TRIALS)
    _, high_found = stats.clopper_pearson(found, TRIALS)
    assert low_wrong <= PLAN.alpha, f"{wrong}/{TRIALS} wrong"
    assert high_found >= 1 - PLAN.alpha, f"{found}/{TRIALS} found"
    assert found >= TRIALS - 3


def test_over_many_seeded_trials_no_change_rarely_starts() -> None:
    started = 0
    for seed in range(TRIALS):
        report = bisect(StandInLab([1.0] * (N + 1), sigma=0.05, seed=2000 + seed))
        started += report["finding"] != "no regression"
    low, _ = stats.clopper_pearson(started, TRIALS)
    assert low <= PLAN.alpha, f"{started}/{TRIALS} started"


def test_two_changes_in_the_range_name_one_of_them_and_say_a_commit_lay_between() -> None:
    medians = [1.0 if i < 6 else 1.3 if i < 11 else 1.6 for i in range(N + 1)]
    report = bisect(StandInLab(medians, sigma=0.02, seed=14))
    assert report["culprit"]["index"] in (6, 11) and report["confirmation"]["confirmed"]
    between = [s for s in report["steps"] if s.get("between")]
    assert between and all(6 <= s["index"] < 11 for s in between)
    assert "between the ends" in between[0]["reason"]
