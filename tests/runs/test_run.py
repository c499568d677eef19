"""`fsmatrix run` end to end on the host backend: real GT.M, mkfs, mount and loop devices.

Covers results and provenance, resume, a failed cell that does not stop the matrix, skipped
filesystems, timeouts, device refusals, explicit block devices, and cleanup after Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FSMATRIX, needs_root
from fsmatrix.agent import storage

pytestmark = [needs_root, pytest.mark.system]


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Loop image files must live on a real disk (direct I/O), not on a tmpfs /tmp.
    with tempfile.TemporaryDirectory(prefix="fsmatrix-test-", dir="/var/tmp") as d:
        yield Path(d)
        assert not _leftovers(Path(d)), _leftovers(Path(d))


def _leftovers(workdir: Path) -> list[str]:
    """Loop devices, mounts and GT.M processes that still point into ``workdir``."""
    found = [
        line
        for line in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
        if str(workdir) in line
    ]
    found += [line for line in Path("/proc/mounts").read_text().splitlines() if str(workdir) in line]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if str(workdir) in cwd or (str(workdir) in cmdline and "pytest" not in cmdline):
                found.append(f"process {pid}: {cmdline}")
    return found


def fsmatrix(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FSMATRIX, *args], capture_output=True, text=True, timeout=timeout, check=False)


def docs_of(results: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(p.read_text()) for p in sorted(results.rglob("r*.json"))]


QUICK = """\
name: t
axes:
  filesystem: [ext4, tmpfs]
  workload.threen1.keys: [integer, spelled]
include:
  - {filesystem: xfs, workload: {sysbench: {mode: rndrw, total_size: 32M, num_files: 4, duration: 1}}}
  - {filesystem: btrfs, workload: {fio: {pattern: randwrite, file_size: 32M, runtime: 1}}}
  - {filesystem: jfs, workload: {threen1: {start: 1, end: 1000}}}
  - {filesystem: xfs, storage.layout: split-journal, storage.journal_filesystem: ext2,
     workload: {threen1: {start: 1, end: 5000}}}
defaults:
  workload.threen1: {start: 1, end: 20000, workers: 3, block: 1000}
  storage.disk_size: 1G
  gtm.global_buffers: 2000
repeat: 2
"""


def test_run_stores_verified_results_with_provenance_and_resumes(
    write_matrix,
    tmp_path: Path,  # type: ignore[no-untyped-def]
    workdir: Path,
) -> None:
    matrix = write_matrix(QUICK)
    results = tmp_path / "results"
    # --no-race: the matrix's fixed repeats (its ext4 and tmpfs cells form comparison groups, which race by default)
    proc = fsmatrix("run", str(matrix), "--results", str(results), "--workdir", str(workdir), "--no-race")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = docs_of(results / "t")
    assert len(docs) == 8 * 2
    by_status: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for doc in docs:
        by_status.setdefault(doc["status"], []).append(doc)
    jfs_available = storage.filesystem_availability("jfs") is None
    assert len(by_status.get("passed", [])) == (16 if jfs_available else 14), by_status.keys()
    if not jfs_available:
        assert {d["params"]["filesystem"] for d in by_status["skipped"]} == {"jfs"}
        assert "jfs" in by_status["skipped"][0]["reason"]

    for doc in by_status["passed"]:
        prov = doc["provenance"]
        for key in ("fsmatrix_version", "git", "kernel", "cpu_model", "memory_kib", "backend", "accel", "tools"):
            assert prov.get(key) not in (None, "", {}), key
        assert prov["backend"] == "host" and prov["accel"] == "none"
        assert doc["samples"]["series"] is not None and doc["samples"]["bound"] in ("cpu", "io", "mixed")
        assert set(doc["key_metrics"]) <= set(doc["metrics"]) | {"device_write_bytes_per_op"}
        if doc["params"]["filesystem"] != "tmpfs":
            data = doc["storage"]["readback"]["data"]
            assert data["mountinfo"]["fstype"] == doc["params"]["filesystem"]
            assert doc["storage"]["devices"][0]["direct_io"] in (True, 1, "1")
            # The file-I/O tools write through to the device inside their window; a 3n+1 run of a
            # few hundredths of a second may leave all its writes in GT.M's buffers and the page
            # cache until after it (flushed on the next timer tick), so only the sum is checked there.
            if doc["workload"] != "threen1":
                assert doc["metrics"]["device_write_bytes"] > 0, (doc["cell_id"], doc["samples"]["io"])
            assert any(k.startswith("mkfs.") for k in prov["tools"])
        if doc["workload"] == "threen1":
            assert doc["verification"]["status"] == "passed"
            end = doc["params"]["workload"]["threen1"]["end"]
            assert doc["metrics"]["longest_sequence"] == {20000: 278, 5000: 237}[end]  # 17647, 3711
            assert "gtm" in prov["tools"]
            # The run's own CPU, from its cgroup: it includes GT.M's detached JOB workers.
            assert doc["samples"]["run_cpu_source"].startswith("cgroup")
            assert doc["metrics"]["cpu_busy_s"] >= 0.9 * doc["metrics"]["worker_cpu_s"] - 0.05, doc["metrics"]

    gtm_on_devices = [
        d for d in by_status["passed"] if d["workload"] == "threen1" and d["params"]["filesystem"] != "tmpfs"
    ]
    assert sum(d["metrics"]["device_write_bytes"] for d in gtm_on_devices) > 0

    index = sqlite3.connect(results / "store.sqlite")  # the results root's store, its one SQLite
    assert index.execute("select count(*) from results where run_id='t'").fetchone()[0] == 16
    split = next(d for d in docs if d["params"]["storage"]["layout"] == "split-journal")
    readback = split["storage"]["readback"]
    assert readback["data"]["mountinfo"]["fstype"] == "xfs" and readback["journal"]["mountinfo"]["fstype"] == "ext2"
    assert split["details"]["gtm"]["readback"]["journal_file"].startswith(readback["journal"]["mount_point"])
    report = (results / "t" / "report.md").read_text()
    assert "Elapsed time" in report and "| 1..20,000 |" in report and "times the row's best median" in report
    # The answer's words on real runs: never "tied", and every speed group says one of them.
    answer = report.split("## Environment")[0]
    assert "tied" not in report and answer.count("### ") >= 1
    assert all(
        any(w in part for w in ("is best", "are equivalent within", "are not separated", "Only ", "Not enough data"))
        for part in answer.split("### ")[1:]
    ), answer
    assert f"report: {results / 't' / 'report.md'}" in proc.stdout

    # Resume: nothing runs again; --force runs one cell again.
    mtimes = {p: p.stat().st_mtime for p in (results / "t").rglob("r*.json")}
    again = fsmatrix("run", str(matrix), "--results", str(results), "--workdir", str(workdir), "--no-race")
    assert again.returncode == 0 and "16 reused" in again.stderr.replace("\n", " "), again.stderr
    progress = [line for line in again.stderr.splitlines() if line.startswith("[") and "] " in line]
    assert progress and all(line.endswith(", reused: not run again)") for line in progress), progress
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes
    forced = fsmatrix(
        "run",
        str(matrix),
        "--results",
        str(results),
        "--workdir",
        str(workdir),
        "--only",
        "tmpfs-*",
        "--force",
        "--repeat",
        "1",
    )
    assert forced.returncode == 0
    kept = {p: mtime for p, mtime in mtimes.items() if p.exists()}
    gone = set(mtimes) - set(kept)  # the tmpfs cells' earlier repeats beyond the one run again
    assert gone and all("tmpfs" in str(p) and p.name != "r1.json" for p in gone)
    changed = [p for p in kept if p.stat().st_mtime != kept[p]]
    assert len(changed) == 2 and all("tmpfs" in str(p) for p in changed)


def test_a_failed_cell_does_not_stop_the_matrix(write_matrix, tmp_path: Path, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    matrix = write_matrix("""\
name: f
axes:
  filesystem: [ext4]
  mount_options: ["no_such_option", ""]
defaults:
  workload.threen1: {start: 1, end: 2000, workers: 2, block: 100}
  storage.disk_size: 512M
""")
    proc = fsmatrix("run", str(matrix), "--results", str(tmp_path), "--workdir", str(workdir), "--no-race")
    assert proc.returncode == 1, proc.stderr
    statuses = sorted((d["params"]["mount_options"], d["status"]) for d in docs_of(tmp_path / "f"))
    assert statuses == [("", "passed"), ("no_such_option", "error")]
    bad = next(d for d in docs_of(tmp_path / "f") if d["status"] == "error")
    assert "mount" in bad["reason"]


def test_timeout_kills_the_run_and_cleans_up(write_matrix, tmp_path: Path, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    matrix = write_matrix("""\
name: slow
axes: {filesystem: [ext4]}
defaults:
  workload.threen1: {start: 1, end: 10000000, workers: 2, block: 50000, keys: integer}  # minutes; fits 4G
  storage.disk_size: 4G
  timeout: 5
""")
    started = time.monotonic()
    proc = fsmatrix("run", str(matrix), "--results", str(tmp_path), "--workdir", str(workdir))
    assert proc.returncode == 1
    assert time.monotonic() - started < 120
    (doc,) = docs_of(tmp_path / "slow")
    assert doc["status"] == "timeout", doc["reason"]


def test_ctrl_c_cleans_up_and_the_run_resumes(write_matrix, tmp_path: Path, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    matrix = write_matrix("""\
name: int
axes:
  filesystem: [tmpfs, ext4]
defaults:
  workload.threen1: {start: 1, end: 10000000, workers: 2, block: 50000, keys: integer}  # minutes; fits 4G
  storage.disk_size: 4G
include:
  - {filesystem: tmpfs, workload: {threen1: {start: 1, end: 1000}}}
""")
    # Run only the quick tmpfs cell first, so the interrupted run has finished work to keep.
    first = fsmatrix(
        "run", str(matrix), "--results", str(tmp_path), "--workdir", str(workdir), "--only", "tmpfs-*-1-1000-*"
    )
    assert first.returncode == 0, first.stderr
    proc = subprocess.Popen(
        [*FSMATRIX, "run", str(matrix), "--results", str(tmp_path), "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the ext4 cell has mounted its loop device
        if any(str(workdir) in line and " ext4 " in line for line in Path("/proc/mounts").read_text().splitlines()):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the ext4 cell never mounted")
    time.sleep(3)  # let GT.M workers start
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not _leftovers(workdir), _leftovers(workdir)
    assert not list(workdir.iterdir()), list(workdir.iterdir())
    docs = docs_of(tmp_path / "int")
    assert [d["params"]["workload"]["threen1"]["end"] for d in docs] == [1000]  # only the finished run


def test_refuses_the_root_disk_and_unconfirmed_devices(write_matrix, tmp_path: Path, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    matrix = write_matrix("axes: {filesystem: [ext4]}\ndefaults: {workload.threen1: {start: 1, end: 100}}\n")
    root_source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True, text=True).stdout.strip()
    if root_source.startswith("/dev/"):
        proc = fsmatrix("run", str(matrix), "--results", str(tmp_path), "--device", root_source, "--yes")
        assert proc.returncode == 2 and "refusing" in proc.stderr and "Traceback" not in proc.stderr
    with storage.loop_devices(1, 64 << 20, workdir) as (device,):
        proc = fsmatrix("run", str(matrix), "--results", str(tmp_path), "--device", device)
        assert proc.returncode == 2 and "--yes" in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "m").exists()


def test_runs_on_an_explicit_block_device(write_matrix, tmp_path: Path, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    matrix = write_matrix("axes: {filesystem: [xfs]}\ndefaults: {workload.threen1: {start: 1, end: 3000}}\n")
    with storage.loop_devices(1, 1 << 30, workdir) as (device,):
        proc = fsmatrix("run", str(matrix), "--results", str(tmp_path), "--device", device, "--yes")
        assert proc.returncode == 0, proc.stderr
        (doc,) = docs_of(tmp_path / "m")
        assert doc["status"] == "passed" and doc["storage"]["readback"]["data"]["device"] == device
        assert doc["provenance"]["device_source"] == "block"
        assert device not in Path("/proc/mounts").read_text()


def test_order_rounds_runs_every_cell_once_per_round(write_matrix, tmp_path: Path, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    matrix = write_matrix("""\
name: o
axes:
  workload.threen1.keys: [integer, spelled]
defaults:
  filesystem: tmpfs
  workload.threen1: {start: 1, end: 1000, workers: 1, block: 100}
repeat: 2
""")

    def ran(*extra: str) -> list[str]:
        """The runs in the order the progress lines ("[2/4] CELL r1: passed (…)") report them."""
        proc = fsmatrix("run", str(matrix), "--results", str(tmp_path), "--workdir", str(workdir), "--force", *extra)
        assert proc.returncode == 0, proc.stderr
        keys = {d["cell_id"]: d["params"]["workload"]["threen1"]["keys"] for d in docs_of(tmp_path / "o")}
        progress = [line for line in proc.stderr.splitlines() if line.startswith("[") and "] " in line]
        runs = [line.split("] ", 1)[1].split(":")[0].split(" ") for line in progress]
        return [f"{keys[cell]} {r}" for cell, r in runs if cell in keys]

    # Rounds by default (issue 45); cell by cell on request. (integer and spelled keys are two comparison
    # groups of one cell each: nothing to race, fixed repeats.)
    # Within a round, the order matrix.json records (drawn from its seed: test_round_order.py).
    order = ran()
    assert sorted(order[:2]) == ["integer r1", "spelled r1"] and sorted(order[2:]) == ["integer r2", "spelled r2"]
    recorded = json.loads((tmp_path / "o" / "matrix.json").read_text())["order"]["rounds"]
    keys = {d["cell_id"]: d["params"]["workload"]["threen1"]["keys"] for d in docs_of(tmp_path / "o")}
    assert order == [f"{keys[c]} r{r}" for r, ids in enumerate(recorded, 1) for c in ids]
    assert ran("--order", "cells") == ["integer r1", "integer r2", "spelled r1", "spelled r2"]


def test_the_summary_shows_mount_options_when_they_tell_cells_apart(tmp_path: Path) -> None:
    from rich.console import Console

    from fsmatrix.matrix import expand_document
    from fsmatrix.runs import RunSummary, summary_table

    def table(mounts: list[str]):  # type: ignore[no-untyped-def]
        doc = {"axes": {"filesystem": ["ext3"], "mount_options": mounts}, "defaults": {"workload.fio.pattern": "write"}}
        return summary_table(RunSummary(tmp_path), expand_document(doc, "t").cells)

    shown = table(["data=journal", "data=writeback"])
    assert [c.header for c in shown.columns][:3] == ["cell", "mount", "workload"]
    console = Console(width=300, record=True)
    console.print(shown)
    text = console.export_text()
    assert "data=journal" in text and "data=writeback" in text
    assert "mount" not in [c.header for c in table([""]).columns]


def test_force_with_fewer_repeats_leaves_no_earlier_repeat_behind(write_matrix, tmp_path: Path, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    # A README audit's finding: --force --repeat 2 after 5 repeats left r3-r5, and the report counted them.
    matrix = write_matrix("""\
name: force
axes:
  workload.threen1.keys: [integer]
defaults:
  filesystem: tmpfs
  workload.threen1: {start: 1, end: 1000, workers: 1, block: 100}
""")
    base = ["run", str(matrix), "--results", str(tmp_path), "--workdir", str(workdir), "--no-race"]
    assert fsmatrix(*base, "--repeat", "3").returncode == 0
    forced = fsmatrix(*base, "--repeat", "1", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "--force: removed 6 earlier result files of these cells" in forced.stdout + forced.stderr
    (cell,) = [p for p in (tmp_path / "force").iterdir() if p.is_dir()]
    assert sorted(p.name for p in cell.iterdir()) == ["r1.json", "r1.log"]
    assert [d["repeat"] for d in docs_of(tmp_path / "force")] == [1]
