"""GT.M helpers: the DSE file-header parser on captured output, and real databases (create, read
back, stop, run down)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import TEST_DATA, Golden, golden_cases, gtm_ipc, sysv_ipc_ids
from fsmatrix.agent import proc
from fsmatrix.agent.databases import gtm

DATA = TEST_DATA / "dse"


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fsmatrix-test-gtm-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path)


# --- locating GT.M and checking settings ---------------------------------------------------------


def test_locate_dist_finds_the_debian_installation() -> None:
    dist = gtm.locate_dist({})
    assert (dist / "mumps").is_file()
    assert (dist / "mupip").is_file()


def test_locate_dist_honours_and_checks_gtm_dist(tmp_path: Path) -> None:
    real = gtm.locate_dist({})
    assert gtm.locate_dist({"gtm_dist": str(real)}) == real
    with pytest.raises(FileNotFoundError, match="no mumps"):
        gtm.locate_dist({"gtm_dist": str(tmp_path)})


def test_settings_defaults_and_validation() -> None:
    assert gtm.Settings.from_mapping(None) == gtm.Settings()
    assert gtm.Settings.from_mapping({"access_method": "mm", "journal": "nobefore"}).access_method == "MM"
    with pytest.raises(ValueError, match="'MM' cannot be combined with gtm.journal 'before'"):
        gtm.Settings.from_mapping({"access_method": "MM", "journal": "before"})
    for bad in (
        {"block_size": 1000},
        {"block_size": True},
        {"global_buffers": 0},
        {"journal": "after"},
        {"access_method": "XX"},
        {"sync_io": "yes"},
        {"colour": "blue"},
    ):
        with pytest.raises(ValueError):
            gtm.Settings.from_mapping(bad)
    assert gtm.Settings(block_size=512).key_size == 472
    assert gtm.Settings(block_size=8192).key_size == 1019


# --- parsing dse dump -fileheader ----------------------------------------------------------------


def test_parse_fileheader_bg_before() -> None:
    fields = gtm.parse_fileheader((DATA / "fileheader" / "bg_before.txt").read_text())
    assert fields["Access method"] == "BG"
    assert fields["Global Buffers"] == "35000"
    assert fields["Block size (in bytes)"] == "4096"
    assert fields["Journal State"] == "[inactive] ON"
    assert fields["Journal Before imaging"] == "TRUE"
    assert fields["Flush timer"] == "00:00:01:00"
    assert fields["Journal File"].endswith("/jnl/threen1.mjl")
    assert fields["Region"] == "DEFAULT"
    back = gtm.readback(fields)
    assert back["journal"] == "before"
    assert back["journal_buffers"] == 2312
    assert back["sync_io"] is False
    assert back["full_block_writes"] is False
    assert back["total_blocks"] == 5010
    assert back["key_size"] == 1019
    assert gtm.differences(gtm.Settings(), back) == []


def test_parse_fileheader_mm_nobefore_sync_io_full_block_writes() -> None:
    back = gtm.readback(gtm.parse_fileheader((DATA / "fileheader" / "mm_nobefore_syncio_fbw.txt").read_text()))
    assert back["access_method"] == "MM"
    assert back["journal"] == "nobefore"
    assert back["sync_io"] is True
    assert back["full_block_write_level"] == 1
    asked = gtm.Settings(access_method="MM", journal="nobefore", sync_io=True, full_block_writes=True)
    assert gtm.differences(asked, back) == []
    # the same header does not satisfy a request for before-images or BG
    assert gtm.differences(gtm.Settings(), back)


def test_parse_fileheader_journal_off() -> None:
    back = gtm.readback(gtm.parse_fileheader((DATA / "fileheader" / "bg_off_1024.txt").read_text()))
    assert back["journal"] == "off"
    assert back["journal_state"] == "DISABLED"
    assert back["journal_buffers"] is None
    assert back["block_size"] == 1024
    assert back["key_size"] == 984


def test_parse_gvstat_on_a_3n1_run() -> None:
    """Captured after a 3n+1 1..100,000 run with 4 workers (before-image journaling)."""
    text = (DATA / "gvstat" / "threen1_1_100000_w4.txt").read_text()
    counters = gtm.parse_gvstat(text)
    assert counters["TTR"] == 43266 and counters["TTW"] == 23  # read-only / read-write TP transactions
    assert counters["SET"] == 217810 and counters["GET"] == 405978
    assert counters["BREA"] == 1226  # four-letter names too
    assert counters["DTA"] == 1616 and "KIL" not in counters  # $DATA: the sample check; zeros are left out
    assert gtm.readback(gtm.parse_fileheader(text))["journal"] == "before"  # the header comes with them
    assert gtm.counter_delta({"SET": 5, "GET": 2, "TTR": 1}, {"SET": 9, "GET": 2, "TTW": 3}) == {
        "SET": 4, "TTR": -1, "TTW": 3,
    }  # fmt: skip


def test_parse_gvstat_rejects_other_text() -> None:
    with pytest.raises(ValueError, match="gvstat"):
        gtm.parse_gvstat("%GTM-E-DBFILERR, Error with database file\n")


def test_gvstat_counts_a_real_databases_operations(base: Path) -> None:
    db, _ = gtm.create_database(
        gtm.Settings(journal="off"), gtm.DatabaseLocation(base / "data", base / "data", base / "scratch", "t")
    )
    try:
        before = gtm.parse_gvstat(gtm.dump_gvstat(db))
        code = "tstart ()  set ^a=1 tcommit  tstart ()  set x=$get(^a) tcommit  set ^b=$get(^a) if $data(^a)"
        subprocess.run([db.tool("mumps"), "-run", "%XCMD", code], env=db.env(), check=True, timeout=60)
        delta = gtm.counter_delta(before, gtm.parse_gvstat(gtm.dump_gvstat(db)))
    finally:
        gtm.release(db)
    assert {k: delta.get(k, 0) for k in ("SET", "GET", "DTA", "TTW", "TTR")} == {
        "SET": 2, "GET": 2, "DTA": 1, "TTW": 1, "TTR": 1,
    }  # fmt: skip


def test_parse_fileheader_rejects_other_text() -> None:
    with pytest.raises(ValueError):
        gtm.parse_fileheader("%GTM-E-DBFILERR, Error with database file\n")


@pytest.mark.parametrize("case", golden_cases("dse/fileheader"))
def test_parse_fileheader_golden(case: Golden) -> None:
    """Every captured `dse dump -fileheader` in tests/data/dse/fileheader/ parses to its expected fields."""
    case.check(gtm.parse_fileheader)


@pytest.mark.parametrize("case", golden_cases("dse/gvstat"))
def test_parse_gvstat_golden(case: Golden) -> None:
    """Every captured `dse dump -fileheader -gvstat` in tests/data/dse/gvstat/ parses to its expected counters."""
    case.check(gtm.parse_gvstat)


# --- real databases ------------------------------------------------------------------------------

CASES = {
    "bg-before": {},
    "bg-nobefore-sync_io-odd-jnl-buffers": {"journal": "nobefore", "sync_io": True, "journal_buffers": 2308},
    "bg-off-1k-blocks": {"journal": "off", "block_size": 1024, "global_buffers": 2000},
    "mm-nobefore-full_block_writes": {"access_method": "MM", "journal": "nobefore", "full_block_writes": True},
}


@pytest.mark.parametrize("name", CASES)
def test_create_database_reads_back_what_was_asked(base: Path, name: str) -> None:
    settings = gtm.Settings.from_mapping(CASES[name])
    db, messages = gtm.create_database(
        settings, gtm.DatabaseLocation(base / "data", base / "jnl", base / "scratch", "t")
    )
    try:
        back = gtm.readback(gtm.parse_fileheader(gtm.dump_fileheader(db)))
        assert gtm.differences(settings, back) == []
        assert db.dat == (base / "data" / "t.dat").resolve()
        if settings.journal == "off":
            assert gtm.journal_files(db) == []
        else:
            assert back["journal_file"] == str(base.resolve() / "jnl" / "t.mjl")
            assert gtm.journal_files(db) == [base.resolve() / "jnl" / "t.mjl"]
            if settings.journal_buffers % 8:  # GT.M rounds the journal buffers up, and says so
                assert any("2308 to 2312" in m for m in messages), messages
        assert gtm.version(db).startswith("GT.M V")
    finally:
        gtm.release(db)


def test_create_database_refuses_an_existing_file(base: Path) -> None:
    (base / "data").mkdir()
    (base / "data" / "t.dat").write_text("precious")
    with pytest.raises(FileExistsError):
        gtm.create_database(gtm.Settings(), gtm.DatabaseLocation(base / "data", base / "data", base / "scratch", "t"))
    assert (base / "data" / "t.dat").read_text() == "precious"


def test_release_stops_detached_processes_and_runs_down(base: Path) -> None:
    """Processes found through the global directory in their environment are stopped, the shared
    memory and semaphores go away, and the directory holds nothing open. Only this database's IPC
    is looked at (another GT.M may run beside the test)."""
    db, _ = gtm.create_database(
        gtm.Settings(), gtm.DatabaseLocation(base / "data", base / "data", base / "scratch", "t")
    )
    loop = "for  set ^x=$increment(^x) hang 0.01"
    started = [
        subprocess.Popen(
            [db.tool("mumps"), "-run", "%XCMD", loop],
            env=db.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # like JOB'd workers: not in our process group
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 20
        while len(gtm.processes_using(db)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(p.pid for p in started) == gtm.processes_using(db)
        # Found by their environment before they open the database: its IPC comes a moment later.
        held = gtm_ipc(db.dat)
        while {kind for kind, _ in held} != {"sem", "shm"} and time.monotonic() < deadline:
            time.sleep(0.1)
            held = gtm_ipc(db.dat)
        assert {kind for kind, _ in held} == {"sem", "shm"}, "a database in use has shared memory and a semaphore"
        report = gtm.release(db)
        assert sorted(report["terminated"]) == sorted(p.pid for p in started)
        assert report["killed"] == []
        for p in started:
            assert p.wait(timeout=5) != 0  # stopped, not finished
        assert gtm.processes_using(db) == []
        assert gtm_ipc(db.dat) == set() and not held & sysv_ipc_ids()
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_rundown_after_sigkill_needs_override(base: Path) -> None:
    """A journaled database whose users were killed is still run down (plain rundown refuses it)."""
    db, _ = gtm.create_database(
        gtm.Settings(), gtm.DatabaseLocation(base / "data", base / "data", base / "scratch", "t")
    )
    p = subprocess.Popen(
        [db.tool("mumps"), "-run", "%XCMD", "for  set ^x=$increment(^x)"],
        env=db.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not (held := gtm_ipc(db.dat)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert held, "the database in use has shared memory"
        time.sleep(0.3)
        os.kill(p.pid, 9)
        p.wait()
        text = gtm.rundown(db)
        assert "successfully rundown" in text
        assert "MUUSERECOV" in text  # the first, plain attempt was refused
        assert gtm_ipc(db.dat) == set() and not held & sysv_ipc_ids()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_opened_runs_the_database_down_however_the_block_ends(tmp_path: Path) -> None:
    """gtm.opened owns the lifecycle: an error inside the block still stops its processes and runs
    the database down, and the report of that is on the session."""
    base = tmp_path / "db"
    settings = gtm.Settings(journal="off")
    with (
        pytest.raises(RuntimeError, match="inside the block"),
        gtm.opened(settings, gtm.DatabaseLocation(base / "data", base / "data", base / "scratch", "t")) as s,
    ):
        proc.run([s.db.tool("mumps"), "-run", "%XCMD", "set ^x=1"], env=s.db.env(), timeout=60)
        raise RuntimeError("inside the block")
    assert "rundown" in s.cleanup and not gtm.processes_using(s.db)
    # Run down: a fresh process gets standalone access at once (MUPIP would refuse a live database).
    proc.run([s.db.tool("mupip"), "integ", "-region", "DEFAULT"], env=s.db.env(), timeout=60)
