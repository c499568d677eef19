"""``power-cut``: the VM backend stops QEMU at once ``after_s`` into the measured part.

The guest side only starts the crash clock (its start marker tells the host when to count from) and
runs the workload; the host kills the VM (``fsmatrix.backends.qemu.power_cut``), boots a second one
on the same data disks, and the recovery runs on the filesystem as the disk holds it
(``job.run_recovery``).
"""

from __future__ import annotations

from fsmatrix.agent.crash.mode import CrashMode, CrashRun

MODE = CrashMode(
    name="power-cut",
    help="the VM backend cuts the guest's power after_s into the measured part",
    start=CrashRun,
    needs_vm="the host backend cannot cut its own power",
)
