"""Job mode inside the guest: read job.json from the job disk, run it, write result.json back.

``fsmatrix-job.service`` mounts the job disk (serial ``fsmatrix-job``) and runs
``python3 -m fsmatrix.agent.guest <mountpoint>``; afterwards it syncs, unmounts and powers off.
Data disks are named by their serial (and bus) only and resolved through /dev/disk/by-id, so a
job can never point the agent at the root disk or the job disk by path.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix import __version__
from fsmatrix.agent import jsonfile, provenance
from fsmatrix.agent.storage.data_disks import BY_ID, BY_ID_NAMES, DataDiskError, resolve_data_disks

log = logging.getLogger("fsmatrix")

JOB_FILE = "job.json"
RESULT_FILE = "result.json"
LOG_FILE = "agent.log"
WORKDIR = Path("/var/tmp/fsmatrix-job")
# The job is made about a second before its guest starts: closer than this, the clock is left alone.
CLOCK_TOLERANCE_S = 5.0


class JobError(Exception):
    """The job on the job disk cannot be run as given; str() says why."""


def parse_job(doc: Any) -> dict[str, Any]:
    """Check a job.json document and return it with defaults filled (repeat 1, no environment)."""
    if not isinstance(doc, dict):
        raise JobError("job.json must hold a JSON object")
    if not isinstance(doc.get("cell"), dict):
        raise JobError("job.json: 'cell' must be a cell with exactly one workload")
    from fsmatrix.agent.parsing import parse_cell  # imported late, as run_job: a broken agent still writes a result

    try:
        cell = parse_cell(doc["cell"])  # parsed once, here: the job runs the typed cell
    except ValueError as exc:
        raise JobError(f"job.json: 'cell': {exc}") from exc
    limit = doc.get("timeout")
    if cell.timeout_auto and isinstance(limit, dict):  # the host derived it (timeout: auto)
        seconds = limit.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
            raise JobError("job.json: 'timeout.seconds' must be a positive integer")
        cell = dataclasses.replace(cell, timeout=seconds, timeout_source=str(limit.get("source") or "auto"))
    cell_id = doc.get("cell_id")
    if not isinstance(cell_id, str) or not cell_id:
        raise JobError("job.json: 'cell_id' must be a non-empty string")
    repeat = doc.get("repeat", 1)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise JobError("job.json: 'repeat' must be a positive integer")
    serials = doc.get("data_serials", [])
    if not isinstance(serials, list) or not all(isinstance(s, str) for s in serials):
        raise JobError("job.json: 'data_serials' must be a list of strings")
    buses = ["virtio-blk"] * len(serials)  # what a job without 'data_disks' means (older hosts)
    if "data_disks" in doc:
        disks = doc["data_disks"]
        if not isinstance(disks, list) or not all(
            isinstance(d, dict) and isinstance(d.get("serial"), str) and d.get("bus") in BY_ID_NAMES for d in disks
        ):
            raise JobError(
                "job.json: 'data_disks' must be a list of {serial, bus} with bus one of " + ", ".join(BY_ID_NAMES)
            )
        named = [d["serial"] for d in disks]
        if "data_serials" in doc and serials != named:
            raise JobError(f"job.json: 'data_serials' {serials} disagree with 'data_disks' {named}")
        serials, buses = named, [d["bus"] for d in disks]
    environment = doc.get("environment", {})
    if not isinstance(environment, dict):
        raise JobError("job.json: 'environment' must be an object")
    # What the host computed before the run for the workload's verification (absent: older hosts,
    # or a workload that declares none; the agent computes it then, still before the run).
    reference = doc.get("reference")
    if reference is not None and not isinstance(reference, dict):
        raise JobError("job.json: 'reference' must be an object or null")
    # "run" (the default: the whole run), or "recover": the recovery half of a crash cell, on disks
    # that hold its crashed filesystem (after a power cut), with the host's record of the crash.
    phase = doc.get("phase", "run")
    if phase not in ("run", "recover"):
        raise JobError(f"job.json: 'phase' must be 'run' or 'recover', not {phase!r}")
    host_time = doc.get("host_time")
    if host_time is not None and (isinstance(host_time, bool) or not isinstance(host_time, int | float)):
        raise JobError("job.json: 'host_time' must be seconds since the epoch")
    crash = doc.get("crash")
    if phase == "recover" and (cell.crash is None or not isinstance(crash, dict)):
        raise JobError("job.json: phase 'recover' needs a crash cell and 'crash', the record of the crash")
    return {
        "cell": cell,
        "cell_id": cell_id,
        "repeat": repeat,
        "data_serials": serials,
        "data_buses": buses,
        "environment": environment,
        "reference": reference,
        "phase": phase,
        "crash": crash,
        "host_time": host_time,
    }


def set_clock(host_time: float | None, tolerance_s: float = CLOCK_TOLERANCE_S) -> float | None:
    """Set the guest's clock to the host's time from the job when it is off by more than
    ``tolerance_s``: a guest restored from a saved state wakes with the time of the save. Returns
    the correction in seconds (None: none made)."""
    if host_time is None:
        return None
    off = float(host_time) - time.time()
    if abs(off) <= tolerance_s:
        return None
    time.clock_settime(time.CLOCK_REALTIME, float(host_time))
    log.info("guest clock set from the job's host time (it was %.0f s off)", -off)
    return off


def parse_route_table(text: str) -> list[dict[str, str]]:
    """Routes in /proc/net/route (IPv4): interface, destination and gateway as dotted quads."""

    def quad(field: str) -> str:
        return socket.inet_ntoa(int(field, 16).to_bytes(4, "little"))

    routes = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            routes.append({"iface": fields[0], "destination": quad(fields[1]), "gateway": quad(fields[2])})
    return routes


def parse_ipv6_route_table(text: str) -> list[dict[str, str]]:
    """Routes in /proc/net/ipv6_route: interface and destination ("<hex address>/<prefix length>")."""
    routes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 10:
            routes.append({"iface": fields[9], "destination": f"{fields[0]}/{int(fields[1], 16)}"})
    return routes


def network_state(proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> dict[str, Any]:
    """Whether this guest could reach anything outside: its interfaces and any default route."""
    try:
        v4 = parse_route_table((proc_root / "net" / "route").read_text())
    except OSError:
        v4 = []
    try:
        v6 = parse_ipv6_route_table((proc_root / "net" / "ipv6_route").read_text())
    except OSError:
        v6 = []
    # lo carries the kernel's "unreachable" ::/0 entry: not a way out.
    default = any(r["destination"] == "0.0.0.0" for r in v4) or any(
        r["destination"] == "0" * 32 + "/0" and r["iface"] != "lo" for r in v6
    )
    try:
        interfaces = sorted(p.name for p in (sys_root / "class" / "net").iterdir() if p.name != "lo")
    except OSError:
        interfaces = []
    return {"interfaces": interfaces, "default_route": default}


def _error_result(job: dict[str, Any] | None, reason: str) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return {
        "schema_version": 1,
        "cell_id": (job or {}).get("cell_id"),
        "repeat": (job or {}).get("repeat"),
        "params": job["cell"].to_dict() if job else None,
        "status": "error",
        "reason": reason,
        "started_at": now,
        "finished_at": now,
        "metrics": {},
        "verification": {"status": "not-run"},
        "provenance": {**provenance.collect(), **((job or {}).get("environment") or {})},
    }


def run(job_dir: Path, by_id: Path = BY_ID, workdir: Path = WORKDIR) -> dict[str, Any]:
    """Run the job in ``job_dir``/job.json; write and return its result (an error result on failure)."""
    job: dict[str, Any] | None = None
    try:
        job = parse_job(jsonfile.read(job_dir / JOB_FILE))
        set_clock(job["host_time"])
        manifest = provenance.image_manifest() or {}
        if manifest.get("git_sha"):
            # No git in the guest: provenance reads the build's commit from here.
            os.environ.setdefault("FSMATRIX_GIT_SHA", str(manifest["git_sha"]))
        try:
            devices = resolve_data_disks(job["data_serials"], by_id=by_id, buses=job["data_buses"])
        except DataDiskError as exc:
            raise JobError(str(exc)) from exc
        log.info("job %s repeat %d on %s", job["cell_id"], job["repeat"], ", ".join(devices) or "no disks")
        from fsmatrix.agent import job as jobs  # imported late: a broken agent still writes a result
        from fsmatrix.agent.cell import DEFAULT_IMAGE
        from fsmatrix.agent.crash import CrashEvent

        built = manifest.get("image", DEFAULT_IMAGE)  # images built before definitions were Debian 12
        if job["cell"].image != built:
            raise JobError(f"the cell is for image {job['cell'].image!r}, but this guest is image {built!r}")

        environment = {
            **job["environment"],
            "guest": {"data_disks": dict(zip(job["data_serials"], devices, strict=True)), "network": network_state()},
        }
        run = jobs.Job(
            jobs.CellRepeat(job["cell"], job["cell_id"], job["repeat"]),
            devices=devices,
            workdir=workdir,  # for a recovery, the crashed run's path: journals name files by path
            environment=environment,
            reference=job["reference"],
        )
        if job["phase"] == "recover":
            result = jobs.run_recovery(run, CrashEvent.from_dict(job["crash"]))
        else:
            result = jobs.run_job(run)
    except (JobError, OSError, ValueError) as exc:
        log.error("job not run: %s", exc)
        result = _error_result(job, f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # the host must always get a result document back
        log.error("agent failed:\n%s", traceback.format_exc())
        result = _error_result(job, f"{type(exc).__name__}: {exc}")
    jsonfile.write_atomic(job_dir / RESULT_FILE, result)
    log.info("result: %s%s", result["status"], f" ({result['reason']})" if result.get("reason") else "")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fsmatrix.agent.guest", description=__doc__)
    parser.add_argument("job_dir", type=Path, help="where the job disk is mounted (holds job.json)")
    parser.add_argument("--workdir", type=Path, default=WORKDIR, help="mount points and scratch (%(default)s)")
    parser.add_argument("--version", action="version", version=f"fsmatrix {__version__}")
    args = parser.parse_args(argv)
    job_dir: Path = args.job_dir
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    handlers.append(logging.FileHandler(job_dir / LOG_FILE, encoding="utf-8"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", handlers=handlers)
    log.info("fsmatrix %s guest agent, job disk %s", __version__, job_dir)
    result = run(job_dir, workdir=args.workdir)
    for handler in handlers:
        handler.flush()
    return 0 if result["status"] in ("passed", "failed", "skipped", "timeout") else 1


if __name__ == "__main__":
    sys.exit(main())
