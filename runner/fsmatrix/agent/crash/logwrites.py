"""dm-log-writes logs: read one, find its marks and flush points, replay it onto a zeroed disk.

``crash.mode: flush-points`` puts the data device behind the kernel's ``log-writes`` target, which
copies every write that reached stable storage to a log device, in that order. Replaying the log's
entries 0..i onto a zeroed disk rebuilds the data device as it was right after entry i; when entry i
is a FLUSH or FUA, that is what a disk whose volatile cache lost everything not yet flushed would
hold after a power cut there (the method of xfstests' generic/482 and CrashMonkey). Standard
library only: this runs in the guest.

The log format (version 1), as ``drivers/md/dm-log-writes.c`` writes it; integers little-endian:

- The log's sector size ``S`` is the *data* device's logical block size (512 or 4096), recorded in
  the super block. Everything in the log is laid out in whole ``S``-byte sectors.
- Bytes ``0..S``: the super block: magic u64, version u64, nr_entries u64, sectorsize u32, zeros.
- From byte ``S``, entries back to back. Each is one ``S``-byte header (sector u64, nr_sectors u64,
  flags u64, data_len u64; a mark's name, ``data_len`` bytes, follows in the same sector; the rest
  is zeros), then, for a write, the ``nr_sectors * S`` bytes written. Discards and marks carry none.
- ``sector`` and ``nr_sectors`` count ``S``-byte units of the data device, not 512-byte sectors:
  the write landed at byte ``sector * S`` (the same thing when ``S`` is 512).
- Flags: FLUSH (the write carried a preflush: everything logged before it is durable), FUA,
  DISCARD, MARK (``dmsetup message DEV 0 mark LABEL``), METADATA (the filesystem's hint; replayed
  like any write).
- The super block is written only after an entry flagged FUA or MARK (the target's removal logs a
  last mark, ``dm-log-writes-end``), so ``nr_entries`` lags behind the entries after the last one,
  and before the first one there is no super block at all. A reader walks past the count and stops
  at the first header that is not a plausible entry (zeros, on a log device that started zeroed).
- When the next entry would not fit, the target stops logging for good, silently: later writes,
  marks and the final mark are missing from the log (``dmsetup status`` shows ``logging_disabled``).
  ``check_complete`` turns that into a clear error.

The log device must start zeroed (a fresh sparse disk image does): the kernel neither clears it nor
records where the log ends, so an older log's leftovers could otherwise read as entries.
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import re
import struct
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from fsmatrix.agent import proc

MAGIC = 0x6A736677736872
VERSION = 1
SECTOR_BYTES = 512  # the unit of device-mapper tables and of dmsetup status

FLUSH = 1 << 0
FUA = 1 << 1
DISCARD = 1 << 2
MARK = 1 << 3
METADATA = 1 << 4
KNOWN_FLAGS = FLUSH | FUA | DISCARD | MARK | METADATA
FLAG_NAMES = ((FLUSH, "FLUSH"), (FUA, "FUA"), (DISCARD, "DISCARD"), (MARK, "MARK"), (METADATA, "METADATA"))

KERNEL_END_MARK = "dm-log-writes-end"  # logged by the target itself when it is removed

_SUPER = struct.Struct("<QQQI")
_HEADER = struct.Struct("<QQQQ")
MIN_SECTOR_SIZE = 512
MAX_SECTOR_SIZE = 65536  # a logical block size is at most a page; 64 KiB pages exist
MAX_MARK_BYTES = MIN_SECTOR_SIZE - _HEADER.size - 1  # the kernel silently cuts longer labels
CHUNK_BYTES = 1 << 20  # replay copies data through a buffer this size: logs can be gigabytes
# dm-log-writes refuses an entry that does not fit and logs nothing after it. The refused entry can
# be a whole bio (a few MiB at most), so a log that stopped this close to its end most likely filled.
FULL_SLACK_BYTES = 8 << 20


class LogError(RuntimeError):
    """A log that cannot be read or replayed as asked; ``str()`` is one line saying why."""


class LogIncomplete(LogError):
    """The log lacks the mark written at the workload's end; ``full`` when the log device filled up."""

    def __init__(self, message: str, *, full: bool) -> None:
        super().__init__(message)
        self.full = full


@dataclass(frozen=True)
class Super:
    version: int
    nr_entries: int  # entries counted up to the last FUA or mark; more may follow
    sectorsize: int


@dataclass(frozen=True)
class Entry:
    """One logged entry; its data stays in the log until replayed."""

    index: int
    offset: int  # byte offset of its header in the log
    sector: int  # in units of the log's sector size, on the data device
    nr_sectors: int
    flags: int
    sectorsize: int
    counted: bool  # within the super block's nr_entries
    mark: str | None = None  # a mark's label

    @property
    def data_offset(self) -> int:
        return self.offset + self.sectorsize

    @property
    def data_bytes(self) -> int:
        """Bytes of data following the header in the log."""
        return 0 if self.flags & (DISCARD | MARK) else self.nr_sectors * self.sectorsize

    @property
    def next_offset(self) -> int:
        return self.data_offset + self.data_bytes

    @property
    def device_offset(self) -> int:
        """Where on the data device the write or discard landed, in bytes."""
        return self.sector * self.sectorsize

    @property
    def device_bytes(self) -> int:
        return self.nr_sectors * self.sectorsize

    @property
    def is_flush_point(self) -> bool:
        return bool(self.flags & (FLUSH | FUA))

    def describe(self) -> str:
        names = "|".join(name for bit, name in FLAG_NAMES if self.flags & bit) or "WRITE"
        what = f"mark {self.mark!r}" if self.mark is not None else f"sector {self.sector} +{self.nr_sectors}"
        return f"{self.index:>8} @{self.offset:<12} {names:<16} {what}" + ("" if self.counted else "  (uncounted)")


@dataclass(frozen=True)
class Stop:
    """Why a walk through the log ended: at ``offset``, where no further entry could be read."""

    kind: str  # "count" (only counted entries asked for), "zeroed", "garbage", "truncated", "end of log"
    offset: int
    detail: str


@dataclass
class Scan:
    """One pass over every entry's header (no data read)."""

    super: Super
    log_bytes: int
    entries: int  # found, counted or not
    end_offset: int  # byte after the last entry found
    stop: Stop
    marks: list[tuple[int, str]] = field(default_factory=list)  # (index, label)
    flush_points: list[int] = field(default_factory=list)  # indices of FLUSH / FUA entries


# --------------------------------------------------------------------------------------------
# reading


def _read_exactly(fd: int, count: int, offset: int) -> bytes:
    """Up to ``count`` bytes at ``offset``: fewer only at the end of the file or device."""
    parts: list[bytes] = []
    while count > 0:
        chunk = os.pread(fd, count, offset)
        if not chunk:
            break
        parts.append(chunk)
        count -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


class WriteLog:
    """An open dm-log-writes log (a block device or a file), read-only. Use as a context manager."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise LogError(f"cannot open log {self.path}: {exc.strerror}") from exc
        try:
            self.size = os.lseek(self._fd, 0, os.SEEK_END)  # works for block devices too
            self.super = self._read_super()
        except BaseException:
            os.close(self._fd)
            raise
        self._scan: Scan | None = None
        self.last_stop: Stop | None = None  # set by entries() when a walk ends

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> WriteLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_super(self) -> Super:
        raw = _read_exactly(self._fd, _SUPER.size, 0)
        if len(raw) < _SUPER.size:
            raise LogError(f"{self.path} is not a dm-log-writes log: only {self.size} bytes")
        magic, version, nr_entries, sectorsize = _SUPER.unpack(raw)
        if magic == 0 and not raw.strip(b"\0"):
            raise LogError(
                f"{self.path} has no dm-log-writes super block (all zeros): the target never logged a FUA "
                "write or a mark onto it"
            )
        if magic != MAGIC:
            raise LogError(f"{self.path} is not a dm-log-writes log: magic {magic:#x}, expected {MAGIC:#x}")
        if version != VERSION:
            raise LogError(f"{self.path}: dm-log-writes format version {version}, this reader knows {VERSION}")
        if not MIN_SECTOR_SIZE <= sectorsize <= MAX_SECTOR_SIZE or sectorsize & (sectorsize - 1):
            raise LogError(f"{self.path}: implausible log sector size {sectorsize} in the super block")
        return Super(version=version, nr_entries=nr_entries, sectorsize=sectorsize)

    def entries(self, *, past_count: bool = True) -> Iterator[Entry]:
        """Every entry in log order, reading headers only. ``past_count``: go on after the super
        block's count (entries logged after the last FUA or mark) until the first implausible header.
        ``last_stop`` says why the walk ended once the iterator is exhausted."""
        size = self.super.sectorsize
        offset = size
        index = 0
        self.last_stop = None
        while True:
            if not past_count and index >= self.super.nr_entries:
                self.last_stop = Stop("count", offset, f"the super block counts {self.super.nr_entries} entries")
                return
            header = _read_exactly(self._fd, size, offset)
            if len(header) < size:
                self.last_stop = Stop("end of log", offset, f"the log ends at byte {self.size}")
                return
            entry, problem = self._parse_header(header, index, offset)
            if entry is None:
                kind = "zeroed" if not header.strip(b"\0") else "garbage"
                self.last_stop = Stop(kind, offset, problem)
                return
            if entry.next_offset > self.size:
                self.last_stop = Stop(
                    "truncated",
                    offset,
                    f"entry {index} needs {entry.data_bytes} data bytes but the log ends at byte {self.size}",
                )
                return
            yield entry
            offset = entry.next_offset
            index += 1

    def _parse_header(self, header: bytes, index: int, offset: int) -> tuple[Entry | None, str]:
        """The entry this header describes, or None and why it is not a plausible one."""
        sector, nr_sectors, flags, data_len = _HEADER.unpack_from(header)
        size = self.super.sectorsize
        where = f"header at byte {offset}"
        if flags == 0 and nr_sectors == 0:
            return None, f"{where}: no flags and no sectors (the kernel never logs that)"
        if flags & ~KNOWN_FLAGS:
            return None, f"{where}: unknown flags {flags:#x}"
        if (sector + nr_sectors) * size >= 1 << 63:
            return None, f"{where}: sector {sector} +{nr_sectors} is beyond any device"
        label = None
        if flags & MARK:
            # A mark is its own entry: kzalloc'ed, so no sectors, flag MARK alone, label in the header.
            if flags != MARK or sector or nr_sectors:
                return None, f"{where}: a mark with flags {flags:#x}, sector {sector} +{nr_sectors}"
            if data_len > size - _HEADER.size - 1:
                return None, f"{where}: mark of {data_len} bytes does not fit its header sector"
            raw = header[_HEADER.size : _HEADER.size + data_len]
            if b"\0" in raw:
                return None, f"{where}: mark label holds a NUL byte"
            label = raw.decode("utf-8", errors="replace")
            padding = header[_HEADER.size + data_len :]
        else:
            if data_len:
                return None, f"{where}: data_len {data_len} on an entry that is not a mark"
            if flags & DISCARD and not nr_sectors:
                return None, f"{where}: a discard of no sectors"
            padding = header[_HEADER.size :]
        if padding.strip(b"\0"):
            return None, f"{where}: the header sector is not zero-padded"
        counted = index < self.super.nr_entries
        return Entry(index, offset, sector, nr_sectors, flags, size, counted, label), ""

    def scan(self) -> Scan:
        """Walk every header once (cached): counts, marks, flush points and where the log ends."""
        if self._scan is None:
            marks: list[tuple[int, str]] = []
            flush_points: list[int] = []
            found = 0
            end = self.super.sectorsize
            for entry in self.entries():
                found += 1
                end = entry.next_offset
                if entry.mark is not None:
                    marks.append((entry.index, entry.mark))
                elif entry.is_flush_point:
                    flush_points.append(entry.index)
            assert self.last_stop is not None
            self._scan = Scan(self.super, self.size, found, end, self.last_stop, marks, flush_points)
        return self._scan

    def entry(self, index: int) -> Entry:
        """Entry ``index`` (walks the headers up to it)."""
        found = self.scan().entries
        if not 0 <= index < found:
            raise LogError(f"{self.path}: no entry {index} (the log has {found} entries)")
        for entry in self.entries():
            if entry.index == index:
                return entry
        raise AssertionError("unreachable: scan() found it")

    def data(self, entry: Entry, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """An entry's data in chunks of at most ``chunk_bytes``."""
        offset, left = entry.data_offset, entry.data_bytes
        while left > 0:
            chunk = _read_exactly(self._fd, min(left, chunk_bytes), offset)
            if not chunk:
                raise LogError(f"{self.path}: entry {entry.index}'s data ends early at byte {offset}")
            yield chunk
            offset += len(chunk)
            left -= len(chunk)


# --------------------------------------------------------------------------------------------
# marks, flush points, completeness


def find_mark(log: WriteLog, label: str) -> int:
    """The index of the one mark named ``label``."""
    found = [index for index, name in log.scan().marks if name == label]
    if not found:
        names = ", ".join(repr(name) for _, name in log.scan().marks) or "none"
        raise LogError(f"{log.path}: no mark {label!r} in the log (marks: {names})")
    if len(found) > 1:
        raise LogError(f"{log.path}: mark {label!r} appears {len(found)} times (entries {found})")
    return found[0]


def flush_points(log: WriteLog, start_mark: str, end_mark: str) -> list[int]:
    """Indices of the FLUSH / FUA entries strictly between two marks, in log order."""
    start, end = find_mark(log, start_mark), find_mark(log, end_mark)
    if end < start:
        raise LogError(f"{log.path}: mark {end_mark!r} (entry {end}) comes before {start_mark!r} (entry {start})")
    return [index for index in log.scan().flush_points if start < index < end]


def check_complete(log: WriteLog, end_mark: str) -> None:
    """Raise LogIncomplete unless every counted entry reads back and ``end_mark`` was logged: without
    it the log may miss writes (the log device filled and the target stopped logging) and no replay
    of it is to be trusted."""
    scan = log.scan()
    if scan.entries < scan.super.nr_entries:  # entries the kernel logged cannot be read back
        raise LogIncomplete(
            f"{log.path}: damaged log: the super block counts {scan.super.nr_entries} entries but only "
            f"{scan.entries} could be read ({scan.stop.kind}: {scan.stop.detail})",
            full=False,
        )
    if any(name == end_mark for _, name in scan.marks):
        return
    free = scan.log_bytes - scan.end_offset
    full = free <= FULL_SLACK_BYTES + scan.super.sectorsize
    where = f"the log holds {scan.entries} entries, ending at byte {scan.end_offset} of {scan.log_bytes}"
    if full:
        raise LogIncomplete(
            f"{log.path}: dm-log-writes log device full: mark {end_mark!r} is missing and {where} "
            f"({free} bytes free); the target stops logging for good when a write does not fit: "
            "give the log a larger disk",
            full=True,
        )
    raise LogIncomplete(
        f"{log.path}: mark {end_mark!r} is missing ({where}, {free} bytes free, {scan.stop.kind}: "
        f"{scan.stop.detail}): the workload did not finish or the mark was never sent",
        full=False,
    )


@dataclass(frozen=True)
class Choice:
    """Flush points picked for replay, reproducibly from ``seed``."""

    points: list[int]  # sorted, distinct
    seed: int
    asked: int
    available: int
    note: str  # says so when fewer were available than asked


def choose_points(available: Sequence[int], count: int, seed: int) -> Choice:
    """``count`` distinct points drawn with ``random.Random(seed)``, sorted; all of them if fewer."""
    if count < 1:
        raise ValueError(f"the number of flush points to replay must be at least 1, got {count}")
    pool = sorted(set(available))
    if len(pool) <= count:
        note = f"only {len(pool)} flush points available, asked for {count}: replaying all of them"
        return Choice(pool, seed, count, len(pool), note if len(pool) < count else "")
    return Choice(sorted(random.Random(seed).sample(pool, count)), seed, count, len(pool), "")


# --------------------------------------------------------------------------------------------
# replay


class _Extents:
    """Disjoint byte ranges [start, end), kept sorted and merged."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, start: int, end: int) -> None:
        first = bisect.bisect_left(self._ends, start)  # ranges ending at or after start touch it
        last = bisect.bisect_right(self._starts, end)  # ranges starting at or before end touch it
        if first < last:
            start, end = min(start, self._starts[first]), max(end, self._ends[last - 1])
        self._starts[first:last] = [start]
        self._ends[first:last] = [end]

    def take(self, start: int, end: int) -> list[tuple[int, int]]:
        """Remove [start, end) and return the parts of it that were covered."""
        first = bisect.bisect_right(self._ends, start)
        last = bisect.bisect_left(self._starts, end)
        if first >= last:
            return []
        covered = [
            (max(s, start), min(e, end)) for s, e in zip(self._starts[first:last], self._ends[first:last], strict=True)
        ]
        kept = []
        if self._starts[first] < start:
            kept.append((self._starts[first], start))
        if self._ends[last - 1] > end:
            kept.append((end, self._ends[last - 1]))
        self._starts[first:last] = [s for s, _ in kept]
        self._ends[first:last] = [e for _, e in kept]
        return covered


@dataclass(frozen=True)
class Replayed:
    entries: int
    bytes_written: int
    bytes_zeroed: int


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view = view[done:]
        offset += done


def _zero(fd: int, start: int, end: int) -> None:
    zeros = bytes(min(CHUNK_BYTES, end - start))
    while start < end:
        count = min(len(zeros), end - start)
        _pwrite_all(fd, zeros[:count], start)
        start += count


def replay(
    log: WriteLog, target: str | os.PathLike[str], last: int, *, target_zeroed: bool, first: int = 0
) -> Replayed:
    """Apply entries 0..``last`` (inclusive) to ``target`` (a device or file, at least as large as
    the logged device), so that a target zeroed beforehand ends up as the device was right after
    entry ``last``. ``first``: entries before it are on the target already (an earlier replay up to
    ``first - 1``), so one copy can be brought from point to point in a single pass over the log.

    A discard is replayed as zeros: the model of a device that reads zeros after a discard (loop
    devices and qcow2 images do; xfstests' replay does the same when it cannot discard).
    ``target_zeroed=True`` promises the target held only zeros before the replay: a discard then
    zeroes only what this replay wrote earlier (the rest is zero already), so mkfs's discard of the
    whole device costs nothing. With False every discarded byte is written."""
    found = log.scan().entries
    if not 0 <= last < found:
        raise LogError(f"{log.path}: cannot replay up to entry {last}: the log has {found} entries")
    if not 0 <= first <= last:
        raise LogError(f"{log.path}: cannot replay from entry {first} up to entry {last}")
    try:
        fd = os.open(os.fspath(target), os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise LogError(f"cannot open replay target {os.fspath(target)}: {exc.strerror}") from exc
    written = _Extents()
    bytes_written = bytes_zeroed = 0
    try:
        target_bytes = os.lseek(fd, 0, os.SEEK_END)
        for entry in log.entries():
            if entry.index > last:
                break
            if not entry.nr_sectors or entry.mark is not None:
                continue  # a bare flush or a mark changes no data
            start, end = entry.device_offset, entry.device_offset + entry.device_bytes
            if entry.index < first:  # on the target already: only remember what is not zero
                if target_zeroed and entry.flags & DISCARD:
                    written.take(start, end)
                elif target_zeroed:
                    written.add(start, end)
                continue
            if end > target_bytes:
                raise LogError(
                    f"entry {entry.index} reaches byte {end} but replay target {os.fspath(target)} has "
                    f"{target_bytes} bytes: the target must be at least as large as the logged device"
                )
            if entry.flags & DISCARD:
                ranges = written.take(start, end) if target_zeroed else [(start, end)]
                for zero_start, zero_end in ranges:
                    _zero(fd, zero_start, zero_end)
                    bytes_zeroed += zero_end - zero_start
                continue
            offset = start
            for chunk in log.data(entry):
                _pwrite_all(fd, chunk, offset)
                offset += len(chunk)
            bytes_written += end - start
            if target_zeroed:
                written.add(start, end)
        os.fsync(fd)  # the caller mounts the target next: the data must be on it
    finally:
        os.close(fd)
    return Replayed(last + 1 - first, bytes_written, bytes_zeroed)


# --------------------------------------------------------------------------------------------
# the guest side: creating the target, marks, status

_LABEL = re.compile(r"^[!-~]+$")  # printable ASCII without spaces: dmsetup splits its message on spaces


def table_line(data_device: str, log_device: str, sectors: int) -> str:
    """The dmsetup table of a log-writes target over all ``sectors`` (512-byte) of ``data_device``."""
    if sectors < 1:
        raise ValueError(f"a log-writes table needs a positive length in sectors, got {sectors}")
    return f"0 {sectors} log-writes {data_device} {log_device}"


def device_sectors(path: str) -> int:
    """A device's (or file's) size in 512-byte sectors, the unit of device-mapper tables."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END) // SECTOR_BYTES
    finally:
        os.close(fd)


def create(name: str, data_device: str, log_device: str) -> str:
    """Create the target ``name`` (logging starts now) and return its /dev/mapper path."""
    proc.run(["dmsetup", "create", name, "--table", table_line(data_device, log_device, device_sectors(data_device))])
    return f"/dev/mapper/{name}"


def mark(name: str, label: str) -> None:
    """Log a mark named ``label`` on the target ``name``, in order with the writes completed so far."""
    if not _LABEL.match(label) or len(label) > MAX_MARK_BYTES:
        raise ValueError(
            f"a dm-log-writes mark is 1 to {MAX_MARK_BYTES} printable ASCII characters without spaces, got {label!r}"
        )
    proc.run(["dmsetup", "message", name, "0", "mark", label])


@dataclass(frozen=True)
class Status:
    logged_entries: int
    highest_sector: int  # the last 512-byte sector of the log in use
    logging_disabled: bool  # the log device filled up (or a log write failed): the log misses writes


def parse_status(text: str) -> Status:
    """Parse ``dmsetup status`` of a log-writes target: ``0 LEN log-writes ENTRIES SECTOR [logging_disabled]``."""
    words = text.split()
    try:
        at = words.index("log-writes")
        return Status(int(words[at + 1]), int(words[at + 2]), "logging_disabled" in words[at + 3 :])
    except (ValueError, IndexError):
        raise LogError(f"unexpected dmsetup status of a log-writes target: {text.strip()!r}") from None


def status(name: str) -> Status:
    """The target's own count; check ``logging_disabled`` before removing it."""
    return parse_status(proc.output(["dmsetup", "status", name]))


# --------------------------------------------------------------------------------------------
# debugging CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m fsmatrix.agent.crash.logwrites", description="Show a dm-log-writes log."
    )
    parser.add_argument("log", help="the log device or file")
    parser.add_argument("--entries", action="store_true", help="list every entry")
    parser.add_argument("--between", nargs=2, metavar=("START", "END"), help="flush points between two marks")
    args = parser.parse_args(argv)
    try:
        with WriteLog(args.log) as log:
            scan = log.scan()
            print(
                f"{log.path}: version {scan.super.version}, sector size {scan.super.sectorsize}, "
                f"{scan.super.nr_entries} entries counted, {scan.entries} found, ending at byte "
                f"{scan.end_offset} of {scan.log_bytes} ({scan.stop.kind}: {scan.stop.detail})"
            )
            if args.entries:
                for entry in log.entries():
                    print(entry.describe())
            print("marks: " + (", ".join(f"{i} {name!r}" for i, name in scan.marks) or "none"))
            points = flush_points(log, *args.between) if args.between else scan.flush_points
            where = f" between {args.between[0]!r} and {args.between[1]!r}" if args.between else ""
            print(f"flush points{where}: {len(points)}: " + " ".join(map(str, points)))
    except LogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
