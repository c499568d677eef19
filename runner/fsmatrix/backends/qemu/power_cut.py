"""The host side of ``crash.mode: power-cut``: the first VM of the run is killed (SIGKILL, no
flush) ``after_s`` seconds after its console shows the measured part began; the backend then
boots a second VM on the same data disk files to recover (``"phase": "recover"``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsmatrix.agent import crash
from fsmatrix.backends import jobdisk
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import snapshot
from fsmatrix.backends.qemu.console import console_tail
from fsmatrix.matrix import MatrixCell

if TYPE_CHECKING:
    from fsmatrix.backends.qemu.backend import QemuBackend

log = logging.getLogger("fsmatrix")

MODE = "power-cut"  # the crash mode whose host side this is (fsmatrix.agent.crash.power_cut)


def applies(cell: MatrixCell) -> bool:
    return cell.spec.crash is not None and cell.spec.crash.mode == MODE


def acknowledged_on(cell: MatrixCell, console_text: str) -> int | None:
    """The commits the cut guest's workload acknowledged on its console, when it declares how to
    count them (``Workload.acknowledged_on_console``); None otherwise."""
    count = cell.spec.declaration.acknowledged_on_console
    return None if count is None else count(cell.spec, console_text)


def cut(
    backend: QemuBackend,
    cell: MatrixCell,
    repeat: int,
    run_dir: Path,
    template: snapshot.Template | None,
    data: list[Disk],
    job_doc: dict[str, Any],
    limit: float,
) -> dict[str, Any]:
    """The first VM of a power-cut cell, killed ``after_s`` into its measured part. Returns
    ``{"crash": <the record for the recover phase>, "wall_s"}``, or, when the cut did not happen,
    ``{"status", "reason", "tail", "crash"}`` for the run's result (its crash section: not fired)."""
    settings = cell.spec.crash
    assert settings is not None
    launch = backend._launch(cell, repeat, run_dir, template, data, job_doc, "run")
    vm_started = time.monotonic()
    backend.power_cut_after_s = settings.after_s
    try:
        code = backend.boot_and_wait(launch, limit)
    finally:
        backend.power_cut_after_s = None
    wall = round(time.monotonic() - vm_started, 1)
    fired_at = backend.power_cut_fired_at_s
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
            return {"status": "timeout", "reason": reason, "tail": tail, "crash": not_cut}
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
        return {"status": "failed", "reason": reason, "tail": tail, "crash": not_cut}
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
    return {"crash": record, "wall_s": wall}
