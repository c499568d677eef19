"""Run one cell once: prepare storage, run the workload under the sampler, verify, build the result.

This is the guest agent's core; the host backend calls it directly, a VM backend inside the guest.
Cleanup (unmount, detach) happens on every exit path through the context managers it enters.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix.agent import cgroup, counters, crash, oscache, provenance, storage, work
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workspace
from fsmatrix.agent.crash import modes as crash_modes
from fsmatrix.agent.crash.mode import CrashNotInjected, CrashRun, not_injected
from fsmatrix.agent.sampler import Sampler

log = logging.getLogger("fsmatrix")

SCHEMA_VERSION = 1
STATUSES = ("passed", "failed", "error", "timeout", "skipped")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def key_metrics(cell: Cell) -> dict[str, str]:
    """The metrics a comparison looks at for this cell's workload, with their better direction
    (the workload's primary metric first)."""
    chosen = cell.declaration.key_metrics(cell.params)
    # Noise-robust companions of wall-clock metrics: they move far less on a busy machine.
    chosen.update({"cpu_busy_s": "lower", "device_write_bytes_per_op": "lower"})
    return chosen


def _device_metrics(
    cell: Cell, outcome: Outcome, samples: dict[str, Any]
) -> tuple[dict[str, float | int | None], dict[str, str]]:
    """The sampler's and the counters' metrics of a run, and why those of ``work.WORK_METRICS`` that
    are None were not measured ({metric: reason}: the document's ``metrics_unavailable``)."""
    io = samples["io"]
    cpu = samples["cpu_s"]
    user, system = cpu["user"] + cpu["nice"], cpu["system"] + cpu["irq"] + cpu["softirq"]
    metrics: dict[str, float | int | None] = {
        "device_read_bytes": io["read_bytes"],
        "device_write_bytes": io["write_bytes"],
        "device_reads": io["reads"],
        "device_writes": io["writes"],
        "device_busy_pct": io["busy_pct"],
        "cpu_user_s": user,
        "cpu_system_s": system,
        "cpu_iowait_s": cpu["iowait"],
    }
    # CPU-seconds of the run's own processes (its cgroup: GT.M's detached workers and a database
    # server included, the neighbours not); the machine-wide figure only where no cgroup could be made.
    own = samples.get("run_cpu_s")
    busy = own["user"] + own["system"] if own else user + system
    metrics["cpu_busy_s"] = round(busy, 3)
    # "Per operation": what one operation is, the workload declares (a database update, an I/O request).
    # A crash cell's outcome counts the resumed work, not the crashed part the samples cover.
    if cell.crash is not None:
        ops, why = None, work.CRASH_CELL
    else:
        ops = cell.declaration.operations(outcome.metrics)
        why = f"the workload reported no operations (one operation: a {cell.declaration.operation})"
    if ops:
        metrics["operations"] = ops
    per_op, unavailable = work.per_op(samples, ops, why)
    return {**metrics, **per_op}, unavailable


@dataclass(frozen=True)
class CellRepeat:
    """Which run a result document is of: the cell, its id in the matrix, the repeat's number."""

    cell: Cell
    cell_id: str
    repeat: int


@dataclass(frozen=True)
class Job:
    """One run of a cell on this machine, as ``run_job`` and ``run_recovery`` take it: which run,
    on which data devices, in which working directory (mount points and scratch), the environment
    the result's provenance records, and ``reference``: ``reference_for(cell)`` if the caller
    computed it already (a VM backend does, on the host; None: computed before the storage is
    prepared and the run starts)."""

    run: CellRepeat
    devices: list[str]
    workdir: Path
    environment: dict[str, Any]
    reference: Mapping[str, Any] | None = None


def result_document(
    run: CellRepeat, *, status: str, reason: str | None, started_at: str, provenance: dict[str, Any]
) -> dict[str, Any]:
    """A result document with nothing measured yet: what run_job fills in, and what a backend
    stores for a run that never reached the workload (skipped, timed out, no result from the guest)."""
    cell = run.cell
    return {
        "schema_version": SCHEMA_VERSION,
        "cell_id": run.cell_id,
        "repeat": run.repeat,
        "workload": cell.workload,
        "params": cell.to_dict(),
        # The limit this run had, and why: the setting, or (timeout: auto) what it was derived from.
        "timeout_s": cell.timeout,
        "timeout_source": cell.timeout_source or "the cell's timeout setting",
        "status": status,
        "reason": reason,
        "started_at": started_at,
        "finished_at": None,
        "duration_s": None,
        "metrics": {},
        # Why a metric of work.WORK_METRICS is None: {metric: reason} (not measured is never 0).
        "metrics_unavailable": {},
        "key_metrics": key_metrics(cell),
        "verification": {"status": "not-run"},
        "details": {},
        "storage": {},
        "samples": None,
        # What the data disks behaved like: compare refuses to set an hdd-profile run against a native one.
        "provenance": {**provenance, "device_profile": cell.device.profile},
    }


def _started_result(job: Job) -> dict[str, Any]:
    """The result document of a run that starts now (an error until it ends otherwise)."""
    return result_document(
        job.run,
        status="error",
        reason=None,
        started_at=_now(),
        provenance={**provenance.collect(), **job.environment, "tools": {}},
    )


def reference_for(cell: Cell) -> dict[str, Any] | None:
    """The workload's reference values for ``cell`` (None if it declares none): what a VM backend
    computes on the host and puts in the job, so the guest spends no run time on it."""
    compute = cell.declaration.reference
    return None if compute is None else compute(cell.params)


def _storage_section(cell: Cell, prepared: storage.PreparedStorage, result: dict[str, Any]) -> None:
    result["storage"] = {
        "layout": cell.storage.layout,
        "filesystem": cell.filesystem,
        "data_device": prepared.data_device,
        "readback": prepared.readback,
        "devices": prepared.devices,
    }
    for side in prepared.readback.values():
        if side.get("mkfs_version"):
            result["provenance"]["tools"][f"mkfs.{side['filesystem']}"] = side["mkfs_version"]
    if "stripe" in prepared.readback and prepared.readback["stripe"].get("tool_version"):
        tool = "mdadm" if prepared.readback["stripe"]["layout"] == "md-raid0" else "lvm"
        result["provenance"]["tools"][tool] = prepared.readback["stripe"]["tool_version"]


def _judge(result: dict[str, Any], outcome: Outcome, event: crash.CrashEvent | None) -> None:
    """Status and reason from the workload's verification and, for a crash cell, the recovery's
    steps and checks: any failure fails the run, and the reason says what was lost or broken."""
    result["verification"] = outcome.verification
    result["details"] = outcome.details
    result["provenance"]["tools"].update(outcome.versions)
    problems = event.problems() if event is not None else []
    if outcome.verification.get("status") not in ("passed", "not-applicable"):
        problems.append(outcome.verification.get("message", "verification failed"))
    result["status"] = "failed" if problems else "passed"
    if problems:
        result["reason"] = "; ".join(problems)


def run_job(job: Job, *, recover: bool = True) -> dict[str, Any]:
    """Run ``job`` once and return its result document (the caller stores it).

    A crash cell (``cell.crash``) is crashed ``crash.after_s`` into its measured part, then its
    workload's ``recover`` hook runs on the same storage; the result gets a ``crash`` section.
    ``recover=False``: stop after the crash (status "error", reason "crashed; ...") and leave the
    crashed database on the devices for ``run_recovery`` (the crash phase alone).
    """
    cell = job.run.cell
    result = _started_result(job)
    event = crash.CrashEvent.for_settings(cell.crash) if cell.crash is not None else None
    t0 = time.monotonic()
    with _failures_recorded(result, cell, event, "run"):
        if job.reference is None:
            job = replace(job, reference=reference_for(cell))
        # What the cell's crash mode does around the run.
        crashing = crash_modes.start(cell.crash, event) if cell.crash is not None and event is not None else None
        outcome, samples = _prepared_and_measured(job, crashing, recover, result)
        if crashing is not None and outcome is not None:  # unmounted: what the mode does after the run
            # Where the data filesystem was: a database journal names its files by absolute path.
            data_mount = Path(os.path.realpath(job.workdir / "mnt")) / "data"
            crashing.after(cell, data_mount, job.workdir / "scratch", job.reference, job.environment)
        result["samples"] = samples
        if outcome is None:  # the crash phase alone: the recover phase judges the run
            result["reason"] = "crashed; the recovery is a separate phase (job.run_recovery)"
        else:
            device_metrics, result["metrics_unavailable"] = _device_metrics(cell, outcome, samples)
            result["metrics"] = {**outcome.metrics, **device_metrics}
            _judge(result, outcome, event)
    _finish(result, event, t0)
    return result


def _prepared_and_measured(
    job: Job, crashing: CrashRun | None, recover: bool, result: dict[str, Any]
) -> tuple[Outcome | None, dict[str, Any]]:
    """Prepare the storage (its section of ``result`` filled in as soon as it is), run the workload
    under the samplers, and clean the storage up: the outcome (None: the crash phase alone) and the
    samples. A stripe is sampled twice: the md / dm device (the headline numbers, what the
    filesystem issued) and, separately, its component disks (what reached the disks)."""
    cell = job.run.cell
    wrap = crashing.wrap_data if crashing is not None else None
    with storage.prepare(cell, job.devices, job.workdir / "mnt", wrap_data=wrap) as prepared:
        _storage_section(cell, prepared, result)
        (job.workdir / "scratch").mkdir(parents=True, exist_ok=True)
        log.info("running %s on %s", cell.workload, prepared.data_device if prepared.bare_device else prepared.data)
        with (
            Sampler(prepared.diskstat_names) as sampler,
            Sampler(prepared.component_diskstat_names) as parts,
            cgroup.RunCpu() as run_cpu,
            counters.RunCounters(run_cpu.directory) as run_counters,
        ):
            database_dirs = [prepared.data, prepared.journal]
            synced = _synced_paths(prepared) if crashing is None else []

            @contextlib.contextmanager
            def measured() -> Iterator[None]:
                # A crash cell's clock starts with the measured part, inside the sampler's window.
                crash_clock = (
                    crashing.measured(run_cpu.directory, database_dirs)
                    if crashing is not None
                    else contextlib.nullcontext()
                )
                # The window holds its own writeback and no one else's: the setup's dirty pages are
                # written before it starts, the workload's before it ends. Else the kernel's flusher
                # decides which side of the window they land on (issue 51: GT.M's database blocks,
                # written back in the window or after it, made bytes/op bimodal). Not for a crash
                # cell: a sync after the crash would make durable what the crash should lose.
                oscache.sync_filesystems(synced)
                with sampler.measured(), parts.measured(), run_cpu.measured(), run_counters.measured(), crash_clock:
                    yield
                    oscache.sync_filesystems(synced)  # after the workload's own timing (Workspace.measure)

            workspace = _workspace(job, prepared, crashing.event if crashing is not None else None, measured)
            if crashing is None:
                outcome: Outcome | None = cell.declaration.run_cell(cell, workspace, float(cell.timeout))
            else:
                outcome = crashing.run(cell, workspace, recover)
        samples = sampler.summary()
        # The run's own processes (a cgroup), beside the machine-wide cpu_s: see _device_metrics.
        samples["run_cpu_s"] = run_cpu.seconds()
        samples["run_cpu_source"] = run_cpu.source
        # What the run's own processes made the CPU and the kernel do (perf counters on its cgroup).
        samples["counters"] = run_counters.summary()
        if prepared.component_diskstat_names:
            samples["components"] = {k: v for k, v in parts.summary().items() if k != "series"}
    return outcome, samples


def _synced_paths(prepared: storage.PreparedStorage) -> list[str]:
    """What the measured window syncs at both ends: the data and journal filesystems, or the
    block device a raw cell writes to (its data directory is on no filesystem under test)."""
    if prepared.bare_device:
        return [prepared.data_device] if prepared.data_device else []
    return [str(prepared.data), str(prepared.journal)]


def _workspace(
    job: Job,
    prepared: storage.PreparedStorage,
    event: crash.CrashEvent | None,
    measure: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
) -> Workspace:
    """Where the workload writes: the prepared filesystems and the scratch directory off them."""
    return Workspace(
        prepared.data,
        prepared.journal,
        job.workdir / "scratch",
        measure=measure,
        device=prepared.data_device if prepared.bare_device else None,
        reference=job.reference,
        crash=event,
    )


@contextlib.contextmanager
def _failures_recorded(result: dict[str, Any], cell: Cell, event: crash.CrashEvent | None, what: str) -> Iterator[None]:
    """A run (``what``) that fails is recorded in ``result``'s status and reason, and the matrix
    goes on: a crash not injected or a failed recovery step fails it, storage the machine cannot
    make skips it, a time limit times it out, anything else is an error."""
    try:
        yield
    except (CrashNotInjected, crash.RecoveryFailed) as exc:
        result["status"], result["reason"] = "failed", _failure(exc, event)
    except storage.Skipped as exc:
        result["status"], result["reason"] = "skipped", str(exc)
    except TimeoutError as exc:
        result["status"], result["reason"] = "timeout", str(exc) or f"exceeded {cell.timeout} s"
    except Exception as exc:
        log.debug("%s failed:\n%s", what, traceback.format_exc())
        result["status"], result["reason"] = "error", f"{type(exc).__name__}: {exc}"


def _finish(result: dict[str, Any], event: crash.CrashEvent | None, t0: float) -> None:
    """The crash section (a crash cell's), when the run finished and how long it took."""
    if event is not None:
        result["crash"] = event.to_dict()
    result["finished_at"] = _now()
    result["duration_s"] = round(time.monotonic() - t0, 3)


def _failure(exc: Exception, event: crash.CrashEvent | None) -> str:
    """The reason of a run whose recovery stopped at a failed step: that step, and any check that
    had failed before it (a damaged database, say)."""
    if not isinstance(exc, crash.RecoveryFailed):
        return str(exc)
    failed = [f"{c['name']}: {c['message']}" for c in (event.checks if event else []) if c["verdict"] == "failed"]
    return "; ".join([f"recovery failed: {exc}", *failed])


def run_recovery(job: Job, event: crash.CrashEvent) -> dict[str, Any]:
    """The recover phase of a crash cell: mount the filesystems ``job.devices`` already hold (no
    mkfs; the mount is timed: ``crash.mount_s``), run the workload's recover hook on the crashed
    database and return the run's result document, ``crash`` section included.

    ``event``: the crash as the crash phase recorded it (``CrashEvent.from_dict(doc["crash"])``;
    after a power cut, the host's record of it: mode, after_s, fired, fired_at_s).
    ``job.workdir``: the crash phase's (the same path): the filesystems must be mounted where they
    were, since a database journal names its files by absolute path (GT.M's does).
    """
    cell = job.run.cell
    result = _started_result(job)
    t0 = time.monotonic()
    with _failures_recorded(result, cell, event, "recovery"):
        hook = cell.declaration.recover
        if cell.crash is None or hook is None:
            raise ValueError(f"cell {job.run.cell_id} has no crash setting: there is nothing to recover")
        if not event.fired:
            raise not_injected(event)
        if job.reference is None:
            job = replace(job, reference=reference_for(cell))
        with storage.prepare(cell, job.devices, job.workdir / "mnt", reuse=True) as prepared:
            event.mount_s = prepared.readback.get("data", {}).get("mount_s")
            _storage_section(cell, prepared, result)
            (job.workdir / "scratch").mkdir(parents=True, exist_ok=True)
            workspace = _workspace(job, prepared, event)
            log.info("recovering %s on %s (mounted in %s s)", cell.workload, prepared.data, event.mount_s)
            outcome = hook(cell, workspace, event)
        result["metrics"] = dict(outcome.metrics)
        _judge(result, outcome, event)
    _finish(result, event, t0)
    return result
