"""What the qemu backend costs and how faithful its disks are: ``python -m fsmatrix.bench.vm``.

Each repetition starts the guest twice through the qemu backend, on one raw data file attached as
the data disk (passthrough, cache none): a fio cell of 4k random reads (queue depth 1, psync) and
one of 1 MiB sequential reads. Right after each boot, fio on the host reads the SAME file with
the same parameters and direct=1. It reports, as median and range over the repetitions:

- boot-to-agent: from QEMU's start until the guest agent has read the run's job and found its
  disks (its console line says so);
- per-run overhead: the run's wall time on the host (overlay, job disk, boot or restore,
  power-off) minus the guest's own job time (storage preparation and workload);
- fidelity: guest IOPS / host IOPS and guest MiB/s / host MiB/s, paired within a repetition.

``--start boot|restore`` chooses how the guest starts (the backend's default: restore from a saved
booted guest; the one-off saving is not part of any run's figures).

The guest fio works on the disk itself (filesystem raw; ``--filesystem ext4`` puts files in ext4
instead), the host fio on the image file: the same bytes. Under TCG the guest's CPU, not the
disk, limits what the guest reaches.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fsmatrix import __version__
from fsmatrix.agent import proc, storage
from fsmatrix.agent.workloads import fio
from fsmatrix.backends.qemu import snapshot
from fsmatrix.backends.qemu.backend import DEFAULT_WORKDIR, QemuBackend
from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm
from fsmatrix.matrix import MatrixCell, expand_document

log = logging.getLogger("fsmatrix")


@dataclass(frozen=True)
class Probe:
    """One measured access pattern: a fio cell in the guest, the same fio on the host."""

    name: str
    pattern: str  # fio workload pattern (guest) / --rw (host)
    record_size: str
    file_size: str
    ioengine: str
    metric: str  # the fio.parse_json number compared


PROBES = (
    Probe("randread-4k-qd1", "randread", "4K", "128M", "psync", "iops"),
    Probe("seqread-1m", "read", "1M", "512M", "libaio", "read_mib_s"),
)


def _cell(probe: Probe, runtime: int, filesystem: str) -> MatrixCell:
    params = {
        "pattern": probe.pattern,
        "record_size": probe.record_size,
        "file_size": probe.file_size,
        "ioengine": probe.ioengine,
        "runtime": runtime,
    }
    doc = {"include": [{"filesystem": filesystem, "workload": {"fio": params}}], "defaults": {"timeout": 1200}}
    return expand_document(doc, "vmbench").cells[0]


def host_fio(probe: Probe, target: Path, runtime: int, scratch: Path) -> dict[str, float | int]:
    """fio on the host against ``target`` (read only, direct=1), as the guest cell runs it."""
    report = scratch / f"host-{probe.name}.json"
    cmd = [
        "fio", f"--name=vmbench-{probe.name}", f"--filename={target}", "--readonly", "--direct=1",
        f"--rw={probe.pattern}", f"--bs={probe.record_size}", f"--size={probe.file_size}",
        f"--ioengine={probe.ioengine}", f"--runtime={runtime}", "--time_based", "--lat_percentiles=1",
        "--output-format=json", f"--output={report}", "--eta=never",
    ]  # fmt: skip
    proc.run(cmd, timeout=runtime + 120)
    return fio.parse_json(report.read_text(errors="replace"))


def fill(path: Path, size: int) -> None:
    """Write ``size`` bytes of random data (one random MiB, repeated): holes or unwritten extents
    would make the host's reads free, and the guest's reads through QEMU too."""
    chunk = os.urandom(1 << 20)
    with path.open("wb") as fh:
        for _ in range(size >> 20):
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, minimum and maximum (all 0.0 for no values)."""
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(repeats: int, runtime: int, size: int, workdir: Path, filesystem: str, echo: Console) -> dict[str, Any]:
    """Run the benchmark; returns the JSON document (every run's numbers and the summary)."""
    bench_dir = workdir / f"vmbench-{os.getpid()}"
    bench_dir.mkdir(parents=True, exist_ok=True)
    data = bench_dir / "data0.img"
    runs: list[dict[str, Any]] = []
    try:
        echo.print(f"writing {size >> 20} MiB of data to {data}")
        fill(data, size)
        backend = QemuBackend(workdir=bench_dir / "vm", devices=[str(data)], echo=lambda m: echo.print(m))
        cells = {probe.name: _cell(probe, runtime, filesystem) for probe in PROBES}
        backend.preflight(list(cells.values()))
        for repeat in range(1, repeats + 1):
            for probe in PROBES:
                started = time.monotonic()
                doc = backend.run(cells[probe.name], repeat)
                if doc["status"] != "passed":
                    raise UserError(f"guest run {probe.name} #{repeat} {doc['status']}: {doc.get('reason')}")
                host = host_fio(probe, data, runtime, bench_dir)
                guest_value = float(doc["metrics"][probe.metric])
                host_value = float(host[probe.metric])
                details = doc["details"]
                run = {
                    "probe": probe.name,
                    "repeat": repeat,
                    "metric": probe.metric,
                    "guest": guest_value,
                    "host": host_value,
                    "fidelity": guest_value / host_value if host_value else 0.0,
                    "guest_lat_p99_us": doc["metrics"].get("lat_p99_us"),
                    "host_lat_p99_us": host.get("lat_p99_us"),
                    "vm_wall_s": details["vm_wall_s"],
                    "guest_job_s": doc["duration_s"],
                    "overhead_s": round(details["vm_wall_s"] - doc["duration_s"], 1),
                    "boot_to_agent_s": details.get("boot_to_agent_s"),
                    "host_wall_s": round(time.monotonic() - started, 1),
                }
                runs.append(run)
                echo.print(
                    f"{probe.name} #{repeat}: guest {guest_value:.1f} host {host_value:.1f} {probe.metric} "
                    f"(fidelity {run['fidelity']:.3f}); boot-to-agent {run['boot_to_agent_s']} s, "
                    f"overhead {run['overhead_s']} s"
                )
        environment = backend.environment()
    finally:
        shutil.rmtree(bench_dir, ignore_errors=True)
    summary: dict[str, Any] = {
        "boot_to_agent_s": spread([r["boot_to_agent_s"] for r in runs if r["boot_to_agent_s"] is not None]),
        "overhead_s": spread([r["overhead_s"] for r in runs]),
    }
    for probe in PROBES:
        mine = [r for r in runs if r["probe"] == probe.name]
        summary[probe.name] = {
            "metric": probe.metric,
            "guest": spread([r["guest"] for r in mine]),
            "host": spread([r["host"] for r in mine]),
            "fidelity": spread([r["fidelity"] for r in mine]),
        }
    return {
        "fsmatrix_version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m fsmatrix.bench.vm", *sys.argv[1:]]),
        "machine": {
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "qemu": proc.output(["qemu-system-x86_64", "--version"], timeout=30).splitlines()[0],
        },
        "accel": environment["accel"],
        "start": backend.start,
        "image": environment["image_name"],
        "settings": {"repeats": repeats, "runtime_s": runtime, "data_file_bytes": size, "filesystem": filesystem},
        "summary": summary,
        "runs": runs,
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def table(measured: dict[str, Any]) -> Table:
    """The summary as a table: median and [min, max] per figure."""

    def cell(stats: dict[str, float], digits: int) -> str:
        return f"{stats['median']:.{digits}f} [{stats['min']:.{digits}f}, {stats['max']:.{digits}f}]"

    summary = measured["summary"]
    title = (
        f"vmbench: accel {measured['accel']}, guest start {measured.get('start', 'boot')}, "
        f"{measured['settings']['repeats']} repeats, median [min, max]"
    )
    out = Table(title=escape(title))
    for header in ("figure", "guest", "host", "guest / host"):
        out.add_column(header)
    out.add_row("boot to agent (s)", cell(summary["boot_to_agent_s"], 1), "", "")
    out.add_row("per-run overhead (s)", cell(summary["overhead_s"], 1), "", "")
    for probe in PROBES:
        stats = summary[probe.name]
        out.add_row(
            f"{probe.name} ({probe.metric})",
            cell(stats["guest"], 1),
            cell(stats["host"], 1),
            cell(stats["fidelity"], 3),
        )
    return out


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()  # a timeout's SIGTERM unmounts and detaches as Ctrl-C does
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.vm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (each starts a guest twice) (%(default)s)")
    parser.add_argument("--start", choices=snapshot.STARTS, default=None, help="boot or restore (default: restore)")
    parser.add_argument("--runtime", type=int, default=10, help="seconds of each fio measurement (%(default)s)")
    parser.add_argument("--size", default="1G", help="the data file, also the guest's data disk (%(default)s)")
    parser.add_argument("--filesystem", default="raw", help="the guest's filesystem for fio (%(default)s)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="not tmpfs: O_DIRECT (%(default)s)")
    parser.add_argument("--json", type=Path, default=Path("results/vmbench.json"), help="write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    console = Console(stderr=True)
    if args.repeats < 1 or args.runtime < 1:
        parser.error("--repeats and --runtime must be at least 1")
    if args.start:
        os.environ[snapshot.START_ENV] = args.start
    try:
        doc = measure(args.repeats, args.runtime, storage.parse_size(args.size), args.workdir, args.filesystem, console)
    except UserError as exc:
        print(f"vmbench: error: {exc}", file=sys.stderr)
        return 2
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    Console(width=120).print(table(doc))
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.vm")
