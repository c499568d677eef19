"""Processes: running external commands (one place for timeouts, error messages and logging), and
reading the process table (/proc): every walk over it is here."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("fsmatrix")

PROC = Path("/proc")


class CommandError(RuntimeError):
    """A command failed or timed out; the message carries the command and the tail of its output."""

    def __init__(self, cmd: Sequence[str], returncode: int | None, output: str) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.output = output
        tail = "\n".join(output.strip().splitlines()[-15:])
        what = "timed out" if returncode is None else f"exited with status {returncode}"
        super().__init__(f"{' '.join(self.cmd)} {what}" + (f":\n{tail}" if tail else ""))


@dataclass(frozen=True)
class AsUser:
    """A command run as another user (root dropping privileges): that uid and gid, no
    supplementary groups."""

    cmd: Sequence[str]
    uid: int
    gid: int


# The run's cgroup while one is open (cgroup.RunCpu sets it): every command started here writes its own
# pid into the cgroup's cgroup.procs before it execs the real command, so the run's processes are counted
# and no thread of this process ever is (the host backend's progress bar, the samplers).
_RUN_CGROUP: list[Path] = []
JOIN = 'echo $$ > "$0" && exec "$@"'  # sh: $0 the cgroup.procs file, "$@" the command
# Root joins first, then drops to the user (who could not move itself out of root's cgroup).
JOIN_AS = (
    "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); os.setgroups([]); "
    "os.setgid(int(sys.argv[3])); os.setuid(int(sys.argv[2]))\n"
    "try: os.execvp(sys.argv[4], sys.argv[4:])\n"
    "except OSError as e: sys.exit(f'{sys.argv[4]}: {e.strerror}')"
)


def set_run_cgroup(directory: Path | None) -> None:
    """Commands started from now on join ``directory`` (a cgroup) themselves; None: no longer."""
    _RUN_CGROUP[:] = [directory] if directory is not None else []


def in_run(argv: Sequence[str], uid: int | None = None, gid: int | None = None) -> tuple[list[str], dict[str, Any]]:
    """``argv`` as it is started: prefixed to join the run's cgroup first where one is open, and the
    keyword arguments of subprocess that run it as ``uid``/``gid`` (None: this user). Joining as
    another user, the wrapper switches users itself after joining: the arguments are then empty."""
    as_user: dict[str, Any] = {} if uid is None else {"user": uid, "group": gid, "extra_groups": []}
    if not _RUN_CGROUP:
        return list(argv), as_user
    procs = str(_RUN_CGROUP[0] / "cgroup.procs")
    if uid is None:
        return ["/bin/sh", "-c", JOIN, procs, *argv], {}
    return [sys.executable, "-c", JOIN_AS, procs, str(uid), str(gid), *argv], {}


def run(
    cmd: Sequence[str] | AsUser,
    *,
    timeout: float | None = 600,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (as the user an ``AsUser`` names) and capture its output as text; raise
    CommandError when it fails and ``check``."""
    user = cmd if isinstance(cmd, AsUser) else None
    argv = list(cmd.cmd if isinstance(cmd, AsUser) else cmd)
    log.debug("run: %s", " ".join(argv))
    started, as_user = in_run(argv, user.uid if user else None, user.gid if user else None)
    try:
        proc = subprocess.run(
            started,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            input=input,
            check=False,
            **as_user,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"") if isinstance(exc.stdout, bytes) else ""
        raise CommandError(argv, None, out if isinstance(out, str) else out.decode(errors="replace")) from exc
    except FileNotFoundError as exc:
        raise CommandError(argv, 127, f"{argv[0]}: command not found") from exc
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stdout + proc.stderr)
    return proc


def output(cmd: Sequence[str], **kwargs: object) -> str:
    """stdout of a command that must succeed."""
    return run(cmd, **kwargs).stdout  # type: ignore[arg-type]


def have(tool: str) -> bool:
    """Whether ``tool`` is on PATH (sbin included: mkfs tools live there)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return shutil.which(tool, path=path) is not None


# ------------------------------------------------------------------ processes, as /proc shows them

PF_EXITING = 0x4  # include/linux/sched.h: the task is in do_exit


@dataclass(frozen=True)
class ProcessState:
    state: str  # R, S, D, T, Z, X...
    parent: int
    flags: int

    @property
    def holds_files(self) -> bool:
        """Not a zombie: a process on its way out still closes its last files (its deferred fput)
        before its parent can reap it, so cleanup before an unmount waits for this to turn false."""
        return self.state not in ("Z", "X")

    @property
    def running(self) -> bool:
        """Neither a zombie nor on its way out. A killed process has closed its sockets (a client
        gets "connection refused") some time before it becomes a zombie."""
        return self.holds_files and not self.flags & PF_EXITING


def process_state(pid: int, proc_root: Path = Path("/proc")) -> ProcessState | None:
    """``pid``'s state, parent and flags (/proc/PID/stat fields 3, 4 and 9); None when it is gone."""
    try:
        fields = (proc_root / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    if len(fields) < 7:
        return None
    return ProcessState(fields[0], int(fields[1]), int(fields[6]))


def holds_files(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (see ``ProcessState.holds_files``)."""
    state = process_state(pid)
    return state is not None and state.holds_files


# --------------------------------------------------------------------------------------------
# the process table


def pids(proc_root: Path = PROC) -> list[int]:
    """Every process id in the process table now (any may be gone by the time it is looked at)."""
    try:
        return sorted(int(entry.name) for entry in proc_root.iterdir() if entry.name.isdigit())
    except OSError:
        return []


def links(pid: int, names: Sequence[str] = ("cwd",), *, fds: bool = True, proc_root: Path = PROC) -> list[str]:
    """Where ``pid``'s links ``names`` (cwd, root, exe) and, with ``fds``, its open file descriptors
    lead; [] when it is gone or cannot be read."""
    entry = proc_root / str(pid)
    found: list[str] = []
    for name in names:
        try:
            found.append(os.readlink(entry / name))
        except OSError:
            continue
    if not fds:
        return found
    try:
        open_fds = list((entry / "fd").iterdir())
    except OSError:
        return found
    for fd in open_fds:
        try:
            found.append(os.readlink(fd))
        except OSError:
            continue  # closed meanwhile
    return found


def mapped(pid: int, proc_root: Path = PROC) -> list[str]:
    """The paths of ``pid``'s memory mappings (/proc/PID/maps); [] when it is gone or cannot be read."""
    try:
        return [line.split(None, 5)[-1] for line in (proc_root / str(pid) / "maps").read_text().splitlines()]
    except OSError:
        return []


def command(pid: int, proc_root: Path = PROC) -> str:
    """``pid``'s command name (/proc/PID/comm); "?" when it is gone or cannot be read."""
    try:
        return (proc_root / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def environ(pid: int, proc_root: Path = PROC) -> list[bytes]:
    """``pid``'s environment as NAME=VALUE entries; [] when it is gone or cannot be read."""
    try:
        return (proc_root / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return []


def cmdline(pid: int, proc_root: Path = PROC) -> list[bytes]:
    """``pid``'s arguments; [] when it is gone or cannot be read."""
    try:
        return (proc_root / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def children_of(parent: int) -> list[int]:
    """Live processes (zombies left out) whose parent is ``parent``."""
    found = []
    for pid in pids():
        state = process_state(pid)
        if state is not None and state.holds_files and state.parent == parent:
            found.append(pid)
    return found


def processes_using(directories: Iterable[Path]) -> list[int]:
    """Live processes other than this one whose working directory or an open file lies under any
    of ``directories``."""
    prefixes = [str(Path(d).resolve()).rstrip("/") + "/" for d in directories]
    me = os.getpid()
    found = []
    for pid in pids():
        if pid == me:
            continue
        targets = links(pid)
        if any(t.startswith(p) or t + "/" == p for t in targets for p in prefixes) and holds_files(pid):
            found.append(pid)
    return found
