"""Crash cells: the ``crash`` setting, the kill injector, and GT.M 3n+1 recovered and resumed after a
real SIGKILL on loop devices (host backend).

The GT.M runs use small ranges (1..300,000, two workers, integer keys: about 2 s of work) killed
1 s into the measured part, so each test takes seconds. Each one checks that no loop device,
mount, GT.M process or System V IPC is left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, attached_under, mounted_under
from fsmatrix.agent import cgroup, crash, proc, storage
from fsmatrix.agent.crash.injector import Injector, cgroup_members
from fsmatrix.agent.databases import gtm
from fsmatrix.agent.declare import Invalid
from fsmatrix.agent.job import CellRepeat, Job, run_job, run_recovery
from fsmatrix.agent.parsing import parse_cell
from fsmatrix.agent.workloads import threen1
from fsmatrix.agent.workloads.threen1 import params as threen1_params
from fsmatrix.agent.workloads.threen1 import recover as threen1_recover
from fsmatrix.backends.host import HostBackend
from fsmatrix.errors import UserError
from fsmatrix.matrix import cell_id, expand_document

needs_root = pytest.mark.root(reason="needs root: losetup, mkfs, mount, cgroups")
needs_gtm = pytest.mark.skipif(not Path(gtm.DIST_GLOB).parent.parent.exists(), reason="needs GT.M (fis-gtm)")
pytestmark = pytest.mark.system  # real GT.M killed and recovered on loop devices: seconds a test

THREEN1_100000 = {"start": 1, "end": 100000}
THREEN1 = {"start": 1, "end": 300000, "workers": 2, "block": 1000, "keys": "integer"}


def crash_cell(journal: str = "before", after_s: float = 1.0, filesystem: str = "ext4", **threen1_params: Any) -> dict:
    return {
        "filesystem": filesystem,
        "storage": {"disk_size": "1G"},
        "gtm": {"journal": journal, "global_buffers": 4096},
        "workload": {"threen1": {**THREEN1, **threen1_params}},
        "crash": {"mode": "kill", "after_s": after_s},
        "timeout": 600,
    }


# --------------------------------------------------------------------------------------------
# the setting


def test_a_cell_without_crash_keeps_its_id_and_json_form() -> None:
    """The ids of cells without a crash are those from before the setting existed (main's, at the
    time this setting was added), and their JSON form has no ``crash`` key at all."""
    before = {
        "ext4-threen1-1-100000-w4-7456bbba": {"filesystem": "ext4", "workload": {"threen1": THREEN1_100000}},
        "btrfs-fio-randread-j1-e8b8d62f": {"filesystem": "btrfs", "workload": {"fio": {"pattern": "randread"}}},
    }
    for expected, doc in before.items():
        assert cell_id(parse_cell(doc)) == expected
        assert "crash" not in parse_cell(doc).to_dict()
        assert parse_cell({**doc, "crash": None}).to_dict() == parse_cell(doc).to_dict()
    matrix = expand_document({"axes": {"filesystem": ["ext4"], "workload": [{"threen1": THREEN1_100000}]}}, "m")
    assert matrix.cells[0].id == "ext4-threen1-1-100000-w4-7456bbba"


def test_a_crash_cell_has_its_own_id_and_the_settings_with_defaults() -> None:
    spec = parse_cell(crash_cell())
    assert spec.crash == crash.CrashSettings(mode="kill", after_s=1.0, points=10, seed=0)
    assert spec.to_dict()["crash"] == {"mode": "kill", "after_s": 1.0, "points": 10, "seed": 0}
    cid = cell_id(spec)
    assert cid.startswith("ext4-crash-kill-threen1-1-300000-w2-")
    plain = {k: v for k, v in crash_cell().items() if k != "crash"}
    assert cell_id(parse_cell(plain)) != cid
    assert parse_cell(spec.to_dict()) == spec  # what a job carries parses back to the same cell


@pytest.mark.parametrize(
    ("crash_doc", "path", "message"),
    [
        ({"mode": "kill", "after_s": 0}, "crash.after_s", "crash.after_s must be a number > 0"),
        ({"mode": "kill", "after_s": -1.5}, "crash.after_s", "crash.after_s must be a number > 0"),
        ({"mode": "reboot", "after_s": 1}, "crash.mode", "crash.mode must be one of power-cut, kill, flush-points"),
        ({"after_s": 1}, "crash.mode", "crash.mode is required"),
        ({"mode": "kill"}, "crash.after_s", "crash.after_s is required"),
        ({"mode": "kill", "after_s": 1, "when": 2}, "crash.when", "unknown setting"),
        ({"mode": "flush-points", "after_s": 1, "points": 0}, "crash.points", "crash.points must be an integer >= 1"),
    ],
)
def test_bad_crash_settings_are_refused_naming_the_setting(crash_doc: dict, path: str, message: str) -> None:
    with pytest.raises(Invalid, match=message) as caught:
        parse_cell({**crash_cell(), "crash": crash_doc})
    assert caught.value.path == path


def test_flush_points_refuses_split_journal() -> None:
    doc = {**crash_cell(), "storage": {"layout": "split-journal"}, "crash": {"mode": "flush-points", "after_s": 1}}
    with pytest.raises(Invalid, match="'flush-points' .* 'split-journal'") as caught:
        parse_cell(doc)
    assert caught.value.path == "crash.mode"
    doc["crash"]["mode"] = "power-cut"  # power-cut takes both devices down at once: fine
    assert parse_cell(doc).crash is not None


def test_a_workload_without_recovery_refuses_a_crash() -> None:
    doc = {"filesystem": "ext4", "workload": {"fio": {"pattern": "randread"}}, "crash": {"mode": "kill", "after_s": 1}}
    with pytest.raises(Invalid, match="fio cannot recover from a crash yet .*threen1") as caught:
        parse_cell(doc)
    assert caught.value.path == "crash"


def test_a_matrix_file_with_a_bad_crash_setting_names_its_line() -> None:
    doc = {
        "axes": {"filesystem": ["ext4"], "workload": [{"threen1": {"start": 1, "end": 1000}}]},
        "defaults": {"crash": {"mode": "kill", "after_s": 0}},
    }
    with pytest.raises(UserError, match=r"crash.after_s: 0 is not allowed; expected a number > 0"):
        expand_document(doc, "m.yaml")
    doc["defaults"] = {"crash.mode": "kill", "crash.after_s": 2.5}
    (cell,) = expand_document(doc, "m.yaml").cells
    assert cell.spec.crash == crash.CrashSettings(mode="kill", after_s=2.5)


def test_the_shipped_crash_matrix_expands() -> None:
    from fsmatrix import matrix

    m = matrix.load(REPO / "matrix" / "crash.yaml")
    modes = {c.spec.crash.mode for c in m.cells if c.spec.crash}
    assert modes == {"power-cut"} and len(m.cells) == 16
    pg = {c.spec.settings["postgres"].synchronous_commit for c in m.cells if c.spec.workload == "pgbench"}
    assert pg == {"on", "off"}
    assert sum(c.spec.mount_options == "data=writeback" for c in m.cells) == 2
    journals = {(c.spec.filesystem, c.spec.settings["gtm"].journal) for c in m.cells if c.spec.workload == "threen1"}
    for fs in ("ext2", "ext3", "ext4", "xfs", "jfs", "btrfs"):
        assert {(fs, "before"), (fs, "nobefore")} <= journals


@needs_root
@pytest.mark.parametrize("mode", ["power-cut", "flush-points"])
def test_the_host_backend_refuses_vm_only_modes_at_preflight(mode: str, tmp_path: Path) -> None:
    doc = {"axes": {"filesystem": ["ext4"], "workload": [{"threen1": {"start": 1, "end": 1000}}]}}
    doc["defaults"] = {"crash": {"mode": mode, "after_s": 1}}
    cells = expand_document(doc, "m").cells
    with pytest.raises(UserError, match=f"crash.mode '{mode}' needs a VM backend"):
        HostBackend(workdir=tmp_path).preflight(cells)
    doc["defaults"] = {"crash": {"mode": "kill", "after_s": 1}}
    HostBackend(workdir=tmp_path).preflight(expand_document(doc, "m").cells)  # kill runs anywhere


# --------------------------------------------------------------------------------------------
# the event and the injector


def test_the_event_records_steps_and_checks_and_lists_what_failed() -> None:
    event = crash.CrashEvent(mode="kill", after_s=1.0)
    with event.step("recover", recovery=True) as step:
        step["detail"] = "fine"
    with pytest.raises(crash.RecoveryFailed, match="integ: the file is gone") as caught, event.step("integ"):
        raise OSError("the file is gone")
    assert caught.value.step == "integ"
    event.not_attempted("forward", "no journal")
    event.check("work reused", False, "0 of 10 survived")
    event.check("integ", True, "clean")
    assert [s["status"] for s in event.steps] == ["ok", "failed", "not-attempted"]
    assert event.recovery_s is not None and event.recovery_s >= 0
    assert event.problems() == ["recovery step integ failed: the file is gone", "work reused: 0 of 10 survived"]
    assert crash.CrashEvent.from_dict({**event.to_dict(), "from_the_future": 1}) == event


@needs_root
def test_the_injector_kills_the_runs_processes_and_not_itself(capsys: pytest.CaptureFixture[str]) -> None:
    event = crash.CrashEvent(mode="kill", after_s=0.3)
    with cgroup.RunCpu() as run_cpu:
        assert run_cpu.directory is not None, "this test needs a writable cgroup hierarchy"
        # started as the workloads start theirs (proc.in_run): joining the run's cgroup, which this
        # process never enters
        child = subprocess.Popen(proc.in_run([sys.executable, "-c", "import time; time.sleep(60)"])[0])
        # a detached grandchild (setsid, parent gone), as GT.M's JOB workers are
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # the pipe would wait for the sleep
        subprocess.run(proc.in_run(["setsid", "-f", "sleep", "60"])[0], check=True, **quiet)
        injector = Injector(event, run_cpu.directory, kill=True)
        t0 = time.monotonic()
        with injector.armed():
            child.wait(timeout=10)
        members = cgroup_members(run_cpu.directory)
    assert child.returncode == -9
    assert time.monotonic() - t0 >= 0.3
    assert event.fired and event.fired_at_s is not None and 0.3 <= event.fired_at_s < 2
    assert event.kill_source == "cgroup" and child.pid in event.killed and os.getpid() not in event.killed
    assert len(event.killed) >= 2  # the detached sleep too
    assert [p for p in members if p != os.getpid() and proc.holds_files(p)] == []
    assert crash.MEASURE_START_MARKER in capsys.readouterr().out


def test_the_injector_does_not_fire_once_the_measured_part_ended(capsys: pytest.CaptureFixture[str]) -> None:
    event = crash.CrashEvent(mode="kill", after_s=1.0)  # far beyond the measured part, even on a stalled machine
    injector = Injector(event, None, [], kill=True)
    with injector.armed():
        time.sleep(0.05)
    time.sleep(1.3)
    assert not event.fired and event.killed == []
    assert event.measured_s is not None and 0.05 <= event.measured_s < 1.0
    assert capsys.readouterr().out.count(crash.MEASURE_START_MARKER) == 1
    with injector.armed():  # a second measured part (a resume) is never crashed nor announced
        pass
    assert capsys.readouterr().out == ""


def test_without_a_cgroup_the_injector_kills_children_and_whoever_holds_the_files(tmp_path: Path) -> None:
    held = tmp_path / "db"
    held.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # not our child (its shell parent exits at once): holds a file under the database's directory
    started = subprocess.run(
        ["sh", "-c", f"(exec 3>{held}/file; exec sleep 60) >/dev/null 2>&1 & echo $!"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    holder = int(started.stdout)
    try:
        time.sleep(0.3)
        event = crash.CrashEvent(mode="kill", after_s=0.1)
        with Injector(event, None, [held], kill=True).armed():
            child.wait(timeout=10)
            while proc.holds_files(holder):
                time.sleep(0.01)
        assert event.kill_source == "open-files"
        assert {child.pid, holder} <= set(event.killed) and os.getpid() not in event.killed
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if proc.holds_files(holder):
            os.kill(holder, 9)


# --------------------------------------------------------------------------------------------
# GT.M 3n+1 on loop devices: crash, recover, resume


def orphaned_shared_memory() -> set[str]:
    """Shared memory segments no process is attached to: what killed GT.M processes leave until a
    recovery or rundown removes them. (Not every new segment: other users of this machine run
    GT.M and PostgreSQL at the same time, attached to theirs.)"""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    header = lines[0].split()
    at, ident = header.index("nattch"), header.index("shmid")
    return {f[ident] for f in (line.split() for line in lines[1:]) if f[at] == "0"}


@pytest.fixture
def job_dir() -> Iterator[Path]:
    """A work directory; afterwards nothing of the run may be left: loop devices, mounts, GT.M
    processes, orphaned shared memory."""
    base = Path(tempfile.mkdtemp(prefix="fsmatrix-test-crash-", dir="/var/tmp"))
    orphans_before = orphaned_shared_memory()
    yield base
    assert mounted_under(base) == []
    assert attached_under(base) == []
    assert orphaned_shared_memory() - orphans_before == set()
    assert [p for p in proc.processes_using([base]) if p != os.getpid()] == []
    proc.run(["rm", "-rf", str(base)], timeout=60)


def _run(cell: dict[str, Any], base: Path, **kwargs: Any) -> dict[str, Any]:
    with storage.loop_devices(1, 1 << 30, base) as devices:
        return run_job(Job(CellRepeat(parse_cell(cell), "c", 1), devices, base / "job", {}), **kwargs)


def _step(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["crash"]["steps"] if s["name"] == name)


@needs_root
@needs_gtm
def test_kill_with_before_image_journaling_recovers_and_resumes_to_the_reference(job_dir: Path) -> None:
    doc = _run(crash_cell("before"), job_dir)
    assert doc["status"] == "passed", doc["reason"]
    section = doc["crash"]
    assert section["mode"] == "kill" and section["after_s"] == 1.0 and section["fired"] is True
    assert 1.0 <= section["fired_at_s"] < 2.5 and section["kill_source"] == "cgroup"  # after_s, not a second early
    assert len(section["killed"]) >= 3  # the parent and both workers
    assert "exited with status -9" in section["workload_error"]
    assert section["mount_s"] is None  # same mount: only the recover phase mounts again
    assert [s["name"] for s in section["steps"]] == [
        "discard shared memory",
        "mupip journal -recover -backward",
        "mupip integ",
        "survey",
        "resume",
    ]
    assert all(s["status"] == "ok" for s in section["steps"])
    assert section["recovery_s"] == _step(doc, "mupip journal -recover -backward")["seconds"] > 0
    assert {c["name"]: c["verdict"] for c in section["checks"]} == {"mupip integ": "passed", "work reused": "passed"}
    reused = section["reused"]
    assert 1000 <= reused["starting_numbers_done"] < 300000  # killed mid-run, after real work
    assert reused["resume_updates"] > 0
    assert doc["verification"]["status"] == "passed"
    assert doc["verification"]["got"]["longest_sequence"] == 442  # the reference for 1..300,000
    assert doc["metrics"]["recovery_s"] == section["recovery_s"]
    assert doc["samples"]["run_cpu_source"] != "none"


@needs_root
@needs_gtm
def test_kill_with_nobefore_journaling_recovers_forward_onto_the_backup(job_dir: Path) -> None:
    doc = _run(crash_cell("nobefore"), job_dir)
    assert doc["status"] == "passed", doc["reason"]
    names = [s["name"] for s in doc["crash"]["steps"]]
    assert names[:4] == [
        "discard shared memory",
        "restore the backup taken at creation",
        "mupip journal -recover -forward",
        "journaling on again",
    ]
    assert "shared memory" in _step(doc, "discard shared memory")["detail"]
    assert doc["crash"]["recovery_s"] == _step(doc, "mupip journal -recover -forward")["seconds"]
    assert doc["crash"]["reused"]["starting_numbers_done"] >= 1000


@needs_root
@needs_gtm
def test_with_journaling_off_recovery_is_not_attempted_and_the_verdicts_recorded(job_dir: Path) -> None:
    doc = _run(crash_cell("off"), job_dir)
    first = doc["crash"]["steps"][0]
    assert first["name"] == "journal recovery" and first["status"] == "not-attempted"
    assert doc["crash"]["steps"][1]["name"] == "mupip rundown"
    assert doc["crash"]["recovery_s"] is None
    # Measured outcomes vary from run to run: a clean rundown and a full pass; a rundown GT.M
    # refuses (GTMASSERT2 in wcs_recover) and a damaged database; a file header behind its file
    # (DBTOTBLK, a kill during a file extension). Whichever: the status follows the record.
    verdicts = {c["name"]: c["verdict"] for c in doc["crash"]["checks"]}
    assert set(verdicts) <= {"mupip integ", "work reused"}
    clean = set(verdicts.values()) == {"passed"} and all(s["status"] != "failed" for s in doc["crash"]["steps"])
    assert (doc["status"] == "passed") == (clean and doc["verification"]["status"] == "passed"), doc["reason"]


@needs_root
@needs_gtm
def test_a_crash_after_the_workload_ended_fails_the_run(job_dir: Path) -> None:
    doc = _run(crash_cell("before", after_s=120.0, end=2000), job_dir)
    assert doc["status"] == "failed"
    assert doc["reason"].startswith("crash not injected: the workload ended after ")
    assert doc["reason"].endswith(" s, before crash.after_s=120")
    assert doc["crash"]["fired"] is False and doc["crash"]["measured_s"] < 120
    assert doc["crash"]["steps"] == []


@needs_root
@needs_gtm
def test_the_recover_phase_mounts_the_crashed_filesystem_and_recovers(job_dir: Path) -> None:
    """The crash phase alone, everything unmounted, then the recover phase on the same devices."""
    with storage.loop_devices(1, 1 << 30, job_dir) as devices:
        crashed = run_job(
            Job(CellRepeat(parse_cell(crash_cell("before")), "c", 1), devices, job_dir / "crash", {}), recover=False
        )
        assert crashed["status"] == "error" and crashed["reason"].startswith("crashed;"), crashed["reason"]
        assert crashed["crash"]["fired"] and crashed["crash"]["steps"] == []
        assert mounted_under(job_dir) == []
        event = crash.CrashEvent.from_dict(crashed["crash"])
        doc = run_recovery(
            Job(CellRepeat(parse_cell(crash_cell("before")), "c", 1), devices, job_dir / "crash", {}), event
        )
    assert doc["status"] == "passed", doc["reason"]
    assert doc["crash"]["mount_s"] is not None and doc["crash"]["mount_s"] > 0
    assert doc["storage"]["readback"]["data"]["reused"] is True
    assert doc["storage"]["readback"]["data"]["mkfs_command"] == []
    assert doc["crash"]["fired_at_s"] == crashed["crash"]["fired_at_s"]
    assert doc["crash"]["reused"]["starting_numbers_done"] >= 1000


@needs_root
@needs_gtm
@pytest.mark.parametrize("journal", ["before", "nobefore"])
def test_a_damaged_journal_fails_the_run_naming_the_recovery(job_dir: Path, journal: str) -> None:
    """Backward recovery (before-image) and forward recovery onto the backup (nobefore) alike."""
    mnt = job_dir / "look"
    with storage.loop_devices(1, 1 << 30, job_dir) as devices:
        crashed = run_job(
            Job(CellRepeat(parse_cell(crash_cell(journal)), "c", 1), devices, job_dir / "crash", {}), recover=False
        )
        assert crashed["crash"]["fired"], crashed["reason"]
        # Between the crash and the recovery: overwrite the journal's start (its file header).
        mnt.mkdir()
        proc.run(["mount", devices[0], str(mnt)], timeout=60)
        try:
            mjl = mnt / f"{threen1_params.DB_NAME}.mjl"  # the filesystem is mounted as ws.data
            with mjl.open("r+b") as f:
                f.write(b"\xa5" * 65536)
        finally:
            proc.run(["umount", str(mnt)], timeout=60)
        doc = run_recovery(
            Job(CellRepeat(parse_cell(crash_cell(journal)), "c", 1), devices, job_dir / "crash", {}),
            crash.CrashEvent.from_dict(crashed["crash"]),
        )
    assert doc["status"] == "failed"
    recovery = "mupip journal -recover -" + ("backward" if journal == "before" else "forward")
    assert doc["reason"].startswith(f"recovery failed: {recovery}: "), doc["reason"]
    assert _step(doc, recovery)["status"] == "failed"


@needs_root
@needs_gtm
def test_nothing_reused_fails_the_run(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recovery that keeps none of the work (here: ^step deleted after the recovery) is a finding."""
    survey = threen1_recover.survey

    def survey_after_losing_every_step(
        db: gtm.Database, params: threen1.Params, timeout: float
    ) -> threen1_recover.Survey:
        proc.run([db.tool("mumps"), "-run", "%XCMD", "kill ^step"], env=db.env(), input="", timeout=60)
        return survey(db, params, timeout)

    monkeypatch.setattr(threen1_recover, "survey", survey_after_losing_every_step)
    doc = _run(crash_cell("before"), job_dir)
    assert doc["status"] == "failed"
    assert "work reused: 0 of 300000 starting numbers survived the crash" in doc["reason"]
    assert doc["crash"]["reused"]["starting_numbers_done"] == 0
    assert doc["verification"]["status"] == "passed"  # the resume redid everything, correctly


def test_a_guest_job_may_ask_for_the_recover_phase() -> None:
    from fsmatrix.agent.guest import JobError, parse_job

    base = {"cell": crash_cell(), "cell_id": "c"}
    assert parse_job(base)["phase"] == "run"
    record = {"mode": "power-cut", "after_s": 1.0, "fired": True, "fired_at_s": 1.02}
    job = parse_job({**base, "phase": "recover", "crash": record})
    assert job["phase"] == "recover" and crash.CrashEvent.from_dict(job["crash"]).fired_at_s == 1.02
    with pytest.raises(JobError, match="'phase' must be 'run' or 'recover'"):
        parse_job({**base, "phase": "crash"})
    with pytest.raises(JobError, match="phase 'recover' needs a crash cell and 'crash'"):
        parse_job({**base, "phase": "recover"})
    plain = {k: v for k, v in crash_cell().items() if k != "crash"}
    with pytest.raises(JobError, match="phase 'recover' needs a crash cell"):
        parse_job({"cell": plain, "cell_id": "c", "phase": "recover", "crash": record})


@needs_root
@needs_gtm
def test_a_damaged_database_fails_the_integrity_check(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database integ finds damaged (here: DSE breaks a block's level after the recovery) fails
    the run, and the reason names integ's finding."""
    integ = gtm.integ

    def integ_after_damage(db: gtm.Database, timeout: float = 3600.0) -> tuple[bool, str]:
        proc.run([db.tool("dse")], env=db.env(), input="change -block=3 -level=5\nquit\n", timeout=60)
        return integ(db, timeout)

    monkeypatch.setattr(gtm, "integ", integ_after_damage)
    doc = _run(crash_cell("before"), job_dir)
    assert doc["status"] == "failed"
    assert "mupip integ: the recovered database is damaged: %GTM-E-DBINCLVL" in doc["reason"], doc["reason"]
    assert {c["name"]: c["verdict"] for c in doc["crash"]["checks"]}["mupip integ"] == "failed"
