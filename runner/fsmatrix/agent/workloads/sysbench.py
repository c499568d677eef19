"""sysbench fileio (seed 003): prepare the test files, drop the caches, run one mode, clean up.

Parameters (``cell["workload"]["sysbench"]``): the ``Params`` dataclass, declared once.
sysbench 1.0's text output is parsed by ``parse_run_output`` only.

Filesystem "raw" is skipped: sysbench 1.0 fileio cannot use a block device as its test file. In
``run`` it checks each file's size with fstat(), which is 0 for a block device ("Size of file
'test_file.0' is 0B, but at least ... is expected"), and for seqwr it unlinks test_file.N and
creates a regular file in its place, so a link to the device would silently measure the
filesystem holding the link instead.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import declare, oscache, proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import FILE_IO_METRICS, Footprint, Metric, Outcome, Workload, Workspace
from fsmatrix.agent.declare import parse_size, setting
from fsmatrix.agent.standalone import run_in_directory
from fsmatrix.agent.storage.prepare import Skipped

log = logging.getLogger("fsmatrix")

VALID_MODES = ("seqwr", "seqrewr", "seqrd", "rndrd", "rndwr", "rndrw")
VALID_IO = ("direct", "buffered")


@dataclass(frozen=True)
class Params:
    """``cell["workload"]["sysbench"]``, declared once: defaults, bounds and help."""

    mode: str = setting(choices=VALID_MODES, cli=True, help="sysbench fileio --file-test-mode")
    total_size: str = setting("1G", size=True, help="--file-total-size, over all files")
    block_size: int = setting(16384, minimum=512, help="--file-block-size, bytes")
    threads: int = setting(1, minimum=1, maximum=1024, help="--threads")
    duration: int = setting(30, minimum=1, help="--time, seconds")
    io: str = setting("direct", choices=VALID_IO, help="--file-extra-flags=direct or buffered I/O")
    num_files: int = setting(128, minimum=1, help="--file-num")
    fsync_freq: int = setting(100, minimum=0, help="--file-fsync-freq (0: never)")
    rw_ratio: float = setting(1.5, minimum=0, help="--file-rw-ratio for rndrw (0: writes only)")


# Outcome.metrics; the other parsed numbers (latency min and sum) stay in details["raw"].
METRICS = (
    "read_mib_s",
    "write_mib_s",
    "reads_per_s",
    "writes_per_s",
    "fsyncs_per_s",
    "iops",
    "latency_avg_ms",
    "latency_p95_ms",
    "latency_max_ms",
    "events",
    "total_time_s",
)

_READ_MODES = ("seqrd", "rndrd")
_WRITE_MODES = ("seqwr", "seqrewr", "rndwr")
# How long `sysbench cleanup` may take: it only unlinks files, but on a slow device that can
# mean freeing gigabytes of extents.
_CLEANUP_TIMEOUT = 300.0
RAW_UNSUPPORTED = (
    "sysbench fileio cannot run on a raw block device: it checks the test file's size with fstat() "
    "(0 for a block device) and re-creates the test files as regular files for seqwr; use fio for raw"
)


def resolve_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the defaults filled in and every value checked; ValueError names the bad key."""
    return declare.to_dict(declare.parse(Params, params, "workload.sysbench"))


def _key_metrics(p: Params) -> tuple[str, ...]:
    """The key metrics for this mode: a direction the mode never does (reads in seqwr) is left out."""
    # rndrw reads only when the read/write ratio is positive; it always writes.
    reads = p.mode in _READ_MODES or (p.mode == "rndrw" and p.rw_ratio > 0)
    writes = p.mode in _WRITE_MODES or p.mode == "rndrw"
    return ("iops", *(("read_mib_s",) if reads else ()), *(("write_mib_s",) if writes else ()), "latency_p95_ms")


def key_metrics(params: Mapping[str, Any]) -> dict[str, str]:
    return WORKLOAD.key_metrics(declare.parse(Params, params, "workload.sysbench"))


# (section, label) in sysbench's report -> metric name
_REPORT_FIELDS: dict[tuple[str, str], str] = {
    ("File operations", "reads/s"): "reads_per_s",
    ("File operations", "writes/s"): "writes_per_s",
    ("File operations", "fsyncs/s"): "fsyncs_per_s",
    ("Throughput", "read, MiB/s"): "read_mib_s",
    ("Throughput", "written, MiB/s"): "write_mib_s",
    ("General statistics", "total time"): "total_time_s",
    ("General statistics", "total number of events"): "events",
    ("Latency (ms)", "min"): "latency_min_ms",
    ("Latency (ms)", "avg"): "latency_avg_ms",
    ("Latency (ms)", "max"): "latency_max_ms",
    ("Latency (ms)", "95th percentile"): "latency_p95_ms",
    ("Latency (ms)", "sum"): "latency_sum_ms",
}
_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def parse_run_output(text: str) -> dict[str, float | int]:
    """Numbers of a ``sysbench fileio ... run`` report (sysbench 1.0).

    Returns reads_per_s, writes_per_s, fsyncs_per_s, read_mib_s, write_mib_s, iops (reads + writes
    per second), events (requests including fsyncs), total_time_s and latency_{min,avg,max,p95,sum}_ms.
    Raises ValueError when a field is missing (sysbench stopped early: its FATAL line is quoted).
    """
    found: dict[str, float | int] = {}
    section = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            # Section headers start in column 0 and end with a colon: "Latency (ms):".
            section = line.strip().rstrip(":")
            continue
        label, sep, value = line.strip().partition(":")
        metric = _REPORT_FIELDS.get((section, label.strip()))
        if not sep or metric is None:
            continue
        number = _NUMBER.match(value.strip())
        if number is None:
            raise ValueError(f"sysbench: {section} / {label.strip()}: not a number: {value.strip()!r}")
        found[metric] = int(float(number.group())) if metric == "events" else float(number.group())
    missing = [name for name in _REPORT_FIELDS.values() if name not in found]
    if missing:
        fatal = [line.strip() for line in text.splitlines() if line.startswith(("FATAL", "ERROR"))]
        why = f" ({fatal[0]})" if fatal else ""
        raise ValueError(f"sysbench output lacks {', '.join(missing)}{why}")
    found["iops"] = float(found["reads_per_s"]) + float(found["writes_per_s"])
    return found


def tool_version() -> str:
    """sysbench's version number, e.g. "1.0.20"."""
    text = proc.output(["sysbench", "--version"], timeout=30)
    match = re.search(r"sysbench\s+(\S+)", text)
    return match.group(1) if match else text.strip()


def _command(params: Params, phase: str) -> list[str]:
    # prepare and cleanup only need to know the files; they stay buffered so that preparing
    # a large file set is not slowed down by O_DIRECT (caches are dropped before the run anyway).
    cmd = [
        "sysbench",
        "fileio",
        f"--file-total-size={params.total_size}",
        f"--file-num={params.num_files}",
    ]
    if phase == "run":
        cmd += [
            f"--file-test-mode={params.mode}",
            f"--file-block-size={params.block_size}",
            f"--threads={params.threads}",
            f"--time={params.duration}",
            "--events=0",
            f"--file-fsync-freq={params.fsync_freq}",
            f"--file-rw-ratio={params.rw_ratio}",
            "--percentile=95",  # parse_run_output reads the "95th percentile" line
        ]
        if params.io == "direct":
            cmd.append("--file-extra-flags=direct")
    cmd.append(phase)
    return cmd


def _run_phase(
    params: Params, phase: str, ws: Workspace, deadline: float, timeout: float
) -> tuple[list[str], int, str]:
    """Run one sysbench phase in ws.data; (command, exit status, output). TimeoutError past deadline."""
    cmd = _command(params, phase)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError(f"sysbench: no time left for {phase} (timeout {timeout:g} s)")
    try:
        # subprocess.run kills sysbench (one process, its workers are threads) when the time is up.
        result = proc.run(cmd, timeout=remaining, cwd=ws.data, check=False)
    except proc.CommandError as exc:
        if exc.returncode is None:
            raise TimeoutError(f"sysbench {phase} killed: exceeded the timeout of {timeout:g} s") from exc
        raise
    text = result.stdout + result.stderr
    (ws.scratch / f"sysbench-{phase}.txt").write_text(text)
    return cmd, result.returncode, text


def _cleanup(params: Params, ws: Workspace) -> None:
    """Remove the test files: `sysbench cleanup`, then whatever it left (it may have failed)."""
    try:
        result = proc.run(_command(params, "cleanup"), timeout=_CLEANUP_TIMEOUT, cwd=ws.data, check=False)
        if result.returncode != 0:
            log.warning("sysbench cleanup exited with status %d", result.returncode)
    except proc.CommandError as exc:
        log.warning("%s", exc)
    for index in range(params.num_files):
        (ws.data / f"test_file.{index}").unlink(missing_ok=True)


def _failed(message: str, details: dict[str, Any], versions: dict[str, str]) -> Outcome:
    return Outcome(
        metrics={}, verification={"status": "failed", "message": message}, details=details, versions=versions
    )


def run_cell(cell: Cell, ws: Workspace, timeout: float) -> Outcome:
    """prepare -> drop caches -> run -> cleanup (always) in ws.data; TimeoutError after ``timeout`` s."""
    params = cell.typed_params(Params)
    if ws.device is not None:
        raise Skipped(RAW_UNSUPPORTED)
    deadline = time.monotonic() + timeout
    ws.scratch.mkdir(parents=True, exist_ok=True)
    versions = {"sysbench": tool_version()}
    details: dict[str, Any] = {"params": declare.to_dict(params)}
    refused = oscache.direct_io_refused(ws.data) if params.io == "direct" else None
    if refused is not None:
        return _failed(f"sysbench: {refused} (workload.sysbench.io: buffered)", details, versions)
    try:
        started = time.monotonic()
        cmd, status, text = _run_phase(params, "prepare", ws, deadline, timeout)
        details["prepare_seconds"] = round(time.monotonic() - started, 3)
        if status != 0:
            return _failed(str(proc.CommandError(cmd, status, text)), details, versions)
        oscache.drop_caches()
        with ws.measure():
            started = time.monotonic()  # inside: the window's syncs are no part of it
            cmd, status, text = _run_phase(params, "run", ws, deadline, timeout)
            details["run_seconds"] = round(time.monotonic() - started, 3)
        details["command"] = cmd
        if status != 0:
            return _failed(str(proc.CommandError(cmd, status, text)), details, versions)
    finally:
        _cleanup(params, ws)
    try:
        numbers = parse_run_output(text)
    except ValueError as exc:
        return _failed(str(exc), details, versions)
    details["raw"] = dict(numbers)
    if numbers["events"] > 0:
        verification: dict[str, Any] = {"status": "passed"}
    else:
        verification = {"status": "failed", "message": "sysbench completed no I/O request (0 events)"}
    metrics = {name: numbers[name] for name in METRICS}
    return Outcome(metrics=metrics, verification=verification, details=details, versions=versions)


def run_standalone(cell: Cell, directory: Path, timeout: float) -> Outcome:
    """Run one sysbench fileio cell (e.g. ``standalone_cell("sysbench", {...})``) in ``directory``, which must exist."""
    return run_in_directory(WORKLOAD, cell, directory, timeout)


WORKLOAD = Workload(
    name="sysbench",
    help="sysbench fileio (seed 003): prepare the files, drop the caches, run one mode",
    params=Params,
    run_cell=run_cell,
    metrics=(*FILE_IO_METRICS, Metric("latency_p95_ms", "95th percentile latency (ms)", "ms", "lower")),
    primary="iops",
    slug=lambda p: f"{p.mode}-t{p.threads}",
    summary=lambda p: f"sysbench {p.mode} {p.total_size} bs{p.block_size} t{p.threads} {p.io}",
    row_keys=("mode",),
    # sysbench counts its events (reads, writes and fsyncs: "total number of events"), never the reads
    # and writes apart (those only as rates): the count it reports, never a rate × time.
    operation="sysbench event (a read, write or fsync request)",
    operations=lambda m: m.get("events"),
    guest_packages=("sysbench",),
    host_packages=("sysbench",),
    key_metrics_for=_key_metrics,
    # Its files: total_size over num_files, written whole by prepare (rndrw and the rest never grow them).
    footprint=lambda cell: Footprint(
        parse_size(cell.typed_params(Params).total_size), setting="workload.sysbench.total_size"
    ),
)
KEY_METRICS = {m.name: m.better for m in WORKLOAD.metrics}
DEFAULTS = declare.defaults(Params)
