"""GT.M: find the installation, build a fresh database from a cell's ``gtm`` settings, read back what
GT.M actually configured, and leave nothing behind (processes stopped, database run down).

The settings (``cell["gtm"]``) map onto GT.M like this:

- ``block_size``, ``global_buffers``, ``access_method``: GDE segment qualifiers;
- ``journal`` (before / nobefore / off), ``journal_buffers``, ``sync_io``: ``mupip set -journal``;
- ``full_block_writes``: GDE ``-fullblkwrt=1``. GT.M V7 made this a database setting (it shows in
  the file header); ``gtm_fullblockwrites=1`` is also exported for older releases that read it.

``dse dump -fileheader`` output is parsed by ``parse_fileheader`` only.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsmatrix.agent import declare, proc, provenance
from fsmatrix.agent.contract import SettingsBlock
from fsmatrix.agent.declare import Invalid, setting

log = logging.getLogger("fsmatrix")

DIST_GLOB = "/usr/lib/x86_64-linux-gnu/fis-gtm/*/mumps"
TOOL = "gtm_dist"  # the guest image declares GT.M's installation directory under this name
REGION = "DEFAULT"
# GT.M's own defaults (gdedefaults), which the published runs used: the file grows 10,000 blocks at
# a time, so its size is comparable with the seeds' figures.
ALLOCATION = 5000
EXTENSION = 10000
MAX_KEY_SIZE = 1019
# GDE: "block size B and reserved bytes 0 limit key size to B - 40".
KEY_SIZE_OVERHEAD = 40

ACCESS_METHODS = ("BG", "MM")
JOURNAL_MODES = ("before", "nobefore", "off")


@dataclass(frozen=True)
class Settings:
    """What to ask GT.M for: the cell's ``gtm`` block, declared once (defaults, bounds, help)."""

    block_size: int = setting(4096, minimum=512, maximum=65024, multiple_of=512, help="database block size, bytes")
    global_buffers: int = setting(35000, minimum=64, maximum=2097151, help="GDE -global_buffer_count")
    # GT.M V7 accepts 2307.. and rounds up to a multiple of 8.
    journal_buffers: int = setting(2312, minimum=2307, maximum=1048576, help="mupip set -journal=buffer_size")
    access_method: str = setting("BG", choices=ACCESS_METHODS, help="BG (buffered global) or MM (memory-mapped)")
    journal: str = setting("before", choices=JOURNAL_MODES, help="before-image, nobefore-image or no journal")
    sync_io: bool = setting(False, help="mupip set -journal=sync_io")
    full_block_writes: bool = setting(False, help="GDE -fullblkwrt=1 (whole blocks written)")
    # Not matrix settings: GT.M's own defaults, as the published runs used.
    allocation: int = setting(ALLOCATION, minimum=1, matrix=False)
    extension: int = setting(EXTENSION, minimum=1, matrix=False)

    def __post_init__(self) -> None:
        if self.access_method == "MM" and self.journal == "before":
            raise Invalid(
                "gtm.access_method",
                "gtm.access_method 'MM' cannot be combined with gtm.journal 'before' (GT.M cannot write "
                "before-images for memory-mapped databases); use journal 'nobefore' or 'off', or access_method 'BG'",
            )

    @classmethod
    def from_mapping(cls, gtm: Mapping[str, Any] | None) -> Settings:
        """Parse a ``gtm`` block (ValueError for a bad value); lower-case access methods are accepted."""
        values = dict(gtm or {})
        if isinstance(values.get("access_method"), str):
            values["access_method"] = values["access_method"].upper()
        return declare.parse(cls, values, "gtm")

    @property
    def key_size(self) -> int:
        return min(MAX_KEY_SIZE, self.block_size - KEY_SIZE_OVERHEAD)


DEFAULT_SETTINGS: dict[str, Any] = declare.defaults(Settings)  # the matrix settings' defaults


# The cell's ``gtm`` block; the workloads that run on GT.M list it in their ``settings``.
def buffer_bytes(settings: Settings) -> int:
    """The database's shared memory: global buffers of one block each (MM maps the file instead,
    page cache the kernel can reclaim, but GT.M still allocates the count asked for) and the
    journal buffers, in 512-byte units, when journaling."""
    journal = settings.journal_buffers * 512 if settings.journal != "off" else 0
    return settings.global_buffers * settings.block_size + journal


BLOCK = SettingsBlock(
    "gtm",
    Settings,
    "GT.M database settings (workloads that run on GT.M)",
    summary=lambda s: f"{s.access_method} jnl={s.journal} gb={s.global_buffers}",
    memory=lambda s: buffer_bytes(s),
    memory_settings=("global_buffers", "journal_buffers"),
)


def _version_key(path: str) -> list[tuple[int, int, str]]:
    """Natural sort key so that V7.0-010 sorts after V7.0-005 and V10 after V7."""
    return [(1, int(p), "") if p.isdigit() else (0, 0, p) for p in re.split(r"(\d+)", path) if p]


def locate_dist(environ: Mapping[str, str] | None = None, declared: Path | None = None) -> Path:
    """The GT.M installation directory: ``$gtm_dist`` when set; in a guest image, the one its
    definition declares (``declared``, default the image manifest's ``tools.gtm_dist``); else, on a
    host, the newest Debian fis-gtm."""
    env = os.environ if environ is None else environ
    override = env.get("gtm_dist", "")
    if override:
        if not (Path(override) / "mumps").is_file():
            raise FileNotFoundError(f"$gtm_dist={override} holds no mumps executable")
        return Path(override)
    declared = declared or provenance.image_tool(TOOL)
    if declared is not None:
        if not (declared / "mumps").is_file():
            raise FileNotFoundError(f"the guest image declares GT.M in {declared} (tools.{TOOL}): no mumps there")
        return declared
    found = sorted(glob.glob(DIST_GLOB), key=_version_key)
    if not found:
        raise FileNotFoundError(f"GT.M not found: nothing matches {DIST_GLOB} and $gtm_dist is not set")
    return Path(found[-1]).parent


@dataclass(frozen=True)
class Database:
    """A GT.M database with its global directory, journal and the directories its processes use."""

    dist: Path
    gld: Path
    dat: Path
    journal_file: Path | None
    objects: Path  # compiled routines
    sources: Path  # routine sources (copied here: nothing is compiled in the package directory)
    tmp: Path  # $gtm_tmp
    settings: Settings

    def tool(self, name: str) -> str:
        return str(self.dist / name)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean GT.M environment: the caller's gtm*/ydb* variables are dropped, ours set."""
        env = {k: v for k, v in os.environ.items() if not k.lower().startswith(("gtm", "ydb"))}
        env.update(
            {
                "gtm_dist": str(self.dist),
                "gtmgbldir": str(self.gld),
                "gtmroutines": f"{self.objects}({self.sources}) {self.dist / 'libgtmutil.so'}",
                "gtm_tmp": str(self.tmp),
                "gtm_log": str(self.tmp),
                "gtm_statsdir": str(self.tmp),
                "gtm_linktmpdir": str(self.tmp),
            }
        )
        if self.settings.full_block_writes:
            env["gtm_fullblockwrites"] = "1"
        env.update(provenance.image_tool_env(TOOL))  # what this guest image's GT.M needs (packer/images/)
        env.update(extra or {})
        return env


def _check_path(path: Path) -> None:
    # gtmroutines is space separated and GDE reads -file_name to the end of the line.
    if any(ch.isspace() for ch in str(path)):
        raise ValueError(f"GT.M cannot use a path with white space: {str(path)!r}")


def _gtm_errors(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if re.search(r"%(GTM|GDE|SYSTEM)-[EF]-", line)]


@dataclass(frozen=True)
class DatabaseLocation:
    """Where a database goes: ``data/name.dat``, its journal ``journal/name.mjl``, and its global
    directory, compiled routines and $gtm_tmp under ``scratch``."""

    data: Path
    journal: Path
    scratch: Path
    name: str = "gtm"

    @property
    def dat(self) -> Path:
        return self.data.resolve() / f"{self.name}.dat"


def create_database(
    settings: Settings, where: DatabaseLocation, *, timeout: float = 120.0, dist: Path | None = None
) -> tuple[Database, list[str]]:
    """A fresh database ``where.dat`` built from ``settings``.

    Refuses to overwrite an existing database file. Returns the database and GT.M's
    informational/warning messages (e.g. a journal buffer count it adjusted).
    """
    if where.dat.exists():
        raise FileExistsError(f"{where.dat} already exists: a 3n+1 run needs a fresh database")
    deadline = time.monotonic() + timeout
    db = _global_directory(settings, where, deadline, dist)
    messages: list[str] = []
    out = proc.run([db.tool("mupip"), "create"], env=db.env(), input="", timeout=_left(deadline))
    messages += _notable(out.stdout + out.stderr)
    if db.journal_file is not None:
        messages += enable_journal(db, timeout=_left(deadline))
    return db, messages


def attach_database(
    settings: Settings, where: DatabaseLocation, *, timeout: float = 120.0, dist: Path | None = None
) -> Database:
    """The existing database ``where.dat`` (a crashed one, say), through a new global directory in
    ``where.scratch``: nothing in the database or its journal is changed."""
    if not where.dat.is_file():
        raise FileNotFoundError(f"{where.dat}: no database to attach to")
    return _global_directory(settings, where, time.monotonic() + timeout, dist)


def _global_directory(settings: Settings, where: DatabaseLocation, deadline: float, dist: Path | None) -> Database:
    """The Database for ``where.dat`` and its global directory (GDE), made in ``where.scratch``."""
    for path in (where.data, where.journal, where.scratch):
        _check_path(path.resolve())
    data_dir, journal_dir, scratch_dir = where.data.resolve(), where.journal.resolve(), where.scratch.resolve()
    name = where.name
    db = Database(
        dist=dist or locate_dist(),
        gld=scratch_dir / f"{name}.gld",
        dat=data_dir / f"{name}.dat",
        journal_file=None if settings.journal == "off" else journal_dir / f"{name}.mjl",
        objects=scratch_dir / "objects",
        sources=scratch_dir / "routines",
        tmp=scratch_dir / "tmp",
        settings=settings,
    )
    for d in (data_dir, journal_dir, db.objects, db.sources, db.tmp):
        d.mkdir(parents=True, exist_ok=True)
    segment = [
        f"-block_size={settings.block_size}",
        f"-access_method={settings.access_method}",
        f"-allocation={settings.allocation}",
        f"-extension_count={settings.extension}",
        f"-fullblkwrt={1 if settings.full_block_writes else 0}",
    ]
    if settings.access_method == "BG":
        segment.append(f"-global_buffer_count={settings.global_buffers}")
    # -file_name last: GDE takes the rest of the line as the file name.
    gde = (
        f"change -segment {REGION} {' '.join(segment)} -file_name={db.dat}\n"
        f"change -region {REGION} -key_size={settings.key_size}\n"
        "show -segment\nshow -region\nexit\n"
    )
    out = proc.run([db.tool("mumps"), "-run", "GDE"], env=db.env(), input=gde, timeout=_left(deadline), cwd=scratch_dir)
    text = out.stdout + out.stderr
    if _gtm_errors(text):
        raise proc.CommandError(["mumps", "-run", "GDE"], out.returncode, text)
    return db


def enable_journal(db: Database, timeout: float = 120.0) -> list[str]:
    """Switch journaling on as the settings ask (a journal file already there becomes an earlier
    generation); GT.M's warnings back."""
    settings = db.settings
    assert db.journal_file is not None
    options = ["enable", "on", settings.journal, f"buffer_size={settings.journal_buffers}"]
    options.append(f"filename={db.journal_file}")
    if settings.sync_io:
        options.append("sync_io")
    out = proc.run(
        [db.tool("mupip"), "set", f"-journal={','.join(options)}", "-region", REGION],
        env=db.env(),
        input="",
        timeout=timeout,
    )
    return _notable(out.stdout + out.stderr)


def _notable(text: str) -> list[str]:
    """GT.M warnings and the text lines that explain them (e.g. a journal buffer count adjusted)."""
    return [line.strip() for line in text.splitlines() if re.search(r"%GTM-(W-|I-TEXT)", line)]


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("GT.M setup ran out of time")
    return left


def version(db: Database, timeout: float = 60.0) -> str:
    """``$ZVERSION``, e.g. "GT.M V7.0-005 Linux x86_64"."""
    out = proc.output([db.tool("mumps"), "-run", "%XCMD", "write $zversion,!"], env=db.env(), input="", timeout=timeout)
    return out.strip()


def compile_routine(db: Database, source: Path, timeout: float = 60.0) -> Path:
    """Copy ``source`` into the database's routine directory and compile it into its objects."""
    target = db.sources / source.name
    target.write_bytes(source.read_bytes())
    out = proc.run([db.tool("mumps"), str(target)], env=db.env(), cwd=db.objects, input="", timeout=timeout)
    obj = db.objects / (source.stem + ".o")
    errors = _gtm_errors(out.stdout + out.stderr)
    if errors or not obj.exists():
        raise proc.CommandError(["mumps", str(target)], out.returncode, out.stdout + out.stderr)
    return obj


# ------------------------------------------------------------------ reading back the file header


def dump_fileheader(db: Database, timeout: float = 60.0) -> str:
    """The text of ``dse dump -fileheader`` (DSE writes it to stderr)."""
    out = proc.run([db.tool("dse"), "dump", "-fileheader"], env=db.env(), input="", timeout=timeout)
    return out.stdout + out.stderr


_HEADER_TOP = re.compile(r"^(File|Region|Date/Time)\s+(\S.*)$")
_JOURNAL_FILE = re.compile(r"^\s+Journal File:\s*(\S.*)$")
_PAIR = re.compile(r"^(\S.*?)\s{2,}(\S.*)$")
# DSE prints two "label ... value" pairs a line; the second starts at this column.
_SECOND_COLUMN = 53


def parse_fileheader(text: str) -> dict[str, str]:
    """``dse dump -fileheader`` output as {label: value}, e.g. {"Block size (in bytes)": "4096"}."""
    fields: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("%"):
            continue
        if m := _HEADER_TOP.match(line):
            fields.setdefault(m.group(1), m.group(2).strip())
            continue
        if m := _JOURNAL_FILE.match(line):
            fields["Journal File"] = m.group(1).strip()
            continue
        if not line.startswith("  "):
            continue
        halves = [line[:_SECOND_COLUMN], line[_SECOND_COLUMN:]] if len(line) > _SECOND_COLUMN else [line]
        for half in halves:
            if m := _PAIR.match(half.strip()):
                fields[m.group(1)] = m.group(2).strip()
    if "Block size (in bytes)" not in fields or "Access method" not in fields:
        raise ValueError("not a DSE file header dump: no block size / access method found")
    return fields


def readback(fields: Mapping[str, str]) -> dict[str, Any]:
    """The settings GT.M reports, under the names of ``Settings`` (plus a few more)."""
    state = fields.get("Journal State", "DISABLED")
    journal_on = state.split()[-1] == "ON"
    before = fields.get("Journal Before imaging") == "TRUE"
    result: dict[str, Any] = {
        "block_size": int(fields["Block size (in bytes)"]),
        "global_buffers": int(fields["Global Buffers"]),
        "access_method": fields["Access method"],
        "journal": ("before" if before else "nobefore") if journal_on else "off",
        "journal_state": state,
        "journal_buffers": int(fields["Journal Buffer Size"]) if journal_on else None,
        "journal_file": fields.get("Journal File") if journal_on else None,
        "sync_io": fields.get("Journal Sync IO") == "TRUE" if journal_on else False,
        "full_block_writes": int(fields.get("Full Block Write", "0")) != 0,
        "full_block_write_level": int(fields.get("Full Block Write", "0")),
        "key_size": int(fields["Maximum key size"]),
        "record_size": int(fields["Maximum record size"]),
        "extension": int(fields["Extension Count"]),
        "total_blocks": int(fields["Total blocks"], 16),
        "free_blocks": int(fields["Free blocks"], 16),
    }
    return result


def differences(settings: Settings, got: Mapping[str, Any]) -> list[str]:
    """How what GT.M configured differs from what was asked (journal buffers: only if below).

    GT.M raises a journal buffer count to its minimum (2307 in V7) and rounds it up; that is
    reported by ``create_database`` as a warning, not a difference.
    """
    diffs = []
    for key in ("block_size", "access_method", "journal", "full_block_writes", "extension"):
        if got[key] != getattr(settings, key):
            diffs.append(f"{key}: asked {getattr(settings, key)!r}, GT.M has {got[key]!r}")
    if settings.access_method == "BG" and got["global_buffers"] != settings.global_buffers:
        diffs.append(f"global_buffers: asked {settings.global_buffers}, GT.M has {got['global_buffers']}")
    if settings.journal != "off":
        if got["sync_io"] != settings.sync_io:
            diffs.append(f"sync_io: asked {settings.sync_io}, GT.M has {got['sync_io']}")
        if got["journal_buffers"] is None or got["journal_buffers"] < settings.journal_buffers:
            diffs.append(f"journal_buffers: asked {settings.journal_buffers}, GT.M has {got['journal_buffers']}")
    return diffs


def dump_gvstat(db: Database, timeout: float = 60.0) -> str:
    """The text of ``dse dump -fileheader -gvstat``: the header followed by GT.M's own counters."""
    out = proc.run([db.tool("dse"), "dump", "-fileheader", "-gvstat"], env=db.env(), input="", timeout=timeout)
    return out.stdout + out.stderr


# "  SET : # of SET   operations                   0x0000000000000002"
_GVSTAT = re.compile(r"^\s*([A-Z0-9]{2,4})\s+:\s+(\S.*?)\s+0x([0-9A-Fa-f]+)\s*$")


def parse_gvstat(text: str) -> dict[str, int]:
    """GT.M's per-database counters from ``dse dump -fileheader -gvstat``, e.g. {"SET": 2, "TTR": 1}.

    DSE lists only the counters that are not zero, so a missing counter is 0: use ``.get(name, 0)``.
    Counters accumulate in the file header over the database's life (every process, every run).
    """
    counters = {m.group(1): int(m.group(3), 16) for line in text.splitlines() if (m := _GVSTAT.match(line))}
    if not counters and "Block size (in bytes)" not in text:
        raise ValueError("not a DSE -gvstat dump: no file header and no counters found")
    return counters


def counter_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What a run added to each counter (the counters are cumulative); zeros left out."""
    names = sorted(set(before) | set(after))
    return {n: after.get(n, 0) - before.get(n, 0) for n in names if after.get(n, 0) != before.get(n, 0)}


def journal_files(db: Database) -> list[Path]:
    """The journal file and its earlier generations (``name.mjl_<timestamp>``)."""
    if db.journal_file is None:
        return []
    return sorted(db.journal_file.parent.glob(db.journal_file.name + "*"))


# ------------------------------------------------------------------ cleanup


def processes_using(db: Database) -> list[int]:
    """Live processes that use ``db``: GT.M processes started with its global directory (workers
    the JOB command detached included) and any process with its database or journal file open."""
    wanted_env = f"gtmgbldir={db.gld}".encode()
    files = {str(db.dat)} | {str(p) for p in journal_files(db)}
    me = os.getpid()
    return [
        pid
        for pid in proc.pids()
        if pid != me and (wanted_env in proc.environ(pid) or files & set(proc.links(pid, ()))) and proc.holds_files(pid)
    ]


def stop_processes(db: Database, pids: Iterable[int] = (), grace: float = 10.0) -> dict[str, list[int]]:
    """Stop every process using ``db`` (plus ``pids`` if they still use it).

    SIGTERM first, which is what ``mupip stop`` sends: GT.M then rolls back, runs its database
    down and exits. Whatever is left after ``grace`` seconds gets SIGKILL.
    """
    targets = set(processes_using(db))
    wanted_env = f"gtmgbldir={db.gld}".encode()
    for pid in pids:
        # A recorded PID may have exited and been reused by an unrelated process.
        if proc.holds_files(pid) and wanted_env in proc.environ(pid):
            targets.add(pid)
    report: dict[str, list[int]] = {"terminated": [], "killed": []}
    for sig, key in ((signal.SIGTERM, "terminated"), (signal.SIGKILL, "killed")):
        live = [pid for pid in sorted(targets) if proc.holds_files(pid)]
        if not live:
            break
        for pid in live:
            try:
                os.kill(pid, sig)
                report[key].append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline and any(proc.holds_files(pid) for pid in live):
            time.sleep(0.05)
        targets |= set(processes_using(db))
    if report["killed"]:
        log.warning("GT.M processes %s had to be killed", report["killed"])
    return report


def rundown(db: Database, timeout: float = 120.0) -> str:
    """Release the database's shared memory and semaphores.

    A process killed with SIGKILL leaves a journaled database that plain rundown refuses
    (MUUSERECOV: it wants a journal recovery); the run's data is worthless then, so -override.
    """
    if not db.dat.exists() or not db.gld.exists():
        return ""
    cmd = [db.tool("mupip"), "rundown", "-region", REGION]
    out = proc.run(cmd, env=db.env(), input="", timeout=timeout, check=False)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        log.info("mupip rundown failed (%s); retrying with -override", out.returncode)
        out = proc.run([*cmd, "-override"], env=db.env(), input="", timeout=timeout, check=False)
        text += out.stdout + out.stderr
        if out.returncode != 0:
            raise proc.CommandError([*cmd, "-override"], out.returncode, text)
    return text


@dataclass
class Session:
    """A database in use (``opened``): what creating it said, and, after the block, what releasing it did."""

    db: Database
    messages: list[str]
    cleanup: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Lifecycle:
    """How ``opened`` treats the database around its block. ``attach``: use the existing database
    (attach_database) instead of creating one. ``backup``: copy the new database aside before any
    process opens it (take_backup: what forward recovery starts from). ``pids()``: the processes to
    stop first when the block ends, e.g. detached JOB workers. ``crashed()``: True when the block
    ends: a crash was injected on purpose, and the database is left exactly as the crash left it
    (no rundown) for the recovery."""

    attach: bool = False
    backup: bool = False
    pids: Callable[[], Iterable[int]] = tuple
    crashed: Callable[[], bool] = lambda: False


FRESH = Lifecycle()  # a new database, no backup, only its own processes, always run down


@contextlib.contextmanager
def opened(
    settings: Settings, where: DatabaseLocation, *, timeout: float = 300.0, lifecycle: Lifecycle = FRESH
) -> Iterator[Session]:
    """GT.M's whole lifecycle in one block: the database created from ``settings`` (create_database),
    then, however the block ends (an error, a timeout, Ctrl-C), every process using it stopped —
    ``lifecycle.pids()``'s first — and the database run down (``release``), so its filesystem can
    be unmounted. ``session.cleanup`` holds what that did. ``lifecycle``: attach instead, back up,
    leave a crashed database alone."""
    messages: list[str] = []
    if lifecycle.attach:
        db = attach_database(settings, where, timeout=timeout)
    else:
        db, messages = create_database(settings, where, timeout=timeout)
        if lifecycle.backup:
            take_backup(db)
    session = Session(db, messages)
    try:
        yield session
    finally:
        session.cleanup = release(db, lifecycle.pids(), keep_crashed=lifecycle.crashed())


def release(db: Database, pids: Iterable[int] = (), *, keep_crashed: bool = False) -> dict[str, Any]:
    """Stop the database's processes and run it down; raises if something still uses it.
    ``keep_crashed``: no rundown (it would flush what the crash left in shared memory)."""
    report: dict[str, Any] = dict(stop_processes(db, pids))
    if keep_crashed:
        report["rundown"] = ["not run down: left as the crash left it, for the recovery"]
    else:
        report["rundown"] = rundown(db).strip().splitlines()[-1:] if db.dat.exists() else []
    left = processes_using(db)
    if left:
        raise RuntimeError(f"processes {left} still use {db.dat} after SIGKILL")
    return report


# ------------------------------------------------------------------ crash recovery


def backup_file(db: Database) -> Path:
    """Where take_backup keeps the copy: beside the database, on the filesystem under test (it must
    survive a power cut with it)."""
    return db.dat.with_name(db.dat.name + ".backup")


def take_backup(db: Database) -> Path:
    """Copy the database, while no process has it open, right after journaling was switched on:
    forward recovery replays the journal onto this copy. Synced, so a crash cannot tear it."""
    if processes_using(db):
        raise RuntimeError(f"cannot copy {db.dat} while processes use it")
    target = backup_file(db)
    with db.dat.open("rb") as src, target.open("xb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return target


def restore_backup(db: Database) -> None:
    """Put the backup copy in place of the (crashed) database file."""
    source = backup_file(db)
    if not source.is_file():
        raise FileNotFoundError(f"no backup {source} to recover forward from")
    with source.open("rb") as src, db.dat.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())


# "data/threen1.dat ::   10551300 [0x00a10004] ::    4128771 [0x003f0003] ::  733864278 [...] :: 0x..."
_FTOK = re.compile(r"::\s*(-?\d+)\s*\[0x[0-9a-fA-F]+\]\s*::\s*(-?\d+)\s*\[0x[0-9a-fA-F]+\]")


def ipc_ids(db: Database, timeout: float = 60.0) -> tuple[int, int]:
    """(semaphore id, shared memory id) the database's file header names; -1 for none."""
    out = proc.run([db.tool("mupip"), "ftok", str(db.dat)], env=db.env(), input="", timeout=timeout)
    for line in (out.stdout + out.stderr).splitlines():
        if (m := _FTOK.search(line)) and str(db.dat.name) in line:
            return int(m.group(1)), int(m.group(2))
    raise ValueError(f"mupip ftok {db.dat}: no semaphore / shared memory ids in its output")


def discard_ipc(db: Database) -> list[str]:
    """Remove the shared memory and semaphore that killed processes left, without flushing them
    (what a power cut does to them): GT.M's global buffers in them are lost. What was removed."""
    sem, shm = ipc_ids(db)
    # After a reboot the ids in the header are stale and may name someone else's: only a segment
    # nobody is attached to is taken, and the semaphore only with it.
    if shm < 0 or _attached(shm) != 0:
        return []
    removed = []
    for flag, ident, what in (("-m", shm, "shared memory"), ("-s", sem, "semaphore")):
        if ident >= 0:
            done = proc.run(["ipcrm", flag, str(ident)], timeout=60, check=False)
            if done.returncode == 0:
                removed.append(f"{what} {ident}")
    return removed


def _attached(shmid: int) -> int | None:
    """How many processes are attached to shared memory segment ``shmid`` (None: no such segment)."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    header = lines[0].split()
    ident, attached = header.index("shmid"), header.index("nattch")
    for fields in (line.split() for line in lines[1:]):
        if int(fields[ident]) == shmid:
            return int(fields[attached])
    return None


def journal_recover(db: Database, direction: str, timeout: float = 3600.0) -> str:
    """``mupip journal -recover -backward|-forward <journal>``: GT.M's output; CommandError unless
    GT.M says the recovery succeeded. Backward recovery removes the crashed shared memory itself."""
    assert direction in ("backward", "forward") and db.journal_file is not None
    cmd = [db.tool("mupip"), "journal", "-recover", f"-{direction}", str(db.journal_file)]
    out = proc.run(cmd, env=db.env(), input="", timeout=timeout, check=False)
    text = out.stdout + out.stderr
    if out.returncode != 0 or "Recover successful" not in text:
        raise proc.CommandError(cmd, out.returncode, text)
    return text


def integ(db: Database, timeout: float = 3600.0) -> tuple[bool, str]:
    """``mupip integ`` of the database: (clean, its output's error lines or its verdict)."""
    out = proc.run([db.tool("mupip"), "integ", "-region", REGION], env=db.env(), input="", timeout=timeout, check=False)
    text = out.stdout + out.stderr
    clean = out.returncode == 0 and "No errors detected by integ" in text
    # The errors first: integ's warnings (a block marked busy that is free, say) come by the dozen.
    errors = [line.strip() for line in text.splitlines() if re.search(r"%GTM-[EF]-", line)]
    errors += [line.strip() for line in text.splitlines() if re.search(r"%GTM-W-", line)]
    if clean:
        return True, "No errors detected by integ"
    return False, "; ".join(errors[:5]) if errors else (text.strip().splitlines() or ["no output"])[-1]


def abandon(db: Database) -> dict[str, Any]:
    """Leave a database that could not be recovered so that its filesystem unmounts and no IPC
    stays behind: processes stopped, shared memory discarded, a forced rundown tried."""
    report: dict[str, Any] = dict(stop_processes(db))
    if db.dat.exists() and db.gld.exists():
        with contextlib.suppress(proc.CommandError, ValueError):
            report["discarded"] = discard_ipc(db)
        try:
            report["rundown"] = rundown(db).strip().splitlines()[-1:]
        except proc.CommandError as exc:
            report["rundown"] = [str(exc).splitlines()[0]]
    return report
