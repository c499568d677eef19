"""pgbench on a fresh PostgreSQL cluster (seeds 001 and 004): every phase timed, the result verified.

Phases, each its own metric (seed 004's table): ``create_s`` (initdb, server start, CREATE
DATABASE), ``load_s`` (pgbench -i steps ``dt`` then ``g``/``G``: tables created and filled),
``vacuum_s`` (``v``), ``index_s`` (``p``: primary keys), then the transaction run (``tps`` without
connection time; latencies from pgbench's per-transaction log ``-l``) and ``total_s`` (all of them).

Before the timed run: pgbench's own pre-run step done here, unmeasured (VACUUM of branches and
tellers, TRUNCATE of history), then CHECKPOINT, sync and (as root) a drop of the page cache; the
run is started with ``-n`` and a recorded ``--random-seed``.

A crash cell (``run(..., acks=sink)``): an acknowledging client (``pgacks``) commits beside pgbench
during the measured run, each commit acknowledged in the sink once it returned; a server killed
meanwhile raises ``postgres.ServerDied``. ``recover_after_crash`` then starts PostgreSQL again on the
same disks (it replays its WAL), times it (``recovery_s``, the redo range and durations from its
log), and verifies: row counts and the TPC-B invariant, every acknowledged commit present (a loss
is reported with the setting that allows it), ``pg_amcheck --all``, ``pg_checksums``.

Verification (a failed check fails the run with its reason): pgbench exits 0 and reports no failed
transaction; its log holds one line per transaction; ``pgbench_history`` holds one row per
transaction (tpcb-like, simple-update); the TPC-B invariant (tpcb-like: sums of account, branch and
teller balances and of history deltas all equal); simple-update: accounts' sum = history's, branches
and tellers untouched; select-only: nothing changed; row counts match the scale; ``pg_amcheck
--install-missing --heapallindexed`` finds nothing; ``pg_checksums --check`` passes (server stopped)
when data checksums are on. pgbench's text output is parsed by ``parse_output`` only, its
per-transaction log by ``parse_log`` only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import re
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import crash, oscache, proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Metric, Outcome, Workload, Workspace
from fsmatrix.agent.databases import postgres
from fsmatrix.agent.declare import Invalid, setting
from fsmatrix.agent.storage.prepare import Skipped
from fsmatrix.agent.workloads.pgbench import acks as pgacks

log = logging.getLogger("fsmatrix")

SCRIPTS = ("tpcb-like", "simple-update", "select-only")
PROTOCOLS = ("simple", "prepared")
DATABASE = "bench"
SUPERUSER_DB = postgres.SUPERUSER  # the database every cluster has
ACCOUNTS_PER_SCALE = 100_000
# How long a failure waits for a server that a crash injector is killing, before it is taken as the
# failure's own: only failures pay it.
DEATH_GRACE_S = 5.0
TELLERS_PER_SCALE = 10
RAW_UNSUPPORTED = (
    "PostgreSQL cannot run on a raw block device (it needs a filesystem for its files); "
    "seed 004's RAW column is not reproducible with pgbench"
)


@dataclass(frozen=True)
class Params:
    """``cell["workload"]["pgbench"]``, declared once: defaults, bounds and help."""

    script: str = setting("tpcb-like", choices=SCRIPTS, cli=True, help="built-in script: pgbench -b")
    scale: int = setting(10, minimum=1, maximum=100000, help="pgbench -s: 100,000 accounts per unit")
    clients: int = setting(4, minimum=1, maximum=1000, help="pgbench -c: concurrent sessions")
    threads: int = setting(2, minimum=1, maximum=1000, help="pgbench -j: client threads (<= clients)")
    duration: int = setting(60, minimum=1, maximum=86400, help="pgbench -T: seconds of transactions")
    protocol: str = setting("simple", choices=PROTOCOLS, help="pgbench -M: query protocol")
    generate: str = setting("client", choices=("client", "server"), help="load: pgbench -i step g or G")

    def __post_init__(self) -> None:
        if self.threads > self.clients:
            raise Invalid(
                "workload.pgbench.threads",
                f"workload.pgbench.threads {self.threads} is above clients {self.clients}; "
                "pgbench needs threads <= clients",
            )


# ------------------------------------------------------------------ parsing pgbench


@dataclass(frozen=True)
class Summary:
    """pgbench's report of a transaction run (PostgreSQL 15)."""

    transactions: int
    failed: int
    tps: float  # without initial connection time
    latency_avg_ms: float
    connection_ms: float


_SUMMARY = {
    "transactions": re.compile(r"^number of transactions actually processed: (\d+)", re.M),
    "failed": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "tps": re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M),
    "latency_avg_ms": re.compile(r"^latency average = ([0-9.]+) ms", re.M),
    "connection_ms": re.compile(r"^initial connection time = ([0-9.]+) ms", re.M),
}


def parse_output(text: str) -> Summary:
    """The numbers of ``pgbench`` run output; ValueError naming what is missing."""
    found: dict[str, str] = {}
    for name, pattern in _SUMMARY.items():
        match = pattern.search(text)
        if match:
            found[name] = match.group(1)
    missing = [name for name in _SUMMARY if name not in found]
    if missing:
        errors = [line.strip() for line in text.splitlines() if "error" in line.lower() or "fatal" in line.lower()]
        why = f" ({errors[0]})" if errors else ""
        raise ValueError(f"pgbench output lacks {', '.join(missing)}{why}")
    return Summary(
        transactions=int(found["transactions"]),
        failed=int(found["failed"]),
        tps=float(found["tps"]),
        latency_avg_ms=float(found["latency_avg_ms"]),
        connection_ms=float(found["connection_ms"]),
    )


@dataclass(frozen=True)
class Latencies:
    count: int  # transactions logged as completed
    failed: int  # logged as failed or skipped
    avg_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


def parse_log(lines: Sequence[str]) -> Latencies:
    """Latencies from pgbench's per-transaction log (``-l``): ``client tx time_us script epoch us ...``.

    A third field that is not a number ("failed", "skipped") counts as a failed transaction.
    Percentiles are nearest-rank.
    """
    times: list[int] = []
    failed = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 6:
            if line.strip():
                raise ValueError(f"pgbench log: cannot read {line.strip()!r}")
            continue
        if fields[2].isdigit():
            times.append(int(fields[2]))
        else:
            failed += 1
    if not times:
        raise ValueError("pgbench log holds no completed transaction")
    times.sort()

    def rank(percent: int) -> float:  # nearest rank: the smallest value with percent % at or below it
        return times[max(0, -(-len(times) * percent // 100) - 1)] / 1000

    return Latencies(
        count=len(times),
        failed=failed,
        avg_ms=round(statistics.fmean(times) / 1000, 3),
        p50_ms=rank(50),
        p95_ms=rank(95),
        p99_ms=rank(99),
        max_ms=times[-1] / 1000,
    )


# ------------------------------------------------------------------ the database's state


STATE_SQL = (
    "SELECT (SELECT count(*) FROM pgbench_branches), (SELECT count(*) FROM pgbench_tellers), "
    "(SELECT count(*) FROM pgbench_accounts), (SELECT count(*) FROM pgbench_history), "
    "(SELECT coalesce(sum(bbalance), 0) FROM pgbench_branches), "
    "(SELECT coalesce(sum(tbalance), 0) FROM pgbench_tellers), "
    "(SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts), "
    "(SELECT coalesce(sum(delta), 0) FROM pgbench_history)"
)
STATE_KEYS = ("branches", "tellers", "accounts", "history", "branch_sum", "teller_sum", "account_sum", "delta_sum")


def read_state(cluster: postgres.Cluster, database: str = DATABASE) -> dict[str, int]:
    """Row counts and balance sums of the four pgbench tables."""
    (row,) = cluster.query(STATE_SQL, database)
    return {k: int(v) for k, v in zip(STATE_KEYS, row, strict=True)}


def check_state(
    script: str, scale: int, transactions: int, before: Mapping[str, int], after: Mapping[str, int]
) -> list[str]:
    """What is wrong with the tables after a run of ``script`` (empty: all consistent)."""
    problems = []
    expected_rows = {"branches": scale, "tellers": TELLERS_PER_SCALE * scale, "accounts": ACCOUNTS_PER_SCALE * scale}
    for table, rows in expected_rows.items():
        if after[table] != rows:
            problems.append(f"pgbench_{table} holds {after[table]} rows, scale {scale} means {rows}")
    if script == "select-only":
        changed = [k for k in STATE_KEYS if before[k] != after[k]]
        if changed:
            problems.append("select-only changed " + ", ".join(f"{k} {before[k]} -> {after[k]}" for k in changed))
        return problems
    if after["history"] != transactions:
        problems.append(f"pgbench_history holds {after['history']} rows, pgbench processed {transactions} transactions")
    if script == "tpcb-like":
        sums = {k: after[k] for k in ("account_sum", "branch_sum", "teller_sum", "delta_sum")}
        if len(set(sums.values())) != 1:
            problems.append("TPC-B invariant broken: " + ", ".join(f"{k} {v}" for k, v in sums.items()))
    else:  # simple-update touches accounts and history only
        if after["account_sum"] != after["delta_sum"]:
            problems.append(
                f"sum of account balances {after['account_sum']} != sum of history deltas {after['delta_sum']}"
            )
        for key in ("branch_sum", "teller_sum"):
            if after[key] != before[key]:
                problems.append(f"simple-update changed {key}: {before[key]} -> {after[key]}")
    return problems


def check_run(summary: Summary, latencies: Latencies) -> list[str]:
    """What is wrong with pgbench's own account of the run: failures, a log that disagrees."""
    problems = []
    if summary.failed or latencies.failed:
        problems.append(f"pgbench reports {max(summary.failed, latencies.failed)} failed transactions")
    if latencies.count != summary.transactions:
        problems.append(
            f"pgbench's per-transaction log holds {latencies.count} completed transactions, "
            f"its report {summary.transactions}"
        )
    return problems


def amcheck(cluster: postgres.Cluster, database: str = DATABASE, timeout: float = 3600) -> str | None:
    """``pg_amcheck --install-missing --heapallindexed``: None when it finds nothing, else what it says."""
    return _amcheck(cluster, ["--heapallindexed", "-d", database], database, timeout)


def amcheck_all(cluster: postgres.Cluster, heapallindexed: bool = True, timeout: float = 3600) -> str | None:
    """``pg_amcheck --all``: every relation of every database (system catalogues included), and with
    ``heapallindexed`` every heap tuple looked up in each index; None when it finds nothing."""
    return _amcheck(cluster, ["--all", *(["--heapallindexed"] if heapallindexed else [])], SUPERUSER_DB, timeout)


def _amcheck(cluster: postgres.Cluster, args: list[str], database: str, timeout: float) -> str | None:
    cmd = [cluster.tool("pg_amcheck"), "--install-missing", *args]
    out = cluster.run(cmd, timeout=timeout, check=False, database=database)
    # A NOTICE (the extension already there) is no finding; anything else pg_amcheck prints is.
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip() and not line.startswith("NOTICE:")]
    if out.returncode == 0 and not lines:
        return None
    return f"pg_amcheck (status {out.returncode}): " + " | ".join(line.strip() for line in lines[:4])


# ------------------------------------------------------------------ the run


def _left(deadline: float, timeout: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"pgbench exceeded {timeout:g} s ({what})")
    return left


def _timed(cluster: postgres.Cluster, cmd: list[str], deadline: float, timeout: float, what: str) -> float:
    """Run a client command against the cluster; its wall time. TimeoutError past the deadline."""
    t0 = time.monotonic()
    try:
        cluster.run(cmd, timeout=_left(deadline, timeout, what), database=DATABASE)
    except proc.CommandError as exc:
        if exc.returncode is None:
            raise TimeoutError(f"pgbench exceeded {timeout:g} s ({what})") from exc
        raise
    return round(time.monotonic() - t0, 3)


def memory_bytes() -> int:
    """The machine's (the guest's) memory, MemTotal."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _stats(cluster: postgres.Cluster) -> dict[str, int]:
    """The WAL position (bytes since the start) and the checkpoint counters."""
    (row,) = cluster.query(
        "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter"
    )
    return {"wal_lsn": int(float(row[0])), "checkpoints": int(row[1]) + int(row[2])}


def _drop_caches() -> str:
    """sync and, as root, drop the page cache; says what was done."""
    if os.geteuid() != 0:
        os.sync()
        return "synced; page cache not dropped (not root)"
    oscache.drop_caches()
    return "synced and dropped"


def run_cell(cell: Cell | Mapping[str, Any], ws: Workspace, timeout: float) -> Outcome:
    """Create a cluster on ws.data (WAL on ws.journal when it differs), load, run, verify, stop.

    A crash cell runs the acknowledging client beside pgbench (``ack_sink``); the crash ends the run
    with ``postgres.ServerDied``, and ``recover_cell`` takes over."""
    cell = Cell.coerce(cell)
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
    deadline = time.monotonic() + timeout
    ws.scratch.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {"params": asdict(params)}
    seed = random.SystemRandom().randrange(1, 2**31)
    extra = {"max_connections": str(max(100, params.clients + 10))}
    with contextlib.ExitStack() as stack:
        t0 = time.monotonic()  # create_s: initdb, server start, createdb
        cluster = postgres.create(
            settings,
            ws.data,
            ws.journal if ws.journal.resolve() != ws.data.resolve() else None,
            ws.scratch,
            stack,
            extra=extra,
            timeout=_left(deadline, timeout, "initdb"),
        )
        t_versions = time.monotonic()
        versions = {"postgres": postgres.version(cluster)}
        pgbench = cluster.tool("pgbench")
        versions["pgbench"] = cluster.run([pgbench, "--version"], timeout=30).stdout.strip()
        t0 += time.monotonic() - t_versions  # not part of creating the database
        problems: list[str] = []
        with (
            cluster.running(min(postgres.START_TIMEOUT_S, _left(deadline, timeout, "server start"))),
            _named_if_the_server_died(cluster, details),
        ):
            cluster.run([cluster.tool("createdb"), DATABASE], timeout=_left(deadline, timeout, "createdb"))
            create_s = round(time.monotonic() - t0, 3)
            readback = cluster.settings_readback()
            diffs = postgres.differences(settings.expected(), readback)
            details["postgres"] = {
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
            init = [pgbench, "-i", "-q", "-s", str(params.scale)]
            load_s = _timed(cluster, [*init, "-I", "dt"], deadline, timeout, "create tables")
            load_s += _timed(cluster, [*init, "-I", "g" if params.generate == "client" else "G"], deadline, timeout,
                             "load")  # fmt: skip
            vacuum_s = _timed(cluster, [*init, "-I", "v"], deadline, timeout, "vacuum")
            index_s = _timed(cluster, [*init, "-I", "p"], deadline, timeout, "primary keys")
            database_bytes = int(cluster.value(f"SELECT pg_database_size('{DATABASE}')"))
            # pgbench's own pre-run step, unmeasured (the run gets -n): an empty history to count.
            for sql in ("VACUUM pgbench_branches", "VACUUM pgbench_tellers", "TRUNCATE pgbench_history"):
                cluster.query(sql, DATABASE)
            cluster.query("CHECKPOINT")
            details["caches"] = _drop_caches()
            before = read_state(cluster)
            stats0 = _stats(cluster)
            log_prefix = ws.scratch / "pgbench_log"
            cmd = [
                pgbench, "-n", "-b", params.script, "-M", params.protocol, "-s", str(params.scale),
                "-c", str(params.clients), "-j", str(params.threads), "-T", str(params.duration),
                "-l", f"--log-prefix={log_prefix}", f"--random-seed={seed}", DATABASE,
            ]  # fmt: skip
            details["command"] = cmd
            log.info("pgbench %s scale %d, %d clients, %d s", params.script, params.scale, params.clients,
                     params.duration)  # fmt: skip
            t1 = time.monotonic()
            client: pgacks.AckClient | None = None
            try:
                with ws.measure(), contextlib.ExitStack() as acking:
                    if acks is not None:
                        client = acking.enter_context(pgacks.acknowledging(cluster, acks, DATABASE))
                    out = cluster.run(cmd, timeout=_left(deadline, timeout, "transactions"), check=False,
                                      database=DATABASE, cwd=ws.scratch)  # fmt: skip
            except proc.CommandError as exc:
                raise TimeoutError(f"pgbench exceeded {timeout:g} s (transactions)") from exc
            run_s = round(time.monotonic() - t1, 3)
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
            if out.returncode != 0:
                problems.append(str(proc.CommandError(cmd, out.returncode, text)))
            stats1 = _stats(cluster)
            try:
                summary = parse_output(text)
            except ValueError:
                if out.returncode != 0:  # pgbench stopped early: its own words say why
                    raise proc.CommandError(cmd, out.returncode, text) from None
                raise
            log_lines = [line for path in sorted(ws.scratch.glob("pgbench_log.*")) for line in
                         path.read_text().splitlines()]  # fmt: skip
            latencies = parse_log(log_lines)
            after = read_state(cluster)
            problems += check_run(summary, latencies)
            problems += check_state(params.script, params.scale, summary.transactions, before, after)
            found = amcheck(cluster, DATABASE, _left(deadline, timeout, "pg_amcheck"))
            if found:
                problems.append(found)
        if settings.data_checksums:
            found = postgres.checksums_check(cluster, _left(deadline, timeout, "pg_checksums"))
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
        "lat_avg_ms": latencies.avg_ms,
        "lat_p50_ms": latencies.p50_ms,
        "lat_p95_ms": latencies.p95_ms,
        "lat_p99_ms": latencies.p99_ms,
        "transactions": summary.transactions,
        "failed_transactions": summary.failed,
        "wal_bytes": stats1["wal_lsn"] - stats0["wal_lsn"],
        "checkpoints": stats1["checkpoints"] - stats0["checkpoints"],
        "database_bytes": database_bytes,
        "memory_bytes": details["memory_bytes"],
    }
    verification: dict[str, Any] = {"status": "failed", "message": "; ".join(problems)} if problems else {
        "status": "passed"}  # fmt: skip
    verification["checks"] = {"state": after, "transactions": summary.transactions,
                               "data_checksums": settings.data_checksums}  # fmt: skip
    return Outcome(metrics=metrics, verification=verification, details=details, versions=versions)


# ------------------------------------------------------------------ after a crash

# pg_amcheck --heapallindexed fingerprints each index, then looks every heap tuple up in it: about
# one more read of all the data. Above this many bytes of databases it is left out (the structural
# checks of every relation remain).
HEAPALLINDEXED_MAX_BYTES = 8 << 30
RECOVERY_POLL_S = 0.02  # how often a recovering server is asked whether it accepts connections


def state_before_run(scale: int) -> dict[str, int]:
    """The tables as ``run`` leaves them before the transaction run: freshly loaded (every balance 0)
    and an empty history."""
    return dict.fromkeys(STATE_KEYS, 0) | {
        "branches": scale,
        "tellers": TELLERS_PER_SCALE * scale,
        "accounts": ACCOUNTS_PER_SCALE * scale,
    }


def check_after_crash(script: str, scale: int, after: Mapping[str, int]) -> list[str]:
    """What is wrong with the tables after a crash of ``script``'s run (empty: consistent).

    How many transactions committed nobody can say after a crash, so the history is taken as the
    count; every other check of ``check_state`` holds for any set of whole transactions (the TPC-B
    invariant for tpcb-like), and fails on a half-applied one."""
    return check_state(script, scale, after["history"], state_before_run(scale), after)


def _wal_root(ws: Workspace) -> Path | None:
    return ws.journal if ws.journal.resolve() != ws.data.resolve() else None


def recover_after_crash(cell: Cell | Mapping[str, Any], ws: Workspace, acks: int, timeout: float) -> dict[str, Any]:
    """After a crash of ``cell``'s run: restart PostgreSQL on the same disks and verify (``recover``)."""
    cell = Cell.coerce(cell)
    if ws.device is not None:
        raise Skipped(RAW_UNSUPPORTED)
    return recover(cell.typed_params(Params), cell.settings_of(postgres.Settings), ws, acks, timeout)


def recover(
    params: Params,
    settings: postgres.Settings,
    ws: Workspace,
    acks: int,
    timeout: float,
    *,
    heapallindexed_max_bytes: int = HEAPALLINDEXED_MAX_BYTES,
) -> dict[str, Any]:
    """Start the crashed cluster on its disks (PostgreSQL replays its WAL), time it, verify it, stop it.

    ``acks``: the highest acknowledgement the sink holds (``pgacks.read_acks``). Steps, each with its
    ``seconds`` and ``status``:

    - ``controldata``: the state the crash left ("in production"; "shut down" after a clean stop);
    - ``start``: ``recovery_s``, server start until it accepts connections as a client sees it (to
      a few hundredths of a second), and what the server's log says: ``server_s`` the same to the millisecond,
      ``sync_s`` its fsync of the data directory first, ``redo_s``/``redo_bytes`` the WAL replayed,
      ``checkpoint_s`` the end-of-recovery checkpoint;
    - ``invariant``: row counts and the TPC-B invariant (``check_after_crash``);
    - ``durability``: every acknowledged commit is there (``pgacks.durability``);
    - ``amcheck``: ``pg_amcheck --all``, ``--heapallindexed`` up to ``heapallindexed_max_bytes``;
    - ``checksums``: ``pg_checksums --check``, server stopped, when data checksums are on.

    Returns ``{"status": "passed"|"failed", "reason", "crash_recovery", "steps", "metrics", ...}``: a
    failed check fails it with its reason; so does a server that does not come back (the later
    checks then do not run), or a data directory that is gone (step ``attach``). ``crash_recovery``
    False: the cluster had been shut down cleanly and nothing was replayed (no crash happened); None:
    there was no cluster to start. TimeoutError past ``timeout``; the server is stopped on every path.
    """
    if acks < 0:
        raise ValueError(f"acknowledged commits cannot be negative: {acks}")
    deadline = time.monotonic() + timeout
    ws.scratch.mkdir(parents=True, exist_ok=True)
    steps: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    metrics: dict[str, float | int] = {}
    extra = {"max_connections": str(max(100, params.clients + 10))}

    def step(name: str, t0: float, failure: str | None = None, **found: Any) -> None:
        steps[name] = {"status": "failed" if failure else "passed", "seconds": round(time.monotonic() - t0, 3),
                       **found}  # fmt: skip
        if failure:
            steps[name]["message"] = failure
            problems.append(failure)

    def report(crash_recovery: bool | None, cluster: postgres.Cluster | None) -> dict[str, Any]:
        return {
            "status": "failed" if problems else "passed",
            "reason": "; ".join(problems) or None,
            "crash_recovery": crash_recovery,
            "steps": steps,
            "metrics": metrics,
            "server_log": str(cluster.log_file) if cluster else None,
            "stops": cluster.stops if cluster else [],
        }

    with contextlib.ExitStack() as stack:
        t0 = time.monotonic()
        try:
            cluster = postgres.attach(settings, ws.data, _wal_root(ws), ws.scratch, stack, extra=extra)
        except FileNotFoundError as exc:  # the crash took the data directory with it: a finding
            step("attach", t0, f"PostgreSQL cannot come back after the crash: {exc}")
            return report(None, None)
        t0 = time.monotonic()
        try:
            control = postgres.controldata(cluster, timeout=_left(deadline, timeout, "pg_controldata"))
        except proc.CommandError as exc:  # a damaged control file: the start below will say more
            step("controldata", t0, f"pg_controldata cannot read the control file: {_first_line(exc)}")
        else:
            step("controldata", t0, state=control.get("Database cluster state", ""),
                 checkpoint=control.get("Latest checkpoint location"),
                 checkpoint_redo=control.get("Latest checkpoint's REDO location"))  # fmt: skip
        offset = cluster.log_file.stat().st_size if cluster.log_file.exists() else 0
        started = False
        failed: Exception | None = None
        try:
            t0 = time.monotonic()
            try:
                cluster.start(_left(deadline, timeout, "recovery"), poll=RECOVERY_POLL_S)
                started = True
            except RuntimeError as exc:  # the server gave up (a PANIC in recovery): a finding, not an error
                failed = exc
            recovery_s = round(time.monotonic() - t0, 3)
            with cluster.log_file.open("rb") as f:
                f.seek(offset)
                replay = postgres.parse_recovery_log(f.read().decode(errors="replace"))
            if started:
                step("start", t0, recovery_s=recovery_s, log=replay)
                metrics["recovery_s"] = recovery_s
                for name in ("server_s", "sync_s", "redo_s", "redo_bytes", "checkpoint_s"):
                    if name in replay:
                        metrics[name] = replay[name]
            else:
                why = replay["errors"][0] if replay["errors"] else str(failed)
                step("start", t0, f"PostgreSQL did not come back after the crash: {why}", log=replay)
            if started:
                _verify_recovered(cluster, params, settings, acks, deadline, timeout, heapallindexed_max_bytes,
                                  step, metrics)  # fmt: skip
        finally:
            cluster.stops.append(cluster.stop()["mode"])
        if started and settings.data_checksums:
            t0 = time.monotonic()
            step("checksums", t0, postgres.checksums_check(cluster, _left(deadline, timeout, "pg_checksums")))
    return report(steps["start"]["log"]["crash_recovery"], cluster)


def recovery_outcome(report: Mapping[str, Any]) -> Outcome:
    """``recover``'s report as a workload's Outcome: its metrics, a verification passed or failed
    with the reason and every step, the whole report in the details."""
    verification: dict[str, Any] = {"status": report["status"], "checks": report["steps"]}
    if report["reason"]:
        verification["message"] = report["reason"]
    return Outcome(metrics=dict(report["metrics"]), verification=verification, details={"recovery": dict(report)})


def _verify_recovered(
    cluster: postgres.Cluster,
    params: Params,
    settings: postgres.Settings,
    acks: int,
    deadline: float,
    timeout: float,
    heapallindexed_max_bytes: int,
    step: Callable[..., None],
    metrics: dict[str, float | int],
) -> None:
    """The checks of a recovered, running cluster: the read-only ones first (pg_amcheck installs its
    extension)."""
    t0 = time.monotonic()
    try:
        after = read_state(cluster)
    except proc.CommandError as exc:
        step("invariant", t0, f"the pgbench tables cannot be read after recovery: {_first_line(exc)}")
    else:
        found = check_after_crash(params.script, params.scale, after)
        step("invariant", t0, "; ".join(found) or None, state=after)

    t0 = time.monotonic()
    try:
        report = pgacks.durability(cluster, acks, DATABASE, settings)
    except proc.CommandError as exc:
        step("durability", t0, f"the acknowledged commits cannot be read after recovery: {_first_line(exc)}")
    else:
        report.pop("status")
        step("durability", t0, report.pop("message", None), **report)
        metrics.update(acknowledged=report["acknowledged"], found_commits=report["found"], lost_commits=report["lost"])

    t0 = time.monotonic()
    size = int(cluster.value("SELECT sum(pg_database_size(oid)) FROM pg_database"))
    whole = size <= heapallindexed_max_bytes
    found_amcheck = amcheck_all(cluster, heapallindexed=whole, timeout=_left(deadline, timeout, "pg_amcheck"))
    step("amcheck", t0, found_amcheck, heapallindexed=whole, database_bytes=size)


def _first_line(exc: proc.CommandError) -> str:
    lines = [line.strip() for line in exc.output.splitlines() if line.strip()]
    return lines[0] if lines else str(exc).splitlines()[0]


# ------------------------------------------------------------------ the crash hook

# Where a VM's guest writes its acknowledgements for a power cut (or flush points): its first serial
# port, which the host records to a log that outlives the guest.
SERIAL_CONSOLE = Path("/dev/ttyS0")
ACKS_FILE = "acks"  # kill: the FileSink in the run's scratch directory (off the device under test)
# recover's steps that are the database's recovery (in order); the others are integrity checks.
RECOVERY_STEPS = ("attach", "controldata", "start")


def ack_tag(cell: Cell | Mapping[str, Any]) -> str:
    """The tag of a crash cell's acknowledgements on a serial console, from the cell alone: the host
    computes the same one to read them back (``pgacks.parse_acks(serial_log, ack_tag(cell))``)."""
    text = json.dumps(Cell.coerce(cell).to_dict(), sort_keys=True)
    return "pgbench-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def ack_sink(cell: Cell, ws: Workspace) -> pgacks.Sink:
    """Where a crash cell's acknowledged commits go: for ``kill`` (the kernel survives) a fresh
    O_DSYNC file in the scratch directory; for the VM modes, which lose the guest, the serial
    console with the cell's tag (the host counts them from its log and passes the count in
    ``CrashEvent.acknowledged``)."""
    assert cell.crash is not None
    if _in_a_vm(cell):
        if not SERIAL_CONSOLE.exists():
            raise RuntimeError(
                f"crash.mode {cell.crash.mode!r} needs the VM's serial console {SERIAL_CONSOLE} for the "
                "acknowledged commits, and there is none"
            )
        return pgacks.ConsoleSink(SERIAL_CONSOLE, ack_tag(cell))
    path = ws.scratch / ACKS_FILE
    ws.scratch.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a count left by an earlier run in this scratch must not be taken for ours
    return pgacks.FileSink(path)


def _in_a_vm(cell: Cell) -> bool:
    """Whether the cell's crash mode runs only in a VM (whose guest the crash may take with it)."""
    return cell.crash is not None and crash.get(cell.crash.mode).needs_vm is not None


def acknowledged_on_console(cell: Cell, console_text: str) -> int:
    """The commits a cut guest acknowledged on its serial console (the lines tagged with the cell's tag)."""
    return pgacks.parse_acks(console_text, ack_tag(cell))


def acknowledged_commits(cell: Cell, ws: Workspace, event: crash.CrashEvent) -> tuple[int, str]:
    """How many commits were acknowledged before the crash, and where that count comes from."""
    if event.acknowledged is not None:
        if event.acknowledged < 0:
            raise ValueError(f"crash.acknowledged cannot be negative: {event.acknowledged}")
        return event.acknowledged, "the host's serial log"
    path = ws.scratch / ACKS_FILE
    if cell.crash is not None and _in_a_vm(cell):
        raise ValueError(
            f"crash.mode {cell.crash.mode!r}: the host passed no acknowledged count (CrashEvent.acknowledged) "
            "from the VM's serial log"
        )
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the acknowledging client's record of the run is gone")
    return pgacks.read_acks(path), str(path)


def recover_cell(cell: Cell | Mapping[str, Any], ws: Workspace, event: crash.CrashEvent) -> Outcome:
    """The crash hook: PostgreSQL restarted on the crashed cluster (its WAL replay is ``recovery_s``),
    then the invariant, every acknowledged commit (``lost_commits``), pg_amcheck and, with data
    checksums, pg_checksums. Nothing is resumed: the checks are the verification.

    The database's recovery steps go to ``event.steps`` (a failed one raises RecoveryFailed: the
    later checks never ran), the checks to ``event.checks``; a lost commit fails the run, the
    reason naming the commits and the setting that allows the loss."""
    cell = Cell.coerce(cell)
    with event.step("acknowledged commits") as record:
        acks, source = acknowledged_commits(cell, ws, event)
        record["detail"] = f"{acks} (from {source})"
    event.acknowledged = acks
    report = recover_after_crash(cell, ws, acks, float(cell.timeout))
    steps: dict[str, dict[str, Any]] = report["steps"]
    for name in RECOVERY_STEPS:
        if name in steps:
            found = steps[name]
            failed = found["status"] == "failed"
            detail = found.get("message") or _step_detail(name, found)
            event.steps.append({"name": name, "seconds": found["seconds"], "status": "failed" if failed else "ok",
                                "detail": crash.short(detail)})  # fmt: skip
    # No cluster, or a server that did not come back: the checks never ran (an unreadable control
    # file alone is recorded, and the start says more).
    for name in ("attach", "start"):
        if steps.get(name, {}).get("status") == "failed":
            raise crash.RecoveryFailed(name, crash.short(steps[name]["message"]))
    metrics = report["metrics"]
    event.recovery_s = metrics.get("recovery_s")
    for name, found in steps.items():
        if name not in RECOVERY_STEPS:
            passed = found["status"] == "passed"
            event.check(name, passed, found.get("message") or _check_detail(name, found))
    if "lost_commits" in metrics:
        event.lost_commits = int(metrics["lost_commits"])
    outcome = recovery_outcome(report)
    if not report["crash_recovery"]:  # a clean shutdown: the crash never reached the database
        event.check("crash recovery", False, "PostgreSQL had been shut down cleanly: it replayed nothing")
    if outcome.verification["status"] != "passed":
        # The reasons are the failed checks above (the crash section): the verification only names them.
        failed_checks = [c["name"] for c in event.checks if c["verdict"] == "failed"]
        outcome.verification["message"] = "failed after the crash: " + ", ".join(failed_checks)
    return outcome


def _step_detail(name: str, found: Mapping[str, Any]) -> str:
    if name == "controldata":
        return f"cluster state: {found.get('state')}"
    if name == "start":
        replay = found.get("log", {})
        return (f"ready after {found.get('recovery_s')} s; redo {replay.get('redo_bytes', 0)} bytes "
                f"in {replay.get('redo_s')} s; {replay.get('end_of_wal', '')}")  # fmt: skip
    return ""


def _check_detail(name: str, found: Mapping[str, Any]) -> str:
    if name == "durability":
        rows = f"{found['found']} rows, max {found['found_max']}"
        return f"all {found['acknowledged']} acknowledged commits found ({rows})"
    if name == "invariant":
        return "row counts and the TPC-B invariant hold"
    if name == "amcheck":
        return "pg_amcheck --all" + (" --heapallindexed" if found.get("heapallindexed") else "") + ": clean"
    return "passed"


WORKLOAD = Workload(
    name="pgbench",
    help="pgbench on a fresh PostgreSQL cluster (seeds 001, 004): create, load, index, transactions",
    params=Params,
    run_cell=run_cell,
    metrics=(
        Metric("tps", "Transactions per second", "tx/s", "higher"),
        Metric("create_s", "Create database (s)", "s", "lower"),
        Metric("load_s", "Load tables (s)", "s", "lower"),
        Metric("index_s", "Create indexes (s)", "s", "lower"),
        Metric("total_s", "Total time (s)", "s", "lower"),
        Metric("lat_avg_ms", "Average latency (ms)", "ms", "lower"),
        Metric("lat_p95_ms", "95th percentile latency (ms)", "ms", "lower"),
    ),
    primary="tps",
    slug=lambda p: f"{p.script}-s{p.scale}-c{p.clients}",
    summary=lambda p: f"pgbench {p.script} s{p.scale} c{p.clients} j{p.threads} {p.duration}s {p.protocol}",
    row_keys=("script", "scale", "clients"),
    row_label=lambda v: f"{v['script']} scale {v['scale']}, {v['clients']} clients",
    overview=("create_s", "load_s", "index_s", "total_s", "tps", "lat_avg_ms"),
    note=(
        "PostgreSQL cannot run on a raw block device: seed 004's RAW column has no pgbench counterpart. "
        "fio on filesystem raw, where present, is context only and never scored against these numbers."
    ),
    operation="transaction",
    operations=lambda m: m.get("transactions"),
    needs_filesystem=True,
    settings=(postgres.BLOCK,),
    journal="the PostgreSQL WAL (pg_wal)",
    guest_packages=("postgresql-15",),
    host_packages=("postgresql-15",),
    recover=recover_cell,
    acknowledged_on_console=acknowledged_on_console,
)
