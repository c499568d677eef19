"""Interactive mode inside the guest (``vagrant up`` of one cell): storage you can look at, and the
cell's run on demand, exactly as job mode runs it.

    python3 -m fsmatrix.agent.session prepare [JOB.json]  # storage made and mounted at /mnt/fsmatrix/data
    python3 -m fsmatrix.agent.session run                 # the cell, as the runner runs it; result.json
    python3 -m fsmatrix.agent.session status | release

``prepare`` copies the job (the same job.json the runner puts on its job disk) to
/var/lib/fsmatrix/session and starts a small holder process that enters ``storage.prepare`` for the
cell and stays inside it: the filesystem stays mounted for as long as the holder lives, and
stopping the holder (SIGTERM) leaves the context manager, so the storage package's own cleanup
unmounts and disassembles everything (md, LVM, ...). A process that stays is needed because the
storage code cleans up on leaving ``prepare``, and only it knows how.

``run`` stops the holder, then runs ``guest.run`` on the session directory: the very function
job mode runs (fresh mkfs, workload, verify, teardown), which writes result.json next to job.json.
Then it prepares the storage again for more poking (``--no-remount`` to skip).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fsmatrix import __version__
from fsmatrix.agent import guest, jsonfile, proc, storage
from fsmatrix.agent.storage import data_disks

log = logging.getLogger("fsmatrix")

SESSION_DIR = Path("/var/lib/fsmatrix/session")
MOUNT_ROOT = Path("/mnt/fsmatrix")  # the holder's mounts: <root>/data (and <root>/journal)
STATE_FILE = "holder.json"  # written by the holder once storage is ready (or it failed)
HOLDER_LOG = "holder.log"
READY_TIMEOUT_S = 900.0  # mkfs of a large disk under TCG is slow
STOP_TIMEOUT_S = 300.0  # unmounting flushes the page cache to the disk


class SessionError(Exception):
    """The session cannot do what was asked; str() says why."""


# ------------------------------------------------------------------------------------ holder


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live holder of ours (not a recycled pid, not a zombie)."""
    return any(b"fsmatrix.agent.session" in arg for arg in proc.cmdline(pid)) and proc.holds_files(pid)


def read_state(session_dir: Path = SESSION_DIR) -> dict[str, Any] | None:
    """The holder's state file (None when there is none or it is unreadable)."""
    try:
        doc = jsonfile.read(session_dir / STATE_FILE)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def hold(session_dir: Path, mount_root: Path, by_id: Path) -> int:
    """The holder: prepare the job's storage, report it in the state file, wait for SIGTERM/SIGINT,
    then leave ``storage.prepare`` (which unmounts and tears down). Returns the exit status."""
    stop_signals = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    # Blocked before anything else, so a stop request during mkfs is taken once storage is ready
    # and still goes through the cleanup below.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    state_path = session_dir / STATE_FILE
    try:
        job = guest.parse_job(jsonfile.read(session_dir / guest.JOB_FILE))
        devices = data_disks.resolve_data_disks(job["data_serials"], by_id=by_id, buses=job["data_buses"])
        with storage.prepare(job["cell"], devices, mount_root) as prepared:
            state = {
                "status": "ready",
                "pid": os.getpid(),
                "cell_id": job["cell_id"],
                "data": str(prepared.data),
                "journal": str(prepared.journal),
                "devices": dict(zip(job["data_serials"], devices, strict=True)),
                "readback": prepared.readback,
            }
            jsonfile.write_atomic(state_path, state)
            log.info("storage ready: %s", prepared.data)
            received = signal.sigwait(stop_signals)
            log.info("signal %d: tearing the storage down", received)
    except Exception as exc:  # reported through the state file: the starter is waiting for it
        log.exception("holder failed")
        jsonfile.write_atomic(
            state_path, {"status": "error", "pid": os.getpid(), "reason": f"{type(exc).__name__}: {exc}"}
        )
        return 1
    state_path.unlink(missing_ok=True)
    log.info("storage released")
    return 0


def start_holder(
    session_dir: Path = SESSION_DIR,
    mount_root: Path = MOUNT_ROOT,
    by_id: Path = data_disks.BY_ID,
    timeout: float = READY_TIMEOUT_S,
) -> dict[str, Any]:
    """Start the holder in a session of its own and wait until its storage is mounted: the state."""
    stop_holder(session_dir)
    (session_dir / STATE_FILE).unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "fsmatrix.agent.session", "--session-dir", str(session_dir),
        "hold", "--mount-root", str(mount_root), "--by-id", str(by_id),
    ]  # fmt: skip
    # Not proc.run: the holder must outlive this command (and the SSH session that ran it), so it
    # gets no terminal and no pipe, only its log file.
    with (session_dir / HOLDER_LOG).open("ab") as out:
        holder = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True
        )
    (session_dir / "holder.pid").write_text(f"{holder.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(session_dir)
        if state is not None and state.get("pid") == holder.pid:
            if state.get("status") == "ready":
                return state
            holder.wait(timeout=60)
            raise SessionError(f"cannot prepare the storage: {state.get('reason')}")
        if holder.poll() is not None:
            raise SessionError(f"the holder exited with status {holder.returncode}: see {session_dir / HOLDER_LOG}")
        time.sleep(0.2)
    stop_holder(session_dir)
    raise SessionError(f"the storage was not ready within {timeout:.0f} s: see {session_dir / HOLDER_LOG}")


def stop_holder(session_dir: Path = SESSION_DIR, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop a running holder and wait until its storage is torn down; False when none ran."""
    pid_file = session_dir / "holder.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    stopped = False
    if _pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid):
            if time.monotonic() > deadline:
                raise SessionError(f"the holder (pid {pid}) did not release the storage within {timeout:.0f} s")
            time.sleep(0.2)
        stopped = True
    pid_file.unlink(missing_ok=True)
    (session_dir / STATE_FILE).unlink(missing_ok=True)
    return stopped


# ------------------------------------------------------------------------------------ commands


def prepare(
    job_file: Path | None,
    session_dir: Path = SESSION_DIR,
    mount_root: Path = MOUNT_ROOT,
    by_id: Path = data_disks.BY_ID,
) -> dict[str, Any]:
    """Install ``job_file`` as the session's job (or keep the current one) and mount its storage."""
    session_dir.mkdir(parents=True, exist_ok=True)
    target = session_dir / guest.JOB_FILE
    if job_file is not None:
        job = jsonfile.read(job_file)
        guest.parse_job(job)  # refuse a bad job before replacing the old one
        stop_holder(session_dir)
        jsonfile.write_atomic(target, job)  # as given: guest.run parses it again, as in job mode
    elif not target.exists():
        raise SessionError(f"no job yet: give a job.json (none in {session_dir})")
    return start_holder(session_dir, mount_root, by_id)


def run(
    session_dir: Path = SESSION_DIR,
    workdir: Path = guest.WORKDIR,
    mount_root: Path = MOUNT_ROOT,
    by_id: Path = data_disks.BY_ID,
    remount: bool = True,
) -> dict[str, Any]:
    """Release the storage, run the job as job mode does (result.json in ``session_dir``), remount."""
    if not (session_dir / guest.JOB_FILE).exists():
        raise SessionError(f"no job in {session_dir}: run `prepare JOB.json` first")
    stop_holder(session_dir)
    (session_dir / guest.RESULT_FILE).unlink(missing_ok=True)
    result = guest.run(session_dir, by_id=by_id, workdir=workdir)
    if remount:
        try:
            start_holder(session_dir, mount_root, by_id)
        except SessionError as exc:  # the result is written either way; say why nothing is mounted
            log.warning("storage not mounted again: %s", exc)
    return result


def status(session_dir: Path = SESSION_DIR) -> dict[str, Any]:
    """What the session holds now: the job's cell id, the holder's state, the last result's status."""
    doc: dict[str, Any] = {"session_dir": str(session_dir), "job": None, "storage": None, "result": None}
    try:
        job = jsonfile.read(session_dir / guest.JOB_FILE)
        doc["job"] = job.get("cell_id") if isinstance(job, dict) else None
    except (OSError, ValueError):
        pass
    state = read_state(session_dir)
    if state is not None and _pid_alive(int(state.get("pid", 0))):
        doc["storage"] = state
    try:
        result = jsonfile.read(session_dir / guest.RESULT_FILE)
        doc["result"] = {"path": str(session_dir / guest.RESULT_FILE), "status": result.get("status")}
    except (OSError, ValueError):
        pass
    return doc


def _setup_logging(session_dir: Path, to_file: bool) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if to_file:
        session_dir.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(session_dir / guest.LOG_FILE, encoding="utf-8"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", handlers=handlers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fsmatrix.agent.session", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"fsmatrix {__version__}")
    parser.add_argument("--session-dir", type=Path, default=SESSION_DIR, help="job, result and logs (%(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    p_prepare = sub.add_parser("prepare", help="install a job and mount its storage at --mount-root/data")
    p_prepare.add_argument("job", type=Path, nargs="?", help="job.json (default: keep the session's job)")
    p_run = sub.add_parser("run", help="run the cell as the runner does; writes result.json")
    p_run.add_argument("--no-remount", action="store_true", help="leave the storage released afterwards")
    p_run.add_argument("--workdir", type=Path, default=guest.WORKDIR, help="the run's mounts (%(default)s)")
    sub.add_parser("status", help="print the session's state as JSON")
    sub.add_parser("release", help="unmount and tear down the storage")
    p_hold = sub.add_parser("hold", help=argparse.SUPPRESS)
    for p in (p_prepare, p_run, p_hold):
        p.add_argument("--mount-root", type=Path, default=MOUNT_ROOT, help="where the storage is mounted")
        p.add_argument("--by-id", type=Path, default=data_disks.BY_ID, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    session_dir: Path = args.session_dir
    _setup_logging(session_dir, to_file=args.command == "run")
    try:
        if args.command == "hold":
            return hold(session_dir, args.mount_root, args.by_id)
        if args.command == "prepare":
            state = prepare(args.job, session_dir, args.mount_root, args.by_id)
            print(f"{state['cell_id']}: storage mounted at {state['data']}")
        elif args.command == "run":
            result = run(session_dir, args.workdir, args.mount_root, args.by_id, remount=not args.no_remount)
            reason = f" ({result['reason']})" if result.get("reason") else ""
            print(f"{result.get('cell_id')}: {result['status']}{reason}; result: {session_dir / guest.RESULT_FILE}")
            return 0 if result["status"] == "passed" else 1
        elif args.command == "status":
            print(json.dumps(status(session_dir), indent=1))
        elif args.command == "release":
            print("released" if stop_holder(session_dir) else "nothing was held")
    except (SessionError, guest.JobError, data_disks.DataDiskError, OSError, ValueError) as exc:
        print(f"fsmatrix session: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
