"""History on the store's columns (results/store/history.py, schema version 2): the selection is SQL on
both databases, the points are built from columns, a document is read only either side of a change
point, and a store of version 1 is migrated with its new columns filled from its documents (all of it
or none of it). Real SQLite files and a throwaway PostgreSQL (fsmatrix.bench.throwaway_pg), real Otava
where change points are wanted; the documents are a real host-backend result (tests/data/goldens)."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke
from fsmatrix.backends import image
from fsmatrix.bench.throwaway_pg import Cluster, available, cluster
from fsmatrix.results.store import Result, comparison_group, database, otava, schema
from fsmatrix.results.store import history as stored_history
from fsmatrix.results.store import url as store_urls
from test_history import document, step_values

needs_postgres_user = pytest.mark.root(reason="needs root: runs PostgreSQL as the postgres OS user")
OTHER_CPU = "Other CPU 9000"
WIDE = {"params.workload.threen1.workers": 4}  # another comparison group: the workload's parameters differ


@dataclass
class Target:
    """An empty store: its URL, and a statement on the database itself (not through the store)."""

    url: str
    raw: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]

    @property
    def parsed(self) -> store_urls.StoreURL:
        return store_urls.parse(self.url)


@pytest.fixture(scope="module")
def otava_python() -> Path:
    return otava.ensure(image.cache_root() / otava.VENV_NAME)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Cluster]:
    if not available():
        pytest.skip("PostgreSQL 15's initdb (make deps) and runuser are needed")
    with cluster("unused-password-of-the-pusher-role") as server:
        yield server


_databases = itertools.count(1)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=[pytest.mark.system, needs_postgres_user])])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "sqlite":
        path = tmp_path / "store.sqlite"

        def on_file(statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
            db = sqlite3.connect(path, isolation_level=None)
            try:
                return db.execute(statement, tuple(params)).fetchall()
            finally:
                db.close()

        return Target(f"sqlite:///{path}", on_file)
    server: Cluster = request.getfixturevalue("postgres")
    name = f"columns_{next(_databases)}"
    server.create_database(name)

    def on_server(statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with server.connect(name) as db:
            cursor = db.execute(statement.replace("?", "%s"), tuple(params))
            return list(cursor.fetchall()) if cursor.description else []

    return Target(server.url(name), on_server)


def made(cell: str, nights: int, *, change: dict[str, Any] | None = None, start: int = 0) -> list[dict[str, Any]]:
    """``nights`` runs of one cell, elapsed_s and cpu_busy_s its key metrics."""
    docs = []
    for i in range(start, start + nights):
        doc = document(i, 1.0 + i / 100, run_id=f"night-{i:02d}", change=change)
        doc["cell_id"] = cell
        doc["key_metrics"] = {"elapsed_s": "lower", "cpu_busy_s": "lower"}
        docs.append(doc)
    return docs


def shelf() -> list[dict[str, Any]]:
    """Two cells of two comparison groups, one of them on two hardware classes, a failed run, and a run
    whose start time is in another offset (its text sorts after the next night's, its instant before)."""
    docs = made("ext4-a", 6) + made("ext4-a", 4, change={"provenance.host.cpu_model": OTHER_CPU}, start=10)
    docs += made("xfs-b", 5, change=WIDE, start=20)
    docs[1]["status"] = "failed"
    docs[2]["started_at"] = "2026-11-04T02:30:00+02:00"  # 00:30Z: before night 3's 01:00Z, its text after
    return docs


def push(url: str, docs: Sequence[dict[str, Any]]) -> None:
    with database.Store.open(store_urls.parse(url)) as opened:
        opened.push([Result.read(d) for d in docs])


def series_of(url: str, **selected: Any) -> list[tuple[str, str, str, str, list[str]]]:
    """(cell, hardware class, metric, group label, the points' run ids) of each series."""
    with database.Store.open(store_urls.parse(url)) as opened:
        found = stored_history.load_series(opened, stored_history.Selection(**selected))
    return [(s.cell_id, s.hardware_class, s.metric, s.group_label, [p.run_id for p in s.points]) for s in found]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every query the store's readers make (``Store.select``), as it was asked."""
    seen: list[str] = []
    select = database.Store.select

    def spy(self: database.Store, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        seen.append(sql)
        return select(self, sql, params)

    monkeypatch.setattr(database.Store, "select", spy)
    return seen


# --------------------------------------------------------------------------------------------
# the selection: SQL on the columns, documents never read


def test_series_come_from_the_columns_selected_in_sql(target: Target, statements: list[str]) -> None:
    docs = shelf()
    push(target.url, docs)
    threen1, wide = comparison_group(docs[0]["params"], "threen1")[1], comparison_group(docs[-1]["params"], "threen1")
    epyc = "AMD EPYC, 2 CPUs, 24 GiB, disk unknown model (rotational)"
    other = epyc.replace("AMD EPYC", OTHER_CPU)
    a_nights = ["night-00", "night-02", "night-03", "night-04", "night-05"]  # night 1 failed; night 2 before 3
    every = series_of(target.url)
    assert every == [
        ("ext4-a", epyc, "cpu_busy_s", threen1, a_nights),
        ("ext4-a", epyc, "elapsed_s", threen1, a_nights),
        ("ext4-a", other, "cpu_busy_s", threen1, [f"night-{i}" for i in range(10, 14)]),
        ("ext4-a", other, "elapsed_s", threen1, [f"night-{i}" for i in range(10, 14)]),
        ("xfs-b", epyc, "cpu_busy_s", wide[1], [f"night-{i}" for i in range(20, 25)]),
        ("xfs-b", epyc, "elapsed_s", wide[1], [f"night-{i}" for i in range(20, 25)]),
    ]
    assert threen1 != wide[1]
    assert series_of(target.url, only=("xfs-*",)) == every[4:]
    assert series_of(target.url, only=("nothing-*,ext4-*",), metric="elapsed_s") == [every[1], every[3]]
    later = ["night-11", "night-12", "night-13"]
    since = series_of(target.url, since="2026-11-12T00:00:00+00:00")
    assert since == [every[2][:4] + (later,), every[3][:4] + (later,), *every[4:]]
    assert series_of(target.url, hardware_class=other) == every[2:4]
    assert series_of(target.url, group=wide[1]) == every[4:] == series_of(target.url, group=wide[0])
    assert series_of(target.url, hardware_class=other, group=wide[1]) == []  # each there, together nothing
    assert statements and not [s for s in statements if "document" in s]  # no document read for any of it


def test_many_cells_are_selected_a_few_at_a_time(
    target: Target, statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    push(target.url, [d for i in range(5) for d in made(f"ext4-c{i}", 3, start=3 * i)])
    whole = series_of(target.url, only=("ext4-c*",))
    monkeypatch.setattr(stored_history, "CELLS_PER_QUERY", 2)
    statements.clear()
    assert series_of(target.url, only=("ext4-c*",)) == whole and len(whole) == 10
    assert sum(" IN (" in s for s in statements) == 3  # 5 cells, 2 a query


def test_an_unknown_metric_class_or_group_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    push(url, shelf())
    env = {k: None for k in os.environ if k == store_urls.ENV or k.startswith("PG")}
    for args, words in [
        (["--metric", "tps"], "--metric 'tps': no stored result has it as a key metric; known: cpu_busy_s, elapsed_s"),
        (
            ["--hardware-class", "a Cray", "--only", "xfs-*"],
            "--hardware-class 'a Cray': no stored result of xfs-* is of that hardware class; known: AMD EPYC, 2 CPUs",
        ),
        (["--group", "fio"], "--group 'fio': no stored result is of that comparison group; known: threen1 "),
    ]:
        done = invoke("history", "--store", url, *args, env=env)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("fsmatrix: error: " + words), line


# --------------------------------------------------------------------------------------------
# a change point's documents, and only theirs


def test_only_the_documents_either_side_of_a_change_point_are_read(
    tmp_path: Path, otava_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = step_values(16, 16, 1.25, seed=7)
    kernel = {"provenance.kernel": "6.99"}
    docs = [document(i, v, run_id=f"n{i}", change=kernel if i >= 16 else None) for i, v in enumerate(values)]
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    push(url, docs)
    asked: list[set[str]] = []
    results = database.Store.results

    def spy(self: database.Store, ids: Any) -> dict[str, Result]:
        asked.append(set(ids))
        return results(self, ids)

    monkeypatch.setattr(database.Store, "results", spy)
    done = invoke("history", "--store", url, "--format", "json")
    assert done.returncode == 0, done.stderr
    (series,) = json.loads(done.stdout)["series"]
    (cp,) = series["change_points"]
    assert cp["changed"] == {"kernel": ["6.18.44-fc-v782", "6.99"]}
    assert (cp["before_run"], cp["after_run"]) == ("n15 r1", "n16 r1")
    with database.Store.open(store_urls.parse(url)) as opened:
        ids = dict(opened.select("SELECT run_id, id FROM results"))
    assert asked == [{ids["n15"], ids["n16"]}]


# --------------------------------------------------------------------------------------------
# version 1 → 2


def version_1_store(target: Target, docs: Sequence[dict[str, Any]]) -> None:
    """A store as an fsmatrix of schema version 1 left it: its tables, and its rows without the columns
    version 2 added."""
    dialect = target.parsed.scheme
    for statement in schema.MIGRATIONS[1](dialect):
        target.raw(statement, ())
    target.raw(f"INSERT INTO {schema.META} (key, value) VALUES ('schema_version', '1')", ())
    document_type = "?" if dialect == "sqlite" else "?::jsonb"
    for row in (database.ResultColumns.of(Result.read(d)) for d in docs):
        target.raw(
            "INSERT INTO results (id, run_id, cell_id, repeat, host, status, workload, comparison_group, "
            "hardware_class, fsmatrix_commit, settings_sha256, kernel, image, backend, tools, started_at, "
            f"finished_at, pushed_at, document) VALUES ({'?, ' * 18}{document_type})",
            (row.id, row.run_id, row.cell_id, row.repeat, row.host, row.status, row.workload, row.comparison_group,
             row.hardware_class, row.fsmatrix_commit, row.settings_sha256, row.kernel, row.image, row.backend,
             row.tools, row.started_at, row.finished_at, "2026-11-30T00:00:00+00:00", row.document),
        )  # fmt: skip
        for metric, value, direction in row.metrics:
            target.raw("INSERT INTO result_metrics VALUES (?, ?, ?, ?)", (row.id, metric, value, direction))


def test_a_version_1_store_is_migrated_and_its_columns_filled(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = shelf()
    docs[0]["duration_s"] = 12.5
    version_1_store(target, docs)
    monkeypatch.setattr(database, "BATCH", 4)  # several batches of the fill
    with database.Store.open(target.parsed) as opened:
        assert opened.count() == len(docs)
    assert target.raw(f"SELECT value FROM {schema.META}", ()) == [(str(schema.VERSION),)]
    filled = {r[0]: (r[1], r[2]) for r in target.raw("SELECT id, comparison_label, duration_s FROM results", ())}
    for d in docs:
        row = database.ResultColumns.of(Result.read(d))
        assert filled[row.id] == (row.comparison_label, row.duration_s) and row.comparison_label
    assert filled[database.ResultColumns.of(Result.read(docs[0])).id][1] == 12.5
    fresh = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    push(fresh, docs)
    assert series_of(target.url) == series_of(fresh) != []


def test_a_migration_stopped_halfway_leaves_version_1(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = shelf()
    version_1_store(target, docs)
    monkeypatch.setattr(database, "BATCH", 4)
    calls = itertools.count()

    def failing(params: Any, workload: str) -> tuple[str, str]:
        if next(calls) == 6:  # in the fill's second batch
            raise RuntimeError("the migration is killed here")
        return comparison_group(params, workload)

    monkeypatch.setattr(database, "comparison_group", failing)
    with pytest.raises(RuntimeError, match="killed here"), database.Store.open(target.parsed):
        pass
    assert target.raw(f"SELECT value FROM {schema.META}", ()) == [("1",)]
    with pytest.raises(Exception, match="comparison_label"):
        target.raw("SELECT comparison_label FROM results", ())
    monkeypatch.undo()
    with database.Store.open(target.parsed) as opened:
        assert opened.count() == len(docs)
    assert target.raw(f"SELECT value FROM {schema.META}", ()) == [(str(schema.VERSION),)]
