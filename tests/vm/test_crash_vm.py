"""Crash cells on the qemu backend in a VM (TCG here): ``crash.mode: power-cut`` (QEMU killed
after_s into the measured part, then a second VM recovers on the same data disk files).

A GT.M 3n+1 cell cut 3 s into its measured part recovers and resumes to the reference answer,
and a cell whose workload ends before ``after_s`` fails "crash not injected"; a pgbench cell with
synchronous_commit=on keeps every commit acknowledged on the serial console, and one with fsync=off
fails naming the commits it lost. Without a VM: tests/crash/test_crash_qemu.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import FSMATRIX, IMAGE_TEST_TIMEOUT, run_on_qemu, vms_under
from fsmatrix.agent import crash
from fsmatrix.backends import image
from test_crash_qemu import PGBENCH

# --------------------------------------------------------------------------------------------
# in a VM


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_power_cut_recovers_3n1_and_a_late_cut_fails(tmp_path: Path, workdir: Path) -> None:
    image.build()
    matrix = tmp_path / "pc.yaml"
    cell = "gtm: {journal: before, global_buffers: 4096}\n    crash: {mode: power-cut, after_s: %s}\n"
    matrix.write_text(
        "name: pc\n"
        "include:\n"
        "  - filesystem: ext4\n"
        "    workload: {threen1: {start: 1, end: 300000, workers: 2, block: 1000, keys: integer}}\n"
        "    " + cell % 3 + "  - filesystem: ext4\n"
        "    workload: {threen1: {start: 1, end: 20000, workers: 2, block: 1000, keys: integer}}\n"
        "    " + cell % 900 + "defaults:\n  storage.disk_size: 1G\n  timeout: 600\nrepeat: 1\n"
    )
    results = tmp_path / "results"
    done = run_on_qemu(matrix, results, workdir)
    docs = {json.loads(p.read_text())["params"]["crash"]["after_s"]: p for p in results.glob("pc/*/r1.json")}
    assert sorted(docs) == [3, 900], done.stdout + done.stderr
    cut = json.loads(docs[3].read_text())
    assert cut["status"] == "passed", cut.get("reason")
    assert cut["verification"]["status"] == "passed"
    section = cut["crash"]
    assert section["mode"] == "power-cut" and section["fired"] and 3 <= section["fired_at_s"] < 4
    assert section["mount_s"] is not None and section["recovery_s"] is not None
    assert section["steps"] and all(s["status"] == "ok" for s in section["steps"])
    assert section["checks"] and all(c["verdict"] == "passed" for c in section["checks"])
    assert sum(v for v in section["reused"].values() if isinstance(v, int | float)) > 0
    log = docs[3].with_suffix(".log").read_text()
    assert "the VM that was to be cut" in log and crash.MEASURE_START_MARKER in log and "result: passed" in log
    late = json.loads(docs[900].read_text())
    assert late["status"] == "failed" and late["reason"].startswith("crash not injected: the guest powered off")
    assert late["crash"]["mode"] == "power-cut" and late["crash"]["fired"] is False and late["crash"]["measured_s"]
    assert done.returncode != 0  # a failed run
    # Nothing left: no QEMU, no run directory (its data disks with it).
    assert not vms_under(workdir)
    assert not [p for p in workdir.iterdir() if p.name.startswith("vm-")]


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_power_cut_pgbench_keeps_every_commit_and_fsync_off_reports_the_loss(tmp_path: Path, workdir: Path) -> None:
    """Two pgbench cells (scale 1, 2 clients: TCG is slow) cut 5 s into their transactions. With
    synchronous_commit=on every commit acknowledged on the serial console is a row after recovery.
    With fsync=off nothing the measured part writes reaches the disk until the kernel writes it back
    on its own (30 s later by default; the agent's sync before the measured part wrote the load), so
    the cut loses the acknowledged commits; the run fails naming them and fsync=off. The report's
    crash table shows both."""
    image.build()
    matrix = tmp_path / "pgpc.yaml"
    matrix.write_text(
        "name: pgpc\n"
        "include:\n"
        "  - {postgres.synchronous_commit: 'on'}\n"
        "  - {postgres.fsync: false}\n"
        "defaults:\n"
        "  filesystem: ext4\n"
        f"  workload: {{pgbench: {json.dumps(PGBENCH)}}}\n"
        "  crash: {mode: power-cut, after_s: 5}\n"
        "  storage.disk_size: 1G\n"
        "  timeout: 900\n"
        "repeat: 1\n"
    )
    results = tmp_path / "results"
    done = run_on_qemu(matrix, results, workdir)
    docs = {p: json.loads(p.read_text()) for p in results.glob("pgpc/*/r1.json")}
    by_fsync = {d["params"]["postgres"]["fsync"]: d for d in docs.values()}
    assert sorted(by_fsync) == [False, True], done.stdout + done.stderr

    kept = by_fsync[True]
    assert kept["status"] == "passed", kept.get("reason")
    section = kept["crash"]
    assert section["fired"] and 5 <= section["fired_at_s"] < 6 and section["mount_s"] is not None
    # The count is the host's, from the cut VM's console, and there were commits to lose.
    assert _step_of(section, "acknowledged commits")["detail"].endswith("(from the host's serial log)")
    assert section["acknowledged"] > 0 and section["lost_commits"] == 0
    assert "in production" in _step_of(section, "controldata")["detail"]  # no shutdown checkpoint: a crash
    assert {c["name"]: c["verdict"] for c in section["checks"]} == {
        "invariant": "passed", "durability": "passed", "amcheck": "passed"}  # fmt: skip
    assert kept["metrics"]["recovery_s"] == section["recovery_s"] > 0

    lost = by_fsync[False]
    section = lost["crash"]
    assert lost["status"] == "failed" and section["fired"]
    assert section["lost_commits"] > 0 and section["acknowledged"] > 0
    n, of = section["lost_commits"], section["acknowledged"]
    assert lost["reason"].startswith(f"durability: {n} of {of} acknowledged commits are missing after recovery")
    assert "fsync=off: nothing is forced to stable storage" in lost["reason"]
    assert {c["name"]: c["verdict"] for c in section["checks"]}["durability"] == "failed"
    assert lost["metrics"]["lost_commits"] == n
    assert done.returncode != 0  # a failed run

    # The report's crash table: one row each, the loss a finding.
    shown = subprocess.run([*FSMATRIX, "report", str(results / "pgpc")], capture_output=True, text=True,
                           timeout=120, check=True).stdout  # fmt: skip
    assert "## Crash recovery" in shown
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in shown.splitlines() if " | power-cut at " in line}
    kept_cut, lost_cut = (f"power-cut at {d['crash']['fired_at_s']:.2f} s" for d in (kept, lost))
    assert rows[kept["cell_id"]][1:6] == ["postgres.fsync=True", "r1", kept_cut, "yes",
                                          f"0 of {kept['crash']['acknowledged']:,}"]  # fmt: skip
    assert rows[lost["cell_id"]][1:6] == ["postgres.fsync=False", "r1", lost_cut, "no: durability failed",
                                          f"{n:,} of {of:,}"]  # fmt: skip
    assert f"- {lost['cell_id']} r1 failed: durability: {n} of {of} acknowledged commits" in shown
    assert not vms_under(workdir)
    assert not [p for p in workdir.iterdir() if p.name.startswith("vm-")]


def _step_of(section: dict[str, object], name: str) -> dict[str, str]:
    steps = section["steps"]
    assert isinstance(steps, list)
    return next(s for s in steps if s["name"] == name)
