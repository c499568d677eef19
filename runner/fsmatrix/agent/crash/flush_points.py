"""``crash.mode: flush-points``: log the data disk's writes, then recover at chosen flush points.

In the guest (qemu backend), with two extra virtio disks the backend attaches for such a cell
(serials ``fsm-log`` and ``fsm-scratch``):

1. ``storage.prepare`` puts the data device behind a ``log-writes`` device-mapper target whose log
   is the log disk (``FlushPoints.wrap``); the filesystem is made and mounted on the target.
2. The run is a normal one. When its measured part begins, the setup is made durable (``sync``)
   and the mark ``fsmatrix-start`` is logged; when it ends, ``fsmatrix-end`` (``FlushPoints.marks``).
   The target's status is read before it is removed: a log that filled up fails the run.
3. After the teardown (``FlushPoints.replay_points``): the log is read (``storage.logwrites``),
   ``crash.points`` flush/FUA entries between the marks are drawn with ``crash.seed``, and the log
   is replayed, in log order, onto the first part of the scratch disk (``base``; the disk starts
   zeroed). For each point a transient dm-snapshot of ``base`` (its copy-on-write area: the rest
   of the scratch disk) is mounted where the data filesystem was (timed: the filesystem's journal
   replay), the workload's recover hook runs on it, and the snapshot is dropped: every point starts
   from the replayed state alone, never from an earlier point's recovery.

Each point gets a verdict (``PointRecord``); the run passes only if every point passes. What a
point models: a disk whose volatile write cache lost everything not flushed at that moment (the
method of xfstests' generic/482 and CrashMonkey). Standard library only: this runs in the guest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsmatrix.agent import crash, proc
from fsmatrix.agent.crash import logwrites as lw
from fsmatrix.agent.crash.mode import CrashMode, CrashRun, WrapData
from fsmatrix.agent.storage import data_disks, filesystems

if TYPE_CHECKING:
    from fsmatrix.agent.cell import Cell
    from fsmatrix.agent.contract import Outcome, Workspace

log = logging.getLogger("fsmatrix")

LOG_SERIAL = "fsm-log"
SCRATCH_SERIAL = "fsm-scratch"
START_MARK = "fsmatrix-start"
END_MARK = "fsmatrix-end"
TARGET = "fsmatrix-logw"  # the log-writes target over the data device
BASE, COW, SNAPSHOT = "fsmatrix-fp-base", "fsmatrix-fp-cow", "fsmatrix-fp-snap"
SNAPSHOT_CHUNK_SECTORS = 8  # 4 KiB copy-on-write chunks
MIN_COW_BYTES = 64 << 20
# Checks of a recover hook that say how much work the crash left, not whether the recovery is
# right: a point early in the run legitimately finds little done. Recorded, but not a verdict.
INFORMATIONAL_CHECKS = frozenset({"work reused"})
# Of the log disk, per byte of data disk: mkfs, the workload's writes and its journal's all go to
# the log (measured: see docs/crash-recovery.md). The disk image is sparse: unused log costs nothing.
LOG_DISK_FACTOR = 4
SCRATCH_DISK_FACTOR = 2  # the replayed copy, and as much again for each point's recovery writes
DISK_WAIT_S = data_disks.DEVICE_WAIT_S


# A test's hook, in the job's ``environment`` (the qemu backend copies FSMATRIX_FLUSH_CORRUPT_POINT
# there): damage the files of that point's replayed filesystem before its recovery, so the point
# must fail. It stays in the result's provenance: such a run says it was damaged on purpose.
CORRUPT_POINT_KEY = "flush_points_corrupt_point"
CORRUPT_BYTES = 64 << 10


class FlushPointsError(RuntimeError):
    """The flush-points machinery could not run (a disk missing, a log unusable): fails the run."""


def disk_sizes(data_bytes: int) -> tuple[int, int]:
    """(log disk, scratch disk) bytes for a data disk of ``data_bytes``."""
    return data_bytes * LOG_DISK_FACTOR, data_bytes * SCRATCH_DISK_FACTOR + MIN_COW_BYTES


def find_disks(by_id: Path = Path("/dev/disk/by-id"), wait_s: float | None = None) -> tuple[str, str]:
    """The log and scratch disks (by serial, as the qemu backend attached them)."""
    try:
        log_disk, scratch_disk = data_disks.resolve_data_disks(
            [LOG_SERIAL, SCRATCH_SERIAL], by_id=by_id, wait_s=DISK_WAIT_S if wait_s is None else wait_s
        )
    except data_disks.DataDiskError as exc:
        raise FlushPointsError(
            f"crash.mode 'flush-points' needs the log and scratch disks the qemu backend attaches: {exc}"
        ) from exc
    return log_disk, scratch_disk


# --------------------------------------------------------------------------------------------
# verdicts


@dataclass
class PointRecord:
    """One replayed flush point in the result's ``crash.points``."""

    index: int  # 0.. in log order
    entry: int  # the log entry (a FLUSH or FUA) replayed up to, inclusive
    sectors_replayed: int  # 512-byte sectors of data written to rebuild the device up to it
    replay_s: float | None = None  # replaying the entries since the previous point
    mount_s: float | None = None  # mounting the replayed filesystem (its journal replay)
    recovery_s: float | None = None  # the database's own recovery (the hook's)
    verdict: str = "failed"  # "passed" | "failed"
    reason: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    reused: dict[str, Any] = field(default_factory=dict)


def point_verdict(event: crash.CrashEvent, outcome: Outcome | None, error: str | None) -> tuple[str, str]:
    """("passed" | "failed", reason) of one point from its recovery's record: failed steps, failed
    checks (but INFORMATIONAL_CHECKS), the resumed work's verification, an error that stopped it."""
    problems = [f"recovery step {s['name']} failed: {s['detail']}" for s in event.steps if s["status"] == "failed"]
    problems += [
        f"{c['name']}: {c['message']}"
        for c in event.checks
        if c["verdict"] == "failed" and c["name"] not in INFORMATIONAL_CHECKS
    ]
    if error:
        problems.append(error)
    elif outcome is None:
        if not problems:
            problems.append("the recovery returned nothing")
    elif outcome.verification.get("status") not in ("passed", "not-applicable"):
        problems.append(str(outcome.verification.get("message") or "verification failed"))
    problems = list(dict.fromkeys(problems))  # a failed step is also the error that stopped the hook
    return ("failed", "; ".join(problems)) if problems else ("passed", "")


def summary(points: list[dict[str, Any]]) -> str:
    """One line: how many points passed, and the seconds each took."""
    passed = sum(1 for p in points if p["verdict"] == "passed")
    mounts = [p["mount_s"] for p in points if p["mount_s"] is not None]
    return f"{passed} of {len(points)} flush points passed" + (
        f"; mount {min(mounts):g}-{max(mounts):g} s" if mounts else ""
    )


# --------------------------------------------------------------------------------------------
# device-mapper helpers


def _dm_create(name: str, table: str, stack: ExitStack) -> str:
    proc.run(["dmsetup", "create", name, "--table", table], timeout=60)
    stack.callback(_dm_remove, name)
    proc.run(["udevadm", "settle", "--timeout=30"], timeout=60, check=False)
    return f"/dev/mapper/{name}"


def _dm_remove(name: str) -> None:
    for attempt in range(10):  # udev may hold the device for a moment after a change
        done = proc.run(["dmsetup", "remove", name], timeout=60, check=False)
        if done.returncode == 0:
            return
        time.sleep(0.2 * (attempt + 1))
    raise FlushPointsError(f"cannot remove device-mapper target {name}: {(done.stdout + done.stderr).strip()}")


def snapshot_invalid(status_text: str) -> bool:
    """``dmsetup status`` of a snapshot: "Invalid" once its copy-on-write area overflowed."""
    return "Invalid" in status_text.split()


# --------------------------------------------------------------------------------------------
# the run


@dataclass(frozen=True)
class PointRecovery:
    """How each flush point is recovered: the cell, where a point's filesystem is mounted, the
    scratch directory (a subdirectory per point), the workload's recover hook and reference values,
    and ``before_recover(device, index)``, a test's hook called before the recovery."""

    cell: Cell
    mount_point: Path
    scratch: Path
    recover: Callable[[Cell, Workspace, crash.CrashEvent], Outcome]
    reference: Mapping[str, Any] | None
    before_recover: Callable[[str, int], None] | None = None


class FlushPoints:
    """One flush-points run: the hooks ``job.run_job`` calls, and the replay after the run."""

    def __init__(
        self, settings: crash.CrashSettings, event: crash.CrashEvent, log_disk: str, scratch_disk: str
    ) -> None:
        self.settings = settings
        self.event = event
        self.log_disk = log_disk
        self.scratch_disk = scratch_disk
        self.target: str | None = None  # the log-writes target, while it exists
        self.data_sectors = 0
        self.status: lw.Status | None = None  # the target's, just before its removal
        self._marked: list[str] = []

    @classmethod
    def for_cell(cls, settings: crash.CrashSettings, event: crash.CrashEvent) -> FlushPoints:
        log_disk, scratch_disk = find_disks()
        return cls(settings, event, log_disk, scratch_disk)

    # ---------------------------------------------------------------- during the run

    def wrap(self, data_device: str, stack: ExitStack) -> str:
        """``storage.prepare``'s ``wrap_data``: the log-writes target over ``data_device``."""
        self.data_sectors = lw.device_sectors(data_device)
        log_bytes = lw.device_sectors(self.log_disk) * lw.SECTOR_BYTES
        if lw.device_sectors(self.scratch_disk) * lw.SECTOR_BYTES < self.data_sectors * lw.SECTOR_BYTES + MIN_COW_BYTES:
            raise FlushPointsError(
                f"scratch disk {self.scratch_disk} is too small: it needs the data device's "
                f"{self.data_sectors * lw.SECTOR_BYTES} bytes plus {MIN_COW_BYTES} for copy-on-write"
            )
        # The log must start zeroed (a fresh sparse image does): check its first sector at least.
        with open(self.log_disk, "rb") as fh:
            if fh.read(4096).strip(b"\0"):
                raise FlushPointsError(f"log disk {self.log_disk} is not zeroed: an old log would read as entries")
        path = lw.create(TARGET, data_device, self.log_disk)
        self.target = TARGET
        stack.callback(self._remove_target)
        proc.run(["udevadm", "settle", "--timeout=30"], timeout=60, check=False)
        log.info("flush-points: %s logs the writes of %s to %s (%d bytes)", path, data_device, self.log_disk, log_bytes)
        return path

    def _remove_target(self) -> None:
        if self.target is None:
            return
        with contextlib.suppress(proc.CommandError, lw.LogError):
            self.status = lw.status(self.target)
        _dm_remove(self.target)
        self.target = None

    @contextlib.contextmanager
    def marks(self) -> Iterator[None]:
        """Around the measured part (once): setup made durable, then the start mark; the end mark after."""
        if self._marked or self.target is None:
            yield
            return
        os.sync()  # the points test the measured workload, not a setup still in the page cache
        lw.mark(self.target, START_MARK)
        self._marked.append(START_MARK)
        ok = False
        try:
            yield
            ok = True
        finally:
            if ok:  # an end mark after a failed workload would make its log look complete
                lw.mark(self.target, END_MARK)
                self._marked.append(END_MARK)

    # ---------------------------------------------------------------- after the run

    def replay_points(
        self,
        cell: Cell,
        mount_point: Path,
        scratch: Path,
        recover: Callable[[Cell, Workspace, crash.CrashEvent], Outcome],
        reference: Mapping[str, Any] | None,
        *,
        before_recover: Callable[[str, int], None] | None = None,
    ) -> None:
        """Draw the points, replay, mount, recover and judge each; fill ``event.flush_points`` and
        ``event.points``. Raises RecoveryFailed when the log cannot be used (full, incomplete):
        the run then fails naming why. ``before_recover(device, index)``: a test's hook, called
        with the mounted point's device before its recovery."""
        event = self.event
        how = PointRecovery(cell, mount_point, scratch, recover, reference, before_recover)
        if self.status is not None and self.status.logging_disabled:
            raise crash.RecoveryFailed(
                "log",
                f"dm-log-writes stopped logging (logging_disabled after {self.status.logged_entries} entries): "
                f"the log disk {self.log_disk} filled up or a log write failed; give the log a larger disk",
            )
        with lw.WriteLog(self.log_disk) as wlog:
            try:
                lw.check_complete(wlog, END_MARK)
                available = lw.flush_points(wlog, START_MARK, END_MARK)
            except lw.LogError as exc:
                raise crash.RecoveryFailed("log", str(exc)) from exc
            scan = wlog.scan()
            choice = lw.choose_points(available, self.settings.points, self.settings.seed) if available else None
            event.flush_points = {
                "seed": self.settings.seed,
                "asked": self.settings.points,
                "available": len(available),
                "chosen": choice.points if choice else [],
                "note": choice.note if choice else "",
                "log_entries": scan.entries,
                "log_bytes_used": scan.end_offset,
                "log_bytes": scan.log_bytes,
                "log_sector_size": scan.super.sectorsize,
                "marks": [f"{index} {name}" for index, name in scan.marks],
            }
            if choice is None:
                between = f"between the marks {START_MARK} and {END_MARK}"
                raise crash.RecoveryFailed("log", f"no flush or FUA entry {between}")
            log.info(
                "flush-points: %d of %d flush points chosen (seed %d); log %d entries, %d of %d bytes",
                len(choice.points), len(available), self.settings.seed, scan.entries, scan.end_offset, scan.log_bytes,
            )  # fmt: skip
            sectors = _sectors_up_to(wlog, choice.points)
            with ExitStack() as stack:
                base, cow = self._scratch_layout(stack)
                previous = -1
                for index, entry in enumerate(choice.points):
                    record = PointRecord(index, entry, sectors[entry])
                    t0 = time.monotonic()
                    lw.replay(wlog, base, entry, target_zeroed=True, first=previous + 1)
                    record.replay_s = round(time.monotonic() - t0, 3)
                    previous = entry
                    self._one_point(how, record, base, cow)
                    event.points.append(asdict(record))
                    log.info(
                        "flush point %d (entry %d): %s%s", index, entry, record.verdict,
                        f": {record.reason}" if record.reason else "",
                    )  # fmt: skip
        log.info("flush-points: %s", summary(event.points))
        left = left_behind(mount_point)
        event.flush_points["left_behind"] = left
        if left:
            raise crash.RecoveryFailed("teardown", "left behind: " + ", ".join(left))
        event.fired = True  # every chosen crash state was recovered from (or tried)
        event.mount_s = max((p["mount_s"] for p in event.points if p["mount_s"] is not None), default=None)
        event.recovery_s = max((p["recovery_s"] for p in event.points if p["recovery_s"] is not None), default=None)

    def _scratch_layout(self, stack: ExitStack) -> tuple[str, str]:
        """``base`` (the data device's size: the replay target) and ``cow`` (the rest) on the scratch disk."""
        total = lw.device_sectors(self.scratch_disk)
        base = _dm_create(BASE, f"0 {self.data_sectors} linear {self.scratch_disk} 0", stack)
        cow_sectors = total - self.data_sectors
        cow = _dm_create(COW, f"0 {cow_sectors} linear {self.scratch_disk} {self.data_sectors}", stack)
        return base, cow

    def _one_point(self, how: PointRecovery, record: PointRecord, base: str, cow: str) -> None:
        """The point's crash state (a snapshot of ``base``, the replay up to it, writes going to
        ``cow``) mounted, recovered and judged, into ``record``."""
        from fsmatrix.agent.contract import Workspace
        from fsmatrix.agent.storage.prepare import unmount

        cell, mount_point = how.cell, how.mount_point

        point_event = crash.CrashEvent(mode=self.event.mode, after_s=self.event.after_s, fired=True)
        # The acknowledgements of the whole run say nothing of an earlier point: not checked here.
        point_event.acknowledged = 0
        outcome: Outcome | None = None
        error: str | None = None
        with ExitStack() as stack:
            table = f"0 {self.data_sectors} snapshot {base} {cow} N {SNAPSHOT_CHUNK_SECTORS}"
            device = _dm_create(SNAPSHOT, table, stack)
            made = _make_dirs(mount_point)
            stack.callback(_remove_dirs, made)
            fs = filesystems.get(cell.filesystem)
            options = [*fs.mount_options, *(o for o in cell.mount_options.split(",") if o.strip())]
            command = ["mount", "-t", cell.filesystem, *(["-o", ",".join(options)] if options else [])]
            stack.callback(unmount, mount_point)
            t0 = time.monotonic()
            mounted = proc.run([*command, device, str(mount_point)], timeout=300, check=False)
            record.mount_s = round(time.monotonic() - t0, 3)
            if mounted.returncode != 0:
                error = f"mount failed: {crash.short(mounted.stdout + mounted.stderr)}"
                record.mount_s = None
            else:
                point_event.mount_s = record.mount_s
                point_scratch = how.scratch / f"point-{record.index}"
                point_scratch.mkdir(parents=True, exist_ok=True)
                ws = Workspace(mount_point, mount_point, point_scratch, reference=how.reference, crash=point_event)
                try:
                    if how.before_recover is not None:
                        how.before_recover(device, record.index)
                    outcome = how.recover(cell, ws, point_event)
                except crash.RecoveryFailed as exc:  # its failed step is on record already
                    failed_step = any(s["status"] == "failed" for s in point_event.steps)
                    error = None if failed_step else f"recovery failed: {exc}"
                    outcome = None
                except Exception as exc:  # the point failed; the others still run
                    error = f"{type(exc).__name__}: {crash.short(str(exc))}"
            unmount(mount_point)
            status = proc.run(["dmsetup", "status", SNAPSHOT], timeout=60, check=False).stdout
            if snapshot_invalid(status):
                error = (error + "; " if error else "") + (
                    "the scratch disk's copy-on-write area filled up during the recovery (snapshot invalid): "
                    "the point's result cannot be trusted"
                )
        record.recovery_s = point_event.recovery_s
        record.steps, record.checks, record.reused = point_event.steps, point_event.checks, point_event.reused
        record.verdict, record.reason = point_verdict(point_event, outcome, error)


def corrupt_files(directory: Path) -> int:
    """Zero the first CORRUPT_BYTES of every regular file under ``directory`` (a database's headers
    with them); return how many files. The test hook's damage."""
    damaged = 0
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("r+b") as fh:
                size = min(CORRUPT_BYTES, os.fstat(fh.fileno()).st_size)
                fh.write(bytes(size))
                fh.flush()
                os.fsync(fh.fileno())
            damaged += 1
    return damaged


def corrupt_hook(environment: Mapping[str, Any], mount_point: Path) -> Callable[[str, int], None] | None:
    """``replay_points``' ``before_recover`` for a job whose environment asks for a damaged point."""
    chosen = environment.get(CORRUPT_POINT_KEY)
    if chosen is None:
        return None
    point = int(chosen)

    def damage(device: str, index: int) -> None:
        if index == point:
            log.warning("flush point %d: damaging its files on purpose (test hook %s)", index, CORRUPT_POINT_KEY)
            log.warning("flush point %d: %d files damaged on %s", index, corrupt_files(mount_point), device)

    return damage


def left_behind(mount_point: Path) -> list[str]:
    """What this module made and should have removed by now: its device-mapper targets, the mount."""
    from fsmatrix.agent.storage.devices import read_mounts

    found = [f"device-mapper target {n}" for n in (TARGET, BASE, COW, SNAPSHOT) if Path(f"/dev/mapper/{n}").exists()]
    found += [f"mount {m.mount_point}" for m in read_mounts() if m.mount_point == str(mount_point)]
    return found


def _sectors_up_to(wlog: lw.WriteLog, points: list[int]) -> dict[int, int]:
    """For each point, the 512-byte sectors of data the replay up to it writes (discards not counted)."""
    wanted, found, total = set(points), {}, 0
    last = max(points)
    for entry in wlog.entries():
        if entry.index > last:
            break
        if entry.mark is None and not entry.flags & lw.DISCARD:
            total += entry.device_bytes // lw.SECTOR_BYTES
        if entry.index in wanted:
            found[entry.index] = total
    return found


def _make_dirs(path: Path) -> list[Path]:
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir()
    return missing


def _remove_dirs(made: list[Path]) -> None:
    for directory in made:  # deepest first; only empty directories, never data
        with contextlib.suppress(OSError):
            directory.rmdir()


# --------------------------------------------------------------------------------------------
# the mode


class FlushPointsRun(CrashRun):
    """A normal run on a logged data device; the crash states are rebuilt from the log afterwards."""

    def __init__(self, settings: crash.CrashSettings, event: crash.CrashEvent) -> None:
        super().__init__(settings, event)
        self.replays = FlushPoints.for_cell(settings, event)

    @property
    def wrap_data(self) -> WrapData:
        return self.replays.wrap

    @contextlib.contextmanager
    def measured(self, cgroup_dir: Path | None, directories: Iterable[Path]) -> Iterator[None]:
        with super().measured(cgroup_dir, directories), self.replays.marks():
            yield

    def run(self, cell: Cell, workspace: Workspace, recover: bool) -> Outcome:
        return cell.declaration.run_cell(cell, workspace, float(cell.timeout))

    def after(
        self,
        cell: Cell,
        data_mount: Path,
        scratch: Path,
        reference: Mapping[str, Any] | None,
        environment: Mapping[str, Any],
    ) -> None:
        hook = cell.declaration.recover
        assert hook is not None  # Cell.check refuses a crash setting for a workload without one
        damage = corrupt_hook(environment, data_mount)  # a test's hook; None otherwise
        self.replays.replay_points(cell, data_mount, scratch, hook, reference, before_recover=damage)


def _refuses(cell: Cell) -> tuple[str, str] | None:
    if cell.storage.journal_on_own_filesystem is None:
        return None
    return (
        "crash.mode",
        "crash.mode 'flush-points' replays one device's write log: it cannot order the writes of "
        "layout 'split-journal' across two devices; use layout 'single' or crash.mode 'power-cut'",
    )


MODE = CrashMode(
    name="flush-points",
    help="log the data disk's writes, then recover at chosen flush points (the qemu backend)",
    start=FlushPointsRun,
    needs_vm="it logs the data disk's writes with dm-log-writes and replays them onto extra disks in the guest",
    kernel_module="dm_log_writes",
    refuses=_refuses,
)
