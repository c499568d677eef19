"""pgbench on real PostgreSQL 15: parsing, every verification check failing on a damaged database,
a setting that did not take, no server process left behind (passed, failed, Ctrl-C), bad settings
refused by `matrix expand`, and cells on real loop devices through `fsmatrix run` (ext4; data on
ext4 with the WAL on ext2). In the guest: tests/vm/test_pgbench_vm.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FSMATRIX, TEST_DATA, attached_under, mounted_under, needs_root, sysv_ipc_ids
from fsmatrix.agent.contract import Workspace
from fsmatrix.agent.databases import postgres
from fsmatrix.agent.parsing import standalone_cell
from fsmatrix.agent.workloads.pgbench import parse as pgparse
from fsmatrix.agent.workloads.pgbench import run as pgrun
from fsmatrix.agent.workloads.pgbench import verify as pgverify

HAVE_PG = Path("/usr/lib/postgresql/15/bin/postgres").exists()
pytestmark = [needs_root, pytest.mark.system, pytest.mark.skipif(not HAVE_PG, reason="needs postgresql-15")]


SAMPLE_OUTPUT = (TEST_DATA / "pgbench" / "summary" / "tpcb-2clients-3s.txt").read_text()


def _dir(prefix: str) -> Path:
    # Under /var/tmp (a real disk) and reachable by the postgres user (pytest's tmp_path is 0700).
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    path.chmod(0o755)
    return path


def processes_under(path: Path) -> list[str]:
    """Processes whose working directory or command line is under ``path`` (postgres children
    rename themselves, but keep the postmaster's working directory, PGDATA)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cwd.startswith(str(path)) or str(path) in cmdline) and "pytest" not in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


# ------------------------------------------------------------------ parsing, no server


def test_parse_output() -> None:
    s = pgparse.parse_output(SAMPLE_OUTPUT)
    assert (s.transactions, s.failed, s.tps, s.latency_avg_ms) == (4362, 0, 1453.025988, 1.37)
    with pytest.raises(ValueError, match="lacks transactions"):
        pgparse.parse_output("pgbench: error: connection to server failed\n")


def test_parse_log_percentiles() -> None:
    lines = [f"0 {i} {(i + 1) * 1000} 0 1795592929 {i}" for i in range(100)] + ["1 7 failed 0 1795592929 1"]
    lat = pgparse.parse_log(lines)
    assert (lat.count, lat.failed, lat.p50_ms, lat.p95_ms, lat.p99_ms, lat.max_ms) == (100, 1, 50, 95, 99, 100)
    assert lat.avg_ms == 50.5


def test_settings_map_onto_server_arguments_and_readback() -> None:
    s = postgres.Settings(shared_buffers="1G", max_wal_size="64M", fsync=False, checkpoint_timeout=60)
    args = s.server_settings()
    assert args["shared_buffers"] == "1048576kB" and args["max_wal_size"] == "64MB" and args["fsync"] == "off"
    assert s.expected()["wal_buffers"] == 2048 * postgres.PAGE  # auto: 1/32 of 1G, capped at 16M
    assert postgres.normalise("shared_buffers", "32768", "8kB") == 256 << 20
    assert postgres.normalise("checkpoint_timeout", "1", "min") == 60
    assert postgres.differences({"fsync": False}, {"fsync": True}) == ["fsync: asked False, PostgreSQL has True"]


# ------------------------------------------------------------------ a real cluster, damaged on purpose


TRANSACTIONS = 100  # the template database's tpcb-like run: 2 clients x 50


@pytest.fixture(scope="module")
def bench() -> Iterator[postgres.Cluster]:
    """A running cluster whose database ``bench`` is a finished tpcb-like run (scale 1, 100 transactions);
    each test damages a copy of it (CREATE DATABASE ... TEMPLATE bench)."""
    base = _dir("fsmatrix-pgtest-")
    try:
        with contextlib.ExitStack() as stack:
            (base / "data").mkdir(mode=0o755)
            cluster = postgres.create(
                postgres.Settings(), postgres.ClusterLocation(base / "data", None, base / "scratch"), stack
            )
            with cluster.running():
                cluster.run([cluster.tool("createdb"), "bench"])
                pgb = cluster.tool("pgbench")
                cluster.run([pgb, "-i", "-q", "-s", "1", "bench"], database="bench")
                cluster.run([pgb, "-n", "-b", "tpcb-like", "-c", "2", "-t", "50", "bench"], database="bench")
                yield cluster
            assert cluster.processes() == []
        assert processes_under(base) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


_copies = iter(range(1000))


def copy_of(cluster: postgres.Cluster, *sql: str) -> str:
    """A copy of the template database with ``sql`` applied to it."""
    name = f"damaged{next(_copies)}"
    cluster.query(f"CREATE DATABASE {name} TEMPLATE bench")
    for statement in sql:
        cluster.query(statement, name)
    return name


ZERO_STATE = dict.fromkeys(pgverify.STATE_KEYS, 0) | {"branches": 1, "tellers": 10, "accounts": 100000}


def test_a_consistent_database_passes_every_check(bench: postgres.Cluster) -> None:
    state = pgverify.read_state(bench, "bench")
    assert state["history"] == TRANSACTIONS and state["account_sum"] == state["delta_sum"]
    assert pgverify.check_state("tpcb-like", 1, TRANSACTIONS, ZERO_STATE, state) == []
    assert pgverify.amcheck(bench, "bench") is None


def test_tpcb_invariant_fails_on_a_balance_changed_behind_pgbench(bench: postgres.Cluster) -> None:
    db = copy_of(bench, "UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid = 1")
    (problem,) = pgverify.check_state("tpcb-like", 1, TRANSACTIONS, ZERO_STATE, pgverify.read_state(bench, db))
    assert problem.startswith("TPC-B invariant broken")


def test_history_count_fails_on_a_deleted_history_row(bench: postgres.Cluster) -> None:
    db = copy_of(bench, "DELETE FROM pgbench_history WHERE ctid = (SELECT min(ctid) FROM pgbench_history)")
    problems = pgverify.check_state("tpcb-like", 1, TRANSACTIONS, ZERO_STATE, pgverify.read_state(bench, db))
    assert f"pgbench_history holds {TRANSACTIONS - 1} rows, pgbench processed {TRANSACTIONS} transactions" in problems


def test_simple_update_checks_fail_on_accounts_history_mismatch_and_touched_tellers(bench: postgres.Cluster) -> None:
    # A consistent simple-update state: only accounts and history moved.
    simple = ("UPDATE pgbench_branches SET bbalance = 0", "UPDATE pgbench_tellers SET tbalance = 0")
    db = copy_of(bench, *simple)
    assert pgverify.check_state("simple-update", 1, TRANSACTIONS, ZERO_STATE, pgverify.read_state(bench, db)) == []
    db = copy_of(bench, *simple, "UPDATE pgbench_accounts SET abalance = abalance - 1 WHERE aid = 2")
    (problem,) = pgverify.check_state("simple-update", 1, TRANSACTIONS, ZERO_STATE, pgverify.read_state(bench, db))
    assert problem.startswith("sum of account balances")
    db = copy_of(bench, *simple, "UPDATE pgbench_tellers SET tbalance = 3 WHERE tid = 1")
    (problem,) = pgverify.check_state("simple-update", 1, TRANSACTIONS, ZERO_STATE, pgverify.read_state(bench, db))
    assert problem == "simple-update changed teller_sum: 0 -> 3"


def test_select_only_fails_when_anything_changed(bench: postgres.Cluster) -> None:
    before = pgverify.read_state(bench, "bench")
    db = copy_of(bench, "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 3")
    (problem,) = pgverify.check_state("select-only", 1, TRANSACTIONS, before, pgverify.read_state(bench, db))
    assert problem.startswith("select-only changed account_sum")


def test_row_counts_fail_when_a_row_is_missing(bench: postgres.Cluster) -> None:
    db = copy_of(bench, "DELETE FROM pgbench_tellers WHERE tid = 10", "DELETE FROM pgbench_accounts WHERE aid = 5")
    problems = pgverify.check_state("select-only", 1, 0, pgverify.read_state(bench, db), pgverify.read_state(bench, db))
    assert problems == [
        "pgbench_tellers holds 9 rows, scale 1 means 10",
        "pgbench_accounts holds 99999 rows, scale 1 means 100000",
    ]


def test_amcheck_finds_a_corrupted_index_page(bench: postgres.Cluster) -> None:
    db = copy_of(bench)
    index = bench.data / bench.value("SELECT pg_relation_filepath('pgbench_accounts_pkey')", db)
    assert pgverify.amcheck(bench, db) is None
    bench.stop()  # nothing cached in shared buffers: the server reads what dd wrote
    try:
        # Garbage over the middle of block 1 (a leaf page) of the accounts' primary key.
        with index.open("r+b") as f:
            f.seek(postgres.PAGE + 1024)
            f.write(os.urandom(4096))
    finally:
        bench.start()
    found = pgverify.amcheck(bench, db)
    assert found is not None and "pgbench_accounts_pkey" in found, found


def test_failed_transactions_and_a_short_log_fail_the_run(bench: postgres.Cluster) -> None:
    """Real failures: concurrent REPEATABLE READ updates of three rows give serialization failures,
    which pgbench 15 counts as failed transactions (one try each)."""
    db = copy_of(bench)
    scratch = bench.log_file.parent
    script = scratch / "conflict.sql"
    script.write_text(
        "\\set aid random(1, 3)\nBEGIN ISOLATION LEVEL REPEATABLE READ;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\nEND;\n"
    )
    prefix = scratch / "conflict_log"
    cmd = [bench.tool("pgbench"), "-n", "-f", str(script), "-c", "4", "-j", "2", "-T", "2", "-l",
           f"--log-prefix={prefix}", db]  # fmt: skip
    out = bench.run(cmd, database=db, check=False)
    summary = pgparse.parse_output(out.stdout + out.stderr)
    lines = [line for p in sorted(scratch.glob("conflict_log.*")) for line in p.read_text().splitlines()]
    latencies = pgparse.parse_log(lines)
    assert summary.failed > 0
    problems = pgverify.check_run(summary, latencies)
    assert problems == [f"pgbench reports {summary.failed} failed transactions"], problems
    # A log that lost lines (one per transaction) disagrees with the report.
    ok = pgparse.Summary(latencies.count, 0, 1.0, 1.0, 1.0)
    completed = [line for line in lines if line.split()[2].isdigit()]
    assert pgverify.check_run(ok, pgparse.parse_log(completed)) == []
    short = pgparse.parse_log(completed[:-3])
    assert pgverify.check_run(ok, short) == [
        f"pgbench's per-transaction log holds {latencies.count - 3} completed transactions, "
        f"its report {latencies.count}"
    ]


def test_checksums_check_finds_a_corrupted_page() -> None:
    base = _dir("fsmatrix-pgsum-")
    try:
        with contextlib.ExitStack() as stack:
            (base / "data").mkdir(mode=0o755)
            cluster = postgres.create(
                postgres.Settings(data_checksums=True),
                postgres.ClusterLocation(base / "data", None, base / "scratch"),
                stack,
            )
            with cluster.running():
                assert cluster.settings_readback()["data_checksums"] is True
                cluster.query("CREATE TABLE t AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 5000) g")
                cluster.query("CHECKPOINT")
                heap = cluster.data / cluster.value("SELECT pg_relation_filepath('t')")
            assert postgres.checksums_check(cluster) is None
            with heap.open("r+b") as f:  # a few bytes in the middle of block 0: the header stays valid
                f.seek(4000)
                f.write(b"\xff" * 64)
            found = postgres.checksums_check(cluster)
            assert found is not None and "checksum" in found.lower(), found
        assert processes_under(base) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_setting_that_does_not_take_fails_the_run_and_stops_the_server() -> None:
    """wal_buffers 1..3 are within pg_settings' bounds, and PostgreSQL silently raises them to 4."""
    base = _dir("fsmatrix-pgset-")
    try:
        (base / "data").mkdir(mode=0o755)
        ws = Workspace(data=base / "data", journal=base / "data", scratch=base / "scratch")
        cell = standalone_cell("pgbench", {"scale": 1, "duration": 1}, postgres={"wal_buffers": 1})
        with pytest.raises(RuntimeError, match=r"wal_buffers: asked 8192, PostgreSQL has 32768"):
            pgrun.run_cell(cell, ws, 120)
        assert processes_under(base) == []
        assert "database system is shut down" in (base / "scratch" / "postgres.log").read_text()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ matrix expand refuses bad settings


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("workload.pgbench.scale: 0", "workload.pgbench.scale: 0 is not allowed"),
        ("postgres.no_such_key: 1", "unknown setting 'postgres.no_such_key'"),
        ("postgres.shared_buffers: lots", "postgres.shared_buffers: 'lots' is not allowed"),
        ('postgres.synchronous_commit: "on\\narchive_command=x"', "postgres.synchronous_commit: "),
        ('postgres.wal_sync_method: "fsync\'"', 'postgres.wal_sync_method: "fsync\'" is not allowed'),
        ("postgres.shared_buffers: 100K", "must be a multiple of 8K"),
        ("postgres.wal_level: minimal", "needs postgres.max_wal_senders 0"),
        ("postgres.synchronous_commit: off", "quote it"),
        ("workload.pgbench.threads: 9", "pgbench needs threads <= clients"),
        ("filesystem: raw", "pgbench needs a filesystem"),
    ],
)
def test_bad_settings_are_refused_by_matrix_expand(tmp_path: Path, setting: str, expected: str) -> None:
    """In process (click's runner: each subprocess costs seconds on a busy 2-core machine); the
    command line itself is checked once below."""
    from click.testing import CliRunner

    from fsmatrix.cli import main

    matrix = _bad_matrix(tmp_path, setting)
    result = CliRunner().invoke(main, ["matrix", "expand", str(matrix)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and expected in result.output, result.output
    assert result.output.startswith("fsmatrix: error: ") and "Traceback" not in result.output


def _bad_matrix(tmp_path: Path, setting: str) -> Path:
    matrix = tmp_path / "m.yaml"
    if setting.startswith("filesystem"):
        matrix.write_text("name: bad\naxes: {filesystem: [raw]}\ndefaults:\n  workload.pgbench.scale: 1\n")
    else:
        head = "name: bad\naxes: {filesystem: [ext4]}\ndefaults:\n  workload.pgbench.duration: 5\n"
        matrix.write_text(f"{head}  {setting}\n")
    return matrix


def test_the_command_line_refuses_a_value_with_a_newline(tmp_path: Path) -> None:
    matrix = _bad_matrix(tmp_path, 'postgres.wal_compression: "lz4\\narchive_command=x"')
    out = subprocess.run([*FSMATRIX, "matrix", "expand", str(matrix)], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert "postgres.wal_compression: 'lz4\\narchive_command=x' is not allowed" in out.stderr


# ------------------------------------------------------------------ fsmatrix run on loop devices


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = _dir("fsmatrix-pgrun-")
    try:
        yield path
        assert attached_under(path) == [] and mounted_under(path) == [] and processes_under(path) == []
    finally:
        shutil.rmtree(path, ignore_errors=True)


CELLS = """\
name: pg
axes:
  filesystem: [ext4]
  storage.layout: [single, split-journal]
  postgres.wal_buffers: [-1, 1]
exclude:
  - {storage.layout: split-journal, postgres.wal_buffers: 1}
defaults:
  storage.journal_filesystem: ext2
  workload.pgbench: {scale: 1, clients: 2, threads: 2, duration: 3}
  storage.disk_size: 512M
"""


def test_pgbench_cells_on_the_host_backend(tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "pg.yaml"
    matrix.write_text(CELLS)
    results = tmp_path / "results"
    out = subprocess.run(
        [*FSMATRIX, "run", str(matrix), "--results", str(results), "--workdir", str(workdir), "--no-race"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr  # the wal_buffers cell fails, the others pass
    docs = [json.loads(p.read_text()) for p in sorted(results.rglob("r*.json"))]
    by_layout = {(d["params"]["storage"]["layout"], d["params"]["postgres"]["wal_buffers"]): d for d in docs}
    assert len(by_layout) == 3

    bad = by_layout[("single", 1)]
    assert bad["status"] == "error" and "did not take" in bad["reason"] and "wal_buffers" in bad["reason"]

    for key in (("single", -1), ("split-journal", -1)):
        doc = by_layout[key]
        assert doc["status"] == "passed", doc["reason"]
        m = doc["metrics"]
        for name in ("create_s", "load_s", "vacuum_s", "index_s", "total_s", "tps", "lat_avg_ms", "lat_p50_ms",
                     "lat_p95_ms", "lat_p99_ms", "wal_bytes", "database_bytes", "memory_bytes"):  # fmt: skip
            assert m[name] > 0, name
        assert m["transactions"] > 0 and m["failed_transactions"] == 0 and m["device_write_bytes_per_op"] > 0
        pg = doc["details"]["postgres"]
        assert pg["readback"] == pg["expected"]
        assert doc["details"]["random_seed"] > 0 and doc["details"]["stops"] == ["fast"]
        assert doc["provenance"]["tools"]["postgres"].startswith("postgres (PostgreSQL) 15")

    split = by_layout[("split-journal", -1)]
    readback = split["storage"]["readback"]
    data_dev = os.path.basename(os.path.realpath(readback["data"]["device"]))
    wal_dev = os.path.basename(os.path.realpath(readback["journal"]["device"]))
    assert readback["journal"]["mountinfo"]["fstype"] == "ext2"
    pg = split["details"]["postgres"]
    assert pg["pg_wal_device"] == wal_dev and pg["data_device"] == data_dev
    assert pg["pg_wal"].startswith(readback["journal"]["mount_point"])
    per_device = split["samples"]["io_by_device"]
    # The WAL lands on the ext2 device: at least the WAL's own bytes (fdatasync rewrites partial pages).
    assert per_device[wal_dev]["write_bytes"] >= split["metrics"]["wal_bytes"] * 0.9, per_device
    report = (results / "pg" / "report.md").read_text()
    assert "Transactions per second" in report and "tpcb-like scale 1, 2 clients" in report
    # seed 004's shape: the storage stacks as rows, the phases, TPS and latency as columns
    assert "**Overview (tpcb-like scale 1, 2 clients), median of repeats**" in report
    assert "| storage | Create database (s) | Load tables (s) | Create indexes (s) | Total time (s) |" in report
    assert "| ext4 (split-journal) |" in report
    assert "seed 004's RAW column has no pgbench counterpart" in report


def test_standalone_command(workdir: Path) -> None:
    out = subprocess.run(
        [*FSMATRIX, "workload", "pgbench", "select-only", "--dir", str(workdir / "db"), "--scale", "1",
         "--clients", "2", "--duration", "2", "--protocol", "prepared", "--set", "postgres.data_checksums=true",
         "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["verification"]["status"] == "passed" and doc["verification"]["checks"]["data_checksums"] is True
    assert doc["metrics"]["tps"] > 0 and doc["verification"]["checks"]["state"]["history"] == 0


def test_ctrl_c_stops_the_server(tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "long.yaml"
    matrix.write_text(
        "name: long\naxes: {filesystem: [ext4]}\ndefaults:\n"
        "  workload.pgbench: {scale: 1, clients: 2, duration: 600}\n  storage.disk_size: 512M\n"
    )
    run = subprocess.Popen(
        [*FSMATRIX, "run", str(matrix), "--results", str(tmp_path / "results"), "--workdir", str(workdir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not any("pgbench -n" in p for p in processes_under(workdir)) and time.monotonic() < deadline:
            time.sleep(0.2)  # until the transaction run has started
        server = [p for p in processes_under(workdir) if "/bin/postgres -D" in p]
        assert server, processes_under(workdir)
        pgdata = Path(server[0].split(" -D ")[1].split()[0])
        pids = postgres.processes_with_cwd(pgdata)  # the postmaster and its children (own groups each)
        assert len(pids) >= 5, pids
        time.sleep(1)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, err
    assert [p for p in pids if Path(f"/proc/{p}").exists()] == []
    assert processes_under(workdir) == []


def test_the_socket_directory_fits_a_socket_address() -> None:
    """A scratch directory too deep for sun_path (107 bytes) gets its socket directory under /tmp."""
    owner = postgres.Owner.resolve()
    deep = _dir("fsmatrix-pgsock-")
    try:
        long_scratch = deep / ("x" * 60) / "scratch"
        with contextlib.ExitStack() as stack:
            short = postgres.socket_dir(deep / "scratch", owner, stack)
            far = postgres.socket_dir(long_scratch, owner, stack)
            assert short.parent == deep / "scratch" and far.parent == Path(tempfile.gettempdir())
            assert len(f"{far}/.s.PGSQL.{postgres.PORT}") <= postgres.MAX_SOCKET_PATH
            assert far.stat().st_uid == owner.uid
        assert not far.exists()
    finally:
        shutil.rmtree(deep, ignore_errors=True)


def test_kill_leaves_no_process_and_no_shared_memory() -> None:
    """The last resort of stop(), and what a crash test will use: SIGKILL of the process group."""
    base = _dir("fsmatrix-pgkill-")
    try:
        with contextlib.ExitStack() as stack:
            (base / "data").mkdir(mode=0o755)
            cluster = postgres.create(
                postgres.Settings(), postgres.ClusterLocation(base / "data", None, base / "scratch"), stack
            )
            with cluster.running():
                assert len(cluster.processes()) >= 5  # postmaster, checkpointer, writers, ...
                shmid = cluster._shmid()
                assert ("shm", str(shmid)) in sysv_ipc_ids()
                cluster.kill()
                assert cluster.processes() == []
            assert cluster.stops == ["not-running"]
        assert processes_under(base) == []
        assert ("shm", str(shmid)) not in sysv_ipc_ids()
    finally:
        shutil.rmtree(base, ignore_errors=True)
