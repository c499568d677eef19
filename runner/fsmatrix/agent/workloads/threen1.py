"""The GT.M 3n+1 benchmark (seeds 000 and 002): ``threen1.m`` on a fresh database, verified.

Parameters (``cell["workload"]["threen1"]``): ``start``, ``end``, ``workers`` (that many GT.M
processes), ``block`` (starting numbers a worker claims at a time) and ``keys``: ``spelled`` (every
number used as a subscript or stored as a value is written in the digit words of
``digit_words.txt``, as the published benchmark does) or ``integer``. GT.M settings: ``cell["gtm"]``,
see ``gtm.Settings``.

Timing is done inside GT.M: the elapsed time runs from the moment every worker is running and has
been released (the parent holds a LOCK they wait on) to the end of the last one, from $ZHOROLOG.
Each worker reports its CPU time at its end with $ZGETJPI("","CPUTIM"): the workers are detached
from the parent (JOB), so no wait()-based accounting sees them, and /proc is gone once they exit.

Whatever happens (success, error, timeout, Ctrl-C), no GT.M process outlives ``run_cell`` and the
database is run down, so its filesystem can be unmounted. The parent's output is parsed by
``parse_output`` only.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import declare, proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.declare import Invalid, setting
from fsmatrix.agent.workloads import Metric, Outcome, Workload, Workspace, gtm, threen1_memory, threen1_reference

log = logging.getLogger("fsmatrix")

ROUTINE = Path(__file__).with_name("threen1.m")
WORDS_FILE = threen1_memory.WORDS_FILE
DB_NAME = "threen1"
KEY_MODES = threen1_memory.KEY_MODES
# Time allowed for creating the database, compiling and reading the header, out of `timeout`.
SETUP_TIMEOUT = 300.0


@dataclass(frozen=True)
class Params:
    """``cell["workload"]["threen1"]``, declared once: defaults, bounds and help."""

    start: int = setting(minimum=1, cli=True, help="first starting number")
    end: int = setting(minimum=1, cli=True, help="last starting number (>= start)")
    workers: int = setting(4, minimum=1, maximum=1024, help="GT.M worker processes")
    block: int = setting(5000, minimum=1, help="starting numbers a worker claims at a time")
    keys: str = setting("spelled", choices=KEY_MODES, help="subscripts and values as digit words or integers")

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise Invalid(
                "workload.threen1.end",
                f"workload.threen1.end {self.end} is below start {self.start}; the range must have end >= start",
            )

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> Params:
        return declare.parse(cls, params, "workload.threen1")

    @property
    def count(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True)
class Worker:
    """One worker's own counts, as it recorded them at its end."""

    id: int
    pid: int
    reads: int
    updates: int
    longest: int
    largest: int
    cpu_s: float
    start_s: float  # when it began work, after the parent released the workers
    end_s: float


@dataclass(frozen=True)
class RunOutput:
    workers: list[Worker]
    elapsed_s: float
    reads: int
    updates: int
    longest: int
    largest: int
    start_skew_s: float  # how long after the release the last worker began


def _fields(line: str) -> dict[str, int]:
    fields = {}
    for item in line.split()[1:]:
        key, sep, value = item.partition("=")
        if not sep or not value.lstrip("-").isdigit():
            raise ValueError(f"threen1 output: cannot read {item!r} in {line!r}")
        fields[key] = int(value)
    return fields


def parse_output(text: str) -> RunOutput:
    """The parent's report: ``worker id=.. pid=..`` lines and one ``result ..`` line."""
    workers = []
    result: dict[str, int] | None = None
    errors = []
    for line in text.splitlines():
        if line.startswith("worker "):
            f = _fields(line)
            workers.append(
                Worker(
                    id=f["id"],
                    pid=f["pid"],
                    reads=f["reads"],
                    updates=f["updates"],
                    longest=f["longest"],
                    largest=f["largest"],
                    cpu_s=f["cpu_cs"] / 100,
                    start_s=f["start_us"] / 1e6,
                    end_s=f["end_us"] / 1e6,
                )
            )
        elif line.startswith("result "):
            result = _fields(line)
        elif line.startswith("%"):
            errors.append(line.strip())
    if result is None:
        raise ValueError("threen1 output has no result line" + (": " + "; ".join(errors) if errors else ""))
    return RunOutput(
        workers=workers,
        elapsed_s=result["elapsed_us"] / 1e6,
        reads=result["reads"],
        updates=result["updates"],
        longest=result["longest"],
        largest=result["largest"],
        start_skew_s=result["start_skew_us"] / 1e6,
    )


def read_pid_file(path: Path) -> list[int]:
    """Worker PIDs from the parent's ``worker <i> <pid>`` lines (written as it starts them)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [int(p[2]) for p in (line.split() for line in lines) if len(p) == 3 and p[2].isdigit()]


def run_cell(cell: Cell | Mapping[str, Any], ws: Workspace, timeout: float) -> Outcome:
    """Run the cell's 3n+1 range on a fresh database in ``ws.data`` (journal in ``ws.journal``)."""
    cell = Cell.coerce(cell)
    return run(cell.typed_params(Params), cell.settings_of(gtm.Settings), ws, timeout)


def run_standalone(
    start: int,
    end: int,
    workers: int,
    block: int,
    keys: str,
    directory: Path,
    gtm: dict[str, Any] | None = None,
    timeout: float = 86400,
) -> Outcome:
    """``fsmatrix workload threen1``: database and journal in ``directory``, scratch in ``directory/.scratch``."""
    params = Params.from_mapping({"start": start, "end": end, "workers": workers, "block": block, "keys": keys})
    settings = _gtm_settings(gtm)
    directory = Path(directory)
    ws = Workspace(data=directory, journal=directory, scratch=directory / ".scratch")
    return run(params, settings, ws, timeout)


def _gtm_settings(values: dict[str, Any] | None) -> gtm.Settings:
    # a parameter named like the module shadows it inside run_standalone
    return gtm.Settings.from_mapping(values)


def run(params: Params, settings: gtm.Settings, ws: Workspace, timeout: float) -> Outcome:
    """Create the database, run the benchmark, clean up, verify."""
    deadline = time.monotonic() + timeout
    threen1_memory.load_digit_words(WORDS_FILE)  # a broken words file fails here, not in 4 workers
    ws.scratch.mkdir(parents=True, exist_ok=True)
    # a directory of its own per run: its global directory path also identifies this run's processes
    scratch = Path(tempfile.mkdtemp(prefix="threen1-", dir=ws.scratch)).resolve()
    pid_file = scratch / "workers.pids"
    job_dir = scratch / "jobs"
    job_dir.mkdir()
    db, messages = gtm.create_database(
        settings,
        ws.data,
        ws.journal,
        scratch / "gtm",
        name=DB_NAME,
        timeout=min(SETUP_TIMEOUT, _left(deadline, timeout)),
    )
    cmd = [db.tool("mumps"), "-run", "main^threen1"]
    cmd += [str(params.start), str(params.end), str(params.workers), str(params.block), params.keys]
    env = db.env({"threen1_words": str(WORDS_FILE), "threen1_pids": str(pid_file), "threen1_jobdir": str(job_dir)})
    timed_out = False
    try:
        gtm.compile_routine(db, ROUTINE, timeout=min(SETUP_TIMEOUT, _left(deadline, timeout)))
        zversion = gtm.version(db, timeout=min(SETUP_TIMEOUT, _left(deadline, timeout)))
        asked = gtm.readback(gtm.parse_fileheader(gtm.dump_fileheader(db)))
        diffs = gtm.differences(settings, asked)
        if diffs:
            raise RuntimeError("GT.M did not configure what the cell asks: " + "; ".join(diffs))
        log.info("threen1 %d..%d, %d workers, block %d, %s keys", *dataclasses.astuple(params))
        t0 = time.monotonic()
        try:
            with ws.measure():  # the sampler covers the benchmark only, not setup and cleanup
                out = proc.run(cmd, env=env, input="", timeout=_left(deadline, timeout), check=False, cwd=scratch)
        except proc.CommandError as exc:
            if exc.returncode is not None:
                raise
            timed_out = True
        parent_wall = time.monotonic() - t0
        if not timed_out:
            (scratch / "parent.out").write_text(out.stdout + out.stderr, encoding="utf-8")
            if out.returncode != 0:
                raise proc.CommandError(cmd, out.returncode, out.stdout + out.stderr + _job_errors(job_dir))
            parsed = parse_output(out.stdout)
            final = gtm.readback(gtm.parse_fileheader(gtm.dump_fileheader(db)))
    finally:
        cleanup = gtm.release(db, read_pid_file(pid_file))
    if timed_out:
        raise TimeoutError(
            f"3n+1 {params.start}..{params.end} exceeded {timeout:g} s; GT.M processes stopped "
            f"{cleanup['terminated'] + cleanup['killed']}, database run down"
        )
    return _outcome(params, settings, db, parsed, asked, final, messages, zversion, parent_wall, cleanup)


def _left(deadline: float, timeout: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"3n+1 exceeded {timeout:g} s before the workers started")
    return left


def _job_errors(job_dir: Path) -> str:
    texts = []
    for path in sorted(job_dir.glob("worker*.mje")):
        text = path.read_text(errors="replace").strip()
        if text:
            texts.append(f"\n{path.name}: {text}")
    return "".join(texts)


def _outcome(
    params: Params,
    settings: gtm.Settings,
    db: gtm.Database,
    result: RunOutput,
    asked: dict[str, Any],
    final: dict[str, Any],
    messages: list[str],
    zversion: str,
    parent_wall: float,
    cleanup: dict[str, Any],
) -> Outcome:
    elapsed = result.elapsed_s
    journal_sizes = {p.name: p.stat().st_size for p in gtm.journal_files(db)}
    dat = db.dat.stat()
    used_blocks = final["total_blocks"] - final["free_blocks"]
    metrics: dict[str, float | int] = {
        "elapsed_s": elapsed,
        "reads": result.reads,
        "updates": result.updates,
        "reads_per_s": round(result.reads / elapsed, 1) if elapsed > 0 else 0.0,
        "updates_per_s": round(result.updates / elapsed, 1) if elapsed > 0 else 0.0,
        "longest_sequence": result.longest,
        "largest_number": result.largest,
        "worker_cpu_s": round(sum(w.cpu_s for w in result.workers), 2),
        "workers": len(result.workers),
        "database_bytes": dat.st_size,
        "journal_bytes": sum(journal_sizes.values()),
    }
    details: dict[str, Any] = {
        "params": dataclasses.asdict(params),
        "zversion": zversion,
        "gtm": {
            "requested": dataclasses.asdict(settings),
            "readback": asked,
            "messages": messages,
            "database_file": str(db.dat),
            "journal_files": journal_sizes,
            "blocks_at_end": {"total": final["total_blocks"], "free": final["free_blocks"]},
        },
        "database_used_bytes": used_blocks * final["block_size"],
        "database_allocated_bytes": dat.st_blocks * 512,
        "workers": [dataclasses.asdict(w) for w in result.workers],
        "start_skew_s": result.start_skew_s,
        "parent_wall_s": round(parent_wall, 3),
        "cleanup": cleanup,
    }
    return Outcome(metrics=metrics, verification=verify(params, result), details=details, versions={"gtm": zversion})


def verify(params: Params, run: RunOutput) -> dict[str, Any]:
    """Compare with the reference; also check the counts' invariant and the worker count.

    Every starting number ends with exactly one read that finds a length, and every other read is
    followed by one update, so reads - updates == end - start + 1 whatever the number of workers.
    """
    longest, largest, source = threen1_reference.reference(params.start, params.end)
    pids = {w.pid for w in run.workers}
    got = {
        "longest_sequence": run.longest,
        "largest_number": run.largest,
        "reads_minus_updates": run.reads - run.updates,
        "workers": len(run.workers),
        "distinct_worker_pids": len(pids),
    }
    problems = []
    if run.longest != longest:
        problems.append(f"longest sequence {run.longest}, the {source} reference says {longest}")
    if run.largest != largest:
        problems.append(f"largest number {run.largest}, the {source} reference says {largest}")
    if run.reads - run.updates != params.count:
        problems.append(f"reads - updates = {run.reads - run.updates}, expected {params.count}")
    if len(run.workers) != params.workers or len(pids) != params.workers:
        problems.append(f"{len(run.workers)} workers reported ({len(pids)} distinct PIDs), asked {params.workers}")
    return {
        "status": "failed" if problems else "passed",
        "reference": {
            "longest_sequence": longest,
            "largest_number": largest,
            "numbers": params.count,
            "source": source,
        },
        "got": got,
        "message": "; ".join(problems)
        if problems
        else f"longest {longest} and largest {largest} match the {source} reference",
    }


WORKLOAD = Workload(
    name="threen1",
    help="the GT.M 3n+1 benchmark (seeds 000, 002): a fresh database, N workers, verified",
    params=Params,
    run_cell=run_cell,
    metrics=(
        Metric("elapsed_s", "Elapsed time (s)", "s", "lower"),
        Metric("reads_per_s", "Read rate (reads/s)", "reads/s", "higher"),
        Metric("updates_per_s", "Update rate (updates/s)", "updates/s", "higher"),
        Metric("worker_cpu_s", "Worker CPU time (s)", "s", "lower"),
    ),
    primary="elapsed_s",
    # Wall time is what a user waits for, but on a shared machine it drifts between batches by more
    # than a real regression (bench_gate: -35 %..+40 % between two batches of the same cell at load
    # 8); the CPU-seconds of the run's own processes (its cgroup) hold within a few per cent there.
    gated=("elapsed_s", "cpu_busy_s"),
    slug=lambda p: f"{p.start}-{p.end}-w{p.workers}",
    summary=lambda p: f"threen1 {p.start}..{p.end} w{p.workers} b{p.block} {p.keys}",
    row_keys=("start", "end"),
    row_label=lambda v: f"{v['start']:,}..{v['end']:,}",
    operation="database update",
    operations=lambda m: m.get("updates"),
    settings=(gtm.BLOCK,),
    journal="the GT.M journal",
    guest_packages=("fis-gtm",),
    host_packages=("fis-gtm",),
)
KEY_METRICS = {m.name: m.better for m in WORKLOAD.metrics}
DEFAULTS = declare.defaults(Params)
