"""perf counters on a run's cgroup: the encoders and decoders on their own, then the real counters on
a real cgroup running a real workload, and what a counter that cannot be opened records."""

from __future__ import annotations

import errno
import os
import struct
import sys
import tempfile
from pathlib import Path

import pytest

from fsmatrix.agent import cgroup, counters, proc, work
from fsmatrix.agent.counters import Count, Event, Reading

# This host's /proc/self/mounts (a container with cgroup v1 controllers and cgroup2 beside them, no
# perf_event on v1), a pure cgroup2 guest's (Debian under systemd), and a v1 perf_event hierarchy's.
HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
PURE_V2 = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
tracefs /sys/kernel/tracing tracefs rw,nosuid,nodev,noexec,relatime 0 0
"""
V1_PERF = """\
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/perf_event cgroup rw,nosuid,nodev,noexec,relatime,perf_event 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
"""


def test_attr_encodes_a_counting_event_reading_its_times() -> None:
    raw = counters.encode_attr(counters.PERF_TYPE_HARDWARE, counters.PERF_COUNT_HW_INSTRUCTIONS)
    assert len(raw) == counters.ATTR_SIZE == 64  # PERF_ATTR_SIZE_VER0
    attr = counters.decode_attr(raw)
    assert attr["type"] == 0 and attr["config"] == 1 and attr["size"] == 64
    assert attr["read_format"] == 3  # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING
    assert attr["sample_period"] == 0 and attr["sample_type"] == 0  # counting, not sampling
    assert attr["flags"] == 0  # enabled at once; user and kernel
    user = counters.decode_attr(counters.encode_attr(0, 1, user_only=True))
    assert user["flags"] == counters.ATTR_EXCLUDE_KERNEL | counters.ATTR_EXCLUDE_HV == 0b1100000


def test_read_decodes_value_and_times() -> None:
    assert counters.decode_read(struct.pack("=QQQ", 5, 100, 90)) == Reading(5, 100, 90)
    with pytest.raises(ValueError, match="returned 16 bytes"):
        counters.decode_read(b"\0" * 16)


def test_delta_sums_the_cpus_and_scales_a_multiplexed_counter() -> None:
    start = [Reading(10, 100, 100), Reading(0, 0, 0)]
    assert counters.delta(start, [Reading(60, 200, 200), Reading(7, 50, 50)]) == Count(57, 1.0)
    # CPU 1's counter ran half the time it was enabled: its 100 are scaled to 200, as perf stat does.
    half = counters.delta([Reading(0, 0, 0)] * 2, [Reading(50, 100, 100), Reading(100, 100, 50)])
    assert half.value == 250 and half.running == 0.75
    # A cgroup that never ran on a CPU: nothing enabled there, nothing counted, and that is a true 0.
    assert counters.delta([Reading(0, 0, 0)], [Reading(0, 0, 0)]) == Count(0, 1.0)
    never = counters.delta([Reading(0, 0, 0)], [Reading(0, 100, 0)])
    assert never.value is None and never.reason is not None and "never ran" in never.reason


def test_cpu_lists() -> None:
    assert counters.parse_cpu_list("0-3,6,8-9\n") == [0, 1, 2, 3, 6, 8, 9]
    assert counters.parse_cpu_list("0") == [0]


def test_where_perf_can_count_on_a_cgroup() -> None:
    assert counters.cgroup_problem(Path("/sys/fs/cgroup/unified/fsmatrix-run-1"), HYBRID) is None
    assert counters.cgroup_problem(Path("/sys/fs/cgroup/system.slice/fsmatrix-run-1"), PURE_V2) is None
    bound = counters.cgroup_problem(Path("/sys/fs/cgroup/unified/fsmatrix-run-1"), V1_PERF)
    assert bound == (
        "the perf_event controller is on the cgroup v1 hierarchy at /sys/fs/cgroup/perf_event, not the run's (cgroup2)"
    )
    v1 = counters.cgroup_problem(Path("/sys/fs/cgroup/cpuacct/fsmatrix-run-1"), HYBRID)
    assert v1 is not None and "no perf_event controller" in v1
    assert counters.cgroup_problem(Path("/sys/fs/cgroup/perf_event/x"), V1_PERF) is None
    assert "on no cgroup mount" in str(counters.cgroup_problem(Path("/var/tmp/x"), PURE_V2))


def test_open_errors_say_why() -> None:
    hw, sw = counters.EVENTS[0], counters.EVENTS[2]
    assert counters.open_error(hw, errno.ENOENT, root=True, paranoid="2") == (
        "no hardware counters (perf_event_open: ENOENT)"
    )
    assert counters.open_error(sw, errno.EACCES, root=False, paranoid="3") == (
        "not permitted (perf_event_open: EACCES; not root; kernel.perf_event_paranoid=3)"
    )
    assert counters.open_error(sw, errno.ENOENT, root=True, paranoid="2").startswith("perf_event_open: ENOENT (")


def test_tracefs_is_found_where_it_is_mounted() -> None:
    assert counters.find_tracefs(PURE_V2) == Path("/sys/kernel/tracing")
    assert counters.find_tracefs(HYBRID) is None


def test_without_a_cgroup_nothing_is_counted_and_every_event_says_why() -> None:
    with counters.RunCounters(None) as run, run.measured():
        pass
    summary = run.summary()
    assert summary["source"] == "none"
    assert summary["counts"] == {e.name: None for e in counters.EVENTS}  # None, never 0
    assert summary["unavailable"] == {e.name: counters.NO_CGROUP for e in counters.EVENTS}


def test_a_directory_that_is_no_cgroup_is_not_counted_and_says_why(tmp_path: Path) -> None:
    with counters.RunCounters(tmp_path) as run:
        pass
    summary = run.summary()
    assert set(summary["counts"].values()) == {None}
    assert all("on no cgroup mount" in reason for reason in summary["unavailable"].values())


def test_a_counter_that_cannot_be_read_is_not_available_from_then_on() -> None:
    """Counting is never worth failing a run for: a counter whose read returns nothing a counter
    returns (here /dev/null's 0 bytes) says so, and the run goes on."""
    event = counters.EVENTS[3]
    with open(os.devnull, "rb") as null:
        run = counters.RunCounters(None, (event,))
        run.fds = {event.name: [os.dup(null.fileno())]}
        with run.measured():
            pass
        run.__exit__(None, None, None)
    assert run.fds == {}
    assert run.counts() == {
        event.name: Count(None, reason="the counter could not be read: a counter read returned 0 bytes; expected 24")
    }


# --------------------------------------------------------------------------------------------
# the real thing: root, a cgroup of our own, perf_event_open

FSYNCS, FDATASYNCS = 40, 9
WRITER = f"""
import os, sys
with open(os.path.join(sys.argv[1], "f"), "wb") as f:
    for _ in range({FSYNCS}):
        f.write(b"x" * 4096)
        f.flush()
        os.fsync(f.fileno())
    for _ in range({FDATASYNCS}):
        os.fdatasync(f.fileno())
"""


def _has_core_pmu() -> bool:
    """Whether this machine has a CPU PMU: an event source of type PERF_TYPE_RAW (4), ``cpu`` on x86."""
    sources = Path("/sys/bus/event_source/devices")
    return any((d / "type").read_text().strip() == "4" for d in sources.iterdir() if (d / "type").exists())


def _run_in_cgroup(events: tuple[Event, ...] = counters.EVENTS) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory(dir="/var/tmp") as scratch,
        cgroup.RunCpu() as cpu,
        counters.RunCounters(cpu.directory, events) as run,
    ):
        assert cpu.directory is not None, "this test needs a writable cgroup hierarchy"
        with run.measured():
            proc.run([sys.executable, "-c", WRITER, scratch])  # it joins the cgroup itself (proc.in_run)
    return run.summary()


@pytest.mark.root(reason="needs root: a cgroup of its own and perf_event_open on it")
def test_the_counters_count_a_real_workload_on_its_cgroup() -> None:
    summary = _run_in_cgroup()
    counts = summary["counts"]
    assert isinstance(counts, dict) and isinstance(summary["unavailable"], dict)
    # Its own calls only: the Python interpreter itself calls neither, and the test process stays out.
    assert FSYNCS <= counts["fsync"] <= FSYNCS + 2, summary
    assert FDATASYNCS <= counts["fdatasync"] <= FDATASYNCS + 2, summary
    assert counts["context_switches"] > 0, summary
    if _has_core_pmu():
        assert counts["instructions"] > 10**6 and counts["cycles"] > 0, summary
    else:
        # Our 2-core machine is a Firecracker VM with no virtual PMU (no `cpu` event source): the
        # hardware events cannot be opened (ENOENT), and that is recorded, never a 0. A TCG guest is the same.
        assert counts["instructions"] is None and counts["cycles"] is None, summary
        assert summary["unavailable"]["instructions"] == "no hardware counters (perf_event_open: ENOENT)"
    assert summary["source"] == "perf_event" and summary["cpus"] == len(
        counters.parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text())
    )


@pytest.mark.root(reason="needs root: a cgroup of its own and perf_event_open on it")
def test_a_counter_that_cannot_be_opened_is_not_available_not_zero() -> None:
    bogus = (
        Event("bogus_software", counters.PERF_TYPE_SOFTWARE, 0xFFFF),  # beyond PERF_COUNT_SW_MAX: ENOENT
        Event("bogus_tracepoint", counters.PERF_TYPE_TRACEPOINT, tracepoint="syscalls/sys_enter_no_such_call"),
        counters.EVENTS[3],  # fsync, to see the good one counted beside them
    )
    summary = _run_in_cgroup(bogus)
    counts = summary["counts"]
    assert isinstance(counts, dict) and counts["bogus_software"] is None and counts["bogus_tracepoint"] is None
    assert FSYNCS <= counts["fsync"] <= FSYNCS + 2, summary
    assert summary["unavailable"] == {
        "bogus_software": f"perf_event_open: ENOENT ({os.strerror(errno.ENOENT)})",
        "bogus_tracepoint": "no tracepoint syscalls/sys_enter_no_such_call in tracefs"
        " (a kernel without CONFIG_FTRACE_SYSCALLS?)",
    }
    # In the result, the per-op metrics of what was not counted are None with the reason, never 0.
    samples = {"io": {"reads": 0, "read_bytes": 0, "writes": 4, "write_bytes": 4096, "flushes": 2}, "counters": summary}
    metrics, reasons = work.per_op(samples, 100, "no operations")
    assert metrics["fsyncs_per_op"] is None and reasons["fsyncs_per_op"].startswith("not counted")
    assert metrics["device_flushes_per_op"] == 0.02


@pytest.mark.root(reason="needs root: mounts tracefs")
def test_tracefs_is_mounted_privately_and_unmounted_when_nowhere_mounted() -> None:
    with counters.tracefs("") as (root, why):  # as if nothing were mounted
        assert why is None and root is not None
        assert (root / "events" / "syscalls" / "sys_enter_fsync" / "id").read_text().strip().isdigit()
        mounted = root
    assert not mounted.exists()
    assert str(mounted) not in Path("/proc/self/mounts").read_text()


TCG_CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: QEMU TCG CPU version 2.5+\n"


def test_a_tcg_guest_is_told_by_its_cpu_model() -> None:
    assert counters.under_tcg(TCG_CPUINFO)
    assert not counters.under_tcg("model name\t: AMD EPYC 7B13\n")
    assert not counters.under_tcg("flags\t: QEMU TCG CPU\n")  # the model name only


@pytest.mark.root(reason="needs root: a cgroup of its own")
def test_under_tcg_no_counter_is_opened() -> None:
    """A guest under TCG hung inside perf_event_open on the run's cgroup: there every counter is not
    available, with the reason, and nothing is opened (no fd, no count)."""
    with cgroup.RunCpu() as cpu, counters.RunCounters(cpu.directory, cpuinfo=TCG_CPUINFO) as run:
        assert cpu.directory is not None, "this test needs a writable cgroup hierarchy"
        with run.measured():
            proc.run([sys.executable, "-c", "pass"])
        assert run.fds == {} and run.opened == []
    summary = run.summary()
    assert set(summary["unavailable"]) == {e.name for e in counters.EVENTS}
    assert set(summary["unavailable"].values()) == {counters.TCG_COUNTERS}
    assert all(v is None for v in summary["counts"].values())
