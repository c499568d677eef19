"""``crash.mode: flush-points`` in a VM (TCG here): GT.M 3n+1 on ext4, ten flush points each
recovered and judged; pgbench's points replaying the WAL and keeping the TPC-B invariant; one
point's files damaged on purpose (a test hook) fails that point and the run; and a log disk too
small for the run fails it, naming the full log. Without a VM: tests/crash/test_flushpoints.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import IMAGE_TEST_TIMEOUT, run_on_qemu, typed, vms_under
from fsmatrix.agent.crash import flush_points as flushpoints
from fsmatrix.backends import image
from fsmatrix.backends.qemu.flush_points import FLUSH_CORRUPT_ENV, FLUSH_LOG_BYTES_ENV
from fsmatrix.results.verdict import answering
from fsmatrix.results.verdict.answer import CrashGroup

# --------------------------------------------------------------------------------------------
# in a VM


THREEN1_CELL = (
    "  - filesystem: ext4\n"
    "    workload: {threen1: {start: 1, end: 20000, workers: 2, block: 1000, keys: integer}}\n"
    "    gtm: {journal: before, global_buffers: 4096}\n"
    "    crash: {mode: flush-points, after_s: 1, points: 10, seed: 1}\n"
)
PGBENCH_CELL = (
    "  - filesystem: ext4\n"
    "    workload: {pgbench: {scale: 1, clients: 2, threads: 2, duration: 5}}\n"
    "    crash: {mode: flush-points, after_s: 1, points: 3, seed: 7}\n"
)


def _run_in_vm(
    tmp_path: Path, workdir: Path, env: dict[str, str] | None = None, cell: str = THREEN1_CELL
) -> tuple[dict, str]:  # type: ignore[type-arg]
    image.build()
    matrix = tmp_path / "fp.yaml"
    matrix.write_text(
        "name: fp\ninclude:\n" + cell + "defaults:\n  storage.disk_size: 512M\n  timeout: 600\nrepeat: 1\n"
    )
    results = tmp_path / "results"
    done = run_on_qemu(matrix, results, workdir, env=env)
    found = list(results.glob("fp/*/r1.json"))
    assert len(found) == 1, done.stdout + done.stderr
    # Nothing left: no QEMU, no run directory (its disks with it). The guest's dm targets and mounts
    # went with the guest; its own teardown is checked in its log.
    assert not vms_under(workdir)
    assert not [p for p in workdir.iterdir() if p.name.startswith("vm-")]
    return json.loads(found[0].read_text()), found[0].with_suffix(".log").read_text()


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_ten_flush_points_of_3n1_on_ext4_each_recover(tmp_path: Path, workdir: Path) -> None:
    doc, log = _run_in_vm(tmp_path, workdir)
    section = doc["crash"]
    assert doc["status"] == "passed", doc.get("reason")
    assert doc["verification"]["status"] == "passed"  # the normal run's own answer
    drawn = section["flush_points"]
    assert drawn["seed"] == 1 and drawn["asked"] == 10 and drawn["available"] >= 10
    assert len(drawn["chosen"]) == 10 and drawn["chosen"] == sorted(drawn["chosen"])
    assert drawn["log_bytes_used"] < drawn["log_bytes"]
    assert drawn["left_behind"] == []  # the guest's dm targets and mount, checked in the guest
    points = section["points"]
    assert [p["index"] for p in points] == list(range(10))
    assert [p["entry"] for p in points] == drawn["chosen"]
    for point in points:
        assert point["verdict"] == "passed", point
        assert point["mount_s"] is not None and point["recovery_s"] is not None
        assert point["sectors_replayed"] > 0
        assert any(s["name"] == "resume" and s["status"] == "ok" for s in point["steps"])
    sectors = [p["sectors_replayed"] for p in points]
    assert sectors == sorted(sectors)  # later points replay more of the log
    assert "flush point 9 (entry" in log
    (group,) = answering.build(typed([doc])).groups  # the answer reads the points (it once said UNSAFE here)
    assert isinstance(group, CrashGroup) and [v.verdict for v in group.crash] == ["safe"]


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_pgbench_flush_points_replay_wal_and_keep_the_invariant(tmp_path: Path, workdir: Path) -> None:
    doc, _ = _run_in_vm(tmp_path, workdir, cell=PGBENCH_CELL)
    assert doc["status"] == "passed", doc.get("reason")
    points = doc["crash"]["points"]
    assert len(points) == 3 and all(p["verdict"] == "passed" for p in points), points
    for point in points:
        assert any(s["name"] == "start" and s["status"] == "ok" for s in point["steps"])  # the WAL replay
        assert point["recovery_s"] is not None and point["mount_s"] is not None
        verdicts = {c["name"]: c["verdict"] for c in point["checks"]}
        assert verdicts["invariant"] == "passed" and verdicts["amcheck"] == "passed"
    assert doc["crash"]["flush_points"]["left_behind"] == []


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_a_damaged_point_fails_the_run_and_the_others_still_pass(tmp_path: Path, workdir: Path) -> None:
    doc, _ = _run_in_vm(tmp_path, workdir, {FLUSH_CORRUPT_ENV: "2"})
    assert doc["status"] == "failed"
    points = doc["crash"]["points"]
    assert len(points) == 10
    assert [p["index"] for p in points if p["verdict"] == "failed"] == [2], [p["reason"] for p in points]
    assert points[2]["reason"]
    assert f"flush point 2 (log entry {points[2]['entry']}): " in doc["reason"], doc["reason"]
    assert doc["provenance"][flushpoints.CORRUPT_POINT_KEY] == 2  # the result says it was damaged on purpose
    assert doc["crash"]["flush_points"]["left_behind"] == []


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_a_log_disk_too_small_fails_the_run_naming_it(tmp_path: Path, workdir: Path) -> None:
    doc, _ = _run_in_vm(tmp_path, workdir, {FLUSH_LOG_BYTES_ENV: str(24 << 20)})
    assert doc["status"] == "failed"
    assert doc["reason"].startswith("recovery failed: log: "), doc["reason"]
    assert "full" in doc["reason"] or "logging_disabled" in doc["reason"], doc["reason"]
    assert doc["crash"]["points"] == []
