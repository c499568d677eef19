"""A results root's one SQLite (results/store/root_store.py): its store, which `fsmatrix run`, `results merge`
and `results reindex` fill and the estimates, `results list` and `history` read; an old root's
``index.sqlite`` absorbed into it and removed, its documents untouched; taken on a network filesystem
(a Slurm task's shared directory) where `run` writes it, without WAL, and refused there where a store
is named. Real SQLite files, real `fsmatrix` processes; the documents are real host-backend results
(tests/data/goldens) renamed into new runs."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import FSMATRIX
from fsmatrix.errors import UserError
from fsmatrix.results import store
from fsmatrix.results.store import database, past_runs
from fsmatrix.results.store import url as store_urls
from fsmatrix.results.store.sides import load_side
from test_store import cli_env, snapshot, write_run

# The index every results root had before its store was its one SQLite (store/index.py before issue 46).
OLD_INDEX = """CREATE TABLE runs (
     run_id TEXT NOT NULL, cell_id TEXT NOT NULL, repeat INTEGER NOT NULL,
     status TEXT NOT NULL, workload TEXT, filesystem TEXT, started_at TEXT,
     duration_s REAL, git_sha TEXT, kernel TEXT, backend TEXT, path TEXT NOT NULL,
     metrics TEXT NOT NULL,
     PRIMARY KEY (run_id, cell_id, repeat))"""


def old_root(root: Path) -> list[dict[str, Any]]:
    """A results root as an older fsmatrix left it: a run's files, and ``index.sqlite`` naming them (one
    by a path relative to wherever that run was started, one whose file is gone)."""
    docs = write_run(root / "nightly", 6, repeats=3)
    db = sqlite3.connect(root / "index.sqlite")
    db.execute(OLD_INDEX)
    for i, doc in enumerate(docs):
        path = store.result_path(root / "nightly", doc["cell_id"], doc["repeat"])
        shown = str(path) if i else f"elsewhere/{doc['cell_id']}/r{doc['repeat']}.json"
        db.execute(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            ("nightly", doc["cell_id"], doc["repeat"], doc["status"], doc["workload"], None, doc["started_at"],
             doc["duration_s"], None, None, None, shown, json.dumps(doc["metrics"])),
        )  # fmt: skip
    db.execute(
        "INSERT INTO runs VALUES ('gone', 'c', 1, 'passed', 'threen1', NULL, NULL, 1.0, NULL, NULL, NULL, "
        "'/nonexistent/r1.json', '{}')"
    )
    db.commit()
    db.close()
    return docs


def fsmatrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FSMATRIX, *args], capture_output=True, text=True, env=cli_env(), timeout=300)


def test_an_old_index_is_absorbed_into_the_store_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "results"
    docs = old_root(root)
    files = snapshot(root / "nightly")
    listed = fsmatrix("results", "list", "--results", str(root), "--format", "json")  # the default store: the root's
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["documents"] == len(docs) == 6
    (said,) = listed.stderr.strip().splitlines()
    assert f"index.sqlite: its 7 documents (6 of them readable) are in {root / 'store.sqlite'} now" in said
    assert sorted(p.name for p in root.iterdir()) == ["nightly", "store.sqlite"]  # no index, no -wal beside it
    assert snapshot(root / "nightly") == files  # the documents stay where they were, as they were
    again = fsmatrix("results", "list", "--results", str(root), "--format", "json")
    assert again.stderr == "" and json.loads(again.stdout) == json.loads(listed.stdout)


def test_the_estimates_read_an_old_root_through_its_store(tmp_path: Path) -> None:
    root = tmp_path / "results"
    docs = old_root(root)
    found = past_runs.stored_runs(root, docs[0]["provenance"]["host"]["machine_id"])
    assert sorted((r.cell_id, r.duration_s) for r in found) == sorted((d["cell_id"], d["duration_s"]) for d in docs)
    assert not (root / "index.sqlite").exists()
    assert past_runs.stored_runs(root, "another-machine") == []
    assert past_runs.stored_runs(tmp_path / "nothing-here", None) == []
    assert not (tmp_path / "nothing-here").exists()  # reading made no store


def test_an_unreadable_old_index_is_removed_and_reindex_fills_the_store(tmp_path: Path) -> None:
    root = tmp_path / "results"
    docs = write_run(root / "nightly", 4, repeats=2)
    (root / "index.sqlite").write_text("not a database")
    done = fsmatrix("results", "reindex", str(root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"indexed 4 result documents in {root / 'store.sqlite'}"
    assert "index.sqlite: not a readable index" in done.stderr and not (root / "index.sqlite").exists()
    with store.open_root(root) as opened:
        assert sorted(r[0] for r in opened.select("SELECT cell_id FROM results")) == sorted(d["cell_id"] for d in docs)
    pushed = fsmatrix("results", "push", str(root / "nightly"), "--results", str(root))
    assert "4 result documents" in pushed.stdout and "0 new, 4 already there" in pushed.stdout  # already in it


def test_the_root_store_on_a_network_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written by `run` there, as the old index was (a Slurm task's root on the shared directory), in
    SQLite's rollback journal: WAL's shared memory wants one machine. Named as a store, refused."""
    root = tmp_path / "results"
    (doc,) = write_run(root / "nightly", 1, repeats=1)
    monkeypatch.setattr(store_urls, "filesystem_of", lambda path: "nfs4")
    index = store.RootStore(root)
    try:
        index.add("nightly", doc, store.result_path(root / "nightly", doc["cell_id"], 1))
    finally:
        index.close()
    journal = sqlite3.connect(root / "store.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "delete"
    url = store_urls.resolve(None, root)
    with pytest.raises(UserError, match=r"network filesystem \(nfs4\)"), store.open_store(url, root):
        pass
    with pytest.raises(UserError, match=r"network filesystem \(nfs4\)"), database.Store.open(url):
        pass


def test_a_document_the_store_cannot_read_is_one_line(tmp_path: Path) -> None:
    shard = tmp_path / "shard" / "r" / "c1"
    shard.mkdir(parents=True)
    (shard / "r1.json").write_text(json.dumps({"run_id": "r", "cell_id": "c1", "repeat": 1, "status": 5}))
    done = fsmatrix("results", "merge", str(tmp_path / "shard"), "--into", str(tmp_path / "merged"))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("fsmatrix: error: ") and "not a usable result document: status is 5" in line


def test_a_compared_run_id_is_its_folder_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "results"
    docs = write_run(root / "base", 3, repeats=3)
    assert len(load_side("base", root).docs) == len(docs)  # no store needed: the folder is the run
    for spec in ("nightly", f"base/{docs[0]['cell_id']}"):  # no such run; a path under the root is no run id
        with pytest.raises(UserError, match="no run with that id"):
            load_side(spec, root)
