"""fio, driven like the iozone runs of seed 001: write, rewrite, read, reread and random I/O.

Parameters (``cell["workload"]["fio"]``): the ``Params`` dataclass, declared once. Each of
``jobs`` jobs works on its own file of ``file_size`` (as iozone -t N does); the measured group
is reported aggregated. fio's JSON is parsed by ``parse_json`` only.

Phases (only the last one is measured):

- write: the files are removed first, so the write allocates, as iozone's "write" does;
- rewrite, read, randread, randwrite, randrw: an unmeasured write pass lays the files out first;
- reread: lay out, read once (unmeasured), then read again. With buffered I/O the second pass is
  meant to find the file in the page cache (that is what iozone's reread measures), so the caches
  are dropped before the first read pass and left alone before the second.

With ``direct`` false the page cache is dropped before the measured phase (before the first read
for reread) and fio invalidates the files' cached pages when a job starts.

Filesystem "raw" (``Workspace.device`` set): fio works on the block device itself
(``--filename=<device>``); each job gets its own region of min(file_size, device size / jobs)
bytes (``--offset_increment``), so jobs do not overlap, as they do not share files on a filesystem.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import declare, oscache, proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import FILE_IO_METRICS, Footprint, Metric, Outcome, Workload, Workspace
from fsmatrix.agent.declare import parse_size, setting
from fsmatrix.agent.standalone import run_in_directory

log = logging.getLogger("fsmatrix")

VALID_PATTERNS = ("write", "rewrite", "read", "reread", "randread", "randwrite", "randrw")
IO_ENGINES = ("psync", "sync", "libaio", "io_uring")


@dataclass(frozen=True)
class Params:
    """``cell["workload"]["fio"]``, declared once: defaults, bounds and help."""

    pattern: str = setting(choices=VALID_PATTERNS, cli=True, help="iozone-style test: write, reread, randrw, ...")
    record_size: str = setting("8K", size=True, help="--bs of the measured phase")
    file_size: str = setting("1G", size=True, help="--size per job (raw: at most device size / jobs)")
    jobs: int = setting(1, minimum=1, maximum=256, help="--numjobs, one file each")
    direct: bool = setting(True, help="--direct=1 (O_DIRECT); false drops the page cache first")
    rwmixread: int = setting(50, minimum=0, maximum=100, help="--rwmixread for randrw, percent")
    runtime: int = setting(0, minimum=0, help="--runtime in seconds (0: the whole file once)")
    ioengine: str = setting("psync", choices=IO_ENGINES, help="--ioengine")
    fsync_on_close: bool = setting(True, help="--fsync_on_close")


# Outcome.metrics; the other numbers parse_json returns (per-direction percentiles, byte counts
# per direction) stay in details.
METRICS = (
    "read_mib_s",
    "write_mib_s",
    "read_iops",
    "write_iops",
    "iops",
    "lat_mean_us",
    "read_lat_mean_us",
    "write_lat_mean_us",
    "lat_p95_us",
    "lat_p99_us",
    "runtime_s",
    "io_bytes",
)

# The job name fixes fio's file names, "<name>.<job number>.0", in ws.data.
JOB_NAME = "fsmatrix-fio"

_MEASURED_RW = {
    "write": "write",
    "rewrite": "write",
    "read": "read",
    "reread": "read",
    "randread": "randread",
    "randwrite": "randwrite",
    "randrw": "randrw",
}
_READ_PATTERNS = ("read", "reread", "randread")
_WRITE_PATTERNS = ("write", "rewrite", "randwrite")


def resolve_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the defaults filled in and every value checked; ValueError names the bad key."""
    return declare.to_dict(declare.parse(Params, params, "workload.fio"))


def _key_metrics(p: Params) -> tuple[str, ...]:
    """The key metrics for this pattern: a direction it never does (writes in randread) is left out."""
    reads = p.pattern in _READ_PATTERNS or (p.pattern == "randrw" and p.rwmixread > 0)
    writes = p.pattern in _WRITE_PATTERNS or (p.pattern == "randrw" and p.rwmixread < 100)
    return ("iops", *(("read_mib_s",) if reads else ()), *(("write_mib_s",) if writes else ()), "lat_p95_us")


def key_metrics(params: Mapping[str, Any]) -> dict[str, str]:
    return WORKLOAD.key_metrics(declare.parse(Params, params, "workload.fio"))


def _percentiles(stats: Mapping[str, Any]) -> Mapping[str, Any]:
    # With lat_percentiles=1 fio puts the percentiles on the total latency; older runs or
    # hand-made job files have them on the completion latency only.
    for key in ("lat_ns", "clat_ns"):
        found = stats.get(key, {}).get("percentile")
        if found:
            return found  # type: ignore[no-any-return]
    return {}


def _percentile_us(entries: Sequence[Mapping[str, Any]], point: str) -> float:
    # Percentiles of several reported groups cannot be merged; the worst one is a safe bound.
    # With group_reporting there is a single entry and this is exact.
    values = [float(_percentiles(stats).get(point, 0)) for stats in entries if stats.get("total_ios", 0) > 0]
    return max(values, default=0.0) / 1000.0


def _weighted_mean_us(entries: Sequence[Mapping[str, Any]]) -> float:
    count = sum(int(stats["lat_ns"]["N"]) for stats in entries)
    if count == 0:
        return 0.0
    return sum(float(stats["lat_ns"]["mean"]) * int(stats["lat_ns"]["N"]) for stats in entries) / count / 1000.0


def parse_json(doc: str | Mapping[str, Any]) -> dict[str, float | int]:
    """Aggregate numbers of a fio ``--output-format=json`` report (text or already decoded).

    Sums throughput, IOPS and bytes over all reported jobs (one entry with group_reporting), weights
    latency means by I/O count. Returns {read,write}_mib_s, {read,write}_iops, iops, lat_mean_us,
    {read,write}_lat_mean_us, lat_p95_us, lat_p99_us (of all I/O: fio's "mixed" section when present),
    {read,write}_lat_p{95,99}_us, runtime_s, io_bytes, {read,write}_io_bytes and ios (the I/O requests
    completed, fio's total_ios). ValueError when the
    document is not a fio report.
    """
    report: Mapping[str, Any]
    if isinstance(doc, str):
        # fio writes error lines ahead of the JSON document into the same output.
        start = re.search(r"^\{", doc, re.MULTILINE)
        if start is None:
            raise ValueError("fio output holds no JSON document")
        try:
            report, _ = json.JSONDecoder().raw_decode(doc, start.start())
        except json.JSONDecodeError as exc:
            raise ValueError(f"fio output: broken JSON: {exc}") from exc
    else:
        report = doc
    jobs = report.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ValueError("fio report has no jobs")
    numbers: dict[str, float | int] = {}
    try:
        every_direction: list[Mapping[str, Any]] = []
        runtimes_ms: list[float] = []
        for direction in ("read", "write"):
            entries = [job[direction] for job in jobs]
            every_direction += entries
            numbers[f"{direction}_io_bytes"] = sum(int(stats["io_bytes"]) for stats in entries)
            numbers[f"{direction}_mib_s"] = sum(float(stats["bw_bytes"]) for stats in entries) / 2**20
            numbers[f"{direction}_iops"] = sum(float(stats["iops"]) for stats in entries)
            numbers[f"{direction}_lat_mean_us"] = _weighted_mean_us(entries)
            numbers[f"{direction}_lat_p95_us"] = _percentile_us(entries, "95.000000")
            numbers[f"{direction}_lat_p99_us"] = _percentile_us(entries, "99.000000")
            runtimes_ms += [float(stats["runtime"]) for stats in entries if stats["total_ios"] > 0]
        mixed = [job["mixed"] for job in jobs if "mixed" in job]
        overall = mixed if len(mixed) == len(jobs) else every_direction
        numbers["lat_mean_us"] = _weighted_mean_us(every_direction)
        numbers["lat_p95_us"] = _percentile_us(overall, "95.000000")
        numbers["lat_p99_us"] = _percentile_us(overall, "99.000000")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"fio report lacks or mangles a field: {exc!r}") from exc
    numbers["iops"] = float(numbers["read_iops"]) + float(numbers["write_iops"])
    numbers["io_bytes"] = int(numbers["read_io_bytes"]) + int(numbers["write_io_bytes"])
    # The I/O requests fio completed, as it counts them (the work metrics' operations: never iops × runtime).
    numbers["ios"] = sum(int(stats["total_ios"]) for stats in every_direction)
    numbers["runtime_s"] = max(runtimes_ms, default=0.0) / 1000.0
    return numbers


def tool_version() -> str:
    """fio's version string, e.g. "fio-3.33"."""
    return proc.output(["fio", "--version"], timeout=30).strip()


@dataclass(frozen=True)
class _Phase:
    name: str
    rw: str
    measured: bool
    cold: bool  # start with an empty page cache (matters for buffered I/O only)


def _phases(params: Params) -> list[_Phase]:
    pattern = params.pattern
    phases = []
    if pattern != "write":
        phases.append(_Phase("layout", "write", measured=False, cold=False))
    if pattern == "reread":
        phases.append(_Phase("first-read", "read", measured=False, cold=True))
    phases.append(_Phase("measure", _MEASURED_RW[pattern], measured=True, cold=pattern != "reread"))
    return phases


def device_size(device: str) -> int:
    """Size in bytes of a block device (or file): where its end is."""
    fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def raw_region(params: Params, size_bytes: int) -> int:
    """Bytes each job works on when fio runs on a device of ``size_bytes``: file_size, or the
    device's share per job when that is smaller, in whole records. ValueError when not one record fits."""
    record = parse_size(params.record_size)
    region = min(parse_size(params.file_size), size_bytes // params.jobs)
    region -= region % record
    if region <= 0:
        raise ValueError(f"fio: the device ({size_bytes} bytes) is too small for {params.jobs} job(s) of one record")
    return region


@dataclass(frozen=True)
class RawTarget:
    """Filesystem raw: the block device fio works on, and each job's region of it."""

    device: str
    size_bytes: int
    region_bytes: int  # per job: raw_region()

    @classmethod
    def of(cls, params: Params, device: str) -> RawTarget:
        size = device_size(device)
        return cls(device, size, raw_region(params, size))


LAYOUT_BLOCK = 1 << 20


def _block_size(params: Params, phase: _Phase) -> str:
    """The record size, except for the layout pass, which only creates what the measured pass reads:
    1 MiB writes there keep a throttled disk (the hdd profile: 180 IOPS) from spending minutes on it."""
    record = params.record_size
    if phase.name == "layout" and parse_size(record) < LAYOUT_BLOCK:
        return str(LAYOUT_BLOCK)
    return record


def _command(params: Params, phase: _Phase, output: Path, raw: RawTarget | None = None) -> list[str]:
    target = [f"--size={params.file_size}"]
    if raw is not None:
        region = raw.region_bytes
        target = [f"--filename={raw.device}", f"--size={region}", f"--offset_increment={region}"]
    cmd = [
        "fio",
        f"--name={JOB_NAME}",
        # Jobs as threads of one process: when the timeout kills fio, every job dies with it
        # (forked fio jobs call setsid and would outlive a killed parent).
        "--thread",
        f"--rw={phase.rw}",
        f"--bs={_block_size(params, phase)}",
        *target,
        f"--numjobs={params.jobs}",
        f"--ioengine={params.ioengine}",
        f"--direct={int(params.direct)}",
        f"--fsync_on_close={int(params.fsync_on_close)}",
        # iozone writes into files it did not preallocate; fio would fallocate them first.
        "--fallocate=none",
        f"--invalidate={int(phase.cold)}",
        "--group_reporting",
        "--unified_rw_reporting=both",  # adds the "mixed" section: percentiles over all I/O
        "--lat_percentiles=1",
        "--output-format=json",
        f"--output={output}",
        "--eta=never",
    ]
    if phase.measured:
        if params.pattern == "randrw":
            cmd.append(f"--rwmixread={params.rwmixread}")
        if params.runtime > 0:
            cmd += [f"--runtime={params.runtime}", "--time_based"]
    return cmd


def _job_files(params: Params, ws: Workspace) -> list[Path]:
    return [ws.data / f"{JOB_NAME}.{job}.0" for job in range(params.jobs)]


def _remove_files(params: Params, ws: Workspace) -> None:
    if ws.device is not None:
        return  # raw: fio made no files
    for path in _job_files(params, ws):
        path.unlink(missing_ok=True)


def _failure_text(result_output: str, report: Path) -> str:
    """What fio said about a failure: the error lines it writes ahead of the JSON, and stderr."""
    text = report.read_text(errors="replace") if report.exists() else ""
    before_json = text.split("\n{", 1)[0] if not text.startswith("{") else ""
    return (before_json + "\n" + result_output).strip()


def run_cell(cell: Cell, ws: Workspace, timeout: float) -> Outcome:
    """Run the pattern's phases in ws.data, reports in ws.scratch; TimeoutError after ``timeout`` s."""
    params = cell.typed_params(Params)
    deadline = time.monotonic() + timeout
    ws.scratch.mkdir(parents=True, exist_ok=True)
    versions = {"fio": tool_version()}
    phase_details: list[dict[str, Any]] = []
    details: dict[str, Any] = {"params": declare.to_dict(params), "phases": phase_details}
    raw = RawTarget.of(params, ws.device) if ws.device is not None else None
    if raw is not None:
        details["raw"] = {
            "device": raw.device,
            "device_size_bytes": raw.size_bytes,
            "region_bytes_per_job": raw.region_bytes,
        }
    numbers: dict[str, float | int] = {}
    refused = oscache.direct_io_refused(ws.data) if params.direct and raw is None else None
    if refused is not None:
        return Outcome(
            {}, {"status": "failed", "message": f"fio: {refused} (workload.fio.direct: false)"}, details, versions
        )
    _remove_files(params, ws)
    try:
        for index, phase in enumerate(_phases(params)):
            if phase.cold and not params.direct:
                oscache.drop_caches()
            report = ws.scratch / f"fio-{index}-{phase.name}.json"
            cmd = _command(params, phase, report, raw)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"fio: no time left for the {phase.name} phase (timeout {timeout:g} s)")
            try:
                with ws.measure() if phase.measured else contextlib.nullcontext():
                    started = time.monotonic()  # inside: the window's syncs are no part of it
                    # raw: nothing to put in ws.data; fio's stray files (if any) go to scratch
                    cwd = ws.scratch if raw is not None else ws.data
                    result = proc.run(cmd, timeout=remaining, cwd=cwd, check=False)
                    seconds = round(time.monotonic() - started, 3)
            except proc.CommandError as exc:
                if exc.returncode is None:
                    raise TimeoutError(f"fio {phase.name} killed: exceeded the timeout of {timeout:g} s") from exc
                raise
            entry: dict[str, Any] = {
                "name": phase.name,
                "rw": phase.rw,
                "measured": phase.measured,
                "seconds": seconds,
                "command": cmd,
            }
            phase_details.append(entry)
            if result.returncode != 0:
                message = str(
                    proc.CommandError(cmd, result.returncode, _failure_text(result.stdout + result.stderr, report))
                )
                return Outcome({}, {"status": "failed", "message": message}, details, versions)
            try:
                entry["numbers"] = parse_json(report.read_text(errors="replace"))
            except (OSError, ValueError) as exc:
                return Outcome({}, {"status": "failed", "message": f"fio {phase.name}: {exc}"}, details, versions)
            if phase.measured:
                numbers = entry["numbers"]
    finally:
        _remove_files(params, ws)
    if numbers.get("io_bytes", 0) > 0:
        verification: dict[str, Any] = {"status": "passed"}
    else:
        verification = {"status": "failed", "message": "fio moved no data in the measured phase"}
    metrics = {name: numbers[name] for name in METRICS}
    return Outcome(metrics=metrics, verification=verification, details=details, versions=versions)


def run_standalone(cell: Cell, directory: Path, timeout: float) -> Outcome:
    """Run one fio cell (e.g. ``standalone_cell("fio", {...})``) in ``directory``, which must exist."""
    return run_in_directory(WORKLOAD, cell, directory, timeout)


WORKLOAD = Workload(
    name="fio",
    help="fio, driven like seed 001's iozone runs: write, rewrite, read, reread, random I/O",
    params=Params,
    run_cell=run_cell,
    metrics=(*FILE_IO_METRICS, Metric("lat_p95_us", "95th percentile latency (µs)", "µs", "lower")),
    primary="iops",
    slug=lambda p: f"{p.pattern}-j{p.jobs}",
    summary=lambda p: f"fio {p.pattern} rs{p.record_size} {p.file_size} j{p.jobs}",
    row_keys=("pattern",),
    operation="I/O request",
    operations=lambda m: m.get("ios"),
    needs_filesystem=False,  # filesystem raw: fio runs on the block device itself
    guest_packages=("fio",),
    host_packages=("fio",),
    key_metrics_for=_key_metrics,
    # One file of file_size per job (raw: fio works on at most the device's share per job instead).
    footprint=lambda cell: Footprint(
        parse_size(cell.typed_params(Params).file_size) * cell.typed_params(Params).jobs,
        setting="workload.fio.file_size",
    ),
)
KEY_METRICS = {m.name: m.better for m in WORKLOAD.metrics}
DEFAULTS = declare.defaults(Params)
