"""PostgreSQL: the ``postgres`` settings block, a cluster made with initdb on the cell's disk(s), a
server started with those settings and stopped on every exit path, and the settings read back.

Safety, by construction:

- every setting is declared with a type and a bound (no free text), and reaches the server as one
  ``-c name=value`` argument: nothing is written into ``postgresql.conf`` (a free-text value there
  could set ``archive_command``, which runs a shell);
- the server listens on no TCP port (``listen_addresses=''``); its Unix socket is in a directory of
  the run's own; it runs as the ``postgres`` user when started by root (PostgreSQL refuses root);
- ``Cluster.running()`` stops it whatever happens: ``pg_ctl stop -m fast``, then ``-m immediate``,
  then SIGKILL of every server process (the server is started in a session of its own, so a Ctrl-C
  at the terminal reaches the client, not the server; the ``finally`` stops the server).

``Cluster.running()`` is the one start/stop path: a crash-recovery step can stop the server dead
(``Cluster.kill()``) and start it again on the same directories.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pwd
import re
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fsmatrix.agent import declare, proc, provenance
from fsmatrix.agent.contract import SettingsBlock
from fsmatrix.agent.declare import Invalid, parse_size, setting

log = logging.getLogger("fsmatrix")

BIN_GLOB = "/usr/lib/postgresql/*/bin/postgres"
TOOL = "postgres_bin"  # the guest image declares PostgreSQL's bin directory under this name
OWNER = "postgres"  # the system user the server runs as when fsmatrix runs as root
PORT = 5432  # only names the socket file (.s.PGSQL.5432): no TCP port is opened
SUPERUSER = "postgres"
# A socket path must fit sun_path: at most 107 bytes, "<dir>/.s.PGSQL.5432".
MAX_SOCKET_PATH = 107
SOCKET_PREFIX = "pgsock-"
PAGE = 8192  # PostgreSQL's page size (Debian's build)
WAL_SEGMENT = 16 << 20
MAX_SHARED_BUFFERS = 1073741823 * PAGE
STOP_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0


class ServerDied(RuntimeError):
    """The server stopped while a run still needed it: a crash (injected, or not)."""

    def __init__(self, message: str, acknowledged: int | None = None) -> None:
        super().__init__(message)
        self.acknowledged = acknowledged  # the acknowledging client's count, when one ran


@dataclass(frozen=True)
class Settings:
    """The cell's ``postgres`` block: defaults are PostgreSQL 15's own, bounds those of pg_settings."""

    shared_buffers: str = setting("128M", size=True, help="shared_buffers (a multiple of 8K, >= 128K)")
    wal_buffers: int = setting(
        -1, minimum=-1, maximum=262143, help="wal_buffers in 8 kB pages; -1: 1/32 of shared_buffers (64 kB..16 MB)"
    )
    wal_level: str = setting("replica", choices=("minimal", "replica", "logical"), help="wal_level")
    max_wal_senders: int = setting(10, minimum=0, maximum=262143, help="max_wal_senders (0 for wal_level minimal)")
    synchronous_commit: str = setting(
        "on", choices=("on", "off", "local", "remote_write", "remote_apply"), help="synchronous_commit (quote on/off)"
    )
    full_page_writes: bool = setting(True, help="full_page_writes")
    fsync: bool = setting(True, help="fsync")
    wal_sync_method: str = setting(
        "fdatasync", choices=("fdatasync", "fsync", "open_datasync", "open_sync"), help="wal_sync_method"
    )
    checkpoint_timeout: int = setting(300, minimum=30, maximum=86400, help="checkpoint_timeout, seconds")
    max_wal_size: str = setting("1G", size=True, help="max_wal_size (a multiple of 1M, >= 2M)")
    wal_compression: str = setting("off", choices=("off", "pglz", "lz4", "zstd"), help="wal_compression (quote off)")
    data_checksums: bool = setting(False, help="initdb --data-checksums (-k)")

    def __post_init__(self) -> None:
        buffers = parse_size(self.shared_buffers)
        if buffers % PAGE or not 16 * PAGE <= buffers <= MAX_SHARED_BUFFERS:
            raise Invalid(
                "postgres.shared_buffers",
                f"postgres.shared_buffers must be a multiple of 8K between 128K and 8T, not {self.shared_buffers!r}",
            )
        wal = parse_size(self.max_wal_size)
        if wal % (1 << 20) or wal < 2 << 20 or wal > (2**31 - 1) << 20:
            raise Invalid(
                "postgres.max_wal_size",
                f"postgres.max_wal_size must be a multiple of 1M between 2M and 2047T, not {self.max_wal_size!r}",
            )
        if self.wal_level == "minimal" and self.max_wal_senders != 0:
            raise Invalid(
                "postgres.max_wal_senders",
                f"postgres.wal_level 'minimal' needs postgres.max_wal_senders 0, not {self.max_wal_senders} "
                "(PostgreSQL refuses to start otherwise)",
            )

    def server_settings(self) -> dict[str, str]:
        """The settings as the server reads them (``-c name=value``); data_checksums is initdb's."""
        on_off = {True: "on", False: "off"}
        return {
            "shared_buffers": f"{parse_size(self.shared_buffers) // 1024}kB",
            "wal_buffers": str(self.wal_buffers),
            "wal_level": self.wal_level,
            "max_wal_senders": str(self.max_wal_senders),
            "synchronous_commit": self.synchronous_commit,
            "full_page_writes": on_off[self.full_page_writes],
            "fsync": on_off[self.fsync],
            "wal_sync_method": self.wal_sync_method,
            "checkpoint_timeout": f"{self.checkpoint_timeout}s",
            "max_wal_size": f"{parse_size(self.max_wal_size) >> 20}MB",
            "wal_compression": self.wal_compression,
        }

    def expected(self) -> dict[str, Any]:
        """What pg_settings must show, normalised as ``readback`` normalises it (sizes in bytes)."""
        shared = parse_size(self.shared_buffers)
        wal_buffers = self.wal_buffers
        if wal_buffers == -1:  # PostgreSQL's automatic choice: 1/32 of shared_buffers, 64 kB .. one segment
            wal_buffers = min(max(shared // PAGE // 32, 8), WAL_SEGMENT // PAGE)
        return {
            "shared_buffers": shared,
            "wal_buffers": wal_buffers * PAGE,
            "wal_level": self.wal_level,
            "max_wal_senders": self.max_wal_senders,
            "synchronous_commit": self.synchronous_commit,
            "full_page_writes": self.full_page_writes,
            "fsync": self.fsync,
            "wal_sync_method": self.wal_sync_method,
            "checkpoint_timeout": self.checkpoint_timeout,
            "max_wal_size": parse_size(self.max_wal_size),
            "wal_compression": self.wal_compression,
            "data_checksums": self.data_checksums,
        }


BLOCK = SettingsBlock(
    "postgres",
    Settings,
    "PostgreSQL server settings (workloads that run on PostgreSQL)",
    summary=lambda s: f"sb={s.shared_buffers} sc={s.synchronous_commit}" + (" k" if s.data_checksums else ""),
    memory=lambda s: s.expected()["shared_buffers"] + s.expected()["wal_buffers"],
    memory_settings=("shared_buffers", "wal_buffers"),
)

_UNITS = {"B": 1, "kB": 1024, "8kB": PAGE, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_TIME_UNITS = {"s": 1, "min": 60, "h": 3600, "d": 86400}


def normalise(name: str, value: str, unit: str | None) -> Any:
    """One pg_settings row as ``Settings.expected`` writes it: sizes in bytes, times in seconds."""
    if value in ("on", "off") and name != "synchronous_commit" and name != "wal_compression":
        return value == "on"
    if unit in _UNITS:
        return int(value) * _UNITS[unit]
    if unit in _TIME_UNITS:
        return int(value) * _TIME_UNITS[unit]
    if value.lstrip("-").isdigit():
        return int(value)
    return value


def differences(expected: Mapping[str, Any], got: Mapping[str, Any]) -> list[str]:
    """Each setting asked for that the server does not have, in words (empty: all took)."""
    return [
        f"{name}: asked {want!r}, PostgreSQL has {got.get(name)!r}"
        for name, want in expected.items()
        if got.get(name) != want
    ]


# ------------------------------------------------------------------ finding PostgreSQL


def locate_bin(environ: Mapping[str, str] | None = None, declared: Path | None = None) -> Path:
    """PostgreSQL's bin directory: ``$FSMATRIX_PG_BIN`` when set; in a guest image, the one its
    definition declares (``declared``, default the image manifest's ``tools.postgres_bin``); else,
    on a host, the newest Debian install."""
    env = os.environ if environ is None else environ
    override = env.get("FSMATRIX_PG_BIN", "")
    if override:
        if not (Path(override) / "postgres").is_file():
            raise FileNotFoundError(f"$FSMATRIX_PG_BIN={override} holds no postgres executable")
        return Path(override)
    declared = declared or provenance.image_tool(TOOL)
    if declared is not None:
        if not (declared / "postgres").is_file():
            raise FileNotFoundError(
                f"the guest image declares PostgreSQL in {declared} (tools.{TOOL}): no postgres there"
            )
        return declared
    found = sorted(glob.glob(BIN_GLOB), key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if not found:
        raise FileNotFoundError(f"PostgreSQL not found: nothing matches {BIN_GLOB} (Debian package postgresql-15)")
    return Path(found[-1]).parent


@dataclass(frozen=True)
class Owner:
    """Who runs the server and owns its files: ``postgres`` under root, else the caller."""

    name: str
    uid: int
    gid: int
    switch: bool  # run commands as this user (fsmatrix runs as root)

    @classmethod
    def resolve(cls) -> Owner:
        if os.geteuid() != 0:
            me = pwd.getpwuid(os.geteuid())
            return cls(me.pw_name, me.pw_uid, me.pw_gid, False)
        try:
            pg = pwd.getpwnam(OWNER)
        except KeyError as exc:
            raise FileNotFoundError(f"no system user {OWNER!r}: install postgresql-15") from exc
        return cls(pg.pw_name, pg.pw_uid, pg.pw_gid, True)

    def can_reach(self, path: Path) -> str | None:
        """Why the owner cannot reach ``path`` (a directory on the way it may not enter), or None."""
        if not self.switch:
            return None
        for part in [path, *path.parents]:
            try:
                st = part.stat()
            except FileNotFoundError:
                continue
            if st.st_uid == self.uid:
                ok = st.st_mode & stat.S_IXUSR
            elif st.st_gid == self.gid:
                ok = st.st_mode & stat.S_IXGRP
            else:
                ok = st.st_mode & stat.S_IXOTH
            if not ok:
                return f"user {self.name} cannot enter {part} (mode {stat.S_IMODE(st.st_mode):04o})"
        return None


def _own_dir(path: Path, owner: Owner) -> Path:
    """An empty directory ``path`` owned by ``owner`` (mode 0700); FileExistsError if it exists."""
    path.mkdir(mode=0o700)
    if owner.switch:
        os.chown(path, owner.uid, owner.gid)
    return path


def device_of(path: Path) -> str | None:
    """The kernel name of the block device holding ``path`` (e.g. "loop3"), None for tmpfs."""
    dev = os.stat(path).st_dev
    link = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    return link.resolve().name if link.exists() else None


# ------------------------------------------------------------------ the cluster


@dataclass
class Cluster:
    """A PostgreSQL cluster: its data directory, WAL directory, socket directory and log."""

    bin: Path
    data: Path  # PGDATA
    wal: Path | None  # initdb --waldir (split-journal), else None: pg_wal inside PGDATA
    sockets: Path
    log_file: Path
    settings: Settings
    owner: Owner
    extra: dict[str, str] = field(default_factory=dict)  # internal server settings (max_connections)
    postmaster: subprocess.Popen[bytes] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    stops: list[str] = field(default_factory=list)  # how each stop went: fast, immediate, killed

    def tool(self, name: str) -> str:
        return str(self.bin / name)

    def env(self, database: str = SUPERUSER) -> dict[str, str]:
        """A clean client environment: no PG* variable of the caller, our socket and user."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(
            {
                "PGHOST": str(self.sockets),
                "PGPORT": str(PORT),
                "PGUSER": SUPERUSER,
                "PGDATABASE": database,
                "LC_ALL": "C",
                "PGTZ": "UTC",
            }
        )
        return env

    def run(
        self,
        cmd: Sequence[str],
        *,
        as_owner: bool = False,
        timeout: float = 600,
        check: bool = True,
        database: str = SUPERUSER,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL tool (as the cluster's owner when ``as_owner``); CommandError on failure."""
        owned = proc.AsUser(cmd, self.owner.uid, self.owner.gid) if as_owner and self.owner.switch else cmd
        return proc.run(
            owned,
            timeout=timeout,
            env=self.env(database),
            cwd=cwd or self.sockets,
            check=check,
            input="",  # no terminal to prompt on (psql, pg_ctl)
        )

    def query(self, sql: str, database: str = SUPERUSER, timeout: float = 600) -> list[list[str]]:
        """Rows of one SQL statement, through psql (unaligned, tuples only, no psqlrc)."""
        out = self.run(
            [self.tool("psql"), "-X", "-A", "-t", "-q", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", sql],
            database=database,
            timeout=timeout,
        )
        return [line.split("\t") for line in out.stdout.splitlines() if line]

    def value(self, sql: str, database: str = SUPERUSER) -> str:
        rows = self.query(sql, database)
        if len(rows) != 1 or len(rows[0]) != 1:
            raise ValueError(f"expected one value from {sql!r}, got {rows!r}")
        return rows[0][0]

    # ---------------------------------------------------------------- initdb

    def initdb(self, timeout: float = 300) -> None:
        """A fresh cluster in ``data`` (WAL in ``wal`` when split); trust authentication over the
        private socket only, C locale, checksums when the settings ask for them."""
        cmd = [self.tool("initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "--no-locale", "-E", "UTF8"]
        if self.wal is not None:
            cmd.append(f"--waldir={self.wal}")
        if self.settings.data_checksums:
            cmd.append("--data-checksums")
        t0 = time.monotonic()
        self.run(cmd, as_owner=True, timeout=timeout)
        self.timings["initdb_s"] = round(time.monotonic() - t0, 3)

    # ---------------------------------------------------------------- the server

    def server_args(self) -> list[str]:
        args = [self.tool("postgres"), "-D", str(self.data)]
        fixed = {
            "listen_addresses": "",
            "unix_socket_directories": str(self.sockets),
            "port": str(PORT),
            "logging_collector": "off",
            **self.extra,
            **self.settings.server_settings(),
        }
        for name, value in fixed.items():
            args += ["-c", f"{name}={value}"]
        return args

    def start(self, timeout: float = START_TIMEOUT_S, poll: float = 0.1) -> None:
        """Start the server in a session of its own and wait until it accepts connections (asked
        every ``poll`` seconds: what a measured start, a crash recovery's, can make finer)."""
        if self.postmaster is not None and self.postmaster.poll() is None:
            raise RuntimeError("the server is already running")
        # The run's cgroup, where one is open: the server joins it itself (proc.in_run).
        switch = self.owner.switch
        argv, kwargs = proc.in_run(
            self.server_args(), self.owner.uid if switch else None, self.owner.gid if switch else None
        )
        with self.log_file.open("ab") as log_out:
            self.postmaster = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.sockets,
                start_new_session=True,  # its own process group: killable as one, deaf to the terminal's ^C
                **kwargs,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.postmaster.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited with status {self.postmaster.returncode}: {self.log_tail()}")
            ready = self.run([self.tool("pg_isready"), "-q", "-t", "1"], check=False, timeout=30)
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL did not accept connections within {timeout:g} s: {self.log_tail()}")
            time.sleep(poll)

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])

    def exited(self, grace: float = 0.0) -> bool:
        """Whether the postmaster this cluster started has exited or is exiting, waiting up to
        ``grace`` seconds for it. A crash injector kills the children first and the postmaster
        last: a client can fail in between, and see the server alive."""
        if self.postmaster is None:
            return False
        deadline = time.monotonic() + grace
        while self.postmaster.poll() is None:
            state = self._postmaster_process()
            if state is None or not state.running:  # on its way out: its exit status comes in a moment
                _wait(self.postmaster, 10)
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _postmaster_process(self) -> proc.ProcessState | None:
        return proc.process_state(self.postmaster.pid) if self.postmaster is not None else None

    def postmaster_state(self) -> str:
        """The postmaster's state letter and flags as /proc shows them (R, S, D, T...), for a message."""
        state = self._postmaster_process()
        return "gone" if state is None else f"state {state.state}, flags {state.flags:#x}"

    def processes(self) -> list[int]:
        """Live processes of this server: the postmaster and every process whose working directory
        is the data directory. Each child of the postmaster makes itself a process-group leader
        (setsid), so the postmaster's group alone misses them; they all inherit its cwd, PGDATA,
        and keep it when a dead postmaster's children are re-parented."""
        found = set(processes_with_cwd(self.data))
        if self.postmaster is not None and self.postmaster.poll() is None:
            found.add(self.postmaster.pid)
        return sorted(found)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> dict[str, Any]:
        """Stop the server: fast shutdown, then immediate, then SIGKILL of every server process.

        Returns how it went ({"mode": "fast"|"immediate"|"killed"|"not-running", ...}). Raises
        RuntimeError if a process of the server is still alive after SIGKILL.
        """
        report: dict[str, Any] = {"mode": "not-running"}
        if self.postmaster is None:
            return report
        if not self.exited():
            for mode in ("fast", "immediate"):
                try:
                    out = self.run(
                        [self.tool("pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w", "-t", str(int(timeout))],
                        as_owner=True,
                        timeout=timeout + 10,
                        check=False,
                    )
                    ok = out.returncode == 0
                except proc.CommandError:
                    ok = False
                if ok and _wait(self.postmaster, 10):
                    report["mode"] = mode
                    break
                log.warning("pg_ctl stop -m %s did not stop PostgreSQL", mode)
            else:
                report["mode"] = "killed"
        if self.processes():
            report["mode"] = "killed"
            self.kill()
        report["left"] = self.processes()
        if report["left"]:
            raise RuntimeError(f"PostgreSQL processes {report['left']} are still alive after SIGKILL")
        return report

    def kill(self) -> None:
        """SIGKILL every process of the server (a crash: no shutdown checkpoint, nothing flushed).

        The postmaster is stopped first (SIGSTOP: it can start no new child, nor restart a killed
        one), then its children are listed, then all of them get SIGKILL, the postmaster last."""
        if self.postmaster is None:
            return
        postmaster = self.postmaster.pid
        shmid = self._shmid()
        if self.postmaster.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(postmaster, signal.SIGSTOP)
        targets = set(self.processes()) | set(proc.children_of(postmaster))
        # The children first, the stopped postmaster last: a child that outlived the postmaster by a
        # moment would see it gone and exit in an orderly way ("unexpected postmaster exit"), not crash.
        for pid in sorted(targets, key=lambda pid: (pid == postmaster, pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _wait(self.postmaster, 10)
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            for pid in self.processes():  # anything forked before the SIGSTOP took effect
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        # A killed postmaster leaves its System V interlock segment behind (a clean stop removes it).
        if shmid is not None and not self.processes():
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True, timeout=30, check=False)

    def _shmid(self) -> int | None:
        """The System V segment id of the running postmaster (line 7 of postmaster.pid: key, id)."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except OSError:
            return None
        fields = lines[6].split() if len(lines) > 6 else []
        return int(fields[1]) if len(fields) == 2 and fields[1].isdigit() else None

    @contextlib.contextmanager
    def running(self, timeout: float = START_TIMEOUT_S) -> Iterator[Cluster]:
        """The server, started; stopped on exit whatever happens (exceptions and Ctrl-C included)."""
        try:
            self.start(timeout)
            yield self
        finally:
            self.stops.append(self.stop()["mode"])

    def settings_readback(self) -> dict[str, Any]:
        """Every declared setting as pg_settings shows it (normalised like ``Settings.expected``)."""
        names = list(self.settings.expected())
        quoted = ", ".join(f"'{n}'" for n in names)  # declared identifiers, not input
        rows = self.query(f"SELECT name, setting, coalesce(unit, '') FROM pg_settings WHERE name IN ({quoted})")
        return {name: normalise(name, value, unit or None) for name, value, unit in rows}


def _wait(popen: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        popen.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def processes_with_cwd(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory``."""
    wanted = str(directory.resolve())
    return [pid for pid in proc.pids() if proc.holds_files(pid) and proc.links(pid, fds=False) == [wanted]]


def socket_dir(scratch: Path, owner: Owner, stack: contextlib.ExitStack) -> Path:
    """A directory of the run's own for the server's socket: under ``scratch`` when the owner can
    reach it and the path fits a socket address, else a private one under /tmp (removed on exit)."""
    scratch.mkdir(parents=True, exist_ok=True)
    base = scratch.resolve()
    # mkdtemp adds 8 characters to the prefix
    longest = len(f"{base}/{SOCKET_PREFIX}12345678/.s.PGSQL.{PORT}")
    if longest > MAX_SOCKET_PATH or owner.can_reach(base):
        base = Path(tempfile.gettempdir())
    path = Path(tempfile.mkdtemp(prefix=SOCKET_PREFIX, dir=base))
    stack.callback(_remove_tree, path)
    if owner.switch:
        os.chown(path, owner.uid, owner.gid)
    return path


def _remove_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), reverse=True):
        with contextlib.suppress(OSError):
            child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


@dataclass(frozen=True)
class ClusterLocation:
    """Where a cluster goes: ``data_root/pgdata``, its WAL in ``wal_root/pg_wal`` (None: in the data
    directory), its sockets and log under ``scratch``."""

    data_root: Path
    wal_root: Path | None
    scratch: Path


def create(
    settings: Settings,
    where: ClusterLocation,
    stack: contextlib.ExitStack,
    *,
    extra: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> Cluster:
    """initdb a fresh cluster in ``where.data_root/pgdata`` (WAL in ``where.wal_root/pg_wal`` when given).

    The cluster gets subdirectories owned by its owner: a fresh ext2/3/4 mount point holds
    lost+found, and initdb refuses a directory that is not empty. Raises ValueError when the
    owner cannot reach a directory, FileExistsError when a cluster is already there.
    """
    data_root, wal_root, scratch = where.data_root, where.wal_root, where.scratch
    owner = Owner.resolve()
    for root in (data_root, wal_root):
        if root is not None:
            why = owner.can_reach(root.resolve())
            if why:
                raise ValueError(f"PostgreSQL cannot use {root}: {why}")
    data = data_root.resolve() / "pgdata"
    wal = wal_root.resolve() / "pg_wal" if wal_root is not None else None
    for path in (data, wal):
        if path is not None and path.exists():
            raise FileExistsError(f"{path} already exists: a pgbench run needs a fresh cluster")
    scratch.mkdir(parents=True, exist_ok=True)
    sockets = socket_dir(scratch, owner, stack)
    _own_dir(data, owner)
    if wal is not None:
        _own_dir(wal, owner)
    cluster = Cluster(
        bin=locate_bin(),
        data=data,
        wal=wal,
        sockets=sockets,
        log_file=scratch / "postgres.log",
        settings=settings,
        owner=owner,
        extra=dict(extra or {}),
    )
    cluster.initdb(timeout)
    return cluster


def attach(
    settings: Settings,
    where: ClusterLocation,
    stack: contextlib.ExitStack,
    *,
    extra: Mapping[str, str] | None = None,
    log_name: str = "postgres-recovery.log",
) -> Cluster:
    """The cluster ``create`` made in ``data_root/pgdata`` (WAL in ``wal_root/pg_wal``), found again
    on the same disks after a crash: nothing is initialised, the server is not started. Its log is a
    file of its own (``log_name`` in ``scratch``) so that what the restart logs is read apart from the run.

    FileNotFoundError when there is no cluster there; ValueError when its WAL is not where the
    layout puts it (pg_wal must be the symbolic link initdb --waldir made to ``wal_root/pg_wal``).
    """
    data_root, wal_root, scratch = where.data_root, where.wal_root, where.scratch
    owner = Owner.resolve()
    data = data_root.resolve() / "pgdata"
    if not (data / "PG_VERSION").is_file():
        raise FileNotFoundError(f"no PostgreSQL cluster in {data} (no PG_VERSION): nothing to recover")
    pg_wal = data / "pg_wal"
    wal = wal_root.resolve() / "pg_wal" if wal_root is not None else None
    if wal is not None and (not pg_wal.is_symlink() or pg_wal.resolve() != wal):
        raise ValueError(f"{pg_wal} does not lead to {wal}: the cluster's WAL is not on the journal disk")
    if wal is None and pg_wal.is_symlink():
        raise ValueError(f"{pg_wal} is a link to {pg_wal.resolve()}: this layout keeps the WAL in the data directory")
    scratch.mkdir(parents=True, exist_ok=True)
    return Cluster(
        bin=locate_bin(),
        data=data,
        wal=wal,
        sockets=socket_dir(scratch, owner, stack),
        log_file=scratch / log_name,
        settings=settings,
        owner=owner,
        extra=dict(extra or {}),
    )


def controldata(cluster: Cluster, timeout: float = 60) -> dict[str, str]:
    """``pg_controldata`` of the (stopped) cluster, ``{"Database cluster state": "in production", ...}``.

    "in production" after a crash, "shut down" after a clean stop: whether a restart has anything to
    recover."""
    out = cluster.run([cluster.tool("pg_controldata"), "-D", str(cluster.data)], as_owner=True, timeout=timeout)
    fields = {}
    for line in out.stdout.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip()] = value.strip()
    return fields


def lsn_bytes(lsn: str) -> int:
    """A WAL position "X/Y" (hexadecimal halves) as a byte offset; ValueError for anything else."""
    high, sep, low = lsn.partition("/")
    if not sep:
        raise ValueError(f"not a WAL position: {lsn!r}")
    return (int(high, 16) << 32) + int(low, 16)


# What PostgreSQL 15 logs while it restarts after a crash (log_line_prefix '%m [%p] ').
_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \S+ \[\d+\] (\w+):  (.*)$")
_EVENTS = {
    "starting": re.compile(r"^starting PostgreSQL "),
    "interrupted": re.compile(r"^database system was interrupted"),
    "recovery": re.compile(r"^database system was not properly shut down; automatic recovery in progress"),
    "redo_start": re.compile(r"^redo starts at ([0-9A-F]+/[0-9A-F]+)"),
    "redo_done": re.compile(r"^redo done at ([0-9A-F]+/[0-9A-F]+) .*elapsed: ([0-9.]+) s"),
    "no_redo": re.compile(r"^redo is not required"),
    "end_of_wal": re.compile(
        r"^(invalid record length|record with incorrect prev-link|invalid magic number|"
        r"invalid resource manager|incorrect resource manager data checksum|"
        r"missing contrecord|record length)"
    ),  # fmt: skip
    "checkpoint": re.compile(r"^checkpoint complete: .*total=([0-9.]+) s"),
    "ready": re.compile(r"^database system is ready to accept connections"),
}
_NOISE = (
    "the database system is starting up",
    "the database system is not yet accepting connections",
    "the database system is shutting down",
)  # what a readiness probe is told meanwhile


def parse_recovery_log(text: str) -> dict[str, Any]:
    """What a restart's server log says about its crash recovery.

    ``crash_recovery``: the server found the cluster not shut down (it was interrupted: it must replay
    its WAL, whether or not it then could); ``redo_start`` /
    ``redo_done``: the WAL range replayed (``redo_bytes`` its length), ``redo_elapsed_s`` PostgreSQL's
    own figure (10 ms resolution); from the line timestamps (ms): ``sync_s`` (interrupted until
    recovery began: PostgreSQL fsyncs the data directory first), ``redo_s``, ``checkpoint_s`` (the
    end-of-recovery checkpoint) and ``server_s`` (server start to ready); ``end_of_wal``: the line
    that ended the replay; ``errors``: FATAL and PANIC lines (not the "starting up" refusals of
    connection attempts), the first few.
    """
    times: dict[str, datetime] = {}
    found: dict[str, Any] = {"crash_recovery": False, "errors": []}
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        stamp, level, message = match.groups()
        if level in ("FATAL", "PANIC") and not message.startswith(_NOISE):
            if len(found["errors"]) < 4:
                found["errors"].append(f"{level}: {message.strip()}")
            continue
        for event, pattern in _EVENTS.items():
            hit = pattern.match(message)
            if not hit:
                continue
            if event == "checkpoint" and "ready" in times:
                continue  # a later checkpoint, not the end-of-recovery one
            times.setdefault(event, datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f"))
            if event in ("interrupted", "recovery"):
                found["crash_recovery"] = True
            elif event == "redo_start":
                found["redo_start"] = hit.group(1)
            elif event == "redo_done":
                found["redo_done"], found["redo_elapsed_s"] = hit.group(1), float(hit.group(2))
            elif event == "end_of_wal":
                found.setdefault("end_of_wal", message.strip())
            elif event == "checkpoint" and "recovery" in times:
                found.setdefault("checkpoint_s", float(hit.group(1)))
    if "redo_start" in found and "redo_done" in found:
        found["redo_bytes"] = lsn_bytes(found["redo_done"]) - lsn_bytes(found["redo_start"])

    def between(first: str, last: str) -> float | None:
        if first in times and last in times:
            return round((times[last] - times[first]).total_seconds(), 3)
        return None

    for name, first, last in (
        ("sync_s", "interrupted", "recovery"),
        ("redo_s", "redo_start", "redo_done"),
        ("server_s", "starting", "ready"),
    ):
        seconds = between(first, last)
        if seconds is not None:
            found[name] = seconds
    found["ready"] = "ready" in times
    return found


def version(cluster: Cluster) -> str:
    """``postgres --version``, e.g. "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"."""
    return cluster.run([cluster.tool("postgres"), "--version"], timeout=30).stdout.strip()


def checksums_check(cluster: Cluster, timeout: float = 600) -> str | None:
    """``pg_checksums --check`` on the stopped cluster: None when it passes, else why not."""
    out = cluster.run([cluster.tool("pg_checksums"), "--check", "-D", str(cluster.data)], as_owner=True,
                      timeout=timeout, check=False)  # fmt: skip
    if out.returncode == 0:
        return None
    text = " | ".join(line.strip() for line in (out.stdout + out.stderr).strip().splitlines()[-4:])
    return f"pg_checksums --check failed (status {out.returncode}): {text}"


DEFAULT_SETTINGS: dict[str, Any] = declare.defaults(Settings)
