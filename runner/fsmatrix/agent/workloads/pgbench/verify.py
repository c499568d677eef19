"""The checks of a run: the tables' state (row counts, the TPC-B invariant), pgbench's own account
of it, ``pg_amcheck``."""

from __future__ import annotations

from collections.abc import Mapping

from fsmatrix.agent.databases import postgres
from fsmatrix.agent.workloads.pgbench.params import DATABASE
from fsmatrix.agent.workloads.pgbench.parse import Latencies, Summary

SUPERUSER_DB = postgres.SUPERUSER  # the database every cluster has
ACCOUNTS_PER_SCALE = 100_000
TELLERS_PER_SCALE = 10

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
