"""History on the store's columns (results/store/history.py, schema version 3): the selection is SQL on
both databases, the points are built from columns, the work per operation is rows of its own kind
(measured values only), a document is read only either side of a change point, and a store of version 1
or 2 is migrated with its new columns and work rows filled from its documents (all of it or none of
it). Real SQLite files and a throwaway PostgreSQL (fsmatrix.bench.throwaway_pg), real Otava where change
points are wanted; the documents are a real host-backend result (tests/data/goldens)."""

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


def made(
    cell: str, nights: int, *, change: dict[str, Any] | None = None, start: int = 0, work: bool = False
) -> list[dict[str, Any]]:
    """``nights`` runs of one cell, elapsed_s and cpu_busy_s its key metrics; ``work``: with the
    template's work per operation (device bytes written and read per operation)."""
    docs = []
    for i in range(start, start + nights):
        doc = document(i, 1.0 + i / 100, run_id=f"night-{i:02d}", change=change, work=work)
        doc["cell_id"] = cell
        doc["key_metrics"] = {"elapsed_s": "lower", "cpu_busy_s": "lower"}
        docs.append(doc)
    return docs


def shelf(work: bool = False) -> list[dict[str, Any]]:
    """Two cells of two comparison groups, one of them on two hardware classes, a failed run, and a run
    whose start time is in another offset (its text sorts after the next night's, its instant before)."""
    other = {"provenance.host.cpu_model": OTHER_CPU}
    docs = made("ext4-a", 6, work=work) + made("ext4-a", 4, change=other, start=10, work=work)
    docs += made("xfs-b", 5, change=WIDE, start=20, work=work)
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
        (
            ["--metric", "tps"],
            "--metric 'tps': no stored result has it as a key or work metric; known: cpu_busy_s, elapsed_s",
        ),
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
# the work per operation: rows of its own kind, measured values only


def test_work_metrics_are_rows_beside_the_key_metrics() -> None:
    doc = document(0, 1.0, work=True)
    doc["metrics"].update(fsyncs_per_op=2.0, instructions_per_op=None, cycles_per_op=float("nan"))
    doc["metrics_unavailable"] = {"instructions_per_op": "perf events not permitted"}
    doc["key_metrics"] = {"elapsed_s": "lower", "device_write_bytes_per_op": "lower"}
    rows = database.metric_rows(Result.read(doc))
    assert rows == (
        ("elapsed_s", 1.0, "lower", schema.KEY),
        ("device_write_bytes_per_op", 193.984, "lower", schema.KEY),  # declared key too: one row, key
        ("device_read_bytes_per_op", 0.0, "lower", schema.WORK),  # 0 measured is a point; None is none
        ("fsyncs_per_op", 2.0, "lower", schema.WORK),
    )


def test_work_series_are_told_apart(target: Target) -> None:
    docs = made("ext4-a", 3, work=True)
    docs[1]["key_metrics"]["device_write_bytes_per_op"] = "lower"  # one run declared it key: the series is key
    push(target.url, docs)
    with database.Store.open(target.parsed) as opened:
        found = {s.metric: s.kind for s in stored_history.load_series(opened)}
    assert found == {
        "cpu_busy_s": schema.KEY,
        "device_read_bytes_per_op": schema.WORK,
        "device_write_bytes_per_op": schema.KEY,
        "elapsed_s": schema.KEY,
    }
    assert series_of(target.url, metric="device_read_bytes_per_op")[0][4] == ["night-00", "night-01", "night-02"]


# --------------------------------------------------------------------------------------------
# version 1 or 2 → 3


def old_store(target: Target, docs: Sequence[dict[str, Any]], version: int) -> None:
    """A store as an fsmatrix of schema ``version`` (1 or 2) left it: its tables, and its rows without
    what later versions added (version 2's columns, version 3's rows of the work metrics)."""
    dialect = target.parsed.scheme
    for v in range(1, version + 1):
        for statement in schema.MIGRATIONS[v](dialect):
            target.raw(statement, ())
    target.raw(f"INSERT INTO {schema.META} (key, value) VALUES ('schema_version', ?)", (str(version),))
    document_type = "?" if dialect == "sqlite" else "?::jsonb"
    for row in (database.ResultColumns.of(Result.read(d)) for d in docs):
        columns = (
            "id, run_id, cell_id, repeat, host, status, workload, comparison_group, hardware_class, "
            "fsmatrix_commit, settings_sha256, kernel, image, backend, tools, started_at, finished_at, pushed_at"
        )
        values: list[Any] = [
            row.id, row.run_id, row.cell_id, row.repeat, row.host, row.status, row.workload, row.comparison_group,
            row.hardware_class, row.fsmatrix_commit, row.settings_sha256, row.kernel, row.image, row.backend,
            row.tools, row.started_at, row.finished_at, "2026-11-30T00:00:00+00:00",
        ]  # fmt: skip
        if version >= 2:
            columns += ", comparison_label, duration_s"
            values += [row.comparison_label, row.duration_s]
        target.raw(
            f"INSERT INTO results ({columns}, document) VALUES ({'?, ' * len(values)}{document_type})",
            (*values, row.document),
        )
        for metric, value, direction, kind in row.metrics:
            if kind == schema.KEY:  # an older fsmatrix stored the key metrics only
                target.raw("INSERT INTO result_metrics VALUES (?, ?, ?, ?)", (row.id, metric, value, direction))


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_store_is_migrated_and_filled_from_its_documents(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    docs = shelf(work=True)
    docs[0]["duration_s"] = 12.5
    docs[3]["metrics"]["device_read_bytes_per_op"] = None  # not measured there: no row, no point
    docs[3]["metrics_unavailable"] = {"device_read_bytes_per_op": "no data devices"}
    old_store(target, docs, version)
    assert target.raw("SELECT COUNT(*) FROM result_metrics", ()) == [(2 * len(docs),)]  # the key metrics only
    monkeypatch.setattr(database, "BATCH", 4)  # several batches of the fill
    with database.Store.open(target.parsed) as opened:
        assert opened.count() == len(docs)
    assert target.raw(f"SELECT value FROM {schema.META}", ()) == [(str(schema.VERSION),)]
    filled = {r[0]: (r[1], r[2]) for r in target.raw("SELECT id, comparison_label, duration_s FROM results", ())}
    rows = [database.ResultColumns.of(Result.read(d)) for d in docs]
    for row in rows:
        assert filled[row.id] == (row.comparison_label, row.duration_s) and row.comparison_label
    assert filled[rows[0].id][1] == 12.5
    stored = set(target.raw("SELECT result_id, metric, value, direction, kind FROM result_metrics", ()))
    assert stored == {(row.id, *m) for row in rows for m in row.metrics}
    work = {(rid, metric) for rid, metric, _, _, kind in stored if kind == schema.WORK}
    assert len(work) == 2 * len(docs) - 1 and (rows[3].id, "device_read_bytes_per_op") not in work
    fresh = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    push(fresh, docs)
    assert series_of(target.url) == series_of(fresh) != []
    assert {s[2] for s in series_of(target.url)} >= {"device_write_bytes_per_op", "device_read_bytes_per_op"}


@pytest.mark.parametrize(
    ("version", "killed", "added"), [(1, "comparison_group", "comparison_label"), (2, "metric_rows", "kind")]
)
def test_a_migration_stopped_halfway_leaves_the_old_version(
    target: Target, monkeypatch: pytest.MonkeyPatch, version: int, killed: str, added: str
) -> None:
    docs = shelf(work=True)
    old_store(target, docs, version)
    monkeypatch.setattr(database, "BATCH", 4)
    calls = itertools.count()
    original = getattr(database, killed)

    def failing(*args: Any) -> Any:
        if next(calls) == 6:  # in the fill's second batch
            raise RuntimeError("the migration is killed here")
        return original(*args)

    monkeypatch.setattr(database, killed, failing)
    with pytest.raises(RuntimeError, match="killed here"), database.Store.open(target.parsed):
        pass
    assert target.raw(f"SELECT value FROM {schema.META}", ()) == [(str(version),)]
    with pytest.raises(Exception, match=added):
        target.raw(f"SELECT {added} FROM results r JOIN result_metrics m ON m.result_id = r.id", ())
    monkeypatch.undo()
    with database.Store.open(target.parsed) as opened:
        assert opened.count() == len(docs)
    assert target.raw(f"SELECT value FROM {schema.META}", ()) == [(str(schema.VERSION),)]
    assert target.raw("SELECT COUNT(*) FROM result_metrics WHERE kind = 'work'", ()) == [(2 * len(docs),)]
