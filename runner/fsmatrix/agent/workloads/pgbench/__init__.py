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

Modules: ``params`` (``Params``, the shared names), ``parse`` (pgbench's output and log),
``verify`` (the checks of a run), ``run``, ``recover`` (after a crash, the acknowledgement sink, the
crash hook), ``acks`` (the acknowledging client). This one holds the declaration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsmatrix.agent.contract import Footprint, Metric, Workload
from fsmatrix.agent.databases import postgres
from fsmatrix.agent.declare import parse_size
from fsmatrix.agent.workloads.pgbench import recover, run
from fsmatrix.agent.workloads.pgbench.params import Params

if TYPE_CHECKING:
    from fsmatrix.agent.cell import Cell

# pgbench's tables and indexes take about 16 MiB per scale unit (100,000 accounts); its updates
# leave dead rows until vacuum gets to them, so half as much again. A fresh cluster is about 40 MiB.
PER_SCALE = 16 << 20
BLOAT = 1.5
CLUSTER = 64 << 20


def footprint(cell: Cell) -> Footprint:
    """The cluster and its tables; the WAL a checkpoint keeps: up to max_wal_size, but no more than
    twice the data (the load logs the tables once, and full-page writes log each page at most once
    per checkpoint), and a few segments over (max_wal_size is a soft limit)."""
    p, pg = cell.typed_params(Params), cell.settings_of(postgres.Settings)
    data = CLUSTER + int(p.scale * PER_SCALE * BLOAT)
    wal = min(parse_size(pg.max_wal_size), 2 * data) + 4 * postgres.WAL_SEGMENT
    return Footprint(data=data, journal=wal, setting="workload.pgbench.scale")


WORKLOAD = Workload(
    name="pgbench",
    help="pgbench on a fresh PostgreSQL cluster (seeds 001, 004): create, load, index, transactions",
    params=Params,
    run_cell=run.run_cell,
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
    guest_tools=(postgres.TOOL,),
    host_packages=("postgresql-15",),
    recover=recover.recover_cell,
    acknowledged_on_console=recover.acknowledged_on_console,
    footprint=footprint,
)
