"""The answer on top (results/answer.py, issue 24): on stored result documents built here — a tie like
the demo's xfs and ext4, a clear winner, crash cells that lose commits (by design and not), the
regime — and in every output: report.md's first section, the JSON (validated against
docs/answer.schema.json), the HTML page's first section, and the end of `fsmatrix run`'s output."""

from __future__ import annotations

import html.parser
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from conftest import REPO, typed
from fsmatrix.agent import jsonfile
from fsmatrix.backends import BackendEntry
from fsmatrix.cli import main
from fsmatrix.matrix import MatrixCell, expand_document
from fsmatrix.results import store
from fsmatrix.results.render import answer_text, markdown, phrases, sentences, tables
from fsmatrix.results.render import page as html_page
from fsmatrix.results.render.sentences import crash_text
from fsmatrix.results.verdict import answer, answering, crash, report

SCHEMA = json.loads((REPO / "docs" / "answer.schema.json").read_text(encoding="utf-8"))
DRAWS = 400  # the repeat advice's simulated draws per n: enough to exercise it, quick
THREEN1 = {"threen1": {"start": 1, "end": 100000, "workers": 2, "block": 5000}}
PGBENCH = {"pgbench": {"scale": 10, "clients": 4, "threads": 2, "duration": 60}}
RATIO = re.compile(r"(\d+\.\d+)× ext4's (?:elapsed time|TPS) \[(\d+\.\d+), (\d+\.\d+)\]")


def build(
    docs: list[store.Result],
    matrix_json: dict[str, Any] | None = None,
    race: dict[str, Any] | None = None,
    *,
    delta: float = 0.05,
    draws: int = answer.DEFAULT_RULE.draws,
) -> answer.Answer:
    """The answer, from a matrix.json and race.json as stored."""
    matrix = store.RunMatrix.read(matrix_json) if matrix_json is not None else None
    raced = store.Race.read(race) if race is not None else None
    return answering.build(docs, matrix, raced, answer.Rule(delta=delta, draws=draws))


def said(g: answer.GroupResult, delta: float = 0.05) -> sentences.Said:
    """What the reports say of a group."""
    return sentences.said(g, delta)


def race_rule(g: answer.GroupResult) -> str | None:
    return phrases.race_rule(g.raced) if isinstance(g, answer.SpeedGroup) and g.raced is not None else None


def cells(doc: dict[str, Any]) -> list[MatrixCell]:
    return expand_document(doc, "t").cells


def runs(
    cell: MatrixCell,
    values: list[float],
    *,
    bound: str = "cpu",
    metrics: dict[str, float] | None = None,
    status: str = "passed",
) -> list[dict[str, Any]]:
    """Result documents of ``cell``, one per value of its workload's primary metric."""
    metric = "tps" if cell.workload_kind == "pgbench" else "elapsed_s"
    return [
        {
            "schema_version": 1,
            "run_id": "t",
            "cell_id": cell.id,
            "repeat": i,
            "workload": cell.workload_kind,
            "params": cell.params,
            "status": status,
            "reason": None if status == "passed" else "it broke",
            "metrics": {metric: v, **(metrics or {})},
            "key_metrics": {metric: "lower" if metric == "elapsed_s" else "higher"},
            "samples": {"bound": bound},
            "provenance": {},
        }
        for i, v in enumerate(values, 1)
    ]


def demo() -> tuple[list[MatrixCell], list[dict[str, Any]]]:
    """The quick matrix's 3n+1: ext4 and xfs within the noise of each other, jfs clearly behind; CPU-bound."""
    ext4, xfs, jfs = cells({"axes": {"filesystem": ["ext4", "xfs", "jfs"]}, "defaults": {"workload": THREEN1}})
    docs = runs(ext4, [8.25, 8.8, 7.7], metrics={"device_write_bytes_per_op": 190.0, "cpu_busy_s": 10.0})
    docs += runs(xfs, [8.12, 8.4, 7.9], metrics={"device_write_bytes_per_op": 40.0, "cpu_busy_s": 10.2})
    docs += runs(jfs, [9.84, 10.2, 9.5], metrics={"device_write_bytes_per_op": 890.0, "cpu_busy_s": 13.0})
    return [ext4, xfs, jfs], docs


def in_order(*made: MatrixCell) -> dict[str, Any]:
    """A matrix.json of these cells, in this order, naming no baseline (as before matrices had one)."""
    return {"name": "t", "cells": [{"id": c.id, "params": c.params} for c in made]}


def winner(metric: str = "elapsed_s") -> tuple[list[MatrixCell], list[dict[str, Any]]]:
    """ext4, ext4 data=writeback and btrfs, five IO-bound runs each: writeback clearly the fastest
    (pass ``in_order(*cells)`` for ext4 as the baseline; by cell id, btrfs comes first)."""
    spec = {
        "axes": {"filesystem": ["ext4", "btrfs"], "mount_options": ["", "data=writeback"]},
        "exclude": [{"filesystem": "btrfs", "mount_options": "data=writeback"}],
        "defaults": {"workload": PGBENCH if metric == "tps" else THREEN1},
    }
    made = cells(spec)
    ext4 = next(c for c in made if c.params["filesystem"] == "ext4" and not c.params["mount_options"])
    writeback = next(c for c in made if c.params["mount_options"])
    btrfs = next(c for c in made if c.params["filesystem"] == "btrfs")
    base = [10.0, 10.1, 9.9, 10.05, 9.95]
    scale = {"elapsed_s": (0.8, 1.3), "tps": (1.25, 0.6)}[metric]
    docs = runs(ext4, base, bound="io", metrics={"device_write_bytes_per_op": 100.0, "device_busy_pct": 90.0})
    docs += runs(
        writeback,
        [v * scale[0] for v in base],
        bound="io",
        metrics={"device_write_bytes_per_op": 60.0, "device_busy_pct": 88.0},
    )
    docs += runs(btrfs, [v * scale[1] for v in base], bound="io", metrics={"device_write_bytes_per_op": 470.0})
    return [ext4, writeback, btrfs], docs


def crash_docs() -> tuple[dict[str, MatrixCell], list[dict[str, Any]]]:
    """pgbench under a power cut with synchronous_commit on (it loses commits: a broken promise),
    off (it loses some: by design) and on xfs (one run an infrastructure failure, one recovered
    with every commit); and the same four stacks benchmarked without a crash, synchronous_commit off the
    fastest."""
    spec = {
        "axes": {"filesystem": ["ext4"], "postgres.synchronous_commit": ["on", "off"]},
        "include": [{"filesystem": "xfs", "postgres.synchronous_commit": "on"}],
        "defaults": {"workload": PGBENCH},
    }
    speed = cells(spec)
    crashing = cells({**spec, "defaults": {**spec["defaults"], "crash": {"mode": "power-cut", "after_s": 5}}})

    def key(c: MatrixCell) -> str:
        return f"{c.params['filesystem']}-{c.params['postgres']['synchronous_commit']}"

    by = {key(c): c for c in crashing} | {f"speed-{key(c)}": c for c in speed}
    docs: list[dict[str, Any]] = []
    for name, lost, status in (("ext4-on", 3, "failed"), ("ext4-off", 12, "failed"), ("xfs-on", 0, "passed")):
        section = {
            "mode": "power-cut",
            "fired": True,
            "mount_s": 0.3,
            "recovery_s": 4.6,
            "steps": [{"name": "start", "status": "ok"}],
            "checks": [{"name": "durability", "verdict": "failed" if lost else "passed"}],
            "lost_commits": lost,
            "acknowledged": 4012,
        }
        doc = runs(by[name], [1.0], status=status)[0]
        doc["metrics"] = {"recovery_s": 4.6}
        doc["crash"] = section
        doc["reason"] = f"durability: {lost} of 4012 acknowledged commits are missing" if lost else None
        docs.append(doc)
    broken = runs(by["xfs-on"], [1.0], status="error")[0]
    broken.update(repeat=2, metrics={}, reason="host side of the run failed: OSError", crash={"mode": "power-cut"})
    docs.append(broken)
    docs += runs(by["speed-ext4-on"], [100.0, 101.0, 99.0, 100.5, 99.5])
    docs += runs(by["speed-ext4-off"], [300.0, 303.0, 297.0, 301.0, 299.0])
    docs += runs(by["speed-xfs-on"], [150.0, 151.0, 149.0, 150.5, 149.5])
    return by, docs


def put(root: Path, docs: list[dict[str, Any]], matrix_json: dict[str, Any] | None = None) -> Path:
    run_dir = root / "t"
    for doc in docs:
        jsonfile.write_atomic(store.result_path(run_dir, doc["cell_id"], doc["repeat"]), doc)
    if matrix_json is not None:
        jsonfile.write_atomic(run_dir / "matrix.json", matrix_json)
    return run_dir


# ----------------------------------------------------------------------------------- the answer


def test_what_is_not_separated_is_said_and_neither_is_called_best() -> None:
    (ext4, xfs, jfs), docs = demo()
    found = build(typed(docs), draws=DRAWS)
    (g,) = found.groups
    assert (g.verdict, g.best, g.not_separated, g.worse) == ("not separated", None, ("ext4", "xfs"), ("jfs",))
    text = " ".join(said(g).sentences)
    assert said(g).headline.startswith("No single best: ext4 and xfs are not separated on elapsed time")
    assert "is best" not in text and "tied" not in text and "3 runs each" in said(g).headline
    worse = next(s for s in said(g).details if s.startswith("Worse than"))
    low, high = (float(x) for x in re.findall(r"jfs \d\.\d+× \[(\d\.\d+), (\d\.\d+)\]", worse)[0])
    assert 1 < low < high
    # what would settle the pair not separated
    (pair,) = g.still_open
    assert pair.configurations == ("ext4", "xfs")
    assert pair.repeats_needed is None or pair.repeats_needed > 3
    assert "To settle: ext4 vs xfs: " in text and "settle ±5 %" in text
    assert "Baseline chosen: ext4 (first by cell id; no matrix.json)." in said(g).details
    # every run CPU-bound in a comparison of filesystems: said plainly
    assert g.regime.disks_not_bottleneck and "the disks were not the bottleneck" in text
    assert g.why is not None and (g.why.best, g.why.against) == ("ext4", "jfs")
    assert g.why.factors[0].metric == "device_write_bytes_per_op"


def test_a_clear_winner_is_named_with_a_ratio_whose_interval_excludes_1() -> None:
    made, docs = winner()
    (g,) = build(typed(docs), in_order(*made), draws=DRAWS).groups
    assert (g.verdict, g.best, g.baseline) == ("best", "ext4 data=writeback", "ext4")
    assert said(g).headline.startswith("ext4 data=writeback is best: takes 0.80× ext4's elapsed time [")
    assert said(g).headline.endswith(", 5 runs each.")
    ratio, low, high = (float(x) for x in RATIO.search(said(g).headline).groups())  # type: ignore[union-attr]
    assert low <= ratio <= high < 1
    best = g.configuration("ext4 data=writeback").to_baseline
    assert best is not None and best.ci_high < 1
    assert g.worse == ("ext4", "btrfs") and g.still_open == ()
    assert "Worse than ext4 data=writeback (elapsed time, × ext4 data=writeback's): ext4 1.25× [" in " ".join(
        said(g).details
    )
    assert not g.regime.disks_not_bottleneck and any(
        s.startswith("Regime: every configuration was IO-bound") for s in said(g).details
    )
    assert g.why is not None and [f.metric for f in g.why.factors] == ["device_write_bytes_per_op"]  # busy: < 5 %


def test_a_higher_is_better_metric_reads_as_a_rate() -> None:
    made, docs = winner("tps")
    (g,) = build(typed(docs), in_order(*made), draws=DRAWS).groups
    assert g.metric == "tps" and g.direction == "higher"
    assert said(g).headline.startswith("ext4 data=writeback is best: 1.25× ext4's TPS [")
    _, low, _ = (float(x) for x in RATIO.search(said(g).headline).groups())  # type: ignore[union-attr]
    assert low > 1


def test_configurations_are_named_by_the_settings_that_vary() -> None:
    spec = {
        "axes": {"filesystem": ["ext4", "btrfs"], "gtm.journal": ["before", "nobefore"]},
        "defaults": {"workload": THREEN1},
    }
    docs = [d for c in cells(spec) for d in runs(c, [1.0, 1.0, 1.0])]
    (g,) = build(typed(docs), draws=DRAWS).groups
    assert sorted(c.name for c in g.configurations) == [
        "btrfs, gtm.journal=before",
        "btrfs, gtm.journal=nobefore",
        "ext4, gtm.journal=before",
        "ext4, gtm.journal=nobefore",
    ]
    assert g.configuration("btrfs, gtm.journal=nobefore").settings == {"filesystem": "btrfs", "gtm.journal": "nobefore"}


def test_the_baseline_is_the_matrix_s_and_the_answer_says_which_rule_chose_it() -> None:
    (ext4, writeback, btrfs), docs = winner()
    (g,) = build(typed(docs), draws=DRAWS).groups
    assert (g.baseline, g.group.baseline_rule) == ("btrfs", "first-id")  # no matrix.json: the first by cell id
    assert "Baseline chosen: btrfs (first by cell id; no matrix.json)." in said(g).details
    (g,) = build(typed(docs), in_order(writeback, btrfs, ext4), draws=DRAWS).groups
    assert (g.baseline, g.group.baseline_rule) == ("ext4 data=writeback", "first-cell")
    (g,) = build(typed(docs), in_order(btrfs, ext4, writeback), draws=DRAWS).groups
    assert (g.baseline, g.group.baseline_rule) == ("btrfs", "first-cell")
    assert "Baseline chosen: btrfs (first cell; the matrix names none)." in said(g).details
    assert [c.name for c in g.configurations] == ["btrfs", "ext4", "ext4 data=writeback"]  # matrix.json's order
    named = {
        "baseline_rule": "named",
        "cells": [
            {"id": c.id, "group": "g", "group_label": "3n+1 by hand", "baseline": c is writeback}
            for c in (ext4, writeback, btrfs)
        ],
    }
    (g,) = build(typed(docs), named, draws=DRAWS).groups
    assert (g.label, g.baseline, g.group.baseline_rule) == ("3n+1 by hand", "ext4 data=writeback", "named")
    assert "Baseline: ext4 data=writeback (named in the matrix)." in said(g).details
    assert said(g).headline.startswith("ext4 data=writeback (the baseline) is best")
    defaults = {**named, "baseline_rule": "defaults"}
    defaults["cells"] = [{**e, "baseline": e["id"] == ext4.id} for e in named["cells"]]
    (g,) = build(typed(docs), defaults, draws=DRAWS).groups
    assert "Baseline chosen: ext4 (every setting at its default)." in said(g).details
    # the matrix's baseline was not run (fsmatrix run --only): the first cell, and the answer says why
    absent = {**named, "cells": [{**e, "baseline": False} for e in named["cells"]]}
    (g,) = build(typed(docs), absent, draws=DRAWS).groups
    assert "Baseline chosen: ext4 (first cell; the matrix's baseline has no results here)." in said(g).details


def test_crash_losses_are_unsafe_by_design_or_not_and_infrastructure_failures_are_no_verdict() -> None:
    by, docs = crash_docs()
    found = build(typed(docs), draws=DRAWS)
    crash = next(g for g in found.groups if g.verdict == "crash")
    verdicts = {v.configuration: v for v in crash.crash}
    on = verdicts["ext4, postgres.synchronous_commit=on"]
    off = verdicts["ext4, postgres.synchronous_commit=off"]
    xfs = verdicts["xfs, postgres.synchronous_commit=on"]
    assert (on.verdict, on.lost_commits, on.acknowledged, on.allowed_by) == ("unsafe", 3, 4012, ())
    assert crash_text(on).startswith(
        "ext4, postgres.synchronous_commit=on: UNSAFE: lost 3 of 4,012 acknowledged commits"
    )
    assert "promise to keep every acknowledged commit" in crash_text(on)
    assert (off.verdict, off.allowed_by) == ("unsafe by design", ("synchronous_commit=off",))
    assert "UNSAFE by design" in crash_text(off) and "synchronous_commit=off allows that" in crash_text(off)
    # an error run is no verdict on xfs; its other run counts
    assert (xfs.verdict, xfs.recovered, xfs.infrastructure) == ("safe", 1, 1)
    assert "1 ended in an infrastructure failure (error)" in crash_text(xfs)
    assert said(crash).headline.startswith("Crash verdict (power-cut): UNSAFE: ext4, postgres.synchronous_commit=on")
    assert "UNSAFE by design: ext4, postgres.synchronous_commit=off" in said(crash).headline
    assert {c.name for c in crash.configurations if c.unsafe} == {
        "ext4, postgres.synchronous_commit=on",
        "ext4, postgres.synchronous_commit=off",
    }
    # The fastest stack in the benchmark loses commits under a crash: UNSAFE whatever its speed.
    speed = next(g for g in found.groups if g.verdict != "crash")
    assert speed.best == "ext4, postgres.synchronous_commit=off"
    assert (
        "is UNSAFE: lost 12 of 4,012 acknowledged commits in 1 of 1 runs after a crash (by design"
        in said(speed).headline
    )
    assert "not the answer, whatever its speed" in said(speed).headline
    assert any(s.startswith("UNSAFE: ext4, postgres.synchronous_commit=on: lost 3") for s in said(speed).details)
    assert {n for _, n in found.unsafe} >= {"ext4, postgres.synchronous_commit=off"}
    # infrastructure alone: no verdict, never "safe"
    only_error = [d for d in docs if d["cell_id"] == by["xfs-on"].id and d["status"] == "error"]
    (g,) = build(typed(only_error)).groups
    assert g.crash[0].verdict == "no verdict" and "infrastructure failure" in crash_text(g.crash[0])


def test_a_database_that_does_not_come_back_is_unsafe() -> None:
    by, docs = crash_docs()
    doc = next(d for d in docs if d["cell_id"] == by["xfs-on"].id and d["status"] == "passed")
    doc.update(status="failed", reason="recovery failed: start: PANIC: could not locate a valid checkpoint record")
    doc["crash"]["steps"] = [{"name": "start", "status": "failed"}]
    v = crash.crash_verdict("xfs", typed([doc]), {"postgres.fsync": True})
    assert v.verdict == "unsafe" and v.not_recovered == 1 and "PANIC" in crash_text(v)
    assert crash.crash_verdict("xfs", typed([doc]), {"postgres.fsync": False}).verdict == "unsafe by design"
    # synchronous_commit off allows losing the last commits, not a damaged database
    assert crash.crash_verdict("xfs", typed([doc]), {"postgres.synchronous_commit": "off"}).verdict == "unsafe"


def test_not_enough_data_and_a_single_configuration() -> None:
    (ext4, xfs, _), docs = demo()
    failing = [d for d in docs if d["cell_id"] == xfs.id]
    failing[0]["status"] = "failed"
    found = build(typed(docs), draws=DRAWS).groups[0]
    assert "xfs" in found.not_enough_data and any("xfs (1 of 3 runs failed" in s for s in said(found).details)
    (g,) = build(typed([d for d in docs if d["cell_id"] == ext4.id])).groups
    assert g.verdict == "single" and said(g).headline.startswith("Only one configuration (ext4): nothing to compare")
    (g,) = build(typed(runs(ext4, [1.0, 1.1]))).groups
    assert g.verdict == "not enough data" and g.best is None
    # the others failing: nothing to compare the one left with, and it is not called fastest
    broken = [dict(d, status="failed") for d in docs if d["cell_id"] != ext4.id]
    (g,) = build(typed([d for d in docs if d["cell_id"] == ext4.id] + broken)).groups
    assert (g.verdict, g.best) == ("single", None)
    assert said(g).headline.startswith("Only ext4 has enough data: nothing to compare it with")


def test_an_equivalent_pair_says_so() -> None:
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = runs(ext4, [10.0, 10.01, 9.99, 10.005, 9.995, 10.0]) + runs(
        xfs, [10.0, 10.012, 9.988, 10.004, 9.996, 10.001]
    )
    (g,) = build(typed(docs), draws=DRAWS).groups
    assert g.verdict == "equivalent" and g.still_open == () and g.equivalent == ("ext4", "xfs")
    assert said(g).headline == "ext4 and xfs are equivalent within ±5 % on elapsed time, 6 runs each."
    (g,) = build(typed(docs), delta=0.0002, draws=DRAWS).groups  # δ settable: ±0.02 % is not shown
    assert g.verdict == "not separated" and g.equivalent == ()


def stored_race(retired: MatrixCell, best: MatrixCell, action: str = "retired") -> dict[str, Any]:
    """A race.json as `fsmatrix run --race` writes it: ``retired`` left after round 3 (``action``)."""
    return {
        "format_version": 1,
        "settings": {"min_repeats": 3, "max_repeats": 8, "delta": 0.05, "budget_s": None},
        "alpha": 0.05,
        "groups": [
            {
                "key": "g",
                "label": "l",
                "metric": "elapsed_s",
                "direction": "lower",
                "raced": True,
                "cells": [best.id, retired.id],
            },
        ],  # fmt: skip
        "rounds": [{"round": 3, "groups": {"g": {"look_alpha": 0.0011}}}],
        "left": {
            retired.id: {"round": 3, "action": action, "reason": "1.3x the best, p = 0.0009 for worse by more than 5%"},
            best.id: {"round": 3, "action": "best", "reason": "the best; every other cell retired"},
        },
        "stopped": {"after_round": 3, "why": "one cell left in every comparison group"},
    }


def test_a_raced_group_is_answered_by_the_race_s_decisions() -> None:
    """A race retires on a sequential rule the fixed-sample intervals need not agree with: the answer is
    the race's decision, with its round and rule, not a fixed-sample test of the runs it stopped at."""
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = typed(runs(ext4, [10.0, 10.6, 9.5]) + runs(xfs, [12.0, 14.5, 10.5]))
    (plain,) = build(docs, draws=DRAWS).groups
    assert plain.verdict == "not separated"  # three runs each: the intervals do not separate them
    (g,) = build(docs, None, stored_race(xfs, ext4), draws=DRAWS).groups
    assert (g.verdict, g.best, g.worse) == ("best", "ext4", ("xfs",))
    c = g.configuration("xfs")
    assert c.decided_by == "race" and c.reason.startswith("after round 3: 1.3x the best")
    assert race_rule(g) is not None and "Pocock's level α' = 0.0011" in race_rule(g) and race_rule(g) in said(g).details
    assert "xfs: worse after round 3: 1.3x the best" in " ".join(said(g).details) and g.still_open == ()
    # a race before the answer's version 2 wrote "tied" for "equivalent"
    (g,) = build(docs, None, stored_race(xfs, ext4, "tied"), draws=DRAWS).groups
    assert g.verdict == "equivalent" and g.equivalent == ("xfs",)
    # a race cut short (a cell without a decision): the intervals answer
    cut = stored_race(xfs, ext4)
    del cut["left"][xfs.id]
    (g,) = build(docs, None, cut, draws=DRAWS).groups
    assert g.verdict == "not separated" and race_rule(g) is None


def test_the_report_of_a_raced_run_reads_its_race(tmp_path: Path) -> None:
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    run_dir = put(tmp_path, runs(ext4, [10.0, 10.6, 9.5]) + runs(xfs, [12.0, 14.5, 10.5]))
    jsonfile.write_atomic(run_dir / store.RACE_FILE, stored_race(xfs, ext4))
    out = CliRunner().invoke(main, ["report", str(run_dir)])
    assert out.exit_code == 0, out.output
    assert (
        "**ext4 (the baseline) is best on elapsed time, 3 runs each.**" in out.output
        and "Decided by the race" in out.output
    )
    assert "## Race" in out.output


def test_summary_lines_are_each_group_s_headline() -> None:
    _, docs = demo()
    found = build(typed(docs), draws=DRAWS)
    assert answer_text.summary_lines(found) == [
        f"answer: threen1 1..100000 w2 b5000 spelled: {said(found.groups[0]).headline}"
    ]
    many = answer.Answer(0.05, 0.05, 0.95, found.groups * 10)
    lines = answer_text.summary_lines(many, limit=4)
    assert len(lines) == 4 and lines[-1] == "answer: ... and 7 more groups: see the report"


# ----------------------------------------------------------------------------------- the outputs


def test_the_markdown_report_opens_with_the_answer_and_prints_the_legend_once() -> None:
    made, docs = demo()
    more_made, more = winner("tps")
    text = markdown.markdown(
        report.of_results(typed(docs + more), store.RunMatrix.read(in_order(*made, *more_made))), "t"
    )
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## The answer" and headings[1] == "## Environment"
    answer_part = text.split("## Environment")[0]
    assert (
        "No single best: ext4 and xfs are not separated" in answer_part and "is best: 1.25× ext4's TPS" in answer_part
    )
    assert text.count(tables.TABLE_LEGEND) == 1
    assert text.index(tables.TABLE_LEGEND) < text.index("| input |")
    assert text.count("| input |") >= 2  # more tables than legends; the tables keep their marks
    assert "(not separated)" in text and "**" in text.split("\n## threen1\n")[1]


def test_the_cli_prints_the_answer_first_and_json_that_matches_the_schema(tmp_path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    _, docs = demo()
    by, crashed = crash_docs()
    run_dir = put(tmp_path, docs + crashed)
    runner = CliRunner()
    md = runner.invoke(main, ["report", str(run_dir)])
    assert md.exit_code == 0, md.output
    # what merge-report.sh puts in $GITHUB_STEP_SUMMARY: the answer first
    assert next(line for line in md.output.splitlines() if line.startswith("## ")) == "## The answer"
    out = runner.invoke(main, ["report", str(run_dir), "--format", "json", "--delta", "10%"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    assert doc["answer"]["delta"] == 0.1 and len(doc["answer"]["groups"]) == 3
    verdicts = {g["verdict"] for g in doc["answer"]["groups"]}
    assert verdicts == {"not separated", "best", "crash"}
    crash = next(g for g in doc["answer"]["groups"] if g["verdict"] == "crash")
    assert {v["verdict"] for v in crash["crash"]} == {"unsafe", "unsafe by design", "safe"}
    bad = runner.invoke(main, ["report", str(run_dir), "--format", "json", "--delta", "0%"])
    assert bad.exit_code == 2 and "--delta" in bad.output
    work = runner.invoke(main, ["report", str(run_dir), "--format", "json", "--work-delta", "2%"])
    assert work.exit_code == 0, work.output
    assert all(g["work"]["delta"] == 0.02 for g in json.loads(work.output)["answer"]["groups"] if g["work"])
    bad = runner.invoke(main, ["report", str(run_dir), "--format", "json", "--work-delta", "100%"])
    assert bad.exit_code == 2 and "--work-delta 100%" in bad.output


def test_the_schema_rejects_what_the_answer_never_writes() -> None:
    _, docs = winner()
    doc = {"title": "t", "answer": answer_text.to_json(build(typed(docs), draws=DRAWS))}
    validator = jsonschema.Draft202012Validator(SCHEMA)
    validator.validate(doc)
    doc["answer"]["groups"][0]["verdict"] = "winner"
    assert not validator.is_valid(doc)
    doc["answer"]["groups"][0]["verdict"] = "tie"  # version 1's word: gone
    assert not validator.is_valid(doc)
    doc["answer"]["groups"][0]["verdict"] = "best"
    doc["answer"]["groups"][0]["configurations"][0]["status"] = "tied"
    assert not validator.is_valid(doc)
    doc["answer"]["groups"][0]["configurations"][0]["status"] = "worse"
    doc["answer"]["groups"][0]["configurations"][0]["surprise"] = 1
    assert not validator.is_valid(doc)
    del doc["answer"]["groups"][0]["configurations"][0]["surprise"]
    doc["answer"]["version"] = 1
    assert not validator.is_valid(doc)


class _Outline(html.parser.HTMLParser):
    """The page's headings (h2, h3) and figure captions in order, and where <details> opens."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self._tag: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("h2", "h3", "figcaption"):
            self._tag, self._text = tag, []
        elif tag in ("details", "section"):
            self.events.append((tag, dict(attrs).get("id") or dict(attrs).get("class") or ""))

    def handle_data(self, data: str) -> None:
        if self._tag:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == self._tag:
            self.events.append((tag, "".join(self._text)))
            self._tag = None


def test_the_html_page_opens_with_the_answer_then_forest_plots_then_the_details() -> None:
    _, docs = demo()
    _, more = winner("tps")
    page = html_page.html_report(report.of_results(typed(docs + more)), "t")
    outline = _Outline()
    outline.feed(page)
    events = outline.events
    h2 = [text for tag, text in events if tag == "h2"]
    assert h2[:3] == ["The answer", "Ratio to the baseline", "Environment"]
    assert events[0] == ("section", "answer")
    forest = [text for tag, text in events if tag == "figcaption" and "ratio of geometric means" in text]
    assert len(forest) == 2  # one per group
    details = events.index(("details", "details"))
    assert events.index(("h2", "Environment")) > details > max(events.index(("figcaption", f)) for f in forest)
    assert page.count(html_escape(tables.TABLE_LEGEND.replace("**bold**", "bold"))) == 1
    assert "No single best: ext4 and xfs are not separated" in page.split("<h2>Ratio to the baseline</h2>")[0]


def html_escape(text: str) -> str:
    import html as html_module

    return html_module.escape(text)


@pytest.mark.system  # headless Chromium: seconds
def test_the_html_page_in_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if not chromium:
        pytest.skip("no chromium")
    _, docs = demo()
    _, more = winner("tps")
    by, crashed = crash_docs()
    page = html_page.write_html(report.of_results(typed(docs + more + crashed)), "t", tmp_path)
    shot = tmp_path / "answer.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}"]
    subprocess.run(
        [chromium, *flags, "--window-size=1200,1600", f"--screenshot={shot}", page.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 10_000  # the screenshot stays in the test's tmp_path as an artefact
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", page.as_uri()], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    outline = _Outline()
    outline.feed(dom)
    assert next(text for tag, text in outline.events if tag == "h2") == "The answer"


def test_fsmatrix_run_ends_with_the_answer_then_the_report_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fsmatrix run` with a backend that returns stored-looking results: no VM, no benchmark."""
    (ext4, xfs, jfs), docs = demo()
    by_cell = {(d["cell_id"], d["repeat"]): d for d in docs}

    class Stored:
        def preflight(self, cells: list[MatrixCell]) -> None:
            pass

        def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
            return dict(by_cell[(cell.id, repeat)])

        def environment(self) -> dict[str, Any]:
            return {}

        def close(self) -> None:
            pass

    import fsmatrix.cli.run as cli_run

    monkeypatch.setitem(cli_run.BACKENDS, "host", BackendEntry("host", "stored results", True, lambda w, d: Stored()))
    matrix_file = tmp_path / "m.yaml"
    matrix_file.write_text(json.dumps({"name": "t", "axes": {"filesystem": ["ext4", "xfs", "jfs"]},
                                       "defaults": {"workload": THREEN1}, "repeat": 3}))  # fmt: skip
    where = ["--results", str(tmp_path / "results"), "--workdir", str(tmp_path / "work")]
    # --no-race: the stored 3 runs a cell (the group would race by default, asking for more)
    out = CliRunner().invoke(main, ["run", str(matrix_file), *where, "--no-race"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.strip().splitlines()
    report_md = tmp_path / "results" / "t" / "report.md"
    assert lines[-1] == f"report: {report_md.resolve()}"
    assert lines[-2].startswith(
        "answer: threen1 1..100000 w2 b5000 spelled: No single best: ext4 and xfs are not separated"
    )
    assert report_md.read_text().splitlines()[2] == "## The answer"
    # matrix.json's baseline: the cell with every setting at its default (older fsmatrix: none, the first cell)
    rule = r"Baseline chosen: ext4 \((every setting at its default|first cell; the matrix names none)\)\."
    assert re.search(rule, report_md.read_text())


def test_a_group_pooled_from_several_runs_says_so_loudly() -> None:
    # A README audit's finding: `fsmatrix report results` (a whole root) answered on runs of eight sittings
    # and two commits as if one. "Answers never pool history": the answer says what it pooled.
    ext4, xfs = cells({"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload": THREEN1}})
    docs = runs(ext4, [10.0, 10.2, 9.9]) + runs(xfs, [10.1, 10.3, 9.8])
    for doc in docs[3:]:
        doc["run_id"] = "tuesday"
    (g,) = answering.build(typed(docs)).groups
    (line,) = [s for s in sentences.said(g, 0.05).details if s.startswith("POOLED:")]
    assert line.startswith("POOLED: this group's runs come from 2 runs (t, tuesday), not one sitting")
    assert "**POOLED:**" in "\n".join(answer_text.markdown_lines(answering.build(typed(docs))))
    (alone,) = answering.build(typed(docs[:3] + runs(xfs, [10.1, 10.3, 9.8]))).groups
    assert not any(s.startswith("POOLED") for s in sentences.said(alone, 0.05).details)
