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
