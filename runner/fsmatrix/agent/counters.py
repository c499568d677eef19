"""What a run's own processes made the CPU and the kernel do: perf_event_open(2) counters on its cgroup.

Counting mode, no sampling and no ``perf`` binary: one counter per online CPU for each event, opened
on the run's cgroup (``PERF_FLAG_PID_CGROUP``: every process in it and its descendants, detached
or not, the neighbours not), read at the start and the end of the measured part and summed over
the CPUs. The events (``EVENTS``): CPU instructions and cycles (hardware; user and kernel, or user
only where the kernel refuses more), context switches (software) and the fsync and fdatasync
system calls (the tracepoints syscalls:sys_enter_fsync / sys_enter_fdatasync, their ids read from
tracefs, which is mounted on a private directory and unmounted again when it is not mounted yet).

A counter that cannot be opened is **not available**, with the reason (no PMU in a guest under TCG:
hardware events fail with ENOENT; no tracefs; not root; no cgroup): its count is None, never 0. In a
guest under TCG no counter is opened at all (``under_tcg``): perf_event_open on the cgroup has hung
both vCPUs there (soft lockups spinning in syscall_trace_enter, in the middle of the call), so a TCG
guest counts neither fsync calls nor context switches (and has no hardware counters anyway).
The encoders and decoders (``encode_attr``, ``decode_read``, ``delta``, ``parse_cpu_list``,
``cgroup_problem``, ``open_error``) need no privileges and are tested on their own.
Standard library only (ctypes): the guest runs this too.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import os
import platform
import struct
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("fsmatrix")

# include/uapi/linux/perf_event.h
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_TRACEPOINT = 2
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FLAG_PID_CGROUP = 1 << 2
PERF_FLAG_FD_CLOEXEC = 1 << 3
# perf_event_attr's flag bits (the bitfield after read_format)
ATTR_DISABLED = 1 << 0
ATTR_EXCLUDE_USER = 1 << 4
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_EXCLUDE_HV = 1 << 6
# PERF_ATTR_SIZE_VER0: type, size, config, sample_period, sample_type, read_format, flags,
# wakeup_events, bp_type, config1. A kernel takes any known size and reads the rest as zero.
ATTR_FORMAT = "=IIQQQQQIIQ"
ATTR_SIZE = struct.calcsize(ATTR_FORMAT)  # 64
READ_FORMAT = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
READ_SIZE = 24  # value, time_enabled, time_running: three u64

# __NR_perf_event_open per machine (uname -m)
SYSCALL_NUMBERS = {
    "x86_64": 298,
    "i386": 336,
    "i686": 336,
    "aarch64": 241,
    "riscv64": 241,
    "loongarch64": 241,
    "armv7l": 364,
    "ppc64le": 319,
    "ppc64": 319,
    "s390x": 331,
}

MNT_DETACH = 2
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")

NO_CGROUP = "no cgroup for the run: its processes cannot be told from the rest of the machine's"


@dataclass(frozen=True)
class Event:
    """One counted event: its name in ``counts``, its perf type and config (a tracepoint's config is
    its id in tracefs, ``tracepoint`` naming it as ``events/<tracepoint>/id``)."""

    name: str
    type: int
    config: int = 0
    tracepoint: str | None = None

    @property
    def hardware(self) -> bool:
        return self.type == PERF_TYPE_HARDWARE


EVENTS = (
    Event("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
    Event("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
    Event("context_switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES),
    Event("fsync", PERF_TYPE_TRACEPOINT, tracepoint="syscalls/sys_enter_fsync"),
    Event("fdatasync", PERF_TYPE_TRACEPOINT, tracepoint="syscalls/sys_enter_fdatasync"),
)


# --------------------------------------------------------------------------------------------
# encoding and decoding: no privileges needed


def encode_attr(type_: int, config: int, *, user_only: bool = False) -> bytes:
    """A perf_event_attr (size VER0) for a counting event, enabled at once, reading the times enabled
    and running (so a multiplexed hardware counter can be scaled). ``user_only``: exclude the kernel
    and the hypervisor (``instructions:u``)."""
    flags = ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV if user_only else 0
    return struct.pack(ATTR_FORMAT, type_, ATTR_SIZE, config, 0, 0, READ_FORMAT, flags, 0, 0, 0)


def decode_attr(raw: bytes) -> dict[str, int]:
    """The fields of an ``encode_attr`` buffer (for tests and logs)."""
    names = ("type", "size", "config", "sample_period", "sample_type", "read_format", "flags")
    return dict(zip(names, struct.unpack(ATTR_FORMAT, raw)[: len(names)], strict=True))


@dataclass(frozen=True)
class Reading:
    """One counter read: its value and how long it was enabled and running (ns)."""

    value: int
    enabled: int
    running: int


def decode_read(raw: bytes) -> Reading:
    """What read(2) returns for ``READ_FORMAT``: value, time_enabled, time_running (native u64)."""
    if len(raw) != READ_SIZE:
        raise ValueError(f"a counter read returned {len(raw)} bytes; expected {READ_SIZE}")
    return Reading(*struct.unpack("=QQQ", raw))


@dataclass(frozen=True)
class Count:
    """An event's count over a window, summed over the CPUs: ``value`` None when it cannot be
    known (``reason`` says why); ``running`` the fraction of the enabled time the counter ran (< 1:
    multiplexed with other events on the PMU, and the value scaled up by it)."""

    value: int | None
    running: float = 1.0
    reason: str | None = None


def delta(start: Sequence[Reading], end: Sequence[Reading]) -> Count:
    """The count between two reads of the same per-CPU counters. A CPU's counter that ran only part
    of its enabled time is scaled (value × enabled / running, as ``perf stat`` does); one that was
    enabled but never ran (the PMU's counters all taken) makes the count unknown."""
    total, enabled, running = 0.0, 0, 0
    for a, b in zip(start, end, strict=True):
        value, on, ran = b.value - a.value, b.enabled - a.enabled, b.running - a.running
        enabled, running = enabled + on, running + ran
        if ran > 0:
            total += value * on / ran
        elif on > 0:
            return Count(None, 0.0, "the counter never ran: the PMU's counters were all taken by other events")
    fraction = round(running / enabled, 4) if enabled else 1.0
    return Count(round(total), fraction)


def parse_cpu_list(text: str) -> list[int]:
    """A kernel CPU list (``/sys/devices/system/cpu/online``: ``0-3,6,8-9``) as numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def cgroup_problem(directory: Path, mounts: str) -> str | None:
    """Why perf cannot count on the cgroup ``directory`` (None when it can): the perf_event controller
    must be on the hierarchy the directory is in. cgroup2 has it unless a cgroup v1 hierarchy holds
    it; a cgroup v1 hierarchy only when it is mounted with it. ``mounts``: /proc/self/mounts."""
    entries = [line.split() for line in mounts.splitlines()]
    cgroups = [(Path(e[1]), e[2], e[3].split(",")) for e in entries if len(e) >= 4 and e[2] in ("cgroup", "cgroup2")]
    holding = [c for c in cgroups if directory == c[0] or directory.is_relative_to(c[0])]
    if not holding:
        return f"the run's cgroup {directory} is on no cgroup mount"
    point, kind, options = max(holding, key=lambda c: len(c[0].parts))
    if kind == "cgroup2":
        bound = next((c[0] for c in cgroups if c[1] == "cgroup" and "perf_event" in c[2]), None)
        if bound is not None:
            return f"the perf_event controller is on the cgroup v1 hierarchy at {bound}, not the run's (cgroup2)"
        return None
    if "perf_event" not in options:
        return f"the run's cgroup is on the cgroup v1 hierarchy at {point}, which has no perf_event controller"
    return None


def open_error(event: Event, code: int, *, root: bool, paranoid: str | None) -> str:
    """The reason an event is not available, from perf_event_open's errno."""
    name = errno.errorcode.get(code, str(code))
    call = f"perf_event_open: {name}"
    if event.hardware and code in (errno.ENOENT, errno.ENODEV, errno.EOPNOTSUPP):
        return f"no hardware counters ({call})"
    if code in (errno.EACCES, errno.EPERM):
        who = "" if root else "not root; "
        level = f"kernel.perf_event_paranoid={paranoid}" if paranoid is not None else "no perf_event_paranoid"
        return f"not permitted ({call}; {who}{level})"
    if code == errno.ENOSYS:
        return f"the kernel has no perf events ({call})"
    if code == errno.EMFILE:
        return f"too many open files ({call}: one counter per CPU and event)"
    return f"{call} ({os.strerror(code)})"


# --------------------------------------------------------------------------------------------
# the system calls


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def perf_event_open(attr: bytes, pid: int, cpu: int, flags: int) -> int:
    """The perf_event_open(2) system call: a file descriptor, or OSError with its errno."""
    number = SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"no perf_event_open number known for {platform.machine()}")
    syscall = _libc().syscall
    syscall.restype = ctypes.c_long
    buffer = ctypes.create_string_buffer(attr, len(attr))
    fd = syscall(
        ctypes.c_long(number), buffer, ctypes.c_long(pid), ctypes.c_long(cpu), ctypes.c_long(-1), ctypes.c_ulong(flags)
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


def _mount(source: str, target: str, fstype: str) -> int:
    """mount(2); 0 or the errno."""
    libc = _libc()
    done = libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(0), None)
    return 0 if done == 0 else ctypes.get_errno()


def _unmount(target: str) -> None:
    if _libc().umount2(target.encode(), MNT_DETACH) != 0:
        log.warning("could not unmount %s: %s", target, os.strerror(ctypes.get_errno()))


def find_tracefs(mounts: str) -> Path | None:
    """Where tracefs is mounted already (its own mount, or under a debugfs mount), if anywhere."""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "tracefs":
            return Path(fields[1])
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "debugfs" and Path(fields[1], "tracing", "events").is_dir():
            return Path(fields[1], "tracing")
    return None


@contextlib.contextmanager
def tracefs(mounts: str) -> Iterator[tuple[Path | None, str | None]]:
    """(tracefs's root, None), or (None, why not). Where it is not mounted, it is mounted on a private
    temporary directory (tracefs, else debugfs with tracefs under it) for the ``with`` and unmounted
    after it: nothing of the machine's mounts changes."""
    found = find_tracefs(mounts)
    if found is not None:
        yield found, None
        return
    target = tempfile.mkdtemp(prefix="fsmatrix-tracefs-")
    try:
        code = _mount("nodev", target, "tracefs")
        if code == 0:
            try:
                yield Path(target), None
            finally:
                _unmount(target)
            return
        debug = _mount("nodev", target, "debugfs")
        if debug == 0:
            try:
                root = Path(target, "tracing")
                yield (root, None) if (root / "events").is_dir() else (None, "debugfs has no tracing directory")
            finally:
                _unmount(target)
            return
        yield None, f"tracefs is not mounted and cannot be (mount: {errno.errorcode.get(code, code)})"
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(target)


TCG_CPU = "QEMU TCG CPU"  # /proc/cpuinfo's model name in a guest under TCG (qemu's -cpu max)
TCG_COUNTERS = (
    "not opened in a guest under TCG: perf_event_open on the run's cgroup has hung both vCPUs there "
    "(soft lockups in syscall_trace_enter under multi-threaded TCG)"
)


def under_tcg(cpuinfo: str) -> bool:
    """Whether this /proc/cpuinfo is a guest's under qemu's TCG (no KVM): its CPU's model name says so."""
    return any(
        line.partition(":")[0].strip() == "model name" and TCG_CPU in line.partition(":")[2]
        for line in cpuinfo.splitlines()
    )


def tracepoint_ids(events: Sequence[Event], mounts: str) -> tuple[dict[str, int], dict[str, str]]:
    """The tracepoint events' ids ({name: id}) and why the others have none ({name: reason})."""
    wanted = [e for e in events if e.tracepoint is not None]
    ids: dict[str, int] = {}
    reasons: dict[str, str] = {}
    if not wanted:
        return ids, reasons
    with tracefs(mounts) as (root, why):
        for event in wanted:
            if root is None:
                reasons[event.name] = why or "no tracefs"
                continue
            path = root / "events" / str(event.tracepoint) / "id"
            try:
                ids[event.name] = int(path.read_text())
            except (OSError, ValueError):
                reasons[event.name] = (
                    f"no tracepoint {event.tracepoint} in tracefs (a kernel without CONFIG_FTRACE_SYSCALLS?)"
                )
    return ids, reasons


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# a run's counters


class RunCounters:
    """``with RunCounters(run_cpu.directory) as counters:`` ... ``with counters.measured(): ...`` ...
    ``counters.summary()``: as ``cgroup.RunCpu`` (the last measured block counts, else the whole ``with``).

    ``directory``: the run's cgroup (None: no cgroup, every event not available)."""

    def __init__(
        self,
        directory: Path | None,
        events: Sequence[Event] = EVENTS,
        mounts: str | None = None,
        cpuinfo: str | None = None,
    ) -> None:
        self.directory = directory
        self.events = tuple(events)
        self._mounts = mounts
        self._cpuinfo = cpuinfo  # /proc/cpuinfo's text (None: read it), for tests
        self.cpus: list[int] = []
        self.fds: dict[str, list[int]] = {}  # event name -> one fd per CPU (until the ``with`` ends)
        self.opened: list[str] = []  # the events counted
        self.scope: dict[str, str] = {}  # hardware events: "user+kernel" or "user"
        self.unavailable: dict[str, str] = {}
        self._start: dict[str, list[Reading]] = {}
        self._end: dict[str, list[Reading]] = {}
        self._window: tuple[dict[str, list[Reading]], dict[str, list[Reading]]] | None = None

    def __enter__(self) -> RunCounters:
        try:
            self._open()
            self._start = self._read()
        except (OSError, ValueError) as exc:  # counting is never worth failing a run for: say why there is none
            self._close()
            self.opened = []
            self.unavailable = {e.name: f"the counters could not be set up: {exc}" for e in self.events}
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._end = self._read()
        finally:
            self._close()

    def _open(self) -> None:
        if self.directory is None:
            self.unavailable = {e.name: NO_CGROUP for e in self.events}
            return
        mounts = self._mounts if self._mounts is not None else Path("/proc/self/mounts").read_text(encoding="utf-8")
        problem = cgroup_problem(self.directory, mounts)
        if problem is not None:
            self.unavailable = {e.name: problem for e in self.events}
            return
        if under_tcg(self._cpuinfo if self._cpuinfo is not None else _read_text("/proc/cpuinfo") or ""):
            self.unavailable = {e.name: TCG_COUNTERS for e in self.events}
            return
        self.cpus = parse_cpu_list(_read_text("/sys/devices/system/cpu/online") or "0")
        ids, self.unavailable = tracepoint_ids(self.events, mounts)
        group = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for event in self.events:
                if event.name in self.unavailable:
                    continue
                config = ids[event.name] if event.tracepoint is not None else event.config
                self._open_event(event, config, group)
        finally:
            os.close(group)
        log.debug("counters on %s: %s; not available: %s", self.directory, sorted(self.fds), self.unavailable)

    def _open_event(self, event: Event, config: int, group: int) -> None:
        """One counter per CPU; any CPU failing makes the event not available. A hardware event the
        kernel refuses to count in the kernel is counted in user space only (``scope``)."""
        scopes = (False, True) if event.hardware else (False,)
        for user_only in scopes:
            fds: list[int] = []
            try:
                for cpu in self.cpus:
                    attr = encode_attr(event.type, config, user_only=user_only)
                    fds.append(perf_event_open(attr, group, cpu, PERF_FLAG_PID_CGROUP | PERF_FLAG_FD_CLOEXEC))
            except OSError as exc:
                for fd in fds:
                    os.close(fd)
                self.unavailable[event.name] = open_error(
                    event,
                    exc.errno or 0,
                    root=os.geteuid() == 0,
                    paranoid=_read_text("/proc/sys/kernel/perf_event_paranoid"),
                )
                if exc.errno in (errno.EACCES, errno.EPERM):
                    continue  # user space only, if it was not that already
                return
            self.fds[event.name] = fds
            self.opened.append(event.name)
            self.unavailable.pop(event.name, None)
            if event.hardware:
                self.scope[event.name] = "user" if user_only else "user+kernel"
            return

    def _read(self) -> dict[str, list[Reading]]:
        """Every open counter's per-CPU readings; one that cannot be read is not available from then on
        (counting is never worth failing a run for)."""
        out = {}
        for name, fds in self.fds.items():
            try:
                out[name] = [decode_read(os.read(fd, READ_SIZE)) for fd in fds]
            except (OSError, ValueError) as exc:
                self.unavailable[name] = f"the counter could not be read: {exc}"
        return out

    def _close(self) -> None:
        for fds in self.fds.values():
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds = {}

    @contextlib.contextmanager
    def measured(self) -> Iterator[None]:
        """Mark the measured part of the run, as Sampler.measured does (the last block counts)."""
        start = self._read()
        try:
            yield
        finally:
            self._window = (start, self._read())

    def counts(self) -> dict[str, Count]:
        """Each event's count over the measured block (or the whole ``with``): call after it ends."""
        start, end = self._window or (self._start, self._end)
        out = {}
        for event in self.events:
            if event.name in self.unavailable:
                out[event.name] = Count(None, reason=self.unavailable[event.name])
            elif event.name in start and event.name in end:
                out[event.name] = delta(start[event.name], end[event.name])
            else:
                out[event.name] = Count(None, reason="not read: the counters were never started")
        return out

    def summary(self) -> dict[str, Any]:
        """The result document's ``samples.counters``: ``counts`` (None where not available),
        ``unavailable`` (event -> reason), ``scope`` of the hardware events counted, ``running``
        (the fraction of the time a multiplexed counter ran, where below 1), the ``cgroup`` and ``cpus``."""
        counts = self.counts()
        return {
            "source": "perf_event" if self.opened else "none",
            "cgroup": str(self.directory) if self.directory is not None else None,
            "cpus": len(self.cpus),
            "counts": {name: c.value for name, c in counts.items()},
            "unavailable": {name: c.reason for name, c in counts.items() if c.reason is not None},
            "scope": dict(self.scope),
            "running": {name: c.running for name, c in counts.items() if c.value is not None and c.running < 1},
        }
