"""sysbench fileio (seed 003): prepare the test files, drop the caches, run one mode, clean up.

Parameters (``cell["workload"]["sysbench"]``): ``mode`` (one of VALID_MODES, required) and the
optional keys of DEFAULTS. sysbench 1.0's text output is parsed by ``parse_run_output`` only.

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
from pathlib import Path
from typing import Any

from fsmatrix.agent import oscache, proc
from fsmatrix.agent.storage.prepare import Skipped
from fsmatrix.agent.workloads import Outcome, Workspace, run_in_directory

log = logging.getLogger("fsmatrix")

VALID_MODES = ("seqwr", "seqrewr", "seqrd", "rndrd", "rndwr", "rndrw")
VALID_IO = ("buffered", "direct")

DEFAULTS: dict[str, Any] = {
    "total_size": "1G",
    "block_size": 16384,
    "threads": 1,
    "duration": 30,
    "io": "direct",
    "num_files": 128,
    "fsync_freq": 100,
    "rw_ratio": 1.5,
}

KEY_METRICS: dict[str, str] = {
    "iops": "higher",
    "read_mib_s": "higher",
    "write_mib_s": "higher",
    "latency_p95_ms": "lower",
}

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
_SIZE = re.compile(r"^\d+[bkmgt]?$", re.IGNORECASE)
# How long `sysbench cleanup` may take: it only unlinks files, but on a slow device that can
# mean freeing gigabytes of extents.
_CLEANUP_TIMEOUT = 300.0
RAW_UNSUPPORTED = (
    "sysbench fileio cannot run on a raw block device: it checks the test file's size with fstat() "
    "(0 for a block device) and re-creates the test files as regular files for seqwr; use fio for raw"
)


def resolve_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with DEFAULTS filled in and every value checked; ValueError names the bad key."""
    unknown = sorted(set(params) - set(DEFAULTS) - {"mode"})
    if unknown:
        raise ValueError(f"sysbench: unknown parameter(s) {', '.join(unknown)}")
    merged = {**DEFAULTS, **params}
    if merged.get("mode") not in VALID_MODES:
        raise ValueError(f"sysbench: mode must be one of {', '.join(VALID_MODES)}, not {merged.get('mode')!r}")
    if merged["io"] not in VALID_IO:
        raise ValueError(f"sysbench: io must be one of {', '.join(VALID_IO)}, not {merged['io']!r}")
    size = str(merged["total_size"]).strip()
    if isinstance(merged["total_size"], bool) or not _SIZE.match(size):
        raise ValueError(f"sysbench: total_size must look like 1G, 512M or a byte count, not {size!r}")
    merged["total_size"] = size
    for key, minimum in (
        ("block_size", 1),
        ("threads", 1),
        ("duration", 1),
        ("num_files", 1),
        ("fsync_freq", 0),
    ):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"sysbench: {key} must be an integer >= {minimum}, not {value!r}")
    ratio = merged["rw_ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or ratio < 0:
        raise ValueError(f"sysbench: rw_ratio must be a number >= 0, not {ratio!r}")
    return merged


def key_metrics(params: Mapping[str, Any]) -> dict[str, str]:
    """The key metrics for this mode: a direction the mode never does (reads in seqwr) is left out."""
    resolved = resolve_params(params)
    mode = resolved["mode"]
    # rndrw reads only when the read/write ratio is positive; it always writes.
    reads = mode in _READ_MODES or (mode == "rndrw" and resolved["rw_ratio"] > 0)
    writes = mode in _WRITE_MODES or mode == "rndrw"
    keys = {"iops": "higher"}
    if reads:
        keys["read_mib_s"] = "higher"
    if writes:
        keys["write_mib_s"] = "higher"
    keys["latency_p95_ms"] = "lower"
    return keys


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


def _command(params: Mapping[str, Any], phase: str) -> list[str]:
    # prepare and cleanup only need to know the files; they stay buffered so that preparing
    # a large file set is not slowed down by O_DIRECT (caches are dropped before the run anyway).
    cmd = [
        "sysbench",
        "fileio",
        f"--file-total-size={params['total_size']}",
        f"--file-num={params['num_files']}",
    ]
    if phase == "run":
        cmd += [
            f"--file-test-mode={params['mode']}",
            f"--file-block-size={params['block_size']}",
            f"--threads={params['threads']}",
            f"--time={params['duration']}",
            "--events=0",
            f"--file-fsync-freq={params['fsync_freq']}",
            f"--file-rw-ratio={params['rw_ratio']}",
            "--percentile=95",  # parse_run_output reads the "95th percentile" line
        ]
        if params["io"] == "direct":
            cmd.append("--file-extra-flags=direct")
    cmd.append(phase)
    return cmd


def _run_phase(
    params: Mapping[str, Any], phase: str, ws: Workspace, deadline: float, timeout: float
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


def _cleanup(params: Mapping[str, Any], ws: Workspace) -> None:
    """Remove the test files: `sysbench cleanup`, then whatever it left (it may have failed)."""
    try:
        result = proc.run(_command(params, "cleanup"), timeout=_CLEANUP_TIMEOUT, cwd=ws.data, check=False)
        if result.returncode != 0:
            log.warning("sysbench cleanup exited with status %d", result.returncode)
    except proc.CommandError as exc:
        log.warning("%s", exc)
    for index in range(params["num_files"]):
        (ws.data / f"test_file.{index}").unlink(missing_ok=True)


def _failed(message: str, details: dict[str, Any], versions: dict[str, str]) -> Outcome:
    return Outcome(
        metrics={}, verification={"status": "failed", "message": message}, details=details, versions=versions
    )


def run_cell(cell: Mapping[str, Any], ws: Workspace, timeout: float) -> Outcome:
    """prepare -> drop caches -> run -> cleanup (always) in ws.data; TimeoutError after ``timeout`` s."""
    params = resolve_params(cell["workload"]["sysbench"])
    if ws.device is not None:
        raise Skipped(RAW_UNSUPPORTED)
    deadline = time.monotonic() + timeout
    ws.scratch.mkdir(parents=True, exist_ok=True)
    versions = {"sysbench": tool_version()}
    details: dict[str, Any] = {"params": params}
    try:
        started = time.monotonic()
        cmd, status, text = _run_phase(params, "prepare", ws, deadline, timeout)
        details["prepare_seconds"] = round(time.monotonic() - started, 3)
        if status != 0:
            return _failed(str(proc.CommandError(cmd, status, text)), details, versions)
        oscache.drop_caches()
        started = time.monotonic()
        with ws.measure():
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


def run_standalone(params: Mapping[str, Any], directory: Path, timeout: float) -> Outcome:
    """Run sysbench fileio in ``directory`` (which must exist), DEFAULTS filling missing parameters."""
    return run_in_directory(run_cell, "sysbench", resolve_params(params), directory, timeout)
