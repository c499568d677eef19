"""Outlier runs (results/verdict/outliers.py): named by one stated rule, never dropped."""

from __future__ import annotations

from conftest import typed
from fsmatrix.results.render import sentences
from fsmatrix.results.verdict import answering, outliers
from test_answer import THREEN1, cells, runs


def test_a_wild_run_is_named_and_ordinary_ones_are_not() -> None:
    found = outliers.outliers("xfs", [(1, 10.0), (2, 10.2), (3, 9.9), (4, 14.0), (5, 10.1)])
    assert [(o.repeat, round(o.ratio, 2)) for o in found] == [(4, 1.39)]
    assert outliers.outliers("xfs", [(1, 10.0), (2, 10.2), (3, 9.9), (4, 10.5), (5, 10.1)]) == ()


def test_the_floor_keeps_nearly_identical_runs_from_flagging_ordinary_noise() -> None:
    # the others agree to 0.1 %: without the 3 % floor, a run 4 % off would be 40 deviations away
    assert outliers.outliers("xfs", [(1, 10.0), (2, 10.01), (3, 9.99), (4, 10.4)]) == ()
    assert outliers.outliers("xfs", [(1, 10.0), (2, 10.01), (3, 9.99), (4, 11.5)])[0].repeat == 4


def test_too_few_runs_are_never_judged() -> None:
    assert outliers.outliers("xfs", [(1, 10.0), (2, 10.1), (3, 30.0)]) == ()


def test_the_answer_names_an_outlier_and_keeps_it_in_every_figure() -> None:
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = typed(runs(ext4, [10.0, 10.1, 9.9, 10.05, 9.95]) + runs(xfs, [12.0, 12.1, 11.9, 30.0, 12.05]))
    (g,) = answering.build(docs).groups
    assert [(o.configuration, o.repeat) for o in g.outliers] == [("xfs", 4)]
    said = sentences.said(g, 0.05)
    line = next(s for s in said.details if s.startswith("Outlier runs on elapsed time"))
    assert "xfs r4 of run t 2.49× the median of its other runs" in line and "kept in every figure" in line
    xfs_config = g.configuration("xfs")
    assert xfs_config.runs == 5  # not dropped: the wild run is in the count and the interval


def test_an_outlier_is_named_by_its_run_too_where_a_results_root_holds_several() -> None:
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    first, second = runs(xfs, [12.0, 12.1, 11.9]), runs(xfs, [30.0, 12.05, 12.02])
    for doc in second:  # a second run of the same cell: its repeats are numbered from 1 again
        doc["run_id"] = "20250102-0900"
    docs = typed(runs(ext4, [10.0, 10.1, 9.9, 10.05, 9.95]) + first + second)
    (g,) = answering.build(docs).groups
    assert [(o.configuration, o.repeat, o.run_id) for o in g.outliers] == [("xfs", 1, "20250102-0900")]
    line = next(s for s in sentences.said(g, 0.05).details if s.startswith("Outlier runs"))
    assert "xfs r1 of run 20250102-0900 2." in line
