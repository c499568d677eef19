"""A configuration that sent the device no flush request where others did (verdict/work.py ``unflushed``):
on a disk with a volatile write cache its fsync is not durable, so the answer says so, in the headline
when it is the answer (make demo's jfs: 0 flushes in every run, ext4 and xfs about 80)."""

from __future__ import annotations

from typing import Any

import jsonschema

from conftest import typed
from fsmatrix.results.render import answer_text, sentences
from fsmatrix.results.verdict import answer, answering
from test_answer import SCHEMA, THREEN1, cells, runs
from test_answer_many import cross

FLUSHING = [3.5e-4, 3.6e-4, 3.4e-4]
NONE = [0.0, 0.0, 0.0]


def with_flushes(docs: list[dict[str, Any]], flushes: list[float]) -> list[dict[str, Any]]:
    for doc, value in zip(docs, flushes, strict=True):
        doc["metrics"]["device_flushes_per_op"] = value
    return docs


def three(jfs_times: list[float], jfs_flushes: list[float], others: list[float] = FLUSHING) -> answer.SpeedGroup:
    ext4, jfs, xfs = cells({"axes": {"filesystem": ["ext4", "jfs", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = with_flushes(runs(ext4, [10.0, 10.2, 9.9]), others) + with_flushes(runs(xfs, [10.1, 10.3, 9.8]), others)
    (g,) = answering.build(typed(docs + with_flushes(runs(jfs, jfs_times), jfs_flushes))).groups
    assert isinstance(g, answer.SpeedGroup)
    return g


def test_the_fastest_sent_no_flush_request_and_the_headline_says_it_is_not_the_same_durability() -> None:
    g = three([5.0, 5.1, 4.9], NONE)
    assert g.best == "jfs"
    assert g.unflushed == answer.Unflushed(("jfs",), ("ext4", "xfs"), (3,))
    said = sentences.said(g, 0.05)
    assert said.headline.endswith(" But jfs sent no flush request (below): not the same durability.")
    (line,) = [s for s in said.details if s.startswith("No flush request:")]
    assert line.startswith("No flush request: jfs sent the device none (in 3 runs), where ext4 and xfs did: on a disk")


def test_a_slower_one_is_named_below_the_headline_only() -> None:
    g = three([20.0, 20.4, 19.8], NONE)
    assert g.best == "ext4" or g.verdict == "not separated"
    said = sentences.said(g, 0.05)
    assert "no flush request" not in said.headline
    assert any(s.startswith("No flush request: jfs sent the device none") for s in said.details)


def test_nothing_is_said_where_no_configuration_flushed_a_device_without_a_volatile_cache() -> None:
    # cache=writethrough, power-loss protection: the block layer sends no flush, whatever the filesystem
    g = three([5.0, 5.1, 4.9], NONE, others=NONE)
    assert g.unflushed is None
    assert not any("flush" in s for s in sentences.said(g, 0.05).sentences)


def test_a_configuration_that_flushed_in_some_runs_is_not_named() -> None:
    assert three([5.0, 5.1, 4.9], [0.0, 1e-5, 0.0]).unflushed is None


def test_runs_that_did_not_measure_flushes_are_never_taken_as_none() -> None:
    ext4, jfs = cells({"axes": {"filesystem": ["ext4", "jfs"]}, "defaults": {"workload": THREEN1}})
    docs = with_flushes(runs(ext4, [10.0, 10.2, 9.9]), FLUSHING) + runs(jfs, [5.0, 5.1, 4.9])
    (g,) = answering.build(typed(docs)).groups
    assert isinstance(g, answer.SpeedGroup) and g.unflushed is None


def test_the_json_carries_it_and_meets_the_schema() -> None:
    ext4, jfs, xfs = cells({"axes": {"filesystem": ["ext4", "jfs", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = with_flushes(runs(ext4, [10.0, 10.2, 9.9]), FLUSHING) + with_flushes(runs(xfs, [10.1, 10.3, 9.8]), FLUSHING)
    docs += with_flushes(runs(jfs, [5.0, 5.1, 4.9]), NONE)
    doc = {"title": "t", "answer": answer_text.to_json(answering.build(typed(docs)))}
    jsonschema.validate(doc, SCHEMA)
    (g,) = doc["answer"]["groups"]
    assert g["unflushed"] == {"none": ["jfs"], "flushing": ["ext4", "xfs"], "runs": [3]}
    bare = {"title": "t", "answer": answer_text.to_json(answering.build(typed(runs(ext4, [10.0, 10.2, 9.9]))))}
    assert bare["answer"]["groups"][0]["unflushed"] is None
    jsonschema.validate(bare, SCHEMA)


def test_a_big_group_names_a_few_and_counts_the_rest() -> None:
    made = cross()  # 32 configurations: the sentences of counts (sentences._speed_many)
    docs: list[dict[str, Any]] = []
    for i, cell in enumerate(made):
        fast = i < 5
        times = [5.0, 5.1, 4.9] if i == 0 else [10.0 + 0.05 * i, 10.2 + 0.05 * i, 9.9 + 0.05 * i]
        docs += with_flushes(runs(cell, times), NONE if fast else FLUSHING)
    (g,) = answering.build(typed(docs)).groups
    assert isinstance(g, answer.SpeedGroup) and g.unflushed is not None and len(g.unflushed.none) == 5
    said = sentences.said(g, 0.05)
    assert said.headline.endswith("sent no flush request (below): not the same durability.")
    (line,) = [s for s in said.details if s.startswith("No flush request:")]
    assert " and 2 more sent the device none (in all runs), where " in line and " and 24 more did" in line


def test_a_disk_without_a_volatile_cache_needs_no_flush_and_is_not_named() -> None:
    # device.cache writethrough: the guest's disk has no write cache, so the block layer sends no flush.
    none, through = cells(
        {"axes": {"device.cache": ["none", "writethrough"]}, "defaults": {"filesystem": "ext4", "workload": THREEN1}}
    )
    docs = with_flushes(runs(none, [10.0, 10.2, 9.9]), FLUSHING) + with_flushes(runs(through, [12.0, 12.1, 11.9]), NONE)
    (g,) = answering.build(typed(docs)).groups
    assert isinstance(g, answer.SpeedGroup) and g.unflushed is None
