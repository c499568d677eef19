"""Acknowledged commits: proof that what a client saw committed before a crash is there after it.

pgbench's own per-transaction log cannot prove durability (its lines name no row, it is buffered,
and a power cut erases it with the guest's page cache). So, beside pgbench, an acknowledging client
commits one small transaction at a time, ``INSERT INTO fsmatrix_acks(n) VALUES (k)`` for k = 1, 2,
..., and only *after the COMMIT has returned* records ``k`` in a sink a crash cannot erase:

- ``FileSink``: a file written with O_DSYNC, one line per acknowledgement (each write returns once
  the line is on stable storage). Enough for a kill, where the kernel survives; off the device
  under test (the scratch directory).
- ``ConsoleSink``: a line ``FSMATRIX-ACK <k>`` on a console or serial port (/dev/ttyS0,
  /dev/console): the host keeps the VM's serial log through a power cut. A line lost in transit
  only undercounts, which is safe.

After recovery, ``durability`` compares: every k up to the highest acknowledged must be a row of
``fsmatrix_acks``; one more row than acknowledged is normal (a commit that reached the disk before
its acknowledgement reached the sink). The client is plain ``psql`` driven through a pipe (the
guest has no Python driver): after each INSERT it prints a marker with ``\\echo``, which psql
only reaches once the server has answered the INSERT, i.e. once the commit returned (autocommit).
Standard library only: this runs in the guest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from fsmatrix.agent import proc
from fsmatrix.agent.databases import postgres

log = logging.getLogger("fsmatrix")

TABLE = "fsmatrix_acks"
PREFIX = "FSMATRIX-ACK"
_MARK = "fsmatrix-committed"  # what psql echoes after each commit (its stdout, never a sink)
# A whole acknowledgement: the prefix, an optional tag, the number and the end of its line. A line
# cut short by a power cut (no newline) or broken into by other console output does not match.
_ACK = re.compile(rf"{PREFIX}(?: ([A-Za-z0-9_.-]+))? (\d+)\r*\n")
_TAG = re.compile(r"[A-Za-z0-9_.-]+")
STOP_WAIT_S = 10.0


# ------------------------------------------------------------------ sinks


class Sink(Protocol):
    """Where acknowledgements go: ``record(k)`` returns once ``k`` is as safe as the sink can make it."""

    path: Path

    def record(self, k: int) -> None: ...

    def close(self) -> None: ...


def ack_line(k: int, tag: str | None = None) -> bytes:
    """One acknowledgement as a sink holds it: ``FSMATRIX-ACK [tag ]k`` and a newline."""
    return f"{PREFIX} {tag + ' ' if tag else ''}{k}\n".encode()


def _check_tag(tag: str | None) -> None:
    if tag is not None and not _TAG.fullmatch(tag):
        raise ValueError(f"an acknowledgement tag is letters, digits, '.', '_' and '-', not {tag!r}")


class FileSink:
    """A regular file, appended with O_DSYNC: every acknowledgement is on stable storage when
    ``record`` returns (survives a kill of every process, and a power cut if the disk honours flushes)."""

    def __init__(self, path: Path, tag: str | None = None) -> None:
        _check_tag(tag)
        self.path = path
        self.tag = tag
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_DSYNC | os.O_CLOEXEC, 0o644)

    def record(self, k: int) -> None:
        line = ack_line(k, self.tag)
        if os.write(self._fd, line) != len(line):
            raise OSError(f"{self.path}: short write of an acknowledgement")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class ConsoleSink:
    """A console or serial port (``/dev/ttyS0``, ``/dev/console``): the host records what the guest
    writes there, power cut or not. A line lost on the way only undercounts."""

    def __init__(self, path: Path, tag: str | None = None) -> None:
        _check_tag(tag)
        self.path = path
        self.tag = tag
        # O_NOCTTY: the agent must not make the console its controlling terminal (its ^C, its hangup).
        self._fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_APPEND | os.O_CLOEXEC)

    def record(self, k: int) -> None:
        # No line of its own needed: parse_acks finds the prefix anywhere (after a prompt, say).
        line = ack_line(k, self.tag)
        written = 0
        while written < len(line):  # a tty may take part of a write
            written += os.write(self._fd, line[written:])

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def parse_acks(text: str, tag: str | None = None) -> int:
    """The highest acknowledgement in a sink's text (a FileSink's file, a VM's serial log); 0 for none.

    Only whole lines count; with ``tag``, only lines carrying it (without: only untagged lines)."""
    _check_tag(tag)
    return max((int(m.group(2)) for m in _ACK.finditer(text) if m.group(1) == tag), default=0)


def read_acks(path: Path, tag: str | None = None) -> int:
    """``parse_acks`` of a file (bytes that are not text, e.g. a serial log's noise, are replaced)."""
    return parse_acks(path.read_bytes().decode("utf-8", errors="replace"), tag)


# ------------------------------------------------------------------ the acknowledging client


@dataclass
class AckClient:
    """A psql session committing ``INSERT INTO fsmatrix_acks`` one at a time, each acknowledged in
    ``sink`` once its COMMIT has returned. ``acknowledged``: the highest k recorded in the sink."""

    cluster: postgres.Cluster
    sink: Sink
    database: str
    # psql's complaints go to a file: a pipe nobody reads while it runs could fill and stall it.
    errors: IO[bytes]
    interval: float = 0.0  # seconds between commits (0: as fast as the server answers)
    first: int = 1
    acknowledged: int = 0
    ended: str | None = None  # why the client stopped before it was asked to (the server went away, ...)
    started_at: float = 0.0
    stopped_at: float = 0.0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._psql: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._stderr = ""

    def start(self) -> None:
        argv, _ = proc.in_run([self.cluster.tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"])  # the run's cgroup
        self._psql = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            bufsize=1,  # line-buffered: each command reaches psql at once
            env=self.cluster.env(self.database),
            cwd=self.cluster.sockets,
            start_new_session=True,  # deaf to the terminal's ^C: stop() ends it
        )
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="fsmatrix-acks", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        psql = self._psql
        assert psql is not None and psql.stdin is not None and psql.stdout is not None
        k = self.first
        try:
            while not self._stop.is_set():
                psql.stdin.write(f"INSERT INTO {TABLE}(n) VALUES ({k});\n\\echo {_MARK} {k}\n")
                line = psql.stdout.readline()
                if not line:
                    self.ended = "psql ended"  # the server went away (a crash), or psql was stopped
                    return
                if line.rstrip("\n") != f"{_MARK} {k}":
                    self.ended = f"psql answered {line.strip()!r}, not the acknowledgement of {k}"
                    return
                self.sink.record(k)  # only now: the commit has returned
                self.acknowledged = k
                k += 1
                if self.interval:
                    self._stop.wait(self.interval)
        except BrokenPipeError:
            self.ended = "psql ended"
        except (OSError, ValueError) as exc:  # a sink that cannot be written, a closed pipe
            self.ended = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        """Stop committing (the commit in flight finishes first), end psql; idempotent."""
        self._stop.set()
        psql, thread = self._psql, self._thread
        if thread is not None:
            thread.join(STOP_WAIT_S)
            if thread.is_alive() and psql is not None:  # stuck on a server that no longer answers
                psql.kill()
                thread.join(STOP_WAIT_S)
        if psql is not None:
            try:  # communicate closes psql's input first: at the end of its input psql quits
                psql.communicate(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                psql.kill()
                psql.communicate()
            self.errors.seek(0)
            self._stderr = self.errors.read().decode(errors="replace")
            if self.ended == "psql ended":
                tail = " | ".join(line.strip() for line in self._stderr.strip().splitlines()[:2])
                self.ended = f"psql ended (status {psql.returncode})" + (f": {tail}" if tail else "")
            self._psql = None
        if self.stopped_at == 0.0:
            self.stopped_at = time.monotonic()

    def summary(self) -> dict[str, Any]:
        seconds = max(self.stopped_at - self.started_at, 0.0) if self.started_at else 0.0
        return {
            "acknowledged": self.acknowledged,
            "first": self.first,
            "sink": str(self.sink.path),
            "seconds": round(seconds, 3),
            "per_s": round((self.acknowledged - self.first + 1) / seconds, 1) if seconds and self.acknowledged else 0.0,
            "ended": self.ended,
        }


def create_table(cluster: postgres.Cluster, database: str) -> int:
    """The acknowledgements' table (made if missing); the first k not yet in it."""
    cluster.query(f"CREATE TABLE IF NOT EXISTS {TABLE} (n bigint PRIMARY KEY)", database)
    return int(cluster.value(f"SELECT coalesce(max(n), 0) + 1 FROM {TABLE}", database))


@contextlib.contextmanager
def acknowledging(
    cluster: postgres.Cluster, sink: Sink, database: str = postgres.SUPERUSER, *, interval: float = 0.0
) -> Iterator[AckClient]:
    """An acknowledging client committing into ``database`` for as long as the block runs; stopped
    (and ``sink`` closed) on every exit path. A crash of the server ends it early (``ended``)."""
    try:
        first = create_table(cluster, database)
        with tempfile.TemporaryFile() as errors:
            client = AckClient(cluster, sink, database, errors, interval=interval, first=first)
            client.start()
            try:
                yield client
            finally:
                client.stop()
                log.info("acknowledged commits: %d (%s)", client.acknowledged, client.ended or "stopped")
    finally:
        sink.close()


# ------------------------------------------------------------------ after recovery


def _ranges(pairs: list[list[str]]) -> str:
    return ", ".join(a if a == b else f"{a}-{b}" for a, b in pairs)


def durability(
    cluster: postgres.Cluster, acknowledged: int, database: str, settings: postgres.Settings
) -> dict[str, Any]:
    """Are all ``acknowledged`` commits (k = 1 .. acknowledged) in the recovered database?

    ``found``: rows present, ``found_max``: the highest; ``lost``: acknowledged k missing, with the
    first ranges of them in ``missing``. ``status`` "failed" with a ``message`` naming the loss and
    the setting that allows it (synchronous_commit=off, fsync=off), or saying that none does.
    """
    if acknowledged < 0:
        raise ValueError(f"acknowledged commits cannot be negative: {acknowledged}")
    exists = cluster.value(f"SELECT to_regclass('{TABLE}') IS NOT NULL", database) == "t"
    if exists:
        found, found_max = (int(v) for v in cluster.query(f"SELECT count(*), coalesce(max(n), 0) FROM {TABLE}",
                                                           database)[0])  # fmt: skip
        missing_sql = (
            f"SELECT k FROM generate_series(1, {int(acknowledged)}) k "
            f"WHERE NOT EXISTS (SELECT 1 FROM {TABLE} WHERE n = k)"
        )
        lost = int(cluster.value(f"SELECT count(*) FROM ({missing_sql}) m", database))
        # Consecutive missing k as ranges (k minus its rank is constant along a run), the first five.
        ranges = cluster.query(
            f"SELECT min(k), max(k) FROM (SELECT k, k - row_number() OVER (ORDER BY k) AS run "
            f"FROM ({missing_sql}) m) r GROUP BY run ORDER BY 1 LIMIT 5",
            database,
        )
    else:  # made before the acknowledgements began: missing means it was lost too
        found = found_max = 0
        lost = acknowledged
        ranges = [["1", str(acknowledged)]] if acknowledged else []
    report: dict[str, Any] = {
        "status": "passed",
        "acknowledged": acknowledged,
        "found": found,
        "found_max": found_max,
        "lost": lost,
        "table": exists,
    }
    if lost:
        report["missing"] = _ranges(ranges) + (", ..." if len(ranges) == 5 else "")
        why = []
        if settings.synchronous_commit == "off":
            why.append("synchronous_commit=off: a commit returns before its WAL is flushed")
        if not settings.fsync:
            why.append("fsync=off: nothing is forced to stable storage")
        because = "; ".join(why) if why else "with synchronous_commit and fsync on, nothing allows that loss"
        where = f"k {report['missing']}" if exists else f"the table {TABLE} itself is gone"
        report["status"] = "failed"
        report["message"] = (
            f"{lost} of {acknowledged} acknowledged commits are missing after recovery ({where}); {because}"
        )
    return report
