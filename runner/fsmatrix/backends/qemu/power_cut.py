"""The host side of ``crash.mode: power-cut``: the first VM of the run is killed (SIGKILL, no
flush) ``after_s`` seconds after its console shows the measured part began; the backend then
boots a second VM on the same data disk files to recover (``"phase": "recover"``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fsmatrix.agent import crash
from fsmatrix.agent.crash import power_cut as guest_side
from fsmatrix.backends import jobdisk
from fsmatrix.backends.qemu.console import console_tail
from fsmatrix.backends.qemu.crash_host import Cut, HostCrashMode, NotCrashed, Recover, VmRun
from fsmatrix.matrix import MatrixCell

log = logging.getLogger("fsmatrix")


def acknowledged_on(cell: MatrixCell, console_text: str) -> int | None:
    """The commits the cut guest's workload acknowledged on its console, when it declares how to
    count them (``Workload.acknowledged_on_console``); None otherwise."""
    count = cell.spec.declaration.acknowledged_on_console
    return None if count is None else count(cell.spec, console_text)


def cut(run: VmRun) -> Recover | NotCrashed:
    """The first VM of a power-cut cell, killed ``after_s`` into its measured part: ``Recover`` with
    the record of the cut, or, when the cut did not happen, ``NotCrashed`` (its crash section: not fired)."""
    cell, limit = run.cell, run.limit
    settings = cell.spec.crash
    assert settings is not None
    launch = run.launch("run")
    vm_started = time.monotonic()
    the_cut = Cut(settings.after_s)
    code = run.backend.boot_and_wait(launch, limit, the_cut)
    wall = round(time.monotonic() - vm_started, 1)
    fired_at = the_cut.fired_at_s
    text = (
        launch.console.read_text(encoding="utf-8", errors="replace").replace("\r", "")
        if launch.console.exists()
        else ""
    )
    log.info("guest console (the VM that was to be cut):\n%s", text or "(none)")
    tail = console_tail(launch.console)
    if fired_at is None:
        not_cut = crash.CrashEvent.for_settings(settings).to_dict()  # fired False
        if code is None:
            reason = (
                f"the guest did not power off within {limit:.0f} s and its measured part never began "
                f"(no {crash.MEASURE_START_MARKER} on its console): no power cut; console tail:\n{tail}"
            )
            return NotCrashed("timeout", reason, tail, not_cut)
        guest = jobdisk.read_result(launch.job_disk) or {}
        measured = (guest.get("crash") or {}).get("measured_s")
        not_cut["measured_s"] = measured if isinstance(measured, int | float) else None
        began = crash.MEASURE_START_MARKER.encode() in text.encode()
        how = (
            f"its measured part lasted {measured:g} s"
            if isinstance(measured, int | float)
            else ("its measured part had begun" if began else "its measured part never began")
        )
        guest_said = f"; the guest's result: {guest.get('status')}: {guest.get('reason')}" if guest else ""
        reason = (
            f"crash not injected: the guest powered off (exit status {code}) before the power cut at "
            f"crash.after_s={settings.after_s:g} ({how}){guest_said}"
        )
        return NotCrashed("failed", reason, tail, not_cut)
    log.warning("power cut: qemu killed %.3f s into the measured part", fired_at)
    record: dict[str, Any] = {
        "mode": settings.mode,
        "after_s": settings.after_s,
        "fired": True,
        "fired_at_s": fired_at,
        "measured_s": fired_at,
    }
    acknowledged = acknowledged_on(cell, text)
    if acknowledged is not None:
        record["acknowledged"] = acknowledged
    # The first VM's root overlay and job disk are done with; its data disks carry on.
    launch.overlay.unlink(missing_ok=True)
    launch.job_disk.unlink(missing_ok=True)
    return Recover(record, {"power_cut_vm_wall_s": wall})


class PowerCutHost(HostCrashMode):
    """The first VM cut (``cut``); the run's VM recovers on the same data disk files."""

    mode = guest_side.MODE.name

    def before_run(self, run: VmRun) -> Recover | NotCrashed:
        return cut(run)


HOST_SIDE = PowerCutHost()
