"""The work per operation where time does not decide (results/verdict/work.py): the same rule as the
time answer per work metric, α split over the metrics, and the answer's sentence."""

from __future__ import annotations

from typing import Any

from conftest import typed
from fsmatrix.results.render import sentences
from fsmatrix.results.verdict import answering
from test_answer import THREEN1, cells, runs

TIMES = [10.0, 10.8, 9.4]  # three runs each: time does not separate the two


def with_work(docs: list[dict[str, Any]], written: list[float]) -> list[dict[str, Any]]:
    for doc, value in zip(docs, written, strict=True):
        doc["metrics"]["device_write_bytes_per_op"] = value
    return docs


def two(ext4_written: list[float], xfs_written: list[float]) -> Any:
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = with_work(runs(ext4, TIMES), ext4_written) + with_work(runs(xfs, [t * 1.02 for t in TIMES]), xfs_written)
    (g,) = answering.build(typed(docs)).groups
    return g


def test_work_separates_what_time_does_not_and_the_answer_says_so_with_its_interval() -> None:
    g = two([4000.0, 4010.0, 3990.0], [7600.0, 7610.0, 7590.0])
    assert g.verdict == "not separated" and g.work is not None
    (d,) = g.work.differences
    assert (d.metric, d.least, [n for n, _ in d.more]) == ("device_write_bytes_per_op", "ext4", ["xfs"])
    ratio = d.more[0][1]
    assert ratio.ci_low < 1.9 < ratio.ci_high and ratio.ci_low > 1.8
    line = next(s for s in sentences.said(g, 0.05).details if s.startswith("Work, where elapsed time does not decide"))
    assert "device bytes written per operation (× ext4's): xfs 1.90× [" in line and "together at 95 %" in line


def test_each_work_metric_is_judged_at_alpha_over_the_metrics_compared() -> None:
    g = two([4000.0, 4010.0, 3990.0], [7600.0, 7610.0, 7590.0])
    assert g.work is not None and g.work.compared == ("device_write_bytes_per_op",)
    (d,) = g.work.differences
    # one pair (family 1) at α / (metrics compared): the interval's own level says so
    assert d.more[0][1].confidence == 1 - 0.05 / len(g.work.compared)


def test_no_work_sentence_when_the_work_is_the_same_or_not_measured() -> None:
    same = two([4000.0, 4010.0, 3990.0], [4001.0, 4009.0, 3992.0])
    assert same.work is not None and same.work.differences == ()
    assert not any(s.startswith("Work,") for s in sentences.said(same, 0.05).details)
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    (bare,) = answering.build(typed(runs(ext4, TIMES) + runs(xfs, TIMES))).groups
    assert bare.work is not None and bare.work.compared == ()  # absent, never taken as 0


def test_the_json_carries_the_work_and_the_decision_and_meets_the_schema() -> None:
    import jsonschema

    from fsmatrix.results.render import answer_text
    from test_answer import SCHEMA

    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    written = [4000.0, 4010.0, 3990.0]
    docs = with_work(runs(ext4, TIMES), written) + with_work(runs(xfs, TIMES), [w * 1.9 for w in written])
    doc = {"title": "t", "answer": answer_text.to_json(answering.build(typed(docs)))}
    jsonschema.validate(doc, SCHEMA)
    (g,) = doc["answer"]["groups"]
    assert doc["answer"]["version"] == 4
    assert g["decided"] == {"on_time": False, "on_work": ["device_write_bytes_per_op"]}
    (d,) = g["work"]["differences"]
    assert d["least"] == "ext4" and d["more"][0]["configuration"] == "xfs" and d["more"][0]["ci_low"] > 1.8


def test_a_group_decided_on_work_says_so_in_its_headline() -> None:
    g = two([4000.0, 4010.0, 3990.0], [7600.0, 7610.0, 7590.0])
    assert not g.decided_on_time and g.decided_on_work == ("device_write_bytes_per_op",)
    assert sentences.said(g, 0.05).headline.endswith(" Decided on work: device bytes written per operation (below).")
    same = two([4000.0, 4010.0, 3990.0], [4001.0, 4009.0, 3992.0])  # equivalent within ±5 %: decided too
    assert same.decided_on_work == ("device_write_bytes_per_op",)
    noisy = two([4000.0, 5000.0, 3000.0], [4200.0, 3500.0, 5100.0])
    assert noisy.decided_on_work == () and "Decided on work" not in sentences.said(noisy, 0.05).headline


XFS = [4000.0, 4010.0, 3990.0]


def _words(g: Any) -> dict[str, str]:
    assert g.work is not None
    (d,) = g.work.differences or (None,)
    return {} if d is None else {s.configuration: s.words for s in d.standings}


def test_a_work_difference_inside_delta_is_equivalent_never_more_work() -> None:
    # issue 51: ext4 1.01× [1.007, 1.021] xfs's bytes was "more"; inside ±5 % it is equivalent (decided)
    g = two([w * 1.014 for w in XFS], XFS)
    assert g.work is not None and g.work.differences == ()
    assert g.decided_on_work == ("device_write_bytes_per_op",)
    assert not any(s.startswith("Work,") for s in sentences.said(g, 0.05).details)


def test_a_difference_shown_but_reaching_past_delta_is_unsettled_and_decides_nothing() -> None:
    g = two([w * 1.05 for w in [4040.0, 4000.0, 3960.0]], [4040.0, 4000.0, 3960.0])
    assert g.work is not None
    (d,) = g.work.differences
    (name, r), *_ = d.unsettled
    assert name == "ext4" and 1 < r.ci_low < 1.05 < r.ci_high and d.more == ()
    assert g.decided_on_work == ()
    line = next(s for s in sentences.said(g, 0.05).details if s.startswith("Work,"))
    assert "(× xfs's): ext4 1.05× [" in line and "more, size unsettled" in line and "margin of ±5 %" in line


def test_the_work_margin_can_be_set_apart_from_the_answers_delta() -> None:
    from fsmatrix.results.verdict.answer import Rule

    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = with_work(runs(ext4, TIMES), [w * 1.014 for w in XFS]) + with_work(runs(xfs, [t * 1.02 for t in TIMES]), XFS)
    (g,) = answering.build(typed(docs), rule=Rule(work_delta=0.001)).groups
    assert g.work is not None and g.work.delta == 0.001
    assert [n for n, _ in g.work.differences[0].more] == ["ext4"]


def test_a_configuration_whose_runs_all_measured_zero_does_none_and_is_the_least() -> None:
    g = two([0.0, 0.0, 0.0], XFS)  # tmpfs, or a stack that never calls fsync
    assert g.work is not None
    (d,) = g.work.differences
    assert d.least == "ext4" and d.does_none and d.more == (("xfs", None),)
    assert g.decided_on_work == ("device_write_bytes_per_op",)
    line = next(s for s in sentences.said(g, 0.05).details if s.startswith("Work,"))
    assert "(ext4 does none): xfs more work" in line


def test_every_configuration_doing_none_is_named_so_and_none_is_equivalent_to_nothing() -> None:
    ext4, jfs, xfs = cells({"axes": {"filesystem": ["ext4", "jfs", "xfs"]}, "defaults": {"workload": THREEN1}})
    zero = [0.0, 0.0, 0.0]  # the demo's bytes read: ext4 and xfs read nothing from the device, jfs a little
    docs = with_work(runs(ext4, TIMES), zero) + with_work(runs(jfs, TIMES), XFS) + with_work(runs(xfs, TIMES), zero)
    (g,) = answering.build(typed(docs)).groups
    (d,) = g.work.differences
    assert d.none == ("ext4", "xfs") and d.equivalent == () and d.more == (("jfs", None),)
    line = next(s for s in sentences.said(g, 0.05).details if s.startswith("Work,"))
    assert "(ext4 and xfs do none): jfs more work" in line and "equivalent" not in line


def test_zero_and_non_zero_runs_of_one_configuration_are_not_enough_data() -> None:
    g = two([0.0, 4000.0, 4010.0], [w * 2 for w in XFS])
    assert g.work is not None and g.work.differences == ()  # the least cannot be called on ext4's mix
    assert g.work.compared == ("device_write_bytes_per_op",)


def test_a_metric_on_which_all_are_equivalent_is_named_so_in_the_headline_not_as_decided() -> None:
    same = two([w * 1.014 for w in XFS], XFS)
    headline = sentences.said(same, 0.05).headline
    assert "Decided on work" not in headline
    assert headline.endswith(" Equivalent within ±5 % on device bytes written per operation.")


def test_a_big_groups_work_words_count_the_others_once() -> None:
    from fsmatrix.results.render import phrases

    shown = [(f"c{i}", f" 1.{i}0× [1.0{i}, 1.{i}9]") for i in range(1, 6)]
    (text,) = phrases._work_words(shown, "more work", 3)
    assert text.endswith("c3 1.30× [1.03, 1.39] … and 2 others more work")  # never "2 more more work"
