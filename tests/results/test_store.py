"""The database store (results/store/database.py) on real databases: SQLite files and a PostgreSQL
server this module starts (fsmatrix.bench.throwaway_pg), written by real `fsmatrix results push` processes —
several at once, one killed with SIGKILL mid-batch, one facing a stopped server — and read back
with `fsmatrix results list`. Every test runs against both stores; the documents are real host-backend
results (tests/data/goldens) renamed into new runs, cells and repeats."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import fsmatrix
from conftest import FSMATRIX, TEST_DATA
from fsmatrix.bench.throwaway_pg import PASSWORD_ROLE, Cluster, available, cluster
from fsmatrix.results.store import database, schema
from fsmatrix.results.store import url as store_urls

pytestmark = pytest.mark.system
needs_postgres_user = pytest.mark.root(reason="needs root: runs PostgreSQL as the postgres OS user")

RUNNER = Path(fsmatrix.__file__).resolve().parents[1]  # the code under test, also in the CLI's processes
PASSWORD = "Zq9vWx7-not-in-any-output-K3p"  # the password role's: must never be printed or stored
GOLDENS = TEST_DATA / "goldens"
TEMPLATES = [
    json.loads(p.read_text())
    for folder in ("threen1/threen1", "pgbench/pgbench")
    for p in sorted((GOLDENS / folder).glob("*/r*.json"))
]
FIRST_NIGHT = datetime(2026, 11, 28, 1, 0, tzinfo=UTC)
CLI_TIMEOUT = 300  # one CLI process; it takes seconds, more on a loaded machine


# --------------------------------------------------------------------------------------------
# run folders as `fsmatrix run` writes them


def write_run(
    run_dir: Path, count: int, *, repeats: int = 5, night: int = 0, templates: Sequence[dict[str, Any]] = TEMPLATES
) -> list[dict[str, Any]]:
    """``count`` distinct result documents in ``run_dir`` (run id: its name): real documents under new
    cell ids and repeats, started 10 s apart from 01:00 UTC on the ``night``-th night, metrics scaled a
    little per night (the same run id, cells and repeats on another night is other content)."""
    cells: dict[str, dict[str, Any]] = {}
    docs = []
    for i in range(count):
        template = templates[(i // repeats) % len(templates)]
        cell_id = f"{template['cell_id']}-n{i // repeats:04d}"
        started = FIRST_NIGHT + timedelta(days=night, seconds=10 * i)
        doc = {
            **template,
            "run_id": run_dir.name,
            "cell_id": cell_id,
            "repeat": i % repeats + 1,
            "started_at": started.isoformat(),
            "finished_at": (started + timedelta(seconds=2)).isoformat(),
            "metrics": {k: _scaled(v, 1 + night / 100) for k, v in template["metrics"].items()},
        }
        if cell_id not in cells:
            cells[cell_id] = {"id": cell_id, "params": doc["params"]}
            (run_dir / cell_id).mkdir(parents=True)
        (run_dir / cell_id / f"r{doc['repeat']}.json").write_text(json.dumps(doc))
        docs.append(doc)
    (run_dir / "matrix.json").write_text(json.dumps({"name": run_dir.name, "cells": list(cells.values())}, indent=1))
    return docs


def _scaled(value: Any, factor: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return int(value * factor) if isinstance(value, int) else round(value * factor, 6)


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory``: its bytes and mtime."""
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------------
# the CLI in its own processes


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != store_urls.ENV and not k.startswith("PG")}
    return {**env, "PYTHONPATH": str(RUNNER), **extra}


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*FSMATRIX, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or cli_env()
    )


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def finish(process: subprocess.Popen[str]) -> Done:
    try:
        out, err = process.communicate(timeout=CLI_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return Done(process.returncode, out, err)


def at_once(*commands: Sequence[str], env: dict[str, str] | None = None) -> list[Done]:
    """The CLI commands started together (real processes), each waited for."""
    processes = [start(*command, env=env) for command in commands]
    return [finish(p) for p in processes]


def cli(*args: str, env: dict[str, str] | None = None) -> Done:
    return at_once(args, env=env)[0]


def one_line_error(done: Done, status: int) -> str:
    """``done`` failed with ``status``, one line on stderr saying so, no traceback, nothing on stdout."""
    assert done.returncode == status, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("fsmatrix: error: ")
    assert done.stdout == ""
    return lines[0]


def pushed(done: Done) -> tuple[int, int]:
    """(new, already there) of a successful push's output."""
    assert done.returncode == 0, done.output
    found = re.search(r"result documents to .*: (\d+) new, (\d+) already there", done.stdout)
    assert found, done.stdout
    return int(found[1]), int(found[2])


# --------------------------------------------------------------------------------------------
# the stores


@dataclass
class StoreUnderTest:
    kind: str  # sqlite or postgresql
    url: str
    path: Path | None = None  # sqlite
    pg: Cluster | None = None  # postgresql
    database: str = ""

    def count(self) -> int:
        """``Store.count()`` through the store's own code (which also opens and checks the store)."""
        with database.Store.open(store_urls.parse(self.url)) as opened:
            return opened.count()

    def raw(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A statement on the database itself, not through the store (no waiting on a writer, no migration)."""
        if self.kind == "sqlite":
            assert self.path is not None
            db = sqlite3.connect(self.path, timeout=0, isolation_level=None)
            try:
                return db.execute(statement, tuple(params)).fetchall()
            finally:
                db.close()
        assert self.pg is not None
        with self.pg.connect(self.database) as db:
            cursor = db.execute(statement.replace("?", "%s"), tuple(params))
            return list(cursor.fetchall()) if cursor.description else []

    def raw_count(self) -> int:
        return int(self.raw("SELECT COUNT(*) FROM results")[0][0])

    def tables(self) -> set[str]:
        if self.kind == "sqlite":
            rows = self.raw("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {str(r[0]) for r in rows}
        assert self.pg is not None
        return self.pg.tables(self.database)

    def nothing_written(self) -> None:
        """The store was never created: no SQLite file, no table in the PostgreSQL database."""
        if self.kind == "sqlite":
            assert self.path is not None
            assert not self.path.parent.exists() or list(self.path.parent.iterdir()) == []
        else:
            assert self.tables() == set()

    def writer_in_transaction(self) -> bool:
        """Whether another connection holds a transaction open on the store (a pusher mid-batch)."""
        if self.kind == "sqlite":
            assert self.path is not None
            db = sqlite3.connect(self.path, timeout=0, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # "database is locked": a writer holds it
                return True
            finally:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                db.close()
            return False
        rows = self.raw(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = ? AND pid <> pg_backend_pid() "
            "AND xact_start IS NOT NULL",
            [self.database],
        )
        return int(rows[0][0]) > 0

    def other_connections(self) -> int:
        if self.kind == "sqlite":
            return 0
        rows = self.raw(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = ? AND pid <> pg_backend_pid()", [self.database]
        )
        return int(rows[0][0])


@pytest.fixture(scope="module")
def pg() -> Iterator[Cluster]:
    if not available():
        pytest.skip("PostgreSQL 15 (/usr/lib/postgresql/15/bin) or runuser is not installed")
    with cluster(PASSWORD) as running:
        yield running


_databases = iter(range(1, 10_000))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=needs_postgres_user)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreUnderTest:
    """An empty store of each kind: a new SQLite file's URL, or a new PostgreSQL database's."""
    if request.param == "sqlite":
        path = tmp_path / "stores" / "store.sqlite"
        return StoreUnderTest("sqlite", f"sqlite:///{path}", path=path)
    running: Cluster = request.getfixturevalue("pg")
    name = f"store_{next(_databases)}"
    running.create_database(name)
    return StoreUnderTest("postgresql", running.url(name), pg=running, database=name)


@dataclass(frozen=True)
class Runs:
    """The run folders the tests push, written once for both stores (pushing reads them only)."""

    nightly: list[Path]  # 4 runs of 500 documents, one per pusher
    second_night: Path  # nightly[0]'s run id, cells and repeats the next night
    big: Path  # 6 batches


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    top = tmp_path_factory.mktemp("runs")
    made = Runs([top / "night-1" / f"nightly-{i}" for i in range(4)], top / "night-2" / "nightly-0", top / "big")
    for run in made.nightly:
        write_run(run, 500)
    write_run(made.second_night, 500, night=1)
    write_run(made.big, 6 * database.BATCH)
    return made


# --------------------------------------------------------------------------------------------
# 1. many pushers at once; idempotent; another night's run under the same run id


def test_concurrent_pushers_store_each_document_once(store: StoreUnderTest, runs: Runs) -> None:
    pushes = [("results", "push", str(run), "--store", store.url) for run in runs.nightly]

    first = at_once(*pushes)
    assert [pushed(done) for done in first] == [(500, 0)] * 4
    assert store.count() == 2000

    # All again, and with them the next night of the first: the same matrix under the same run id,
    # cells and repeats, other content.
    *again, done = at_once(*pushes, ("results", "push", str(runs.second_night), "--store", store.url))
    assert [pushed(done) for done in again] == [(0, 500)] * 4
    assert all(": 0 new," in done.stdout for done in again)
    assert pushed(done) == (500, 0)
    separate = [line for line in done.stdout.splitlines() if line.startswith("stored as a separate run: ")]
    assert len(separate) == 500 and f" {runs.second_night.name} " in separate[0], done.stdout
    assert store.count() == 2500
    rows = store.raw("SELECT COUNT(*), COUNT(DISTINCT started_at) FROM results WHERE run_id = ?", ["nightly-0"])
    assert rows[0] == (1000, 1000)  # both nights kept, neither over the other


# --------------------------------------------------------------------------------------------
# 2. a pusher killed with SIGKILL mid-batch leaves whole batches only


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("T", "t")


def test_kill_9_mid_batch_leaves_whole_batches(store: StoreUnderTest, runs: Runs) -> None:
    total = 6 * database.BATCH
    run = runs.big
    before = snapshot(run)
    assert store.count() == 0  # the store made, so that the test can read it while the pusher writes

    # Let the pusher run in short slices, stopped (SIGSTOP) between them; the first time it is stopped
    # with at least one batch stored and a transaction open (mid-batch), SIGKILL. No timing bound.
    pusher = start("results", "push", str(run), "--store", store.url)
    killed_at = None
    deadline = time.monotonic() + 600
    try:
        while killed_at is None and pusher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            os.kill(pusher.pid, signal.SIGSTOP)
            while pusher.poll() is None and not _stopped(pusher.pid):
                time.sleep(0.005)
            stored = store.raw_count()
            if database.BATCH <= stored < total and store.writer_in_transaction():
                os.kill(pusher.pid, signal.SIGKILL)
                killed_at = stored
            else:
                os.kill(pusher.pid, signal.SIGCONT)
    finally:
        if pusher.poll() is None and killed_at is None:
            pusher.kill()
        out = finish(pusher)
    assert killed_at is not None, f"the pusher was never stopped mid-batch: {out.output}"
    assert out.returncode == -signal.SIGKILL

    deadline = time.monotonic() + 60  # PostgreSQL: the killed client's backend rolls back and leaves
    while store.other_connections() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = store.count()
    assert left % database.BATCH == 0 and database.BATCH <= left < total, left
    assert store.raw("SELECT COUNT(*) FROM result_metrics WHERE result_id NOT IN (SELECT id FROM results)") == [(0,)]

    assert pushed(cli("results", "push", str(run), "--store", store.url)) == (total - left, left)
    assert store.count() == total
    assert snapshot(run) == before


# --------------------------------------------------------------------------------------------
# 3. a store that cannot be reached: one line, the run folder untouched; then the push completes


@contextlib.contextmanager
def unreachable(store: StoreUnderTest, tmp_path: Path) -> Iterator[str]:
    """The URL of ``store`` made unreachable meanwhile: its PostgreSQL server stopped, or an SQLite
    store whose folder cannot be made (a regular file is in its way); reachable again after."""
    if store.kind == "postgresql":
        assert store.pg is not None
        store.pg.stop()
        try:
            yield store.url
        finally:
            store.pg.start()
        return
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a regular file where the store's folder would be\n")
    try:
        yield f"sqlite:///{blocker / 'store.sqlite'}"
    finally:
        blocker.unlink()


def test_unreachable_store_is_one_line_and_the_push_completes_later(store: StoreUnderTest, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "nightly"
    write_run(run, 20)
    before = snapshot(run)
    with unreachable(store, tmp_path) as url:
        done = cli("results", "push", str(run), "--store", url)
        line = one_line_error(done, 1)
        assert store_urls.parse(url).shown in line or url.removeprefix("sqlite:///") in line, line
        assert snapshot(run) == before
    again = cli("results", "push", str(run), "--store", url)
    assert pushed(again) == (20, 0)
    check = StoreUnderTest(store.kind, url, store_urls.parse(url).path, store.pg, store.database)
    assert check.count() == 20
    assert snapshot(run) == before


# --------------------------------------------------------------------------------------------
# 4. a password never shows: output, errors, stored rows, children's environment


@needs_postgres_user
def test_password_is_never_printed_stored_or_inherited(pg: Cluster, tmp_path: Path) -> None:
    pg.create_database("secret_store", owner=PASSWORD_ROLE)
    url = pg.url("secret_store", PASSWORD_ROLE, PASSWORD)
    run = tmp_path / "runs" / "nightly"
    write_run(run, 30)
    push = cli("results", "push", str(run), "--store", url)
    assert pushed(push) == (30, 0) and "****" in push.stdout
    listed_md, listed_json, from_env, wrong_db, keyword_form = at_once(
        ("results", "list", "--store", url),
        ("results", "list", "--store", url, "--format", "json"),
        ("results", "list", "--results", str(tmp_path / "results")),  # the URL from FSMATRIX_STORE
        ("results", "push", str(run), "--store", pg.url("no_such_db", PASSWORD_ROLE, PASSWORD)),
        ("results", "list", "--store", f"host={pg.socket_dir} dbname=secret_store password={PASSWORD}"),
        env=cli_env(FSMATRIX_STORE=url),
    )
    assert listed_md.returncode == 0 and "****" in listed_md.stdout, listed_md.output
    assert json.loads(listed_json.stdout)["documents"] == 30
    assert from_env.returncode == 0 and "****" in from_env.stdout, from_env.output
    assert "no_such_db" in one_line_error(wrong_db, 1)
    one_line_error(keyword_form, 2)  # libpq's key=value form is not a URL: refused, its password masked
    seen = [push, listed_md, listed_json, from_env, wrong_db, keyword_form]
    pg.stop()
    try:
        down = cli("results", "list", "--store", url)
    finally:
        pg.start()
    one_line_error(down, 1)
    seen.append(down)

    for done in seen:
        assert PASSWORD not in done.output, done.output

    tables = pg.tables("secret_store")
    assert {"results", "result_metrics", "fsmatrix_store"} <= tables
    for table in tables:
        for row in pg.sql(f"SELECT * FROM {table}", "secret_store"):
            assert PASSWORD not in repr(row)
    dump = subprocess.run(
        ["runuser", "-u", "postgres", "--", "pg_dump", "-h", str(pg.socket_dir), "secret_store"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "Zq9vWx7" not in dump.stdout and len(dump.stdout) > 10_000


CHILD = textwrap.dedent(
    """
    import subprocess, sys
    from pathlib import Path
    from fsmatrix.results.store import url
    if sys.argv[1] == "resolve":
        print(url.resolve(None, Path("results")).shown)
    print(subprocess.run(["env"], capture_output=True, text=True, check=True).stdout)
    """
)


def test_a_child_process_does_not_inherit_the_store_url() -> None:
    url = f"postgresql://{PASSWORD_ROLE}:{PASSWORD}@/db?host=/run/x"

    def child(step: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, step], env=cli_env(FSMATRIX_STORE=url), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert PASSWORD in child("no-resolve")  # without resolve() a child would see it: the check can fail
    out = child("resolve")
    assert PASSWORD not in out and store_urls.ENV not in out
    assert out.startswith(f"postgresql://{PASSWORD_ROLE}:****@/db?host=/run/x\n")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"postgresql://u:{PASSWORD}@db.example:5433/store", "postgresql://u:****@db.example:5433/store"),
        (f"postgresql://u@/store?host=/run/pg&password={PASSWORD}", "postgresql://u@/store?host=/run/pg&password=****"),
        (f"postgres:///store?password={PASSWORD}&sslmode=require", "postgres:///store?password=****&sslmode=require"),
        ("postgresql://u@/store?host=/run/pg", "postgresql://u@/store?host=/run/pg"),
    ],
)
def test_store_url_shown_masks_the_password(text: str, shown: str) -> None:
    parsed = store_urls.parse(text)
    assert parsed.shown == shown
    assert parsed.target == text  # libpq gets it as it is
    if PASSWORD in text:
        assert PASSWORD not in parsed.hide(f"FATAL: something about {PASSWORD}")


# --------------------------------------------------------------------------------------------
# 5. bad input: one line, exit 2, nothing written


def test_bad_input_anywhere_is_one_line_and_writes_nothing(store: StoreUnderTest, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "nightly"
    write_run(run, 10)
    not_a_run = tmp_path / "runs" / "stray"
    (not_a_run / "cell").mkdir(parents=True)
    (not_a_run / "cell" / "r1.json").write_text(json.dumps(TEMPLATES[0]))

    mysql, since, stray = at_once(
        ("results", "push", str(run), "--store", "mysql://u@x/db", "--results", str(tmp_path / "results")),
        ("results", "list", "--store", store.url, "--since", "yesterday"),
        ("results", "push", str(run), str(not_a_run), "--store", store.url),
    )
    assert "unknown kind of store" in one_line_error(mysql, 2)
    assert "--since 'yesterday': not a date" in one_line_error(since, 2)
    assert f"{not_a_run}: no matrix.json" in one_line_error(stray, 2)
    store.nothing_written()
    assert not (tmp_path / "results").exists()


def test_a_store_of_a_newer_schema_is_refused(store: StoreUnderTest, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "nightly"
    write_run(run, 10)
    assert store.count() == 0
    store.raw("UPDATE fsmatrix_store SET value = '99' WHERE key = 'schema_version'")
    push, listed = at_once(
        ("results", "push", str(run), "--store", store.url), ("results", "list", "--store", store.url)
    )
    for done in (push, listed):
        assert f"schema version 99, newer than this fsmatrix's ({schema.VERSION})" in one_line_error(done, 2)
    assert store.raw_count() == 0
    assert store.raw("SELECT value FROM fsmatrix_store") == [("99",)]


def test_a_database_that_is_not_a_store_is_refused_untouched(store: StoreUnderTest, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "nightly"
    write_run(run, 10)
    if store.kind == "sqlite":
        assert store.path is not None
        store.path.parent.mkdir()
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
            db.commit()
        before = store.path.read_bytes()
    else:
        store.raw("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    push = cli("results", "push", str(run), "--store", store.url)
    assert "not an fsmatrix store (it has tables invoices)" in one_line_error(push, 2)
    assert store.tables() == {"invoices"}
    if store.kind == "sqlite":
        assert store.path is not None
        assert store.path.read_bytes() == before  # not even its journal mode changed
        assert sorted(p.name for p in store.path.parent.iterdir()) == ["store.sqlite"]


# --------------------------------------------------------------------------------------------
# 6. results list


def test_list_shows_each_sitting_and_filters(store: StoreUnderTest, tmp_path: Path) -> None:
    threen1 = [t for t in TEMPLATES if t["workload"] == "threen1"]
    pgbench = [t for t in TEMPLATES if t["workload"] == "pgbench"]
    night_1 = write_run(tmp_path / "night-1" / "nightly", 30, repeats=3, templates=threen1)
    night_2 = write_run(tmp_path / "night-2" / "nightly", 30, repeats=3, night=1, templates=threen1)
    other = write_run(tmp_path / "night-2" / "pg-only", 12, repeats=3, night=1, templates=pgbench)
    folders = [str(p) for folder in ("night-1", "night-2") for p in sorted((tmp_path / folder).iterdir())]
    assert pushed(cli("results", "push", *folders, "--store", store.url)) == (72, 0)
    host = threen1[0]["provenance"]["host"]["machine_id"]
    assert {t["provenance"]["host"]["machine_id"] for t in TEMPLATES} == {host}

    def expected(docs: list[dict[str, Any]], cells: str = "*") -> dict[str, Any]:
        chosen = [d for d in docs if re.fullmatch(cells.replace("*", ".*"), d["cell_id"])]
        return {
            "run_id": docs[0]["run_id"],
            "host": host,
            "started": min(d["started_at"] for d in chosen),
            "cells": len({d["cell_id"] for d in chosen}),
            "documents": len(chosen),
        }

    listed, only, since = at_once(
        ("results", "list", "--store", store.url, "--format", "json"),
        ("results", "list", "--store", store.url, "--format", "json", "--only", "xfs-*"),
        ("results", "list", "--store", store.url, "--format", "json", "--since", "2026-11-29"),
    )
    assert json.loads(listed.stdout) == {
        "documents": 72,
        "runs": [expected(night_1), expected(night_2), expected(other)],
    }, listed.output
    xfs = sum(d["cell_id"].startswith("xfs-") for d in night_1 + night_2)
    assert xfs > 0
    assert json.loads(only.stdout) == {
        "documents": xfs,
        "runs": [expected(night_1, "xfs-*"), expected(night_2, "xfs-*")],
    }, only.output
    assert json.loads(since.stdout) == {"documents": 42, "runs": [expected(night_2), expected(other)]}, since.output
