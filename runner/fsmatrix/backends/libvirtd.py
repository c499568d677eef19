"""The libvirt daemons fsmatrix talks to: the system's, or a private set it starts and stops itself.

When ``qemu:///system`` answers (a system libvirtd runs), fsmatrix uses it and starts nothing.
Otherwise (a host or container without systemd) it starts virtlogd, virtlockd and libvirtd inside
a network namespace of its own, so that no bridge (virbr0), firewall rule or private address of
libvirt's appears on the host. Their pid files live in STATE_DIR; ``stop`` stops exactly the
processes named there (checked against /proc, so never a system libvirtd nor a recycled pid) and
deletes the namespace when fsmatrix made it.

Users of a managed set hold a lease (STATE_DIR/users/<pid>); ``running()`` stops the set when the
last lease goes and nobody asked for it to stay (``fsmatrix libvirt start`` does).

QEMU permissions: domains fsmatrix creates run QEMU as root with ``relabel='no'`` (see
backends/libvirt.py), so neither qemu.conf nor the ownership of the disk files matters.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.errors import UserError

log = logging.getLogger("fsmatrix")

URI = "qemu:///system"
NETNS = "fsmatrix"
STATE_DIR = Path("/run/fsmatrix/libvirt")
# Start order; stopped in reverse. libvirtd reaches the other two through their sockets.
DAEMONS = ("virtlogd", "virtlockd", "libvirtd")
PACKAGE = "libvirt-daemon-system"
SOCKET_WAIT_S = 30.0
STOP_GRACE_S = 15.0
LOG_FILE = "libvirtd.log"


@dataclass(frozen=True)
class Daemons:
    uri: str
    netns: str | None  # None: the system's daemon, which fsmatrix never starts or stops
    started: bool  # this call started them


# ------------------------------------------------------------------------------------ helpers


def libvirt_module() -> Any:
    """The libvirt-python module, with libvirt's default error printing to stderr switched off."""
    try:
        import libvirt  # type: ignore[import-untyped]
    except ImportError as exc:
        raise UserError(
            "the libvirt backend needs the Python package libvirt-python (pip install libvirt-python)"
        ) from exc
    # Errors arrive as exceptions; without this, libvirt also prints every one of them to stderr.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def reachable(uri: str = URI) -> bool:
    """Whether a libvirt daemon answers on ``uri``."""
    libvirt = libvirt_module()
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return False
    try:
        conn.getLibVersion()
        return True
    except libvirt.libvirtError:
        return False
    finally:
        conn.close()


def _pid_file(daemon: str) -> Path:
    return STATE_DIR / f"{daemon}.pid"


def _alive_as(pid: int, daemon: str) -> bool:
    """Whether ``pid`` is a running ``daemon`` (so a stale pid file never names another process)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return os.path.basename(exe.removesuffix(" (deleted)")) == daemon


def our_pids() -> dict[str, int]:
    """The daemons fsmatrix started that still run: name -> pid (empty: none of fsmatrix's runs)."""
    found = {}
    for daemon in DAEMONS:
        try:
            pid = int(_pid_file(daemon).read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive_as(pid, daemon):
            found[daemon] = pid
    return found


def _netns_exists() -> bool:
    return Path("/run/netns", NETNS).exists()


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serializes start and stop between fsmatrix processes."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / "lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def live_leases() -> list[int]:
    """The pids of the processes using the managed daemons (stale leases are removed on the way):
    what `fsmatrix libvirt stop` warns about."""
    pids = []
    for lease in (STATE_DIR / "users").glob("*"):
        if lease.name.isdigit() and Path(f"/proc/{lease.name}").exists():
            pids.append(int(lease.name))
        else:
            lease.unlink(missing_ok=True)
    return pids


def _check_installed() -> None:
    for daemon in DAEMONS:
        if not proc.have(daemon):
            raise UserError(
                f"{daemon} not found: the libvirt backend needs libvirt's daemons "
                f"(Debian: apt-get install {PACKAGE} libvirt-clients)"
            )
    if not proc.have("ip"):
        raise UserError("ip not found: starting libvirtd in its own network namespace needs it (Debian: iproute2)")


def _log_tail(lines: int = 15) -> str:
    try:
        text = (STATE_DIR / LOG_FILE).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ------------------------------------------------------------------------------ start / stop


def start() -> Daemons:
    """A libvirt daemon answering on URI: the system's when it runs, else fsmatrix's own (started
    here when it does not run yet). Raises UserError when libvirt is not installed or will not start."""
    with _locked():
        ours = our_pids()
        if reachable():
            if ours:
                return Daemons(URI, NETNS, started=False)
            return Daemons(URI, None, started=False)
        _check_installed()
        if ours:  # a half-dead set from an earlier run: start afresh
            log.warning("fsmatrix's libvirt daemons do not answer: restarting them (%s)", ours)
            _stop_locked()
        return _start_locked()


def _start_locked() -> Daemons:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "keep").unlink(missing_ok=True)
    try:
        if not _netns_exists():
            proc.run(["ip", "netns", "add", NETNS], timeout=30)
            (STATE_DIR / "netns-created").touch()
        proc.run(["ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up"], timeout=30)
        # Warnings and errors only: the daemons have no journal to write to here.
        env = {**os.environ, "LIBVIRT_LOG_OUTPUTS": f"3:file:{STATE_DIR / LOG_FILE}"}
        for daemon in DAEMONS:
            # -d: the parent returns once the daemon runs; -p: the pid file stop() trusts.
            cmd = ["ip", "netns", "exec", NETNS, daemon, "-d", "-p", str(_pid_file(daemon))]
            proc.run(cmd, timeout=60, env=env)
        deadline = time.monotonic() + SOCKET_WAIT_S
        while not reachable():
            if time.monotonic() > deadline:
                raise UserError(
                    f"libvirtd started but {URI} did not answer within {SOCKET_WAIT_S:.0f} s:\n{_log_tail()}"
                )
            time.sleep(0.2)
    except proc.CommandError as exc:
        _stop_locked()
        raise UserError(f"cannot start libvirt's daemons: {exc}\n{_log_tail()}") from exc
    except BaseException:
        _stop_locked()
        raise
    log.info("started virtlogd, virtlockd and libvirtd in network namespace %s", NETNS)
    return Daemons(URI, NETNS, started=True)


def stop() -> None:
    """Stop the daemons fsmatrix started (never a system libvirtd) and delete the namespace when
    fsmatrix made it. Domains still running on them are destroyed first: nothing could manage
    them afterwards."""
    with _locked():
        _stop_locked()


def _destroy_domains() -> None:
    libvirt = libvirt_module()
    try:
        conn = libvirt.open(URI)
    except libvirt.libvirtError:
        return
    try:
        for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            log.warning("destroying domain %s: its libvirtd is being stopped", dom.name())
            with contextlib.suppress(libvirt.libvirtError):
                dom.destroy()
    finally:
        conn.close()


def _stop_locked() -> None:
    ours = our_pids()
    if "libvirtd" in ours:
        _destroy_domains()
    for daemon in reversed(DAEMONS):
        pid = ours.get(daemon)
        if pid is not None:
            _terminate(pid, daemon)
        _pid_file(daemon).unlink(missing_ok=True)
    if (STATE_DIR / "netns-created").exists():
        if _netns_exists():
            proc.run(["ip", "netns", "delete", NETNS], timeout=30)
        (STATE_DIR / "netns-created").unlink()
    (STATE_DIR / "keep").unlink(missing_ok=True)


def _terminate(pid: int, daemon: str) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE_S."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while _alive_as(pid, daemon):
        if time.monotonic() > deadline:
            log.warning("%s (pid %d) ignored SIGTERM: killing it", daemon, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    log.info("stopped %s (pid %d)", daemon, pid)


def status() -> dict[str, Any]:
    """What runs: uri, whether it answers, whether fsmatrix manages it, the daemons' pids, the namespace."""
    ours = our_pids()
    answers = reachable()
    version = None
    if answers:
        libvirt = libvirt_module()
        with contextlib.suppress(libvirt.libvirtError):
            conn = libvirt.open(URI)
            try:
                number = conn.getLibVersion()
                version = f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"
            finally:
                conn.close()
    return {
        "uri": URI,
        "reachable": answers,
        "managed_by_fsmatrix": bool(ours),
        "daemons": {daemon: ours.get(daemon) for daemon in DAEMONS},
        "netns": NETNS if ours else None,
        "netns_exists": _netns_exists(),
        "netns_created_by_fsmatrix": (STATE_DIR / "netns-created").exists(),
        "kept": (STATE_DIR / "keep").exists(),
        "users": live_leases() if STATE_DIR.exists() else [],
        "libvirt_version": version,
    }


@contextlib.contextmanager
def running() -> Iterator[Daemons]:
    """A libvirt daemon for the duration of the block. Started when needed; at the end fsmatrix's
    own daemons stop unless another fsmatrix process still uses them or `fsmatrix libvirt start`
    asked for them to stay. A system libvirtd is never touched."""
    daemons = start()
    lease = STATE_DIR / "users" / str(os.getpid())
    if daemons.netns is not None:
        lease.parent.mkdir(parents=True, exist_ok=True)
        lease.touch()
    try:
        yield daemons
    finally:
        if daemons.netns is not None:
            with _locked():
                lease.unlink(missing_ok=True)
                if not live_leases() and not (STATE_DIR / "keep").exists():
                    _stop_locked()
