"""PostgreSQL crash recovery on real PostgreSQL 15 and real ext4 on loop devices: a run killed mid-way
comes back (timed, pg_amcheck clean, TPC-B invariant, no acknowledged commit lost), and each check
fails when it should: a deleted or a damaged WAL segment, a balance changed behind pgbench, acknowledgements
beyond what the table holds, commits lost to synchronous_commit=off. Parsing of acknowledgements
and of the recovery log, without a server."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import FSMATRIX, TEST_DATA, attached_under, mounted_under, needs_root, sysv_ipc_ids
from fsmatrix.agent import crash, job, proc, storage
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Workspace
from fsmatrix.agent.databases import postgres
from fsmatrix.agent.parsing import parse_cell
from fsmatrix.agent.workloads import pgbench
from fsmatrix.agent.workloads.pgbench import acks as pgacks
from fsmatrix.agent.workloads.pgbench import params as pgparams
from fsmatrix.agent.workloads.pgbench import recover as pgrecover
from fsmatrix.agent.workloads.pgbench import run as pgrun

HAVE_PG = Path("/usr/lib/postgresql/15/bin/postgres").exists()
needs_pg = pytest.mark.skipif(not HAVE_PG, reason="needs postgresql-15")
pytestmark = pytest.mark.system  # real PostgreSQL killed and recovered on loop devices: seconds a test

# A PostgreSQL 15 restart after a SIGKILL, as its log shows it (this machine, log_line_prefix '%m [%p] ').
RECOVERY_LOG = (TEST_DATA / "postgres" / "recovery_log" / "after-sigkill.txt").read_text()


# ------------------------------------------------------------------ no server


def test_recovery_log_is_parsed() -> None:
    found = postgres.parse_recovery_log(RECOVERY_LOG)
    assert found["crash_recovery"] is True and found["ready"] is True
    assert (found["redo_start"], found["redo_done"]) == ("0/1573DD0", "0/20174D8")
    assert found["redo_bytes"] == 0x20174D8 - 0x1573DD0 and found["redo_elapsed_s"] == 0.5
    assert (found["sync_s"], found["redo_s"], found["server_s"]) == (1.015, 0.501, 1.569)
    assert found["checkpoint_s"] == 0.021  # the end-of-recovery checkpoint, not the later one
    assert found["end_of_wal"].startswith("invalid record length at 0/2017500")
    assert found["errors"] == []  # "the database system is starting up" is the readiness probe's refusal
    clean = postgres.parse_recovery_log(
        "2026-11-25 10:53:40.733 UTC [3388] LOG:  database system was shut down at 2026-11-25 10:53:40 UTC\n"
        "2026-11-25 10:53:40.737 UTC [3382] LOG:  database system is ready to accept connections\n"
    )
    assert clean["crash_recovery"] is False and "redo_bytes" not in clean
    panic = postgres.parse_recovery_log(
        "2026-11-25 10:53:46.031 UTC [3460] LOG:  database system was not properly shut down; automatic recovery "
        "in progress\n2026-11-25 10:53:46.040 UTC [3460] PANIC:  could not locate a valid checkpoint record\n"
    )
    assert panic["errors"] == ["PANIC: could not locate a valid checkpoint record"] and panic["ready"] is False
    assert postgres.lsn_bytes("1/0") == 1 << 32
    with pytest.raises(ValueError, match="not a WAL position"):
        postgres.lsn_bytes("12")


def test_acknowledgements_are_parsed_back_from_whole_lines_only() -> None:
    text = "noise 123\nFSMATRIX-ACK 1\nFSMATRIX-ACK 2\r\n[  3.1] kernel\nlogin: FSMATRIX-ACK 17\r\r\nFSMATRIX-ACK 999"
    assert pgacks.parse_acks(text) == 17  # "999" has no end of line: cut short by the power cut
    assert pgacks.parse_acks("FSMATRIX-ACK 12[ 5.0] usb 1-1: new device\n") == 0  # broken into: not counted
    assert pgacks.parse_acks("") == 0
    tagged = "FSMATRIX-ACK r1 40\nFSMATRIX-ACK r2 7\nFSMATRIX-ACK 5\n"
    assert (pgacks.parse_acks(tagged, "r1"), pgacks.parse_acks(tagged, "r2"), pgacks.parse_acks(tagged)) == (40, 7, 5)
    with pytest.raises(ValueError, match="acknowledgement tag"):
        pgacks.parse_acks(tagged, "r 1")


def test_attach_refuses_a_directory_without_a_cluster_or_with_the_wal_elsewhere(tmp_path: Path) -> None:
    settings = postgres.Settings()
    with contextlib.ExitStack() as stack:
        with pytest.raises(FileNotFoundError, match=r"no PostgreSQL cluster in .*/pgdata \(no PG_VERSION\)"):
            postgres.attach(settings, postgres.ClusterLocation(tmp_path, None, tmp_path / "scratch"), stack)
        (tmp_path / "pgdata" / "pg_wal").mkdir(parents=True)
        (tmp_path / "pgdata" / "PG_VERSION").write_text("15\n")
        with pytest.raises(ValueError, match="the cluster's WAL is not on the journal disk"):
            postgres.attach(
                settings, postgres.ClusterLocation(tmp_path, tmp_path / "journal", tmp_path / "scratch"), stack
            )
        cluster = postgres.attach(settings, postgres.ClusterLocation(tmp_path, None, tmp_path / "scratch"), stack)
        assert cluster.data == tmp_path.resolve() / "pgdata" and cluster.log_file.name == "postgres-recovery.log"


def test_a_failure_while_the_server_is_dead_is_named_a_crash(tmp_path: Path) -> None:
    cluster = postgres.Cluster(
        bin=tmp_path, data=tmp_path, wal=None, sockets=tmp_path, log_file=tmp_path / "log",
        settings=postgres.Settings(), owner=postgres.Owner.resolve(), postmaster=subprocess.Popen(["sleep", "30"]),
    )  # fmt: skip
    assert cluster.postmaster is not None
    try:
        with pytest.raises(RuntimeError) as alive, pgrun._named_if_the_server_died(cluster, {}):
            raise RuntimeError("boom")  # the server is alive: the failure is its own
        assert str(alive.value) == "boom"
        (note,) = alive.value.__notes__
        pid = cluster.postmaster.pid
        assert re.fullmatch(rf"the postmaster \(pid {pid}\) is alive: state S, flags 0x[0-9a-f]+", note), note
        cluster.postmaster.kill()
        cluster.postmaster.wait()
        died = r"^PostgreSQL stopped during the run \(status -9\): boom$"
        details = {"acks": {"acknowledged": 7}}
        watch = pgrun._named_if_the_server_died(cluster, details)
        with pytest.raises(postgres.ServerDied, match=died) as caught, watch:
            raise RuntimeError("boom\nmore")
        assert caught.value.acknowledged == 7
        # The injector kills the postmaster last: a client that failed a moment before still sees it
        # alive, and the failure waits for it (pgrun.DEATH_GRACE_S) before calling it its own.
        cluster.postmaster = subprocess.Popen(["sleep", "30"])
        killer = threading.Timer(1.0, cluster.postmaster.kill)
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(postgres.ServerDied, match=died), pgrun._named_if_the_server_died(cluster, {}):
            raise RuntimeError("boom")
        assert 0.9 < time.monotonic() - t0 < pgrun.DEATH_GRACE_S
        killer.join()
    finally:
        cluster.postmaster.kill()
        cluster.postmaster.wait()


def test_a_process_on_its_way_out_is_not_running(tmp_path: Path) -> None:
    """A killed process closes its files (clients of a killed postmaster get "connection refused")
    before its parent can reap it; in between, /proc says PF_EXITING: not running, still holding files."""
    me = proc.process_state(os.getpid())
    assert me is not None and me.parent == os.getppid() and me.running and me.holds_files
    head, _, rest = Path(f"/proc/{os.getpid()}/stat").read_text().rpartition(")")
    fields = rest.split()
    fields[6] = str(int(fields[6]) | proc.PF_EXITING)
    (tmp_path / "1234").mkdir()  # /proc as the kernel shows an exiting task
    (tmp_path / "1234" / "stat").write_text(head + ") " + " ".join(fields))
    exiting = proc.process_state(1234, tmp_path)
    assert exiting is not None and not exiting.running and exiting.holds_files
    fields[0] = "Z"
    (tmp_path / "1234" / "stat").write_text(head + ") " + " ".join(fields))
    zombie = proc.process_state(1234, tmp_path)
    assert zombie is not None and not zombie.running and not zombie.holds_files
    assert proc.process_state(1235, tmp_path) is None


def test_file_sink_appends_durably_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "acks"
    sink = pgacks.FileSink(path)
    for k in (1, 2, 3):
        sink.record(k)
    sink.close()
    sink.close()  # idempotent
    assert path.read_text() == "FSMATRIX-ACK 1\nFSMATRIX-ACK 2\nFSMATRIX-ACK 3\n"
    assert os.O_DSYNC  # Linux: every write returns once on stable storage
    with path.open("ab") as f:
        f.write(b"\xff\xfe garbage\nFSMATRIX-ACK 4")  # a serial log's noise, a line cut short
    assert pgacks.read_acks(path) == 3


def test_console_sink_writes_whole_lines_to_a_terminal() -> None:
    """A pseudo-terminal stands in for /dev/ttyS0."""
    master, slave = os.openpty()
    try:
        sink = pgacks.ConsoleSink(Path(os.ttyname(slave)), tag="r3")
        sink.record(41)
        sink.record(42)
        sink.close()
        time.sleep(0.1)
        text = os.read(master, 4096).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert pgacks.parse_acks(text, "r3") == 42, text  # the terminal turns \n into \r\n: still whole lines
    assert pgacks.parse_acks(text) == 0


def test_the_ack_sink_is_a_file_for_kill_and_the_tagged_console_for_a_power_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(data=tmp_path, journal=tmp_path, scratch=tmp_path / "scratch")
    kill = parse_cell(crash_cell())
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / pgrecover.ACKS_FILE).write_text("FSMATRIX-ACK 99\n")  # an earlier run's
    sink = pgrecover.ack_sink(kill, ws)
    assert isinstance(sink, pgacks.FileSink) and sink.path == tmp_path / "scratch" / pgrecover.ACKS_FILE
    sink.record(1)
    sink.close()
    assert pgacks.read_acks(sink.path) == 1  # a fresh file: the earlier count is gone

    doc = crash_cell()
    doc["crash"]["mode"] = "power-cut"
    cut = parse_cell(doc)
    tag = pgrecover.ack_tag(cut)
    assert tag == pgrecover.ack_tag(parse_cell(cut.to_dict())) != pgrecover.ack_tag(kill)  # from the cell alone
    master, slave = os.openpty()  # a pseudo-terminal stands in for /dev/ttyS0
    try:
        monkeypatch.setattr(pgrecover, "SERIAL_CONSOLE", Path(os.ttyname(slave)))
        sink = pgrecover.ack_sink(cut, ws)
        assert isinstance(sink, pgacks.ConsoleSink)
        sink.record(7)
        sink.close()
        time.sleep(0.1)
        text = os.read(master, 4096).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert pgacks.parse_acks(text, tag) == 7 and pgacks.parse_acks(text) == 0
    monkeypatch.setattr(pgrecover, "SERIAL_CONSOLE", tmp_path / "no-ttyS0")
    with pytest.raises(RuntimeError, match="needs the VM's serial console .*no-ttyS0"):
        pgrecover.ack_sink(cut, ws)


def test_the_acknowledged_count_comes_from_the_host_or_the_file(tmp_path: Path) -> None:
    ws = Workspace(data=tmp_path, journal=tmp_path, scratch=tmp_path)
    kill = parse_cell(crash_cell())
    event = crash.CrashEvent(mode="kill", after_s=1.5)
    with pytest.raises(FileNotFoundError, match="acks is missing"):
        pgrecover.acknowledged_commits(kill, ws, event)
    (tmp_path / pgrecover.ACKS_FILE).write_text("FSMATRIX-ACK 1\nFSMATRIX-ACK 2\nFSMATRIX-ACK 3")  # the last cut short
    assert pgrecover.acknowledged_commits(kill, ws, event) == (2, str(tmp_path / pgrecover.ACKS_FILE))
    event.acknowledged = 40  # the host's count wins
    assert pgrecover.acknowledged_commits(kill, ws, event) == (40, "the host's serial log")
    event.acknowledged = -1
    with pytest.raises(ValueError, match="cannot be negative"):
        pgrecover.acknowledged_commits(kill, ws, event)
    doc = crash_cell()
    doc["crash"]["mode"] = "power-cut"
    cut = crash.CrashEvent(mode="power-cut", after_s=1.5)
    with pytest.raises(ValueError, match="the host passed no acknowledged count"):
        pgrecover.acknowledged_commits(parse_cell(doc), ws, cut)  # the file is the guest's: not trusted


# ------------------------------------------------------------------ real PostgreSQL on ext4 on a loop device


SCALE = 1


def _cell(layout: str = "single", **settings: Any) -> Cell:
    params = {"scale": SCALE, "clients": 2, "threads": 2, "duration": 60}
    doc = {"filesystem": "ext4", "workload": {"pgbench": params}, "postgres": settings}
    if layout != "single":  # the WAL on a second disk, ext2
        doc["storage"] = {"layout": layout, "journal_filesystem": "ext2"}
    return parse_cell(doc)


def processes_under(path: Path) -> list[str]:
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


@contextlib.contextmanager
def loop_workspace(cell: Cell) -> Iterator[Workspace]:
    """The cell's storage (ext4; split-journal: and ext2) on fresh loop devices, mounted, under
    /var/tmp (reachable by the postgres user); the scratch directory off them. Afterwards nothing
    is left: no device, mount or process."""
    base = Path(tempfile.mkdtemp(prefix="fsmatrix-pgcrash-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        with (
            storage.loop_devices(storage.required_devices(cell), 512 << 20, base) as loops,
            storage.prepare(cell, loops, base / "mnt") as prepared,
        ):
            yield Workspace(data=prepared.data, journal=prepared.journal, scratch=base / "scratch")
        assert attached_under(base) == [] and mounted_under(base) == [] and processes_under(base) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


def kill_server(pgdata: Path) -> list[int]:
    """What a crash injector does: SIGSTOP the postmaster (no restart of its children), SIGKILL every
    process of the server."""
    lines = (pgdata / "postmaster.pid").read_text().splitlines()
    postmaster, shmid = int(lines[0]), int(lines[6].split()[1])
    os.kill(postmaster, signal.SIGSTOP)
    killed = set()
    deadline = time.monotonic() + 10
    while (pids := postgres.processes_with_cwd(pgdata)) and time.monotonic() < deadline:
        for pid in sorted(pids, key=lambda pid: pid == postmaster):  # the postmaster last
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.05)
    assert postgres.processes_with_cwd(pgdata) == []
    # The dead postmaster's interlock segment: a restart on pgdata would remove it; a test that
    # fails before one must not leave it behind (it may be gone already: a killed server's last
    # attachment going away with IPC_RMID set, or a cleanup elsewhere).
    subprocess.run(["ipcrm", "-m", str(shmid)], check=False, capture_output=True)
    assert ("shm", str(shmid)) not in sysv_ipc_ids()
    return sorted(killed)


def wait_for_acks(path: Path, at_least: int, timeout: float = 240, alive: Any = lambda: True) -> int:
    """Until the sink holds ``at_least`` acknowledgements. Generous: the run before the transactions
    syncs the whole machine's page cache, which takes long when neighbours write a lot."""
    deadline = time.monotonic() + timeout
    while (n := pgacks.read_acks(path) if path.exists() else 0) < at_least:
        assert alive(), f"the run ended after {n} acknowledgements"
        assert time.monotonic() < deadline, f"only {n} acknowledgements in {timeout} s"
        time.sleep(0.05)
    return n


@dataclass
class Crashed:
    cell: Cell
    ws: Workspace
    sink: Path
    error: BaseException | None
    killed: list[int]
    details: dict[str, Any]


@pytest.fixture(scope="module")
def crashed() -> Iterator[Crashed]:
    """A pgbench cell's run (the workload's own ``run``, with an acknowledging client) whose server
    is SIGKILLed mid-way, as the crash hook will see it."""
    if os.geteuid() != 0 or not HAVE_PG:
        pytest.skip("needs root and postgresql-15")
    cell = _cell(data_checksums=True)  # and pg_checksums after recovery
    with loop_workspace(cell) as ws:
        sink = ws.scratch / "acks"
        ws.scratch.mkdir(parents=True)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                pgrun.run(cell.typed_params(pgbench.Params), cell.settings_of(postgres.Settings), ws, 300,
                            acks=pgacks.FileSink(sink))  # fmt: skip
            except BaseException as exc:  # handed to the test
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        killed: list[int] = []
        try:
            wait_for_acks(sink, 300, alive=thread.is_alive)  # the transaction run is on
            time.sleep(0.5)
        finally:
            if (ws.data / "pgdata" / "postmaster.pid").exists():  # also when the wait failed: the run ends now
                killed = kill_server(ws.data / "pgdata")
            # The run's own cleanup may still try pg_ctl stop (fast, then immediate) before it sees the
            # server gone: up to 2 × (STOP_TIMEOUT_S + 20) s on a loaded machine.
            thread.join(2 * (postgres.STOP_TIMEOUT_S + 20) + 60)
        assert not thread.is_alive() and killed
        yield Crashed(cell, ws, sink, errors[0] if errors else None, killed, {})


@needs_root
@needs_pg
def test_a_killed_run_comes_back_with_every_acknowledged_commit(crashed: Crashed) -> None:
    assert isinstance(crashed.error, postgres.ServerDied), crashed.error
    # Whichever the run noticed first: pgbench failing, or the next query (the postmaster is killed last).
    assert str(crashed.error).startswith("PostgreSQL stopped during the"), crashed.error
    assert "(status -9)" in str(crashed.error)
    acks = pgacks.read_acks(crashed.sink)
    assert acks >= 300 and crashed.error.acknowledged == acks  # the sink holds what the client counted
    report = pgrecover.recover_after_crash(crashed.cell, crashed.ws, acks, 300)
    crashed.details.update(report)
    assert report["status"] == "passed", report["reason"]
    steps = report["steps"]
    assert steps["controldata"]["state"] == "in production"  # killed: no shutdown checkpoint
    assert report["crash_recovery"] is True
    replay = steps["start"]["log"]
    assert replay["redo_bytes"] > 0 and replay["ready"] and "end_of_wal" in replay
    m = report["metrics"]
    assert 0 < m["recovery_s"] < 60 and m["redo_bytes"] == replay["redo_bytes"]
    durable = steps["durability"]
    assert durable["lost"] == 0 and durable["acknowledged"] == acks
    assert acks <= durable["found_max"] <= acks + 1 and durable["found"] == durable["found_max"]
    state = steps["invariant"]["state"]
    assert state["history"] > 0 and state["account_sum"] == state["branch_sum"] == state["delta_sum"]
    assert steps["amcheck"]["status"] == "passed" and steps["amcheck"]["heapallindexed"] is True
    assert report["stops"] == ["fast"] and steps["checksums"]["status"] == "passed"
    outcome = pgrecover.recovery_outcome(report)
    assert outcome.verification == {"status": "passed", "checks": steps} and outcome.metrics["lost_commits"] == 0
    assert processes_under(crashed.ws.data) == []


@needs_root
@needs_pg
def test_acknowledgements_beyond_the_table_are_reported_lost(crashed: Crashed) -> None:
    """A sink claiming 25 more commits than the database holds: the durability check fails, naming them."""
    acks = pgacks.read_acks(crashed.sink)
    with crashed.sink.open("a") as f:
        f.write(f"FSMATRIX-ACK {acks + 26}\n")
    claimed = pgacks.read_acks(crashed.sink)
    report = pgrecover.recover_after_crash(crashed.cell, crashed.ws, claimed, 300)
    durable = report["steps"]["durability"]
    found_max = durable["found_max"]
    assert report["status"] == "failed" and durable["status"] == "failed"
    assert durable["lost"] == claimed - found_max and report["metrics"]["lost_commits"] == durable["lost"]
    assert durable["missing"] == f"{found_max + 1}-{claimed}"
    assert report["reason"] == (
        f"{claimed - found_max} of {claimed} acknowledged commits are missing after recovery "
        f"(k {found_max + 1}-{claimed}); with synchronous_commit and fsync on, nothing allows that loss"
    )
    assert report["steps"]["invariant"]["status"] == "passed" and report["steps"]["amcheck"]["status"] == "passed"


@needs_root
@needs_pg
def test_a_balance_changed_behind_pgbench_breaks_the_invariant(crashed: Crashed) -> None:
    settings = crashed.cell.settings_of(postgres.Settings)

    def change(sql: str, crash: bool) -> None:
        with contextlib.ExitStack() as stack:
            cluster = postgres.attach(
                settings,
                postgres.ClusterLocation(crashed.ws.data, None, crashed.ws.scratch),
                stack,
                log_name="damage.log",
            )
            with cluster.running():
                cluster.query(sql, pgparams.DATABASE)
                if crash:
                    cluster.kill()

    change("UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid = 1", crash=True)
    try:
        report = pgrecover.recover_after_crash(crashed.cell, crashed.ws, 0, 300)
    finally:  # the other tests' database again
        change("UPDATE pgbench_accounts SET abalance = abalance - 7 WHERE aid = 1", crash=False)
    invariant = report["steps"]["invariant"]
    assert report["status"] == "failed" and invariant["status"] == "failed"
    assert invariant["message"].startswith("TPC-B invariant broken: account_sum "), invariant["message"]
    assert report["reason"] == invariant["message"] and report["crash_recovery"] is True


@needs_root
@needs_pg
def test_a_corrupted_index_fails_amcheck_of_every_database(crashed: Crashed) -> None:
    """Garbage over a leaf page of the acknowledgements' primary key (database bench): pg_amcheck
    --all finds it, and so does pg_checksums. (Last of the tests on this cluster: it stays damaged.)"""
    settings = crashed.cell.settings_of(postgres.Settings)
    with contextlib.ExitStack() as stack:
        cluster = postgres.attach(
            settings, postgres.ClusterLocation(crashed.ws.data, None, crashed.ws.scratch), stack, log_name="damage.log"
        )
        with cluster.running():
            path = cluster.value(f"SELECT pg_relation_filepath('{pgacks.TABLE}_pkey')", pgparams.DATABASE)
    index = cluster.data / path
    with index.open("r+b") as f:  # the server is stopped: it reads what is written here
        f.seek(postgres.PAGE + 1024)
        f.write(os.urandom(4096))
    report = pgrecover.recover_after_crash(crashed.cell, crashed.ws, 0, 300)
    amcheck = report["steps"]["amcheck"]
    checksums = report["steps"]["checksums"]
    assert report["status"] == "failed" and amcheck["status"] == "failed" and checksums["status"] == "failed"
    assert amcheck["message"].startswith("pg_amcheck (status 2): ") and f"{pgacks.TABLE}_pkey" in amcheck["message"]
    assert checksums["message"].startswith("pg_checksums --check failed") and "checksum" in checksums["message"]
    assert report["reason"] == f"{amcheck['message']}; {checksums['message']}"


def _crash_with_acks(
    settings: postgres.Settings, ws: Workspace, sink: Path, before_kill: Any, with_pgbench: bool = True
) -> None:
    """A cluster with pgbench's tables on ``ws``; the acknowledging client (and pgbench) running,
    ``before_kill(cluster)`` called, then every server process SIGKILLed."""
    with contextlib.ExitStack() as stack:
        wal_root = ws.journal if ws.journal != ws.data else None
        cluster = postgres.create(settings, postgres.ClusterLocation(ws.data, wal_root, ws.scratch), stack)
        with cluster.running():
            cluster.run([cluster.tool("createdb"), pgparams.DATABASE])
            cluster.run([cluster.tool("pgbench"), "-i", "-q", "-s", str(SCALE), pgparams.DATABASE],
                        database=pgparams.DATABASE)  # fmt: skip
            cluster.query("CHECKPOINT")
            cluster.query("SELECT pg_switch_wal()")  # the checkpoint record stays in an older segment
            with contextlib.ExitStack() as running:
                client = running.enter_context(pgacks.acknowledging(cluster, pgacks.FileSink(sink), pgparams.DATABASE))
                if with_pgbench:
                    bench = subprocess.Popen(
                        [cluster.tool("pgbench"), "-n", "-c", "2", "-T", "60", pgparams.DATABASE],
                        env=cluster.env(pgparams.DATABASE), cwd=ws.scratch, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )  # fmt: skip
                    running.callback(bench.wait)
                    running.callback(bench.kill)
                wait_for_acks(sink, 200)
                before_kill(cluster)
                cluster.kill()
            # The server went away under the client: psql says so and quits (how it says it varies).
            assert client.ended is not None and client.ended.startswith("psql ended (status "), client.ended
            assert client.acknowledged == pgacks.read_acks(sink)


@needs_root
@needs_pg
@pytest.mark.parametrize("layout", ["single", "split-journal"])
def test_a_deleted_wal_segment_fails_the_recovery(layout: str) -> None:
    """The segment written last deleted after the kill: PostgreSQL replays what is left and comes
    up without a word, shorter by the deleted WAL; the acknowledgements are what show the loss."""
    cell = _cell(layout)
    with loop_workspace(cell) as ws:
        ws.scratch.mkdir(parents=True)
        sink = ws.scratch / "acks"
        _crash_with_acks(cell.settings_of(postgres.Settings), ws, sink, lambda cluster: time.sleep(0.5))
        pg_wal = ws.data / "pgdata" / "pg_wal"
        assert pg_wal.resolve().is_relative_to(ws.journal)
        segments = [p for p in pg_wal.iterdir() if len(p.name) == 24 and p.is_file()]
        newest = max(segments, key=lambda p: p.stat().st_mtime_ns)  # the one written last (not a recycled one)
        newest.unlink()
        report = pgrecover.recover_after_crash(cell, ws, pgacks.read_acks(sink), 300)
        assert report["status"] == "failed", report
        durable = report["steps"]["durability"]
        assert durable["status"] == "failed" and durable["lost"] > 0, durable
        assert "acknowledged commits are missing after recovery" in report["reason"]
        assert "nothing allows that loss" in report["reason"]
        assert report["steps"]["start"]["status"] == "passed" and report["crash_recovery"] is True


@needs_root
@needs_pg
def test_a_damaged_wal_segment_fails_the_recovery() -> None:
    """The segment written last overwritten with garbage after its first page (the records of the
    acknowledged commits): the replay stops at the first record whose header or CRC does not check,
    PostgreSQL comes up as if the WAL ended there, and only the acknowledgements show the loss."""
    cell = _cell()
    with loop_workspace(cell) as ws:
        ws.scratch.mkdir(parents=True)
        sink = ws.scratch / "acks"
        _crash_with_acks(cell.settings_of(postgres.Settings), ws, sink, lambda cluster: time.sleep(0.5))
        pg_wal = ws.data / "pgdata" / "pg_wal"
        segments = [p for p in pg_wal.iterdir() if len(p.name) == 24 and p.is_file()]
        newest = max(segments, key=lambda p: p.stat().st_mtime_ns)
        with newest.open("r+b") as segment:
            segment.seek(8192)  # past the segment's first page: its long header stays valid
            segment.write(bytes(range(256)) * 4096)  # 1 MiB that is no WAL record
        acks = pgacks.read_acks(sink)
        report = pgrecover.recover_after_crash(cell, ws, acks, 300)
        assert report["steps"]["start"]["status"] == "passed" and report["crash_recovery"] is True, report
        durable = report["steps"]["durability"]
        assert report["status"] == "failed" and durable["status"] == "failed", report
        assert 0 < durable["lost"] <= acks, durable
        assert report["reason"].startswith(f"{durable['lost']} of {acks} acknowledged commits are missing after")
        assert "nothing allows that loss" in report["reason"]


@needs_root
@needs_pg
def test_a_deleted_checkpoint_segment_keeps_the_server_down() -> None:
    """Without the WAL segment holding the last checkpoint PostgreSQL cannot even begin its redo:
    it stops with a PANIC, which is the reason given; the later checks do not run."""
    cell = _cell()
    with loop_workspace(cell) as ws:
        ws.scratch.mkdir(parents=True)
        sink = ws.scratch / "acks"
        _crash_with_acks(cell.settings_of(postgres.Settings), ws, sink, lambda cluster: None, with_pgbench=False)
        with contextlib.ExitStack() as stack:
            cluster = postgres.attach(postgres.Settings(), postgres.ClusterLocation(ws.data, None, ws.scratch), stack)
            redo_file = postgres.controldata(cluster)["Latest checkpoint's REDO WAL file"]
        (ws.data / "pgdata" / "pg_wal" / redo_file).unlink()
        report = pgrecover.recover_after_crash(cell, ws, pgacks.read_acks(sink), 300)
        assert report["status"] == "failed" and set(report["steps"]) == {"controldata", "start"}
        assert report["reason"] == (
            "PostgreSQL did not come back after the crash: PANIC: could not locate a valid checkpoint record"
        ), report["reason"]
        assert report["steps"]["start"]["log"]["crash_recovery"] is True and "recovery_s" not in report["metrics"]
        outcome = pgrecover.recovery_outcome(report)
        assert outcome.verification["status"] == "failed" and outcome.verification["message"] == report["reason"]


def test_a_data_directory_gone_is_a_failed_recovery(tmp_path: Path) -> None:
    ws = Workspace(data=tmp_path / "data", journal=tmp_path / "data", scratch=tmp_path / "scratch")
    (tmp_path / "data").mkdir()
    report = pgrecover.recover_after_crash(_cell(), ws, 5, 60)
    assert report["status"] == "failed" and report["crash_recovery"] is None and list(report["steps"]) == ["attach"]
    assert report["reason"].startswith("PostgreSQL cannot come back after the crash: no PostgreSQL cluster in ")
    with pytest.raises(ValueError, match="acknowledged commits cannot be negative: -1"):
        pgrecover.recover_after_crash(_cell(), ws, -1, 60)


@needs_root
@needs_pg
def test_synchronous_commit_off_loses_commits_to_a_kill_and_says_so() -> None:
    """With synchronous_commit=off a commit returns while its WAL is still in shared memory; the WAL
    writer writes it within 200 ms. Stopped (SIGSTOP) for 0.5 s before the kill, it writes nothing:
    what was acknowledged meanwhile dies with the server's memory, and the check reports it."""
    cell = _cell(synchronous_commit="off")
    settings = cell.settings_of(postgres.Settings)
    assert settings.synchronous_commit == "off"

    def stop_wal_writer(cluster: postgres.Cluster) -> None:
        (writer,) = [pid for pid in cluster.processes() if b"walwriter" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        os.kill(writer, signal.SIGSTOP)
        time.sleep(0.5)

    with loop_workspace(cell) as ws:
        ws.scratch.mkdir(parents=True)
        sink = ws.scratch / "acks"
        _crash_with_acks(settings, ws, sink, stop_wal_writer, with_pgbench=False)
        acks = pgacks.read_acks(sink)
        report = pgrecover.recover_after_crash(cell, ws, acks, 300)
        durable = report["steps"]["durability"]
        assert durable["lost"] > 0 and durable["status"] == "failed", durable
        assert durable["found_max"] + durable["lost"] == acks  # a clean tail is gone, nothing else
        assert report["reason"] == (
            f"{durable['lost']} of {acks} acknowledged commits are missing after recovery "
            f"(k {durable['found_max'] + 1}-{acks}); synchronous_commit=off: a commit returns before its WAL is flushed"
        )
        # What was lost are whole transactions: the database is consistent, only shorter.
        assert report["steps"]["invariant"]["status"] == "passed" and report["steps"]["amcheck"]["status"] == "passed"


@needs_root
@needs_pg
def test_the_ack_client_stops_on_an_exception() -> None:
    base = Path(tempfile.mkdtemp(prefix="fsmatrix-pgacks-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        with contextlib.ExitStack() as stack:
            (base / "data").mkdir(mode=0o755)
            cluster = postgres.create(
                postgres.Settings(), postgres.ClusterLocation(base / "data", None, base / "scratch"), stack
            )
            with cluster.running():
                sink = pgacks.FileSink(base / "acks")
                with pytest.raises(KeyboardInterrupt), pgacks.acknowledging(cluster, sink) as client:
                    wait_for_acks(base / "acks", 20)
                    psql = client._psql
                    assert psql is not None
                    raise KeyboardInterrupt
                assert psql.poll() is not None and client.ended is None
                assert sink._fd == -1  # closed
                summary = client.summary()
                assert summary["acknowledged"] >= 20 and summary["per_s"] > 0
                # Nothing acknowledged that is not committed (the server was never stopped).
                report = pgacks.durability(cluster, client.acknowledged, postgres.SUPERUSER, cluster.settings)
                assert report["lost"] == 0 and report["found"] in (client.acknowledged, client.acknowledged + 1)
        assert processes_under(base) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ the crash hook through run_job


def crash_cell(**postgres_settings: Any) -> dict[str, Any]:
    """A pgbench crash cell: scale 1, killed 1.5 s into the 60 s transaction run."""
    return {
        "filesystem": "ext4",
        "storage": {"disk_size": "512M"},
        "workload": {"pgbench": {"scale": SCALE, "clients": 2, "threads": 2, "duration": 60}},
        "postgres": postgres_settings,
        "crash": {"mode": "kill", "after_s": 1.5},
        "timeout": 600,
    }


def orphaned_shared_memory() -> set[str]:
    """System V segments nobody is attached to (a killed postmaster's, until a restart removes it)."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    header = lines[0].split()
    at, ident = header.index("nattch"), header.index("shmid")
    return {f[ident] for f in (line.split() for line in lines[1:]) if f[at] == "0"}


@pytest.fixture
def job_dir() -> Iterator[Path]:
    """A work directory under /var/tmp (reachable by the postgres user); afterwards nothing of the
    run may be left: loop devices, mounts, server processes, the killed server's shared memory."""
    if os.geteuid() != 0 or not HAVE_PG:
        pytest.skip("needs root and postgresql-15")
    base = Path(tempfile.mkdtemp(prefix="fsmatrix-pgcrash-job-", dir="/var/tmp"))
    base.chmod(0o755)
    orphans_before = orphaned_shared_memory()
    try:
        yield base
        assert mounted_under(base) == [] and attached_under(base) == [] and processes_under(base) == []
        assert orphaned_shared_memory() - orphans_before == set()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _crash_step(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["crash"]["steps"] if s["name"] == name)


@needs_root
@needs_pg
def test_a_killed_pgbench_cell_recovers_through_run_job(job_dir: Path) -> None:
    with storage.loop_devices(1, 512 << 20, job_dir) as devices:
        doc = job.run_job(job.Job(job.CellRepeat(parse_cell(crash_cell()), "c", 1), devices, job_dir / "job", {}))
    assert doc["status"] == "passed", doc["reason"]
    section = doc["crash"]
    assert section["fired"] is True and 1.5 <= section["fired_at_s"] < 2.5 and section["kill_source"] == "cgroup"
    assert section["workload_error"].startswith("ServerDied: PostgreSQL stopped during the"), section["workload_error"]
    assert [s["name"] for s in section["steps"]] == ["acknowledged commits", "controldata", "start"]
    assert all(s["status"] == "ok" for s in section["steps"]), section["steps"]
    assert "in production" in _crash_step(doc, "controldata")["detail"]  # killed: no shutdown checkpoint
    assert 0 < section["recovery_s"] <= _crash_step(doc, "start")["seconds"] < 60
    assert {c["name"]: c["verdict"] for c in section["checks"]} == {
        "invariant": "passed", "durability": "passed", "amcheck": "passed"}  # fmt: skip
    assert section["lost_commits"] == 0 and section["acknowledged"] > 0
    acks = pgacks.read_acks(job_dir / "job" / "scratch" / pgrecover.ACKS_FILE)
    assert section["acknowledged"] == acks
    m = doc["metrics"]
    assert m["recovery_s"] == section["recovery_s"] and m["lost_commits"] == 0 and m["acknowledged"] == acks
    assert m["redo_bytes"] > 0
    assert doc["verification"]["status"] == "passed"


@needs_root
@needs_pg
def test_a_wal_segment_deleted_between_crash_and_recovery_fails_the_run(job_dir: Path) -> None:
    """The crash phase alone, then the WAL segment holding the last checkpoint record deleted, then
    the recover phase on the same devices: the server cannot come back, and the run fails saying why.
    (A 1.5 s run writes too little WAL for a later segment to exist reliably; losing one that holds
    acknowledged commits is test_a_deleted_wal_segment_fails_the_recovery's case.)"""
    cell = parse_cell(crash_cell())
    look = job_dir / "look"
    with storage.loop_devices(1, 512 << 20, job_dir) as devices:
        crashed = job.run_job(job.Job(job.CellRepeat(cell, "c", 1), devices, job_dir / "job", {}), recover=False)
        assert crashed["status"] == "error" and crashed["reason"].startswith("crashed;"), crashed["reason"]
        assert crashed["crash"]["fired"] and crashed["crash"]["steps"] == []
        look.mkdir()
        proc.run(["mount", devices[0], str(look)], timeout=60)
        try:
            (look / "pgdata" / "pg_wal" / checkpoint_segment(look / "pgdata")).unlink()
        finally:
            proc.run(["umount", str(look)], timeout=60)
        doc = job.run_recovery(
            job.Job(job.CellRepeat(cell, "c", 1), devices, job_dir / "job", {}),
            crash.CrashEvent.from_dict(crashed["crash"]),
        )
    assert doc["status"] == "failed", doc
    assert doc["crash"]["mount_s"] is not None
    assert doc["reason"] == (
        "recovery failed: start: PostgreSQL did not come back after the crash: "
        "PANIC: could not locate a valid checkpoint record"
    ), doc["reason"]
    assert _crash_step(doc, "start")["status"] == "failed" and doc["crash"]["checks"] == []
    assert doc["crash"]["lost_commits"] is None  # never counted: the server stayed down


def checkpoint_segment(pgdata: Path) -> str:
    """The name of the WAL segment holding the cluster's latest checkpoint record (pg_controldata)."""
    out = proc.run(["/usr/lib/postgresql/15/bin/pg_controldata", "-D", str(pgdata)], timeout=60).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    high, low = (int(part, 16) for part in fields["Latest checkpoint location"].strip().split("/"))
    timeline = int(fields["Latest checkpoint's TimeLineID"])
    return f"{timeline:08X}{high:08X}{low >> 24:08X}"  # 16 MiB segments, initdb's default


@needs_root
@needs_pg
def test_lost_commits_name_synchronous_commit_off(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The count the host passes (CrashEvent.acknowledged, as after a power cut) beyond what the
    database holds: the run fails naming the lost commits and the setting that allows the loss."""
    cell = parse_cell(crash_cell(synchronous_commit="off"))
    with storage.loop_devices(1, 512 << 20, job_dir) as devices:
        crashed = job.run_job(job.Job(job.CellRepeat(cell, "c", 1), devices, job_dir / "job", {}), recover=False)
        event = crash.CrashEvent.from_dict(crashed["crash"])
        event.acknowledged = pgacks.read_acks(job_dir / "job" / "scratch" / pgrecover.ACKS_FILE) + 1000
        doc = job.run_recovery(job.Job(job.CellRepeat(cell, "c", 1), devices, job_dir / "job", {}), event)
    assert doc["status"] == "failed"
    assert doc["crash"]["lost_commits"] >= 999  # one more row than acknowledged is normal
    assert "synchronous_commit=off" in doc["reason"] and "acknowledged commits are missing" in doc["reason"]
    assert _crash_step(doc, "acknowledged commits")["detail"].endswith("(from the host's serial log)")


@needs_root
@needs_pg
def test_missing_acknowledgements_fail_the_recovery(job_dir: Path) -> None:
    cell = parse_cell(crash_cell())
    with storage.loop_devices(1, 512 << 20, job_dir) as devices:
        crashed = job.run_job(job.Job(job.CellRepeat(cell, "c", 1), devices, job_dir / "job", {}), recover=False)
        (job_dir / "job" / "scratch" / pgrecover.ACKS_FILE).unlink()
        event = crash.CrashEvent.from_dict(crashed["crash"])
        doc = job.run_recovery(job.Job(job.CellRepeat(cell, "c", 1), devices, job_dir / "job", {}), event)
        assert doc["status"] == "failed"
        assert doc["reason"].startswith("recovery failed: acknowledged commits: "), doc["reason"]
        assert "is missing" in doc["reason"] and "start" not in [s["name"] for s in doc["crash"]["steps"]]
        # The same with an empty record (nothing acknowledged) passes; its start also removes the
        # killed server's shared memory, which the failed recovery never got to.
        (job_dir / "job" / "scratch" / pgrecover.ACKS_FILE).write_text("")
        again = job.run_recovery(
            job.Job(job.CellRepeat(cell, "c", 1), devices, job_dir / "job", {}),
            crash.CrashEvent.from_dict(crashed["crash"]),
        )
    assert again["status"] == "passed", again["reason"]
    assert again["crash"]["acknowledged"] == 0 and again["crash"]["lost_commits"] == 0


@needs_root
@needs_pg
def test_fsmatrix_run_kills_and_recovers_a_pgbench_cell_on_the_host_backend(job_dir: Path) -> None:
    """The whole CLI path: `fsmatrix run --backend host` on a one-cell matrix with crash.mode kill."""
    matrix = job_dir / "pgcrash.yaml"
    matrix.write_text(
        "name: pgcrash\naxes: {filesystem: [ext4]}\ndefaults:\n"
        f"  workload.pgbench: {{scale: {SCALE}, clients: 2, threads: 2, duration: 60}}\n"
        "  storage.disk_size: 512M\n  crash: {mode: kill, after_s: 1.5}\n"
    )
    results = job_dir / "results"
    out = subprocess.run(
        [*FSMATRIX, "run", str(matrix), "--backend", "host", "--results", str(results),
         "--workdir", str(job_dir / "work")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = results.glob("pgcrash/*/r1.json")
    doc = json.loads(path.read_text())
    assert doc["status"] == "passed", doc["reason"]
    assert "-crash-kill-pgbench-" in doc["cell_id"]
    section = doc["crash"]
    assert section["fired"] and section["lost_commits"] == 0 and section["acknowledged"] > 0
    assert section["recovery_s"] > 0 and doc["metrics"]["recovery_s"] == section["recovery_s"]


@needs_root
@needs_pg
def test_a_cleanly_stopped_cluster_is_no_crash_recovery() -> None:
    """The hook on a cluster shut down cleanly (nothing replayed): the crash never reached the
    database, and the check says so."""
    cell = parse_cell(crash_cell())
    with loop_workspace(cell) as ws:
        ws.scratch.mkdir(parents=True)
        with contextlib.ExitStack() as stack:
            cluster = postgres.create(
                cell.settings_of(postgres.Settings), postgres.ClusterLocation(ws.data, None, ws.scratch), stack
            )
            with cluster.running():
                cluster.run([cluster.tool("createdb"), pgparams.DATABASE])
                cluster.run([cluster.tool("pgbench"), "-i", "-q", "-s", str(SCALE), pgparams.DATABASE],
                            database=pgparams.DATABASE)  # fmt: skip
        (ws.scratch / pgrecover.ACKS_FILE).write_text("")
        event = crash.CrashEvent(mode="kill", after_s=1.5, fired=True)
        outcome = pgrecover.recover_cell(cell, ws, event)
    assert outcome.verification["status"] == "passed"  # the database itself is fine
    checks = {c["name"]: c for c in event.checks}
    assert checks["crash recovery"]["verdict"] == "failed"
    assert event.problems() == ["crash recovery: PostgreSQL had been shut down cleanly: it replayed nothing"]
    assert "shut down" in next(s for s in event.steps if s["name"] == "controldata")["detail"]
