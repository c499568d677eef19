"""The run: a fresh (or, resuming, the recovered) database, the workers, the sample read back, the
outcome; ``run_cell`` for a cell, ``run_standalone`` for ``fsmatrix workload threen1``."""

from __future__ import annotations

import dataclasses
import logging
import random
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workspace
from fsmatrix.agent.databases import gtm
from fsmatrix.agent.workloads.threen1 import memory as threen1_memory
from fsmatrix.agent.workloads.threen1.params import DB_NAME, ROUTINE, SETUP_TIMEOUT, WORDS_FILE, Params, time_left
from fsmatrix.agent.workloads.threen1.parse import RunOutput, parse_output
from fsmatrix.agent.workloads.threen1.verify import (
    SAMPLE_TIMEOUT,
    check_sample,
    expected,
    read_steps,
    sample_entries,
    transactions,
    verify,
)

log = logging.getLogger("fsmatrix")

WORKER_EXIT_S = 10.0  # how long the measured window waits for the workers to exit after the parent
PID_FILE = "workers.pids"  # in the run's scratch directory: the parent writes its workers' PIDs there


def read_pid_file(path: Path) -> list[int]:
    """Worker PIDs from the parent's ``worker <i> <pid>`` lines (written as it starts them)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [int(p[2]) for p in (line.split() for line in lines) if len(p) == 3 and p[2].isdigit()]


def run_cell(cell: Cell, ws: Workspace, timeout: float) -> Outcome:
    """Run the cell's 3n+1 range on a fresh database in ``ws.data`` (journal in ``ws.journal``)."""
    return run(cell.typed_params(Params), cell.settings_of(gtm.Settings), ws, timeout)


def run_standalone(
    params: Params, directory: Path, gtm: dict[str, Any] | None = None, timeout: float = 86400
) -> Outcome:
    """``fsmatrix workload threen1``: database and journal in ``directory``, scratch in ``directory/.scratch``."""
    settings = _gtm_settings(gtm)
    directory = Path(directory)
    ws = Workspace(data=directory, journal=directory, scratch=directory / ".scratch")
    return run(params, settings, ws, timeout)


def _gtm_settings(values: dict[str, Any] | None) -> gtm.Settings:
    # a parameter named like the module shadows it inside run_standalone
    return gtm.Settings.from_mapping(values)


def _given_reference(params: Params, given: Mapping[str, Any]) -> dict[str, Any]:
    """A reference handed in (by the host, through the job): it must be for this range."""
    ints = ("start", "end", "longest_sequence", "largest_number")
    if not all(isinstance(given.get(k), int) and not isinstance(given.get(k), bool) for k in ints) or not (
        isinstance(given.get("source"), str)
    ):
        raise ValueError(f"3n+1 reference must hold the integers {', '.join(ints)} and a source; got {dict(given)!r}")
    if (given["start"], given["end"]) != (params.start, params.end):
        raise ValueError(
            f"3n+1 reference is for {given['start']}..{given['end']}, the cell runs {params.start}..{params.end}"
        )
    return dict(given)


@dataclass(frozen=True)
class RunRecord:
    """What one 3n+1 run left to judge it by: the database, the parent's output (``output``), what
    GT.M configured before the run (``asked``) and held after it (``final``, a file header), what
    creating the database said, $zversion, the parent's wall time, what releasing the database did,
    GT.M's counters over the run and the stored-entries sample's check."""

    db: gtm.Database
    output: RunOutput
    asked: dict[str, Any]
    final: dict[str, Any]
    messages: list[str]
    zversion: str
    parent_wall: float
    cleanup: dict[str, Any]
    counters: dict[str, int]
    sample: dict[str, Any]


def run(
    params: Params,
    settings: gtm.Settings,
    ws: Workspace,
    timeout: float,
    *,
    sample_seed: int | None = None,
    resume: bool = False,
) -> Outcome:
    """Create the database, run the benchmark, verify, clean up.

    ``ws.reference``: ``expected(params)`` if the caller computed it already; otherwise it is
    computed here, before the timeout starts counting (it is not part of the run). ``sample_seed``:
    the seed of the stored-entries sample (default: a fresh one, recorded in the verification).
    ``resume``: run on the database already in ``ws.data`` (recovered after a crash) and go on
    from what it holds; the workers' own answers then cover only what they computed.

    A crash cell (``ws.crash``) with nobefore journaling keeps a copy of the new database for
    forward recovery; once the crash has fired the database is left as it is (no rundown).
    """
    ref = expected(params) if ws.reference is None else _given_reference(params, ws.reference)
    seed = random.SystemRandom().randrange(2**32) if sample_seed is None else sample_seed
    deadline = time.monotonic() + timeout

    def left() -> float:
        return time_left(deadline, timeout)

    threen1_memory.load_digit_words(WORDS_FILE)  # a broken words file fails here, not in 4 workers
    ws.scratch.mkdir(parents=True, exist_ok=True)
    # a directory of its own per run: its global directory path also identifies this run's processes
    scratch = Path(tempfile.mkdtemp(prefix="threen1-", dir=ws.scratch)).resolve()
    (scratch / "jobs").mkdir()
    lifecycle = gtm.Lifecycle(
        attach=resume,
        backup=ws.crash is not None and settings.journal == "nobefore" and not resume,
        pids=lambda: read_pid_file(scratch / PID_FILE),  # the JOB workers detach: the database alone cannot find them
        crashed=lambda: ws.crash is not None and ws.crash.fired,
    )
    where = gtm.DatabaseLocation(ws.data, ws.journal, scratch / "gtm", DB_NAME)
    with gtm.opened(settings, where, timeout=min(SETUP_TIMEOUT, left()), lifecycle=lifecycle) as session:
        db = session.db
        zversion, asked, counters_before = _set_up(db, settings, left)
        log.info("threen1 %d..%d, %d workers, block %d, %s keys", *dataclasses.astuple(params))
        out, parent_wall = _benchmark(db, params, scratch, ws, left)
        if out is not None:
            parsed = parse_output(out.stdout)
            header = gtm.dump_gvstat(db)  # before the sample check adds its reads to the counters
            final = gtm.readback(gtm.parse_fileheader(header))
            counters = gtm.counter_delta(counters_before, gtm.parse_gvstat(header))
            entries = sample_entries(params, seed)
            stored = read_steps(db, params.keys, [n for n, _ in entries], timeout=SAMPLE_TIMEOUT)
    cleanup = session.cleanup
    if out is None:
        raise TimeoutError(
            f"3n+1 {params.start}..{params.end} exceeded {timeout:g} s; GT.M processes stopped "
            f"{cleanup['terminated'] + cleanup['killed']}, database run down"
        )
    sample = check_sample(entries, stored, seed)
    record = RunRecord(
        db, parsed, asked, final, session.messages, zversion, parent_wall, cleanup, counters, sample
    )  # fmt: skip
    return _outcome(params, settings, record, ref, resume)


def _set_up(
    db: gtm.Database, settings: gtm.Settings, left: Callable[[], float]
) -> tuple[str, dict[str, Any], dict[str, int]]:
    """Compile the routine, and check GT.M configured what the cell asks: $zversion, the file
    header's readback, and GT.M's counters before the run."""
    gtm.compile_routine(db, ROUTINE, timeout=min(SETUP_TIMEOUT, left()))
    zversion = gtm.version(db, timeout=min(SETUP_TIMEOUT, left()))
    header = gtm.dump_gvstat(db)  # the file header, and GT.M's counters before the run
    asked = gtm.readback(gtm.parse_fileheader(header))
    diffs = gtm.differences(settings, asked)
    if diffs:
        raise RuntimeError("GT.M did not configure what the cell asks: " + "; ".join(diffs))
    return zversion, asked, gtm.parse_gvstat(header)


def _benchmark(
    db: gtm.Database, params: Params, scratch: Path, ws: Workspace, left: Callable[[], float]
) -> tuple[subprocess.CompletedProcess[str] | None, float]:
    """The measured part: the parent and its workers over the range. Its output (None: it timed
    out) and its wall time; CommandError when it failed."""
    pid_file, job_dir = scratch / PID_FILE, scratch / "jobs"
    cmd = [db.tool("mumps"), "-run", "main^threen1"]
    cmd += [str(params.start), str(params.end), str(params.workers), str(params.block), params.keys]
    env = db.env({"threen1_words": str(WORDS_FILE), "threen1_pids": str(pid_file), "threen1_jobdir": str(job_dir)})
    t0 = t1 = time.monotonic()
    try:
        with ws.measure():  # the sampler covers the benchmark only, not setup and cleanup
            t0 = time.monotonic()  # inside: the window's syncs are no part of the wall time
            out = proc.run(cmd, env=env, input="", timeout=left(), check=False, cwd=scratch)
            t1 = time.monotonic()
            if ws.crash is None:  # a crashed run's workers are the crash mode's
                _wait_for_workers(pid_file, min(WORKER_EXIT_S, left()))
    except proc.CommandError as exc:
        if exc.returncode is not None:
            raise
        return None, time.monotonic() - t0
    parent_wall = t1 - t0
    (scratch / "parent.out").write_text(out.stdout + out.stderr, encoding="utf-8")
    if out.returncode != 0:
        raise proc.CommandError(cmd, out.returncode, out.stdout + out.stderr + _job_errors(job_dir))
    return out, parent_wall


def _wait_for_workers(pid_file: Path, limit: float) -> None:
    """Until every worker has exited (at most ``limit`` seconds). The parent returns once each worker
    has released its work lock, often before every worker has exited; the last GT.M process out runs
    the database down: writes its global buffers (27 MB in the PR cell) and fsyncs. Waited for in the
    measured window, that rundown is always in it (issue 51: when a worker was last, it fell after
    the window or, once dse had attached, to the cleanup's mupip rundown: bytes/op were bimodal)."""
    deadline = time.monotonic() + limit
    while any(proc.holds_files(pid) for pid in read_pid_file(pid_file)) and time.monotonic() < deadline:
        time.sleep(0.005)


def _job_errors(job_dir: Path) -> str:
    texts = []
    for path in sorted(job_dir.glob("worker*.mje")):
        text = path.read_text(errors="replace").strip()
        if text:
            texts.append(f"\n{path.name}: {text}")
    return "".join(texts)


def _outcome(
    params: Params, settings: gtm.Settings, record: RunRecord, reference: dict[str, Any], resumed: bool = False
) -> Outcome:
    result, db, final, counters = record.output, record.db, record.final, record.counters
    elapsed = result.elapsed_s
    journal_sizes = {p.name: p.stat().st_size for p in gtm.journal_files(db)}
    dat = db.dat.stat()
    used_blocks = final["total_blocks"] - final["free_blocks"]
    shared = result.shared  # the answers and totals as the database holds them
    metrics: dict[str, float | int] = {
        "elapsed_s": elapsed,
        "reads": shared.reads,
        "updates": shared.updates,
        "reads_per_s": round(shared.reads / elapsed, 1) if elapsed > 0 else 0.0,
        "updates_per_s": round(shared.updates / elapsed, 1) if elapsed > 0 else 0.0,
        "longest_sequence": shared.longest,
        "largest_number": shared.largest,
        "worker_cpu_s": round(sum(w.cpu_s for w in result.workers), 2),
        "workers": len(result.workers),
        "database_bytes": dat.st_size,
        "journal_bytes": sum(journal_sizes.values()),
        # GT.M's own counters for the run (dse dump -fileheader -gvstat)
        "tp_read_only": counters.get("TTR", 0),
        "tp_read_write": counters.get("TTW", 0),
        "gtm_sets": counters.get("SET", 0),
        "gtm_gets": counters.get("GET", 0),
    }
    details: dict[str, Any] = {
        "params": dataclasses.asdict(params),
        "zversion": record.zversion,
        "gtm": {
            "requested": dataclasses.asdict(settings),
            "readback": record.asked,
            "messages": record.messages,
            "database_file": str(db.dat),
            "journal_files": journal_sizes,
            "blocks_at_end": {"total": final["total_blocks"], "free": final["free_blocks"]},
            "counters": counters,
        },
        "transactions": transactions(result),
        "database_used_bytes": used_blocks * final["block_size"],
        "database_allocated_bytes": dat.st_blocks * 512,
        "workers": [dataclasses.asdict(w) for w in result.workers],
        "start_skew_s": result.start_skew_s,
        "parent_wall_s": round(record.parent_wall, 3),
        "cleanup": record.cleanup,
    }
    return Outcome(
        metrics=metrics,
        verification=verify(params, result, reference, counters, record.sample, resumed=resumed),
        details=details,
        versions={"gtm": record.zversion},
    )
