"""Result storage: loading with clear errors, merging shard artifacts, filling a root's store from its files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import typed
from fsmatrix.agent import jsonfile
from fsmatrix.cli import main
from fsmatrix.errors import UserError
from fsmatrix.results import store
from fsmatrix.results.render import markdown, tables
from fsmatrix.results.verdict import groups, report


def doc(cell: str, repeat: int, elapsed: float, run_id: str = "r") -> dict:  # type: ignore[type-arg]
    return {
        "schema_version": 1,
        "run_id": run_id,
        "cell_id": cell,
        "repeat": repeat,
        "workload": "threen1",
        "status": "passed",
        "params": {"filesystem": "ext4"},
        "metrics": {"elapsed_s": elapsed},
        "provenance": {"git": {"sha": "abc"}, "kernel": "6.1", "backend": "host"},
    }


def put(root: Path, d: dict) -> Path:  # type: ignore[type-arg]
    path = store.result_path(root / d["run_id"], d["cell_id"], d["repeat"])
    jsonfile.write_atomic(path, d)
    return path


def test_merge_shards_into_one_root(tmp_path: Path) -> None:
    shard_a, shard_b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    put(shard_a, doc("c1", 1, 1.0))
    put(shard_a, doc("c1", 2, 1.1)).with_suffix(".log").write_text("log a")
    put(shard_b, doc("c2", 1, 2.0))
    out = CliRunner().invoke(main, ["results", "merge", str(shard_a), str(shard_b), "--into", str(merged)])
    assert out.exit_code == 0 and "merged 3" in out.output
    assert (merged / "r" / "c1" / "r2.log").read_text() == "log a"
    assert len(store.load_results(merged / "r")) == 3
    db = sqlite3.connect(merged / "store.sqlite")  # the root's store: its one SQLite
    assert db.execute("select count(*) from results").fetchone()[0] == 3
    assert not (merged / "index.sqlite").exists()
    # merging the same artifacts again changes nothing
    out = CliRunner().invoke(main, ["results", "merge", str(shard_a), "--into", str(merged)])
    assert out.exit_code == 0 and "merged 0" in out.output and "2 already there" in out.output


def test_merge_unites_the_shards_matrix_json(tmp_path: Path) -> None:
    """Each shard's matrix.json lists its own cells: the merged one lists every cell, for the answer's
    baselines (a shard whose cells are all known adds nothing)."""
    for shard, cell in (("a", "c1"), ("b", "c2"), ("c", "c2")):
        put(tmp_path / shard, doc(cell, 1, 1.0))
        record = {"name": "m", "baseline_rule": "defaults", "cells": [{"id": cell, "baseline": cell == "c2"}]}
        jsonfile.write_atomic(tmp_path / shard / "r" / "matrix.json", record)
    store.merge([tmp_path / "a", tmp_path / "b", tmp_path / "c"], tmp_path / "m")
    merged = jsonfile.read(tmp_path / "m" / "r" / "matrix.json")
    assert merged["cells"] == [{"id": "c1", "baseline": False}, {"id": "c2", "baseline": True}]
    assert merged["baseline_rule"] == "defaults"


def test_merge_never_replaces_a_different_measurement(tmp_path: Path) -> None:
    put(tmp_path / "a", doc("c1", 1, 1.0))
    put(tmp_path / "b", doc("c1", 1, 9.0))
    store.merge([tmp_path / "a"], tmp_path / "m")
    out = CliRunner().invoke(main, ["results", "merge", str(tmp_path / "b"), "--into", str(tmp_path / "m")])
    assert out.exit_code == 2 and "already holds a different result" in out.output
    assert jsonfile.read(tmp_path / "m" / "r" / "c1" / "r1.json")["metrics"]["elapsed_s"] == 1.0


def test_reindex_fills_the_store_from_documents(tmp_path: Path) -> None:
    for i in range(1, 4):
        put(tmp_path, doc("c", i, float(i)))
    (tmp_path / "index.sqlite").write_text("garbage")  # an old index that cannot be read: removed
    assert store.reindex(tmp_path) == 3
    assert not (tmp_path / "index.sqlite").exists()
    with store.open_root(tmp_path) as opened:
        rows = opened.select("SELECT document FROM results ORDER BY repeat")
    assert [json.loads(r[0])["metrics"]["elapsed_s"] for r in rows] == [1.0, 2.0, 3.0]
    assert store.reindex(tmp_path) == 3  # again: nothing twice
    with store.open_root(tmp_path) as opened:
        assert opened.count() == 3


def test_loading_bad_results_gives_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        store.load_results(tmp_path / "missing")
    with pytest.raises(UserError, match="no result documents"):
        store.load_results(tmp_path)
    put(tmp_path, {**doc("c", 1, 1.0), "schema_version": 99})
    with pytest.raises(UserError, match="schema version 99; this fsmatrix reads version 1"):
        store.load_results(tmp_path)
    (tmp_path / "r" / "c" / "r1.json").write_text("{not json")
    with pytest.raises(UserError, match="not a readable result document"):
        store.load_results(tmp_path)


def test_report_columns_name_the_layout_and_device_profile() -> None:
    base = {"filesystem": "xfs", "mount_options": "", "mkfs_options": "", "storage.layout": "single"}
    assert tables._column_label({**base, "device.profile": "native"}) == "xfs"
    striped = {**base, "storage.layout": "md-raid0", "storage.stripe_disks": 4, "storage.stripe_size": "64K"}
    assert tables._column_label({**striped, "device.profile": "hdd"}) == "xfs (md-raid0 4×64K, hdd profile)"
    assert tables._column_label({**base, "mount_options": "noatime"}) == "xfs (mount_options=noatime)"


def _fs_docs(filesystem: str, values: list[float], bound: str = "io") -> list[dict[str, Any]]:
    params = {
        "filesystem": filesystem,
        "mkfs_options": "",
        "mount_options": "",
        "storage": {"layout": "single"},
        "device": {"profile": "native"},
        "workload": {"threen1": {"start": 1, "end": 1000}},
    }
    return [
        {
            "cell_id": f"{filesystem}-c",
            "repeat": i,
            "workload": "threen1",
            "params": params,
            "status": "passed",
            "metrics": {"elapsed_s": v},
            "key_metrics": {"elapsed_s": "lower"},
            "samples": {"bound": bound},
            "provenance": {},
        }
        for i, v in enumerate(values, 1)
    ]


def test_report_bolds_a_winner_only_when_the_intervals_separate_it() -> None:
    # make demo's case: jfs 5.03 against ext4 5.19 ±11 %, three runs each: nothing separates them.
    close = markdown.markdown(
        report.of_results(typed(_fs_docs("jfs", [5.03, 4.9, 5.2]) + _fs_docs("ext4", [5.19, 4.7, 5.8], "cpu"))), "t"
    )
    tables = close.split("\n## threen1\n")[1].split("## Runs")[0]
    assert "**" not in tables.replace("**Elapsed time (s)**", "")
    assert "5.03 ±3% (not separated) [io]" in close and "5.19 ±11% (1.03×, not separated) [cpu]" in close
    assert "tied" not in close
    assert "**Elapsed time (s)** (lower is better; 3 repeats per entry)" in close
    # Clearly apart: the best is bold, the other "n×, worse".
    apart = markdown.markdown(
        report.of_results(typed(_fs_docs("jfs", [5.0, 5.05, 4.95]) + _fs_docs("ext4", [10.0, 10.1, 9.9]))), "t"
    )
    tables = apart.split("\n## threen1\n")[1]
    assert "**5** ±1% [io]" in tables and "10 ±1% (2.00×, worse) [io]" in tables and "not separated" not in tables
    # One column has nothing to beat.
    alone = groups.rank({"xfs": [1.0, 1.1, 1.2]}, "lower")
    assert alone["xfs"].mark == ""


def test_rank_marks_every_entry_with_the_answers_word() -> None:
    ranked = groups.rank(
        {"a": [10.0, 10.1, 9.9], "b": [10.2, 9.8, 10.3], "c": [20.0, 20.2, 19.8], "d": "failed"}, "lower"
    )
    assert (ranked["a"].mark, ranked["b"].mark, ranked["c"].mark) == ("not separated", "not separated", "worse")
    assert "d" not in ranked and ranked["c"].ratio == 2.0
    # Two runs are too few for any decision: nothing marked, never a winner.
    assert groups.rank({"a": [1.0, 1.0], "b": [5.0, 5.0]}, "lower")["a"].mark == ""
    # Equivalent: within ±5 % and shown to be.
    eq = groups.rank({"a": [10.0, 10.01, 9.99, 10.0], "b": [10.02, 10.0, 10.01, 10.03]}, "lower")
    assert eq["a"].mark == eq["b"].mark == "equivalent"


def test_rank_copes_with_zeros() -> None:
    """A value of 0 has no ratio: such an entry is never the leader, and nothing is claimed of it."""
    ranked = groups.rank({"a": [0.0, 0.0, 0.0], "b": [1.0, 1.1, 0.9]}, "lower")
    assert ranked["a"].ratio == 1.0 and ranked["b"].ratio == float("inf")
    assert ranked["a"].mark == ranked["b"].mark == ""  # one entry with a ratio: nothing to compare
    assert groups.rank({"a": [0.0, 0.0, 0.0], "b": [2.0, 2.0, 2.1]}, "higher")["a"].ratio == float("inf")


def test_report_names_the_guest_agents_commit_and_the_host_sides() -> None:
    docs = _fs_docs("xfs", [1.0, 1.1])
    assert "- fsmatrix commit: unknown" in markdown.markdown(report.of_results(typed(docs)), "t")
    for d in docs:
        d["provenance"] = {"git": {"sha": "a" * 40}, "host": {"fsmatrix_git": "b" * 40}}
    assert f"- fsmatrix commit: guest agent {'a' * 12}; host {'b' * 12}" in markdown.markdown(
        report.of_results(typed(docs)), "t"
    )
