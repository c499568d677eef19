"""The once-a-second CPU and IO sampler: parsers on captured text, classification, a real run."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from conftest import TEST_DATA, Golden, golden_cases
from fsmatrix.agent import sampler

PROC_STAT = """\
cpu  1000 20 300 5000 400 10 5 0 0 0
cpu0 500 10 150 2500 200 5 3 0 0 0
intr 12345
"""

DISKSTATS = (TEST_DATA / "sampler" / "diskstats" / "loop0-vda.txt").read_text()


def test_parse_proc_stat() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = sampler.parse_proc_stat(PROC_STAT)
    assert cpu["user"] == 1000 / ticks and cpu["iowait"] == 400 / ticks and cpu["softirq"] == 5 / ticks


def test_parse_diskstats_counts_512_byte_sectors() -> None:
    stats = sampler.parse_diskstats(DISKSTATS)
    assert stats["loop0"] == sampler.DiskCounters(
        reads=120, read_bytes=2400 * 512, writes=64, write_bytes=512 * 512, busy_ms=40, flushes=0
    )
    assert stats["vda"].writes == 3000 and stats["vda"].busy_ms == 8000 and stats["vda"].flushes == 500


def test_flush_requests_only_where_the_kernel_reports_them() -> None:
    """Linux 5.5+ appends flush requests (fields 16-17); before it there are none to read: None, not 0,
    and None in every sum and difference with it."""
    new = sampler.parse_diskstats((TEST_DATA / "sampler" / "diskstats" / "host-linux-6.18.txt").read_text())
    old = sampler.parse_diskstats((TEST_DATA / "sampler" / "diskstats" / "linux-4.18-5.4-format.txt").read_text())
    assert new["vda"].flushes == 44105 and old["vda"].flushes is None
    assert (new["vda"] - sampler.ZERO).flushes == 44105
    assert (old["vda"] + sampler.ZERO).flushes is None and (new["vda"] - old["vda"]).flushes is None
    assert (old["vda"] - old["vda"]).writes == 0  # the other counters as before


@pytest.mark.parametrize("case", golden_cases("sampler/diskstats"))
def test_parse_diskstats_golden(case: Golden) -> None:
    """Every captured /proc/diskstats in tests/data/sampler/diskstats/ parses to its expected counters."""
    case.check(sampler.parse_diskstats)


def test_classify() -> None:
    assert sampler.classify(cpu_busy=0.95, iowait=0.0, device_busy=0.9) == "cpu"
    assert sampler.classify(cpu_busy=0.30, iowait=0.5, device_busy=0.2) == "io"
    assert sampler.classify(cpu_busy=0.30, iowait=0.0, device_busy=0.8) == "io"
    assert sampler.classify(cpu_busy=0.05, iowait=0.0, device_busy=0.0) == "idle"


def test_real_sampling_of_cpu_work_and_writes() -> None:
    # /var/tmp, not /tmp: /tmp may be tmpfs, which has no block device to sample.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        _sample_writes(Path(scratch))


def _sample_writes(tmp_path: Path) -> None:
    root_device = _device_of(tmp_path)
    with sampler.Sampler([root_device], interval=0.5) as s:
        end = time.monotonic() + 2.2
        with open(tmp_path / "f", "wb") as fh:
            while time.monotonic() < end:
                fh.write(os.urandom(1 << 16))
            fh.flush()
            os.fsync(fh.fileno())
    summary = s.summary()
    assert len(summary["series"]) >= 3
    assert summary["cpu_s"]["user"] + summary["cpu_s"]["system"] > 1.0  # one core kept busy ~2 s
    assert summary["io"]["write_bytes"] > 0, f"no writes seen on {root_device}"
    # The fsync reaches the disk as a flush request where the kernel counts them (5.5+) and the disk
    # has a volatile write cache to flush (virtio's here: "write back").
    if (
        _write_cache(root_device) == "write back"
        and sampler.parse_diskstats(_proc_diskstats())[root_device].flushes is not None
    ):
        assert summary["io"]["flushes"] >= 1, summary["io"]
    assert summary["bound"] in ("cpu", "io", "mixed")
    assert all(set(x) >= {"t", "cpu_pct", "write_bytes_s", "class"} for x in summary["series"])


def _proc_diskstats() -> str:
    return Path("/proc/diskstats").read_text()


def _write_cache(device: str) -> str | None:
    """The disk's write cache mode ("write back", "write through"), or None (a partition: its disk's)."""
    block = Path("/sys/class/block") / device
    for queue in (block / "queue", block.resolve().parent / "queue"):
        if (queue / "write_cache").exists():
            return (queue / "write_cache").read_text().strip()
    return None


def _device_of(path: Path) -> str:
    """Kernel name of the block device holding ``path`` (via its major:minor)."""
    dev = os.stat(path).st_dev
    return Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve().name


def test_a_device_missing_from_diskstats_is_not_measured_never_zero() -> None:
    # issue 51: a device /proc/diskstats does not list was summed as 0 bytes, 0 IOs, 0 flushes
    with sampler.Sampler(["fsmatrix-no-such-device"], interval=0.2) as s:
        time.sleep(0.3)
    summary = s.summary()
    assert summary["io_missing"] == ["fsmatrix-no-such-device"]
    assert set(summary["io"].values()) == {None}
