"""Once-a-second samples of CPU time and device IO while a workload runs.

/proc/stat and /proc/diskstats are parsed here and nowhere else. A sample is classified as
CPU-bound when the CPUs were at least 85 % busy, as IO-bound when they were not but the device was
busy at least half the second or the CPUs spent at least 20 % of it waiting for IO; the run gets the
class most of its classified samples have ("mixed" when neither reaches half).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
CPU_BOUND_BUSY = 0.85
IO_BOUND_DEVICE_BUSY = 0.5
IO_BOUND_IOWAIT = 0.2


@dataclass(frozen=True)
class DiskCounters:
    reads: int
    read_bytes: int
    writes: int
    write_bytes: int
    busy_ms: int
    # Flush requests completed (/proc/diskstats field 16, Linux 5.5+); None where the kernel does not
    # report them, and then None in every sum and difference: not measured, never 0.
    flushes: int | None = 0

    def __sub__(self, other: DiskCounters) -> DiskCounters:
        return self._combine(other, -1)

    def __add__(self, other: DiskCounters) -> DiskCounters:
        return self._combine(other, 1)

    def _combine(self, other: DiskCounters, sign: int) -> DiskCounters:
        flushes = None if self.flushes is None or other.flushes is None else self.flushes + sign * other.flushes
        return DiskCounters(
            self.reads + sign * other.reads,
            self.read_bytes + sign * other.read_bytes,
            self.writes + sign * other.writes,
            self.write_bytes + sign * other.write_bytes,
            self.busy_ms + sign * other.busy_ms,
            flushes,
        )


ZERO = DiskCounters(0, 0, 0, 0, 0, 0)


def parse_proc_stat(text: str) -> dict[str, float]:
    """The aggregate ``cpu`` line of /proc/stat, in seconds per field."""
    ticks = os.sysconf("SC_CLK_TCK")
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1 : 1 + len(CPU_FIELDS)]]
            return {name: v / ticks for name, v in zip(CPU_FIELDS, values, strict=False)}
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    """Per kernel device name: completed reads/writes, bytes, milliseconds spent doing IO and, where
    the kernel reports them (Linux 5.5+: 17 fields after the name), completed flush requests.

    The fields after major, minor and name (Documentation/admin-guide/iostats.rst): 1 reads, 3
    sectors read, 5 writes, 7 sectors written, 10 ms doing IO; 12-15 discards (4.18+); 16 flush
    requests, 17 ms flushing (5.5+)."""
    result = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 14:
            continue
        result[f[2]] = DiskCounters(
            reads=int(f[3]),
            read_bytes=int(f[5]) * SECTOR,
            writes=int(f[7]),
            write_bytes=int(f[9]) * SECTOR,
            busy_ms=int(f[12]),
            flushes=int(f[18]) if len(f) >= 20 else None,
        )
    return result


def _read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read()


def classify(cpu_busy: float, iowait: float, device_busy: float) -> str:
    if cpu_busy >= CPU_BOUND_BUSY:
        return "cpu"
    if device_busy >= IO_BOUND_DEVICE_BUSY or iowait >= IO_BOUND_IOWAIT:
        return "io"
    return "idle"


class Sampler:
    """Samples in a background thread; use as a context manager around the workload."""

    def __init__(self, devices: list[str], interval: float = 1.0) -> None:
        self.devices = devices
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.missing: set[str] = set()  # devices /proc/diskstats did not list at some snapshot
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fsmatrix-sampler", daemon=True)
        self._start_cpu: dict[str, float] = {}
        self._start_io = ZERO
        self._end_cpu: dict[str, float] = {}
        self._end_io = ZERO
        self._t0 = 0.0
        self._t1 = 0.0
        self._window: list[tuple[float, dict[str, float], DiskCounters]] = []
        # Per device, at the start and the end of the totals' window: with a journal or a WAL on a
        # second device, what landed on each one.
        self._by_device: list[dict[str, DiskCounters]] = []

    def _snapshot(self) -> tuple[float, dict[str, float], DiskCounters]:
        io = ZERO
        for counters in self._devices().values():
            io = io + counters
        return time.monotonic(), parse_proc_stat(_read("/proc/stat")), io

    def _devices(self) -> dict[str, DiskCounters]:
        """Each device's counters now; one missing from /proc/diskstats is noted in ``missing`` (its
        totals are then not measured, never 0) and counts as ZERO in the per-second series."""
        stats = parse_diskstats(_read("/proc/diskstats"))
        self.missing.update(name for name in self.devices if name not in stats)
        return {name: stats.get(name, ZERO) for name in self.devices}

    def __enter__(self) -> Sampler:
        self._t0, self._start_cpu, self._start_io = self._snapshot()
        self._by_device = [self._devices()]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._t1, self._end_cpu, self._end_io = self._snapshot()
        if len(self._by_device) == 1:
            self._by_device.append(self._devices())

    @contextlib.contextmanager
    def measured(self) -> Iterator[None]:
        """Mark the measured part of the run: totals then cover only this window."""
        self._window = [self._snapshot()]
        self._by_device = [self._devices()]
        try:
            yield
        finally:
            self._window.append(self._snapshot())
            self._by_device.append(self._devices())

    def _loop(self) -> None:
        prev = (self._t0, self._start_cpu, self._start_io)
        while not self._stop.wait(self.interval):
            now = self._snapshot()
            self.samples.append(_sample(prev, now, self._t0))
            prev = now

    def summary(self) -> dict[str, Any]:
        """Totals over the whole run, the per-second series and the run's classification."""
        (t0, cpu0, io0), (t1, cpu1, io1) = (
            self._window
            if len(self._window) == 2
            else [(self._t0, self._start_cpu, self._start_io), (self._t1, self._end_cpu, self._end_io)]
        )
        wall = max(t1 - t0, 1e-9)
        cpu = {k: round(cpu1[k] - cpu0[k], 3) for k in CPU_FIELDS}
        io = io1 - io0
        window = (t0 - self._t0, t1 - self._t0)
        for sample in self.samples:
            sample["measured"] = window[0] < sample["t"] <= window[1] + self.interval
        classes = [s["class"] for s in self.samples if s["class"] != "idle" and s["measured"]]
        bound = "mixed"
        for kind in ("cpu", "io"):
            if classes and classes.count(kind) * 2 > len(classes):
                bound = kind
        return {
            "interval_s": self.interval,
            "devices": self.devices,
            "wall_s": round(wall, 3),
            "window_s": [round(window[0], 3), round(window[1], 3)],
            "cpu_s": cpu,
            "io": self._io(io, wall),
            # Devices /proc/diskstats did not list (the io totals are then None: not measured, never 0).
            "io_missing": sorted(self.missing),
            "io_by_device": self._io_by_device(),
            "bound": bound,
            "io_bound_fraction": round(classes.count("io") / len(classes), 3) if classes else 0.0,
            "series": self.samples,
        }

    def _io(self, io: DiskCounters, wall: float) -> dict[str, int | float | None]:
        if self.missing:
            return dict.fromkeys(("reads", "read_bytes", "writes", "write_bytes", "flushes", "busy_pct"))
        return {
            "reads": io.reads,
            "read_bytes": io.read_bytes,
            "writes": io.writes,
            "write_bytes": io.write_bytes,
            "flushes": io.flushes,
            "busy_pct": round(100 * io.busy_ms / 1000 / wall, 1),
        }

    def _io_by_device(self) -> dict[str, dict[str, int | None]]:
        """Totals of the window per device (empty before the sampler has ended)."""
        if len(self._by_device) != 2:
            return {}
        start, end = self._by_device
        out = {}
        for name in self.devices:
            d = end[name] - start[name]
            out[name] = {
                "reads": d.reads,
                "read_bytes": d.read_bytes,
                "writes": d.writes,
                "write_bytes": d.write_bytes,
                "flushes": d.flushes,
            }
        return out


def _sample(
    prev: tuple[float, dict[str, float], DiskCounters],
    now: tuple[float, dict[str, float], DiskCounters],
    t0: float,
) -> dict[str, Any]:
    dt = max(now[0] - prev[0], 1e-9)
    cpu = {k: now[1][k] - prev[1][k] for k in CPU_FIELDS}
    total = sum(cpu.values()) or 1e-9
    share = {k: v / total for k, v in cpu.items()}
    busy = 1 - share["idle"] - share["iowait"]
    io = now[2] - prev[2]
    device_busy = min(io.busy_ms / 1000 / dt, 1.0)
    return {
        "t": round(now[0] - t0, 2),
        "cpu_pct": {k: round(100 * share[k], 1) for k in ("user", "system", "iowait", "idle")},
        "read_bytes_s": round(io.read_bytes / dt),
        "write_bytes_s": round(io.write_bytes / dt),
        "reads_s": round(io.reads / dt),
        "writes_s": round(io.writes / dt),
        "device_busy_pct": round(100 * device_busy, 1),
        "class": classify(busy, share["iowait"], device_busy),
    }
