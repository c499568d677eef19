"""A run's QEMU process: started so that it dies with its runner, watched until the guest powers off
(or its time limit passes, or a crash mode's ``Cut`` pulls its plug), stopped with QMP ``quit`` and
then SIGKILL; and QEMU processes an earlier run left behind, found by name."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from qemu.qmp.legacy import QEMUMonitorProtocol

from fsmatrix.agent import crash, proc
from fsmatrix.backends.qemu import snapshot
from fsmatrix.backends.qemu.console import ConsoleWatcher
from fsmatrix.backends.qemu.crash_host import Cut

log = logging.getLogger("fsmatrix")

QUIT_GRACE_S = 15.0  # after QMP quit, before SIGKILL
QMP_CONNECT_S = 10.0
# The guest agent's first log line (fsmatrix.agent.guest.main), which systemd copies to the serial
# console: the moment the guest has booted and job mode has started.
# The agent logs this once it has read the run's job and found its disks: boot-to-agent ends here.
AGENT_MARKER = b" INFO job "
CONSOLE_POLL_S = 0.25
CUT_POLL_S = 0.02  # once the measured part began, until the cut


def running_vms(prefix: str = "fsmatrix-") -> list[tuple[int, str]]:
    """QEMU processes whose -name starts with ``prefix``: (pid, name). Finds leftovers."""
    found = []
    for pid in proc.pids():
        args = proc.cmdline(pid)
        if not args or not os.path.basename(args[0]).startswith(b"qemu-system"):
            continue
        for flag, value in itertools.pairwise(args):
            if flag == b"-name" and value.decode(errors="replace").startswith(prefix):
                found.append((pid, value.decode(errors="replace")))
    return found


def parent_death_prefix() -> list[str]:
    """A command prefix that makes the VM die with its runner: setpriv (util-linux) sets the
    parent-death signal and execs QEMU, which keeps it (QEMU 7.2 has no -run-with exit-with-parent;
    a preexec_fn is unsafe while rich's refresh thread runs). Empty when setpriv is missing."""
    return ["setpriv", "--pdeathsig", "KILL", "--"] if proc.have("setpriv") else []


def qemu_supports_io_uring(scratch: Path) -> bool:
    """Whether this host's QEMU opens a disk with aio=io_uring (a build or a kernel may lack it)."""
    scratch.mkdir(parents=True, exist_ok=True)
    probe = scratch / f"aio-probe-{os.getpid()}.img"
    try:
        probe.write_bytes(b"\0" * 4096)
        cmd = [
            "qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none", "-qmp", "stdio",
            "-drive", f"file={probe},if=none,id=probe,format=raw,cache=none,aio=io_uring",
        ]  # fmt: skip
        done = proc.run(cmd, input='{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n', timeout=30, check=False)
        return done.returncode == 0
    except proc.CommandError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def start(cmd: list[str], stderr_path: Path) -> tuple[subprocess.Popen[bytes], float]:
    """QEMU started (dying with its runner), its stderr to ``stderr_path``; and when (monotonic)."""
    with stderr_path.open("wb") as stderr:
        started = time.monotonic()
        vm = subprocess.Popen(
            [*parent_death_prefix(), *cmd], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
        )
    return vm, started


@dataclass
class Watch:
    """One QEMU process being waited for, started at ``started`` (monotonic)."""

    vm: subprocess.Popen[bytes]
    started: float
    console: Path
    qmp: Path
    boot_to_agent_s: float | None = None  # seconds from the start to the agent having read its job

    def _agent_seen(self, watcher: ConsoleWatcher, now: float) -> None:
        if self.boot_to_agent_s is None and watcher.seen():
            self.boot_to_agent_s = now - self.started

    def until_exit(self, limit: float, cut: Cut | None = None) -> int | None:
        """Wait for QEMU to exit: its exit status, or None when it was stopped after ``limit``
        seconds; with ``cut``, killed ``cut.after_s`` after the measured part began
        (``cut.fired_at_s`` records when)."""
        vm, started = self.vm, self.started
        watcher = ConsoleWatcher(self.console, AGENT_MARKER)
        cut_after = cut.after_s if cut is not None else None
        if cut is not None:
            cut.fired_at_s = None
        measure = ConsoleWatcher(self.console, crash.MEASURE_START_MARKER.encode()) if cut_after is not None else None
        measure_seen: float | None = None
        while (code := vm.poll()) is None:
            now = time.monotonic()
            if measure is not None and cut is not None and cut_after is not None:
                if measure_seen is None and measure.seen():
                    measure_seen = now
                    log.info("the cut: the measured part began; cutting in %g s", cut_after)
                if measure_seen is not None and now - measure_seen >= cut_after:
                    # The cut: no QMP quit, no flush; what the guest had not written is lost.
                    vm.send_signal(signal.SIGKILL)
                    code = vm.wait()
                    cut.fired_at_s = round(now - measure_seen, 3)
                    return code
            if now - started >= limit:
                stop(vm, self.qmp)
                return None
            self._agent_seen(watcher, now)
            pause = CONSOLE_POLL_S if measure_seen is None else CUT_POLL_S  # the cut lands close to after_s
            time.sleep(min(pause, max(0.0, limit - (now - started))))
        self._agent_seen(watcher, time.monotonic())  # the marker came in the last poll interval
        return code


def stop(vm: subprocess.Popen[bytes], qmp: Path) -> None:
    """QMP quit, then SIGKILL when QEMU does not exit within QUIT_GRACE_S."""
    try:
        monitor = QEMUMonitorProtocol(str(qmp))
        monitor.settimeout(QMP_CONNECT_S)
        try:
            monitor.connect()
            monitor.cmd("quit")
        finally:
            snapshot.close(monitor)
        vm.wait(timeout=QUIT_GRACE_S)
        log.info("qemu stopped with QMP quit")
    except Exception as exc:  # a QMP, socket or wait failure alike: kill it
        log.warning("QMP quit did not stop qemu (%s): killing it", exc)
        if vm.poll() is None:
            vm.send_signal(signal.SIGKILL)
            vm.wait()


def kill(vm: subprocess.Popen[bytes] | None) -> None:
    """An exception on the way: no QEMU may outlive its run."""
    if vm is not None and vm.poll() is None:
        vm.kill()
        vm.wait()
