"""After a crash: PostgreSQL restarted on the crashed cluster (its WAL replay timed), then the
invariant, every acknowledged commit, pg_amcheck and pg_checksums (``recover``); the acknowledgement
sink a crash cell's run writes to and its tag (``ack_sink``, ``ack_tag``); the crash hook
(``recover_cell``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fsmatrix.agent import crash, proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workspace
from fsmatrix.agent.crash import modes as crash_modes
from fsmatrix.agent.databases import postgres
from fsmatrix.agent.storage.prepare import Skipped
from fsmatrix.agent.workloads.pgbench import acks as pgacks
from fsmatrix.agent.workloads.pgbench.params import DATABASE, RAW_UNSUPPORTED, Params, time_left
from fsmatrix.agent.workloads.pgbench.verify import (
    ACCOUNTS_PER_SCALE,
    STATE_KEYS,
    TELLERS_PER_SCALE,
    amcheck_all,
    check_state,
    read_state,
)

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


def wal_root(ws: Workspace) -> Path | None:
    """Where the cluster's WAL goes: the journal directory when the layout splits it from the data
    (None: in the data directory)."""
    return ws.journal if ws.journal.resolve() != ws.data.resolve() else None


def recover_after_crash(cell: Cell, ws: Workspace, acks: int, timeout: float) -> dict[str, Any]:
    """After a crash of ``cell``'s run: restart PostgreSQL on the same disks and verify (``recover``)."""
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
    found = _Findings(timeout)
    ws.scratch.mkdir(parents=True, exist_ok=True)
    extra = {"max_connections": str(max(100, params.clients + 10))}
    with contextlib.ExitStack() as stack:
        t0 = time.monotonic()
        try:
            cluster = postgres.attach(
                settings, postgres.ClusterLocation(ws.data, wal_root(ws), ws.scratch), stack, extra=extra
            )
        except FileNotFoundError as exc:  # the crash took the data directory with it: a finding
            found.step("attach", t0, f"PostgreSQL cannot come back after the crash: {exc}")
            return found.report(None, None)
        _controldata(cluster, found)
        offset = cluster.log_file.stat().st_size if cluster.log_file.exists() else 0
        started = False
        try:
            started = _start(cluster, found, offset)
            if started:
                _verify_recovered(cluster, params, settings, acks, heapallindexed_max_bytes, found)
        finally:
            cluster.stops.append(cluster.stop()["mode"])
        if started and settings.data_checksums:
            t0 = time.monotonic()
            found.step("checksums", t0, postgres.checksums_check(cluster, found.left("pg_checksums")))
    return found.report(found.steps["start"]["log"]["crash_recovery"], cluster)


class _Findings:
    """What ``recover`` found so far: its steps, the problems among them and the metrics, and the
    time it has left."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.steps: dict[str, dict[str, Any]] = {}
        self.problems: list[str] = []
        self.metrics: dict[str, float | int] = {}

    def left(self, what: str) -> float:
        return time_left(self.deadline, self.timeout, what)

    def step(self, name: str, t0: float, failure: str | None = None, **found: Any) -> None:
        """A step that began at ``t0`` ended now: passed, or failed with ``failure`` (a problem)."""
        self.steps[name] = {"status": "failed" if failure else "passed", "seconds": round(time.monotonic() - t0, 3),
                            **found}  # fmt: skip
        if failure:
            self.steps[name]["message"] = failure
            self.problems.append(failure)

    def report(self, crash_recovery: bool | None, cluster: postgres.Cluster | None) -> dict[str, Any]:
        return {
            "status": "failed" if self.problems else "passed",
            "reason": "; ".join(self.problems) or None,
            "crash_recovery": crash_recovery,
            "steps": self.steps,
            "metrics": self.metrics,
            "server_log": str(cluster.log_file) if cluster else None,
            "stops": cluster.stops if cluster else [],
        }


def _controldata(cluster: postgres.Cluster, found: _Findings) -> None:
    """Step ``controldata``: the state the crash left the (stopped) cluster in."""
    t0 = time.monotonic()
    try:
        control = postgres.controldata(cluster, timeout=found.left("pg_controldata"))
    except proc.CommandError as exc:  # a damaged control file: the start below will say more
        found.step("controldata", t0, f"pg_controldata cannot read the control file: {_first_line(exc)}")
    else:
        found.step("controldata", t0, state=control.get("Database cluster state", ""),
                   checkpoint=control.get("Latest checkpoint location"),
                   checkpoint_redo=control.get("Latest checkpoint's REDO location"))  # fmt: skip


def _start(cluster: postgres.Cluster, found: _Findings, offset: int) -> bool:
    """Step ``start``: the server started (PostgreSQL replays its WAL), timed, and what its log
    says from ``offset`` on; whether it came back."""
    started = False
    failed: Exception | None = None
    t0 = time.monotonic()
    try:
        cluster.start(found.left("recovery"), poll=RECOVERY_POLL_S)
        started = True
    except RuntimeError as exc:  # the server gave up (a PANIC in recovery): a finding, not an error
        failed = exc
    recovery_s = round(time.monotonic() - t0, 3)
    with cluster.log_file.open("rb") as f:
        f.seek(offset)
        replay = postgres.parse_recovery_log(f.read().decode(errors="replace"))
    if started:
        found.step("start", t0, recovery_s=recovery_s, log=replay)
        found.metrics["recovery_s"] = recovery_s
        for name in ("server_s", "sync_s", "redo_s", "redo_bytes", "checkpoint_s"):
            if name in replay:
                found.metrics[name] = replay[name]
    else:
        why = replay["errors"][0] if replay["errors"] else str(failed)
        found.step("start", t0, f"PostgreSQL did not come back after the crash: {why}", log=replay)
    return started


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
    heapallindexed_max_bytes: int,
    found: _Findings,
) -> None:
    """The checks of a recovered, running cluster: the read-only ones first (pg_amcheck installs its
    extension)."""
    t0 = time.monotonic()
    try:
        after = read_state(cluster)
    except proc.CommandError as exc:
        found.step("invariant", t0, f"the pgbench tables cannot be read after recovery: {_first_line(exc)}")
    else:
        broken = check_after_crash(params.script, params.scale, after)
        found.step("invariant", t0, "; ".join(broken) or None, state=after)

    t0 = time.monotonic()
    try:
        report = pgacks.durability(cluster, acks, DATABASE, settings)
    except proc.CommandError as exc:
        found.step("durability", t0, f"the acknowledged commits cannot be read after recovery: {_first_line(exc)}")
    else:
        report.pop("status")
        found.step("durability", t0, report.pop("message", None), **report)
        found.metrics.update(
            acknowledged=report["acknowledged"], found_commits=report["found"], lost_commits=report["lost"]
        )

    t0 = time.monotonic()
    size = int(cluster.value("SELECT sum(pg_database_size(oid)) FROM pg_database"))
    whole = size <= heapallindexed_max_bytes
    found_amcheck = amcheck_all(cluster, heapallindexed=whole, timeout=found.left("pg_amcheck"))
    found.step("amcheck", t0, found_amcheck, heapallindexed=whole, database_bytes=size)


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


def ack_tag(cell: Cell) -> str:
    """The tag of a crash cell's acknowledgements on a serial console, from the cell alone: the host
    computes the same one to read them back (``pgacks.parse_acks(serial_log, ack_tag(cell))``)."""
    text = json.dumps(cell.to_dict(), sort_keys=True)
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
    return cell.crash is not None and crash_modes.get(cell.crash.mode).needs_vm is not None


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


def recover_cell(cell: Cell, ws: Workspace, event: crash.CrashEvent) -> Outcome:
    """The crash hook: PostgreSQL restarted on the crashed cluster (its WAL replay is ``recovery_s``),
    then the invariant, every acknowledged commit (``lost_commits``), pg_amcheck and, with data
    checksums, pg_checksums. Nothing is resumed: the checks are the verification.

    The database's recovery steps go to ``event.steps`` (a failed one raises RecoveryFailed: the
    later checks never ran), the checks to ``event.checks``; a lost commit fails the run, the
    reason naming the commits and the setting that allows the loss."""
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
