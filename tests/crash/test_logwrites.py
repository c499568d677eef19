"""dm-log-writes logs: reading, marks, flush points, full logs, replay (fsmatrix.agent.crash.logwrites).

This host's kernel has no dm-log-writes module (nor device-mapper), so no real log can be produced
here: the logs below come from ``KernelStyleLog``, a small writer that lays entries out the way
``drivers/md/dm-log-writes.c`` does (header sector, data, zero padding, a super block rewritten only
after FUA and mark entries, logging stopped for good when an entry does not fit). It is a test
helper, separate from the reader, and keeps its own model of the data device to compare replays
against byte for byte. A log written by the real target is checked in the guest (VM test).
"""

from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import attached_under, needs_root
from fsmatrix.agent.crash import logwrites as lw
from fsmatrix.agent.storage import loop_devices

DEVICE_BYTES = 256 << 10


class KernelStyleLog:
    """Writes a dm-log-writes log file as the kernel lays it out (format version 1), and models the
    data device: ``images[i]`` is the device right after entry ``i``, a discard reading as zeros."""

    def __init__(
        self, path: Path, *, sectorsize: int = 512, log_bytes: int = 4 << 20, device_bytes: int = DEVICE_BYTES
    ):
        self.path = path
        self.sectorsize = sectorsize
        self.log_bytes = log_bytes
        with open(path, "wb") as f:
            f.truncate(log_bytes)  # a fresh, zeroed log device
        self.next_offset = sectorsize  # the super block owns the first sector
        self.enabled = True
        self.offsets: list[int] = []
        self.image = bytearray(device_bytes)
        self.images: list[bytes] = []

    def _put(self, offset: int, data: bytes) -> None:
        with open(self.path, "r+b") as f:
            f.seek(offset)
            f.write(data)

    def _super(self) -> None:
        raw = struct.pack("<QQQI", lw.MAGIC, lw.VERSION, len(self.offsets), self.sectorsize)
        self._put(0, raw.ljust(self.sectorsize, b"\0"))

    def _log(self, sector: int, nr_sectors: int, flags: int, data: bytes = b"", label: bytes = b"") -> int | None:
        if not self.enabled:
            return None
        size = self.sectorsize + len(data)
        if self.next_offset + size >= self.log_bytes:  # the kernel: next_sector >= end_sector
            self.enabled = False
            return None
        header = struct.pack("<QQQQ", sector, nr_sectors, flags, len(label)) + label
        self._put(self.next_offset, header.ljust(self.sectorsize, b"\0") + data)
        self.offsets.append(self.next_offset)
        self.next_offset += size
        start, end = sector * self.sectorsize, (sector + nr_sectors) * self.sectorsize
        if flags & lw.DISCARD:
            self.image[start:end] = bytes(end - start)
        elif data:
            self.image[start:end] = data
        self.images.append(bytes(self.image))
        if flags & (lw.FUA | lw.MARK):
            self._super()
        return len(self.offsets) - 1

    def write(
        self, sector: int, data: bytes, *, flush: bool = False, fua: bool = False, meta: bool = False
    ) -> int | None:
        assert data and len(data) % self.sectorsize == 0
        flags = (lw.FLUSH if flush else 0) | (lw.FUA if fua else 0) | (lw.METADATA if meta else 0)
        return self._log(sector, len(data) // self.sectorsize, flags, data)

    def flush(self) -> int | None:
        return self._log(0, 0, lw.FLUSH)

    def discard(self, sector: int, nr_sectors: int) -> int | None:
        return self._log(sector, nr_sectors, lw.DISCARD)

    def mark(self, label: str) -> int | None:
        return self._log(0, 0, lw.MARK, label=label.encode())

    def remove(self) -> int | None:
        """What the target's removal logs."""
        return self.mark(lw.KERNEL_END_MARK)


def block(byte: int, sectors: int = 1, sectorsize: int = 512) -> bytes:
    return bytes([byte]) * (sectors * sectorsize)


def workload_log(path: Path, sectorsize: int = 512) -> KernelStyleLog:
    """A small run: mkfs-style discard, start mark, writes, flushes, FUAs, a discard over written
    data, end mark, removal; then more writes the super block does not count."""
    log = KernelStyleLog(path, sectorsize=sectorsize)
    s = DEVICE_BYTES // sectorsize
    log.discard(0, s)  # 0
    log.write(0, block(0x11, 4, sectorsize))  # 1
    log.mark("start")  # 2
    log.write(8, block(0x22, 2, sectorsize))  # 3
    log.write(3, block(0x33, 1, sectorsize), meta=True)  # 4: overwrites part of entry 1
    log.flush()  # 5
    log.write(20, block(0x44, 8, sectorsize))  # 6
    log.write(1, block(0x55, 1, sectorsize), flush=True, fua=True)  # 7: a journal commit
    log.discard(8, 1)  # 8: half of entry 3 back to zeros
    log.write(30, block(0x66, 3, sectorsize), fua=True)  # 9
    log.write(40, block(0x77, 1, sectorsize))  # 10
    log.flush()  # 11
    log.mark("end")  # 12
    log.remove()  # 13
    return log


def test_reads_super_and_every_entry(tmp_path: Path) -> None:
    made = workload_log(tmp_path / "log")
    with lw.WriteLog(made.path) as log:
        assert log.super == lw.Super(version=1, nr_entries=14, sectorsize=512)
        entries = list(log.entries())
        assert [e.offset for e in entries] == made.offsets
        assert all(e.counted for e in entries)
        assert log.last_stop is not None and log.last_stop.kind == "zeroed"
        assert log.last_stop.offset == made.next_offset
        assert (entries[3].sector, entries[3].nr_sectors, entries[3].data_bytes) == (8, 2, 1024)
        assert entries[4].flags == lw.METADATA
        assert entries[7].flags == lw.FLUSH | lw.FUA
        assert entries[0].data_bytes == 0 and entries[0].device_bytes == DEVICE_BYTES  # a discard carries no data
        assert [(e.index, e.mark) for e in entries if e.mark] == [(2, "start"), (12, "end"), (13, lw.KERNEL_END_MARK)]
        assert b"".join(log.data(entries[6], chunk_bytes=1000)) == block(0x44, 8)
        scan = log.scan()
        assert scan.entries == 14 and scan.end_offset == made.next_offset
        assert scan.flush_points == [5, 7, 9, 11]


@pytest.mark.parametrize("sectorsize", [512, 4096])
def test_replay_matches_the_device_at_every_entry(tmp_path: Path, sectorsize: int) -> None:
    """Replayed onto a zeroed file, entries 0..i give the device as it was right after entry i."""
    made = workload_log(tmp_path / "log", sectorsize)
    target = tmp_path / "target"
    with lw.WriteLog(made.path) as log:
        for last in range(len(made.images)):
            for zeroed in (True, False):
                target.write_bytes(bytes(DEVICE_BYTES))
                lw.replay(log, target, last, target_zeroed=zeroed)
                assert target.read_bytes() == made.images[last], f"after entry {last}, target_zeroed={zeroed}"


def test_replay_in_steps_onto_one_copy(tmp_path: Path) -> None:
    """Point to point with ``first``: the same bytes as replaying each prefix from scratch, discards included."""
    made = workload_log(tmp_path / "log")
    target = tmp_path / "target"
    target.write_bytes(bytes(DEVICE_BYTES))
    with lw.WriteLog(made.path) as log:
        previous = -1
        for point in [1, 4, 5, 9, 13]:  # entry 8 discards what entry 3 wrote in the step before
            done = lw.replay(log, target, point, target_zeroed=True, first=previous + 1)
            assert done.entries == point - previous
            assert target.read_bytes() == made.images[point], f"after entry {point}"
            previous = point
        with pytest.raises(lw.LogError, match="cannot replay from entry 6 up to entry 5"):
            lw.replay(log, target, 5, target_zeroed=True, first=6)


def test_sector_counts_in_log_sectors_not_512_bytes(tmp_path: Path) -> None:
    """With 4 KiB logical blocks, sector 3 is byte 12288 of the device (the kernel logs bio sectors >> 3)."""
    made = KernelStyleLog(tmp_path / "log", sectorsize=4096)
    made.write(3, block(0xAB, 1, 4096), fua=True)
    target = tmp_path / "target"
    target.write_bytes(bytes(DEVICE_BYTES))
    with lw.WriteLog(made.path) as log:
        lw.replay(log, target, 0, target_zeroed=True)
    image = target.read_bytes()
    assert image[12288 : 12288 + 4096] == block(0xAB, 1, 4096)
    assert not image[:12288].strip(b"\0") and not image[16384:].strip(b"\0")


def test_discard_zeroes_what_the_replay_wrote_before(tmp_path: Path) -> None:
    """target_zeroed=True skips zeroing only what nobody wrote: a discard over earlier writes still zeroes them."""
    made = workload_log(tmp_path / "log")
    target = tmp_path / "target"
    target.write_bytes(bytes(DEVICE_BYTES))
    with lw.WriteLog(made.path) as log:
        done = lw.replay(log, target, 8, target_zeroed=True)
    assert done.bytes_zeroed == 512  # entry 8 over entry 3's first sector; mkfs's whole-device discard cost nothing
    assert target.read_bytes()[8 * 512 : 9 * 512] == bytes(512)
    # The promise matters: a target that was not zeroed keeps its old bytes where nothing was written.
    target.write_bytes(b"\xff" * DEVICE_BYTES)
    with lw.WriteLog(made.path) as log:
        lw.replay(log, target, 8, target_zeroed=True)
    assert target.read_bytes() != made.images[8]
    with lw.WriteLog(made.path) as log:
        lw.replay(log, target, 8, target_zeroed=False)
    assert target.read_bytes() == made.images[8]


def test_extents_merge_and_split() -> None:
    extents = lw._Extents()
    for start, end in [(10, 20), (30, 40), (20, 25), (50, 60), (5, 12)]:
        extents.add(start, end)
    assert list(zip(extents._starts, extents._ends, strict=True)) == [(5, 25), (30, 40), (50, 60)]
    assert extents.take(22, 55) == [(22, 25), (30, 40), (50, 55)]
    assert list(zip(extents._starts, extents._ends, strict=True)) == [(5, 22), (55, 60)]
    assert extents.take(0, 4) == [] and extents.take(22, 55) == []
    assert extents.take(8, 10) == [(8, 10)]
    assert list(zip(extents._starts, extents._ends, strict=True)) == [(5, 8), (10, 22), (55, 60)]


def test_super_count_lags_and_the_walk_goes_past_it(tmp_path: Path) -> None:
    """After the last FUA or mark the super block is stale: those entries are found but not counted."""
    made = workload_log(tmp_path / "log")
    made.write(50, block(0x88))  # 14
    made.flush()  # 15
    made.write(51, block(0x99))  # 16
    with lw.WriteLog(made.path) as log:
        assert log.super.nr_entries == 14
        entries = list(log.entries())
        assert len(entries) == 17 and [e.index for e in entries if not e.counted] == [14, 15, 16]
        assert [e.index for e in log.entries(past_count=False)] == list(range(14))
        assert log.last_stop is not None and log.last_stop.kind == "count"
        assert log.scan().flush_points[-1] == 15
        target = tmp_path / "target"
        target.write_bytes(bytes(DEVICE_BYTES))
        lw.replay(log, target, 16, target_zeroed=True)
        assert target.read_bytes() == made.images[16]


def test_before_the_first_fua_or_mark_there_is_no_super_block(tmp_path: Path) -> None:
    made = KernelStyleLog(tmp_path / "log")
    made.write(0, block(1))
    made.flush()
    with pytest.raises(lw.LogError, match=r"no dm-log-writes super block \(all zeros\)"):
        lw.WriteLog(made.path)


def test_truncated_last_entry_ends_the_walk(tmp_path: Path) -> None:
    made = workload_log(tmp_path / "log")
    made.write(60, block(0xAA, 16))  # 14: 8 KiB of data
    os.truncate(made.path, made.offsets[14] + 512 + 4096)  # half its data made it
    with lw.WriteLog(made.path) as log:
        assert log.scan().entries == 14
        assert log.last_stop is not None and log.last_stop.kind == "truncated"
        assert "entry 14 needs 8192 data bytes" in log.last_stop.detail
    os.truncate(made.path, made.offsets[14] + 100)  # not even its whole header
    with lw.WriteLog(made.path) as log:
        assert log.scan().entries == 14 and log.scan().stop.kind == "end of log"


def test_garbage_after_the_last_entry_ends_the_walk(tmp_path: Path) -> None:
    made = workload_log(tmp_path / "log")
    made._put(made.next_offset, bytes(range(256)) * 64)
    with lw.WriteLog(made.path) as log:
        scan = log.scan()
    assert scan.entries == 14 and scan.stop.kind == "garbage" and scan.stop.offset == made.next_offset


def _header(sector: int, nr_sectors: int, flags: int, data_len: int, tail: bytes = b"") -> bytes:
    return (struct.pack("<QQQQ", sector, nr_sectors, flags, data_len) + tail).ljust(512, b"\0")


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (_header(0, 0, 0, 0), "no flags and no sectors"),
        (_header(5, 1, 1 << 7, 0), "unknown flags 0x80"),
        (_header(1 << 60, 1, 0, 0), "beyond any device"),
        (_header(0, 0, lw.MARK | lw.FLUSH, 3, b"abc"), "a mark with flags 0x9"),
        (_header(0, 2, lw.MARK, 3, b"abc"), "a mark with flags 0x8, sector 0 +2"),
        (_header(0, 0, lw.MARK, 480, b"x" * 480), "does not fit its header sector"),
        (_header(0, 0, lw.MARK, 3, b"a\0c"), "NUL byte"),
        (_header(0, 0, lw.MARK, 2, b"abc"), "not zero-padded"),
        (_header(7, 1, 0, 512), "data_len 512 on an entry that is not a mark"),
        (_header(7, 0, lw.DISCARD, 0), "a discard of no sectors"),
        (_header(7, 1, 0, 0, b"\0" * 100 + b"\x01"), "not zero-padded"),
    ],
)
def test_each_implausible_header_stops_the_walk(tmp_path: Path, header: bytes, problem: str) -> None:
    made = workload_log(tmp_path / "log")
    made._put(made.offsets[13], header)  # replaces the final mark
    with lw.WriteLog(made.path) as log:
        scan = log.scan()
    assert scan.entries == 13
    assert scan.stop.kind == ("zeroed" if not header.strip(b"\0") else "garbage")
    assert problem in scan.stop.detail


def test_longest_mark_the_kernel_writes_is_read(tmp_path: Path) -> None:
    made = KernelStyleLog(tmp_path / "log")
    made.mark("m" * lw.MAX_MARK_BYTES)
    with lw.WriteLog(made.path) as log:
        assert log.scan().marks == [(0, "m" * 479)]


@pytest.mark.parametrize(
    ("super_block", "message"),
    [
        (struct.pack("<QQQI", 0x1234, 1, 3, 512), r"not a dm-log-writes log: magic 0x1234, expected 0x6a736677736872"),
        (struct.pack("<QQQI", lw.MAGIC, 2, 3, 512), "format version 2, this reader knows 1"),
        (struct.pack("<QQQI", lw.MAGIC, 1, 3, 1000), "implausible log sector size 1000"),
        (struct.pack("<QQQI", lw.MAGIC, 1, 3, 256), "implausible log sector size 256"),
        (struct.pack("<QQQI", lw.MAGIC, 1, 3, 131072), "implausible log sector size 131072"),
    ],
)
def test_bad_super_block_is_one_clear_error(tmp_path: Path, super_block: bytes, message: str) -> None:
    made = workload_log(tmp_path / "log")
    made._put(0, super_block)
    with pytest.raises(lw.LogError, match=message):
        lw.WriteLog(made.path)


def test_missing_or_tiny_log_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(lw.LogError, match=r"cannot open log .*/nothing: No such file or directory"):
        lw.WriteLog(tmp_path / "nothing")
    (tmp_path / "tiny").write_bytes(b"\x72\x68")
    with pytest.raises(lw.LogError, match="not a dm-log-writes log: only 2 bytes"):
        lw.WriteLog(tmp_path / "tiny")


def test_entry_lookup_and_a_log_that_shrinks_under_the_reader(tmp_path: Path) -> None:
    made = workload_log(tmp_path / "log")
    with lw.WriteLog(made.path) as log:
        assert log.entry(6).offset == made.offsets[6]
        with pytest.raises(lw.LogError, match=r"no entry 14 \(the log has 14 entries\)"):
            log.entry(14)
        os.truncate(made.path, made.offsets[6] + 512 + 1024)
        with pytest.raises(lw.LogError, match="entry 6's data ends early at byte"):
            list(log.data(log.entry(6)))


def test_marks_and_flush_points_between_them(tmp_path: Path) -> None:
    made = workload_log(tmp_path / "log")
    with lw.WriteLog(made.path) as log:
        assert lw.find_mark(log, "start") == 2 and lw.find_mark(log, "end") == 12
        assert lw.flush_points(log, "start", "end") == [5, 7, 9, 11]
        with pytest.raises(
            lw.LogError, match=r"no mark 'middle' in the log \(marks: 'start', 'end', 'dm-log-writes-end'\)"
        ):
            lw.find_mark(log, "middle")
        with pytest.raises(lw.LogError, match=r"mark 'start' \(entry 2\) comes before 'end'"):
            lw.flush_points(log, "end", "start")
    made.mark("start")
    with (
        lw.WriteLog(made.path) as log,
        pytest.raises(lw.LogError, match=r"mark 'start' appears 2 times \(entries \[2, 14\]\)"),
    ):
        lw.find_mark(log, "start")


def test_flush_points_exclude_what_lies_outside_the_marks(tmp_path: Path) -> None:
    made = KernelStyleLog(tmp_path / "log")
    made.write(0, block(1), fua=True)  # 0: before the start mark
    made.mark("a")  # 1
    made.flush()  # 2
    made.mark("b")  # 3
    made.flush()  # 4: after the end mark
    made.mark("c")  # 5
    with lw.WriteLog(made.path) as log:
        assert lw.flush_points(log, "a", "b") == [2]
        assert lw.flush_points(log, "a", "c") == [2, 4]
        assert lw.flush_points(log, "b", "c") == [4]


def test_full_log_is_detected(tmp_path: Path) -> None:
    """The target drops the entry that does not fit and everything after it, end marks included."""
    made = KernelStyleLog(tmp_path / "log", log_bytes=64 << 10)
    made.mark("start")
    for n in range(200):
        made.write(n % 64, block(n % 250 + 1, 4), fua=n % 5 == 0)
    assert not made.enabled
    assert made.mark("end") is None and made.remove() is None
    with lw.WriteLog(made.path) as log:
        assert lw.find_mark(log, "start") == 0
        with pytest.raises(lw.LogIncomplete, match=r"log device full: mark 'end' is missing") as caught:
            lw.check_complete(log, "end")
        assert caught.value.full
        assert log.scan().entries == len(made.offsets)  # the uncounted tail after the last FUA is found too
        assert log.super.nr_entries < len(made.offsets)


def test_missing_end_mark_with_room_left_is_not_called_full(tmp_path: Path) -> None:
    made = KernelStyleLog(tmp_path / "log", log_bytes=32 << 20)
    made.mark("start")
    made.write(0, block(1), fua=True)
    with lw.WriteLog(made.path) as log:
        with pytest.raises(lw.LogIncomplete, match=r"mark 'end' is missing .* the workload did not finish") as caught:
            lw.check_complete(log, "end")
        assert not caught.value.full
    made.mark("end")
    with lw.WriteLog(made.path) as log:
        lw.check_complete(log, "end")


def test_damaged_counted_entry_is_detected(tmp_path: Path) -> None:
    """Garbage where the super block says entries are: the end mark is unreachable, and the error says why."""
    made = workload_log(tmp_path / "log")
    made._put(made.offsets[5], _header(0, 0, 1 << 9, 0))
    with lw.WriteLog(made.path) as log, pytest.raises(lw.LogIncomplete) as caught:
        lw.check_complete(log, "end")
    assert str(caught.value).endswith(
        "damaged log: the super block counts 14 entries but only 5 could be read "
        f"(garbage: header at byte {made.offsets[5]}: unknown flags 0x200)"
    )
    assert not caught.value.full


def test_choose_points_is_seeded_sorted_and_distinct() -> None:
    pool = list(range(100, 200, 3))
    first = lw.choose_points(pool, 5, seed=42)
    assert first == lw.choose_points(list(reversed(pool)), 5, seed=42)
    assert first.points == sorted(set(first.points)) and len(first.points) == 5 and set(first.points) <= set(pool)
    assert (first.seed, first.asked, first.available, first.note) == (42, 5, len(pool), "")
    assert any(lw.choose_points(pool, 5, seed=seed).points != first.points for seed in range(43, 50))
    few = lw.choose_points([9, 3, 3], 5, seed=1)
    assert few.points == [3, 9] and few.note == "only 2 flush points available, asked for 5: replaying all of them"
    assert lw.choose_points([9, 3], 2, seed=1) == lw.Choice([3, 9], 1, 2, 2, "")
    with pytest.raises(ValueError, match="at least 1, got 0"):
        lw.choose_points(pool, 0, seed=1)


def test_replay_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    made = workload_log(tmp_path / "log")
    small = tmp_path / "small"
    small.write_bytes(bytes(16 << 10))
    with lw.WriteLog(made.path) as log:
        with pytest.raises(lw.LogError, match=r"cannot replay up to entry 14: the log has 14 entries"):
            lw.replay(log, small, 14, target_zeroed=True)
        with pytest.raises(lw.LogError, match=r"cannot open replay target .*/absent: No such file"):
            lw.replay(log, tmp_path / "absent", 3, target_zeroed=True)
        with pytest.raises(lw.LogError, match=r"entry 0 reaches byte 262144 but replay target .* has 16384 bytes"):
            lw.replay(log, small, 3, target_zeroed=False)
    writes = KernelStyleLog(tmp_path / "writes")
    writes.write(2, block(1), fua=True)
    writes.write(32, block(2), fua=True)
    with lw.WriteLog(writes.path) as log:
        lw.replay(log, small, 0, target_zeroed=True)
        with pytest.raises(lw.LogError, match=r"entry 1 reaches byte 16896 but replay target .* has 16384 bytes"):
            lw.replay(log, small, 1, target_zeroed=True)


def test_replay_streams_large_entries(tmp_path: Path) -> None:
    """An entry larger than the copy buffer is copied in pieces, not read whole."""
    device_bytes = 8 << 20
    made = KernelStyleLog(tmp_path / "log", log_bytes=16 << 20, device_bytes=device_bytes)
    data = bytes(range(256)) * (5 << 12)  # 5 MiB
    made.write(1000, data, fua=True)
    target = tmp_path / "target"
    target.write_bytes(bytes(device_bytes))
    with lw.WriteLog(made.path) as log:
        entry = log.entry(0)
        assert [len(chunk) for chunk in log.data(entry)] == [1 << 20] * 5
        done = lw.replay(log, target, 0, target_zeroed=True)
    assert done == lw.Replayed(entries=1, bytes_written=len(data), bytes_zeroed=0)
    assert target.read_bytes() == made.images[0]


@needs_root
def test_replay_onto_a_loop_device_gives_a_filesystem_fsck_accepts(tmp_path: Path) -> None:
    """A log whose writes are a real mkfs.ext4 image, replayed onto a real block device."""
    size = 16 << 20
    fs_image = tmp_path / "fs.img"
    with open(fs_image, "wb") as f:
        f.truncate(size)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", str(fs_image)], check=True)
    image = fs_image.read_bytes()
    made = KernelStyleLog(tmp_path / "log", log_bytes=size + (4 << 20), device_bytes=size)
    made.discard(0, size // 512)  # mkfs discards the whole device first
    made.mark("start")
    blocks = [n for n in range(size // 4096) if image[n * 4096 : (n + 1) * 4096].strip(b"\0")]
    for n in blocks:
        made.write(n * 8, image[n * 4096 : (n + 1) * 4096])
    made.flush()
    made.mark("end")
    with loop_devices(1, size, tmp_path) as (device,):
        assert stat.S_ISBLK(os.stat(device).st_mode)
        with open(device, "r+b") as f:  # not zeroed: a leftover pattern the discard must clear
            f.write(b"\xee" * size)
        with lw.WriteLog(made.path) as log:
            last = lw.flush_points(log, "start", "end")[-1]
            lw.replay(log, device, last, target_zeroed=False)
        with open(device, "rb") as f:
            assert f.read() == image
        subprocess.run(["e2fsck", "-f", "-n", device], check=True, capture_output=True)
    assert attached_under(tmp_path) == []


# --------------------------------------------------------------------------------------------
# guest-side helpers, against a stand-in dmsetup that records its arguments


@pytest.fixture
def fake_dmsetup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    calls = tmp_path / "calls"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "dmsetup"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {calls}\n'
        'if [ "$1" = status ]; then echo "0 2048 log-writes 17 4242 logging_disabled"; fi\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return calls


def test_table_line_and_dmsetup_commands(tmp_path: Path, fake_dmsetup: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(bytes(1 << 20))
    assert lw.table_line("/dev/vdb", "/dev/vdc", 2048) == "0 2048 log-writes /dev/vdb /dev/vdc"
    assert lw.device_sectors(str(data)) == 2048
    assert lw.create("fsm-lw", str(data), "/dev/vdc") == "/dev/mapper/fsm-lw"
    lw.mark("fsm-lw", "fsmatrix-start")
    assert lw.status("fsm-lw") == lw.Status(17, 4242, True)
    assert fake_dmsetup.read_text().splitlines() == [
        f"create fsm-lw --table 0 2048 log-writes {data} /dev/vdc",
        "message fsm-lw 0 mark fsmatrix-start",
        "status fsm-lw",
    ]
    with pytest.raises(ValueError, match="a positive length"):
        lw.table_line("/dev/vdb", "/dev/vdc", 0)


@pytest.mark.parametrize("label", ["", "two words", "tab\there", "é", "x" * 480])
def test_mark_refuses_labels_the_kernel_would_mangle(fake_dmsetup: Path, label: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII characters without spaces"):
        lw.mark("fsm-lw", label)
    assert not fake_dmsetup.exists()


def test_parse_status() -> None:
    assert lw.parse_status("0 2097152 log-writes 120 8191\n") == lw.Status(120, 8191, False)
    assert lw.parse_status("0 8 log-writes 3 99 logging_disabled") == lw.Status(3, 99, True)
    with pytest.raises(lw.LogError, match="unexpected dmsetup status of a log-writes target: '0 8 linear 8:16 0'"):
        lw.parse_status("0 8 linear 8:16 0")


def test_cli(tmp_path: Path) -> None:
    made = workload_log(tmp_path / "log")
    run = [sys.executable, "-m", "fsmatrix.agent.crash.logwrites"]
    env = {**os.environ, "PYTHONPATH": str(Path(lw.__file__).parents[3])}
    shown = subprocess.run(
        [*run, str(made.path), "--entries", "--between", "start", "end"], capture_output=True, text=True, env=env
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "sector size 512, 14 entries counted, 14 found" in lines[0]
    assert len(lines) == 1 + 14 + 2
    assert "FLUSH|FUA" in lines[8] and "mark 'start'" in lines[3]
    assert lines[-2] == "marks: 2 'start', 12 'end', 13 'dm-log-writes-end'"
    assert lines[-1] == "flush points between 'start' and 'end': 4: 5 7 9 11"
    bad = subprocess.run([*run, str(tmp_path / "nothing")], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "cannot open log" in bad.stderr
