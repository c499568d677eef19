"""The job disk: how the host hands one job to a guest and gets its result back, without mounting.

A small raw image with an ext2 filesystem labelled ``fsmatrix-job``, made with ``mke2fs -d`` from a
directory holding ``job.json``; the VM attaches it as virtio-blk with serial ``fsmatrix-job``. The
guest's ``fsmatrix-job.service`` writes ``result.json`` and ``agent.log`` onto it and powers off;
the host reads them back with ``debugfs`` (read-only, no mount, no loop device).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.agent.guest import JOB_FILE, LOG_FILE, RESULT_FILE, parse_job
from fsmatrix.agent.storage.data_disks import JOB_SERIAL

LABEL = JOB_SERIAL
SERIAL = JOB_SERIAL
DEFAULT_SIZE_MIB = 64  # room for a result with a long per-second series, and the agent's log
# The job disk's own filesystem (not one under test): every guest kernel has it, and mke2fs -d fills it.
JOB_DISK_FILESYSTEM = "ext2"


def make_job_disk(path: Path, job: dict[str, Any], size_mib: int = DEFAULT_SIZE_MIB) -> Path:
    """Write a job disk for ``job`` (see fsmatrix.agent.guest.parse_job) to ``path``; return ``path``."""
    parse_job(job)  # the guest would refuse it: fail here, where the error is seen
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fsmatrix-job-") as tmp:
        (Path(tmp) / JOB_FILE).write_text(json.dumps(job, indent=1) + "\n", encoding="utf-8")
        path.unlink(missing_ok=True)
        with path.open("wb") as fh:
            fh.truncate(size_mib << 20)  # sparse
        proc.run(["mke2fs", "-q", "-F", "-t", JOB_DISK_FILESYSTEM, "-L", LABEL, "-d", tmp, str(path)], timeout=60)
    return path


def read_file(path: Path, name: str) -> bytes | None:
    """The contents of ``/name`` on the job disk ``path``, or None when it is not there."""
    with tempfile.TemporaryDirectory(prefix="fsmatrix-job-") as tmp:
        out = Path(tmp) / "out"
        # debugfs opens read-only unless -w, and reports a missing file on stderr with status 0.
        proc.run(["debugfs", "-R", f"dump /{name} {out}", str(path)], timeout=60)
        if not out.exists():
            return None
        return out.read_bytes()


def read_result(path: Path) -> dict[str, Any] | None:
    """The guest's result.json from job disk ``path``; None when the guest wrote none (or half of one)."""
    data = read_file(path, RESULT_FILE)
    if not data:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def read_log(path: Path) -> str | None:
    """The guest agent's log from job disk ``path``, or None."""
    data = read_file(path, LOG_FILE)
    return None if data is None else data.decode("utf-8", errors="replace")
