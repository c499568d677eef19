"""The run: a fresh cluster, load, the timed transactions (with the acknowledging client in a crash
cell), verification; a server that died on the way is named (``postgres.ServerDied``)."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import oscache, proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workspace
from fsmatrix.agent.databases import postgres
from fsmatrix.agent.storage.prepare import Skipped
from fsmatrix.agent.workloads.pgbench import acks as pgacks
from fsmatrix.agent.workloads.pgbench.params import DATABASE, RAW_UNSUPPORTED, Params, time_left
from fsmatrix.agent.workloads.pgbench.parse import Latencies, Summary, parse_log, parse_output
from fsmatrix.agent.workloads.pgbench.recover import ack_sink, wal_root
from fsmatrix.agent.workloads.pgbench.verify import amcheck, check_run, check_state, read_state

log = logging.getLogger("fsmatrix")

# How long a failure waits for a server that a crash injector is killing, before it is taken as the
# failure's own: only failures pay it.
DEATH_GRACE_S = 5.0


@dataclass(frozen=True)
class _Clock:
    """The run's time limit: ``timeout`` seconds, up at ``deadline`` (time.monotonic)."""

    deadline: float
    timeout: float

    def left(self, what: str) -> float:
        return time_left(self.deadline, self.timeout, what)


def _timed(cluster: postgres.Cluster, cmd: list[str], clock: _Clock, what: str) -> float:
    """Run a client command against the cluster; its wall time. TimeoutError past the deadline."""
    t0 = time.monotonic()
    try:
        cluster.run(cmd, timeout=clock.left(what), database=DATABASE)
    except proc.CommandError as exc:
        if exc.returncode is None:
            raise TimeoutError(f"pgbench exceeded {clock.timeout:g} s ({what})") from exc
        raise
    return round(time.monotonic() - t0, 3)


def memory_bytes() -> int:
    """The machine's (the guest's) memory, MemTotal."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


# The checkpoint counters: PostgreSQL 17 moved them from pg_stat_bgwriter (checkpoints_timed,
# checkpoints_req) to pg_stat_checkpointer (num_timed, num_requested).
CHECKPOINTER_SINCE = 170000  # server_version_num
CHECKPOINTS_QUERY = {
    False: "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter",
    True: "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, num_timed, num_requested FROM pg_stat_checkpointer",
}


def _stats(cluster: postgres.Cluster) -> dict[str, int]:
    """The WAL position (bytes since the start) and the checkpoint counters, from the view this
    server's version keeps them in (asked of the server, not guessed from a path)."""
    number = int(cluster.value("SHOW server_version_num"))
    (row,) = cluster.query(CHECKPOINTS_QUERY[number >= CHECKPOINTER_SINCE])
    return {"wal_lsn": int(float(row[0])), "checkpoints": int(row[1]) + int(row[2])}


def _drop_caches() -> str:
    """sync and, as root, drop the page cache; says what was done."""
    if os.geteuid() != 0:
        os.sync()
        return "synced; page cache not dropped (not root)"
    oscache.drop_caches()
    return "synced and dropped"


def run_cell(cell: Cell, ws: Workspace, timeout: float) -> Outcome:
    """Create a cluster on ws.data (WAL on ws.journal when it differs), load, run, verify, stop.

    A crash cell runs the acknowledging client beside pgbench (``ack_sink``); the crash ends the run
    with ``postgres.ServerDied``, and ``recover_cell`` takes over."""
    if ws.device is not None:
        raise Skipped(RAW_UNSUPPORTED)
    sink = ack_sink(cell, ws) if cell.crash is not None else None
    try:
        return run(cell.typed_params(Params), cell.settings_of(postgres.Settings), ws, timeout, acks=sink)
    finally:
        if sink is not None:  # the client closes it; a run that failed before the client started did not
            sink.close()


@contextlib.contextmanager
def _named_if_the_server_died(cluster: postgres.Cluster, details: Mapping[str, Any]) -> Iterator[None]:
    """A failure while the server is dead (killed by a crash injector, at any phase) is raised as
    ``postgres.ServerDied``, the failure it caused chained to it, with the acknowledging client's
    count once ``details["acks"]`` holds it."""
    try:
        yield
    except postgres.ServerDied:
        raise
    except Exception as exc:
        if cluster.exited(grace=DEATH_GRACE_S):
            assert cluster.postmaster is not None
            first = str(exc).strip().splitlines()[:1] or [type(exc).__name__]
            raise postgres.ServerDied(
                f"PostgreSQL stopped during the run (status {cluster.postmaster.returncode}): {first[0]}",
                details.get("acks", {}).get("acknowledged"),
            ) from exc
        if cluster.postmaster is not None:  # for whoever reads the failure: what the server was doing
            exc.add_note(f"the postmaster (pid {cluster.postmaster.pid}) is alive: {cluster.postmaster_state()}")
        raise


def run(
    params: Params, settings: postgres.Settings, ws: Workspace, timeout: float, acks: pgacks.Sink | None = None
) -> Outcome:
    """The run; with ``acks`` (a crash cell), an acknowledging client commits beside pgbench during
    the measured run and records each acknowledged commit in that sink (``pgacks``). A server that
    dies while it is needed raises ``postgres.ServerDied`` (with the acknowledged count when it died
    during the transaction run)."""
    clock = _Clock(time.monotonic() + timeout, timeout)
    ws.scratch.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {"params": asdict(params)}
    seed = random.SystemRandom().randrange(1, 2**31)
    extra = {"max_connections": str(max(100, params.clients + 10))}
    with contextlib.ExitStack() as stack:
        t0 = time.monotonic()  # create_s: initdb, server start, createdb
        where = postgres.ClusterLocation(ws.data, wal_root(ws), ws.scratch)
        cluster = postgres.create(settings, where, stack, extra=extra, timeout=clock.left("initdb"))
        versions, asking = _versions(cluster)
        t0 += asking  # not part of creating the database
        problems: list[str] = []
        with (
            cluster.running(min(postgres.START_TIMEOUT_S, clock.left("server start"))),
            _named_if_the_server_died(cluster, details),
        ):
            cluster.run([cluster.tool("createdb"), DATABASE], timeout=clock.left("createdb"))
            create_s = round(time.monotonic() - t0, 3)
            details["postgres"] = _settings_taken(cluster, settings, extra)
            load_s, vacuum_s, index_s = _load(cluster, params, clock)
            database_bytes = int(cluster.value(f"SELECT pg_database_size('{DATABASE}')"))
            details["caches"] = _before_the_run(cluster)
            before, stats0 = read_state(cluster), _stats(cluster)  # in this order
            cmd = _command(cluster, params, ws.scratch / "pgbench_log", seed)
            details["command"] = cmd
            log.info("pgbench %s scale %d, %d clients, %d s", params.script, params.scale, params.clients,
                     params.duration)  # fmt: skip
            out, run_s = _transactions(cluster, cmd, ws, acks, clock, details)
            text = out.stdout + out.stderr
            if out.returncode != 0:
                problems.append(str(proc.CommandError(cmd, out.returncode, text)))
            stats1 = _stats(cluster)
            summary = _summary(text, cmd, out.returncode)
            latencies = parse_log([line for path in sorted(ws.scratch.glob("pgbench_log.*")) for line in
                                   path.read_text().splitlines()])  # fmt: skip
            after = read_state(cluster)
            problems += check_run(summary, latencies)
            problems += check_state(params.script, params.scale, summary.transactions, before, after)
            found = amcheck(cluster, DATABASE, clock.left("pg_amcheck"))
            if found:
                problems.append(found)
        if settings.data_checksums:
            found = postgres.checksums_check(cluster, clock.left("pg_checksums"))
            if found:
                problems.append(found)
        details["server_log"] = str(cluster.log_file)
        details["stops"] = cluster.stops
    details.update(
        random_seed=seed,
        state_before=before,
        state_after=after,
        summary=asdict(summary),
        latency=asdict(latencies),
        run_s=run_s,
        memory_bytes=memory_bytes(),
    )
    metrics: dict[str, float | int] = {
        "tps": summary.tps,
        "create_s": create_s,
        "load_s": round(load_s, 3),
        "vacuum_s": vacuum_s,
        "index_s": index_s,
        "total_s": round(create_s + load_s + vacuum_s + index_s + run_s, 3),
        **_latency_metrics(latencies),
        "transactions": summary.transactions,
        "failed_transactions": summary.failed,
        "wal_bytes": stats1["wal_lsn"] - stats0["wal_lsn"],
        "checkpoints": stats1["checkpoints"] - stats0["checkpoints"],
        "database_bytes": database_bytes,
        "memory_bytes": details["memory_bytes"],
    }
    verification = _verification(problems, after, summary, settings)
    return Outcome(metrics=metrics, verification=verification, details=details, versions=versions)


def _verification(
    problems: list[str], after: dict[str, Any], summary: Summary, settings: postgres.Settings
) -> dict[str, Any]:
    verification: dict[str, Any] = {"status": "failed", "message": "; ".join(problems)} if problems else {
        "status": "passed"}  # fmt: skip
    verification["checks"] = {"state": after, "transactions": summary.transactions,
                               "data_checksums": settings.data_checksums}  # fmt: skip
    return verification


def _versions(cluster: postgres.Cluster) -> tuple[dict[str, str], float]:
    """The server's and pgbench's versions, and the seconds it took to ask."""
    t0 = time.monotonic()
    versions = {"postgres": postgres.version(cluster)}
    versions["pgbench"] = cluster.run([cluster.tool("pgbench"), "--version"], timeout=30).stdout.strip()
    return versions, time.monotonic() - t0


def _settings_taken(cluster: postgres.Cluster, settings: postgres.Settings, extra: dict[str, str]) -> dict[str, Any]:
    """What the server was asked for and took (the details' ``postgres``); RuntimeError when it did
    not take the settings the cell asks for."""
    readback = cluster.settings_readback()
    diffs = postgres.differences(settings.expected(), readback)
    taken = {
        "requested": settings.server_settings() | {"data_checksums": settings.data_checksums},
        "expected": settings.expected(),
        "readback": readback,
        "internal": extra,
        "data_directory": str(cluster.data),
        "data_device": postgres.device_of(cluster.data),
        "pg_wal": str((cluster.data / "pg_wal").resolve()),
        "pg_wal_device": postgres.device_of(cluster.data / "pg_wal"),
        "initdb_s": cluster.timings.get("initdb_s"),
    }
    if diffs:
        raise RuntimeError("PostgreSQL did not take the settings the cell asks for: " + "; ".join(diffs))
    return taken


def _load(cluster: postgres.Cluster, params: Params, clock: _Clock) -> tuple[float, float, float]:
    """pgbench -i in its steps, each timed: the tables made and loaded, vacuumed, indexed."""
    init = [cluster.tool("pgbench"), "-i", "-q", "-s", str(params.scale)]
    load_s = _timed(cluster, [*init, "-I", "dt"], clock, "create tables")
    load_s += _timed(cluster, [*init, "-I", "g" if params.generate == "client" else "G"], clock, "load")
    vacuum_s = _timed(cluster, [*init, "-I", "v"], clock, "vacuum")
    index_s = _timed(cluster, [*init, "-I", "p"], clock, "primary keys")
    return load_s, vacuum_s, index_s


def _before_the_run(cluster: postgres.Cluster) -> str:
    """pgbench's own pre-run step, unmeasured (the run gets -n): an empty history to count; then a
    checkpoint and the page cache dropped. Says what was done with the caches."""
    for sql in ("VACUUM pgbench_branches", "VACUUM pgbench_tellers", "TRUNCATE pgbench_history"):
        cluster.query(sql, DATABASE)
    cluster.query("CHECKPOINT")
    return _drop_caches()


def _command(cluster: postgres.Cluster, params: Params, log_prefix: Path, seed: int) -> list[str]:
    return [
        cluster.tool("pgbench"), "-n", "-b", params.script, "-M", params.protocol, "-s", str(params.scale),
        "-c", str(params.clients), "-j", str(params.threads), "-T", str(params.duration),
        "-l", f"--log-prefix={log_prefix}", f"--random-seed={seed}", DATABASE,
    ]  # fmt: skip


def _transactions(
    cluster: postgres.Cluster,
    cmd: list[str],
    ws: Workspace,
    acks: pgacks.Sink | None,
    clock: _Clock,
    details: dict[str, Any],
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The measured part: pgbench's timed transactions (with the acknowledging client beside it when
    ``acks``, its summary in ``details["acks"]``). pgbench's result and its wall time; its output is
    kept in pgbench-run.txt. ``postgres.ServerDied`` when the server stopped during it."""
    client: pgacks.AckClient | None = None
    try:
        with ws.measure():
            t1 = time.monotonic()  # inside: the window's syncs are no part of run_s (and total_s)
            with contextlib.ExitStack() as acking:
                if acks is not None:
                    client = acking.enter_context(pgacks.acknowledging(cluster, acks, DATABASE))
                out = cluster.run(cmd, timeout=clock.left("transactions"), check=False, database=DATABASE,
                                  cwd=ws.scratch)  # fmt: skip
            run_s = round(time.monotonic() - t1, 3)
    except proc.CommandError as exc:
        raise TimeoutError(f"pgbench exceeded {clock.timeout:g} s (transactions)") from exc
    text = out.stdout + out.stderr
    (ws.scratch / "pgbench-run.txt").write_text(text)
    if client is not None:
        details["acks"] = client.summary()
    if cluster.exited(grace=DEATH_GRACE_S if out.returncode != 0 else 0):
        assert cluster.postmaster is not None
        last = text.strip().splitlines()[-1:] or [""]
        raise postgres.ServerDied(
            f"PostgreSQL stopped during the transaction run (status {cluster.postmaster.returncode}); "
            f"pgbench: {last[0].strip()}",
            client.acknowledged if client is not None else None,
        )
    return out, run_s


def _summary(text: str, cmd: list[str], returncode: int) -> Summary:
    """pgbench's summary of the run; when there is none and pgbench failed, its own words say why."""
    try:
        return parse_output(text)
    except ValueError:
        if returncode != 0:  # pgbench stopped early: its own words say why
            raise proc.CommandError(cmd, returncode, text) from None
        raise


def _latency_metrics(latencies: Latencies) -> dict[str, float]:
    return {
        "lat_avg_ms": latencies.avg_ms,
        "lat_p50_ms": latencies.p50_ms,
        "lat_p95_ms": latencies.p95_ms,
        "lat_p99_ms": latencies.p99_ms,
    }
