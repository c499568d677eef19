"""``kill``: every process of the run's database gets SIGKILL ``after_s`` into its measured part.

The kernel, its page cache and the filesystem live on: this tests the database's own crash safety,
nothing below it. Works on every backend (the guest agent kills, as the host one does).
"""

from __future__ import annotations

from fsmatrix.agent.crash.mode import CrashMode, CrashRun


class KillRun(CrashRun):
    kill = True


MODE = CrashMode(name="kill", help="SIGKILL the database's processes after_s into the measured part", start=KillRun)
