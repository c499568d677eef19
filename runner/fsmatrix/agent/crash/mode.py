"""The crash-mode contract: what a mode declares (``CrashMode``) and what it does to one run
(``CrashRun``). ``job.run_job`` calls these hooks and nothing else, so a new mode is one module that
declares ``MODE = CrashMode(...)`` plus one line in the registry (``fsmatrix.agent.crash.MODES``).

The hooks of a run, in order: ``wrap_data`` (storage.prepare puts it over the data device),
``measured`` (entered around the workload's measured part), ``run`` (runs the workload and, by
default, its recover hook after the crash), ``after`` (once the storage is unmounted).
Standard library only: the guest runs this.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsmatrix.agent.crash.event import CrashEvent, short
from fsmatrix.agent.crash.injector import Injector

if TYPE_CHECKING:
    from fsmatrix.agent.cell import Cell
    from fsmatrix.agent.contract import Outcome, Workspace
    from fsmatrix.agent.crash.settings import CrashSettings

log = logging.getLogger("fsmatrix")

# storage.prepare's ``wrap_data``: given the data device and the cleanup stack, the device to use instead.
WrapData = Callable[[str, ExitStack], str]


class CrashNotInjected(RuntimeError):
    """A crash cell whose workload ended before the crash fired: it must not pass."""


class CrashRun:
    """One run of a crash cell as its mode makes it. The defaults: the workload runs, the crash
    clock starts with its measured part (the mode itself, or a VM backend from outside, crashes it),
    then the workload's recover hook runs on the same storage."""

    kill = False  # whether the crash clock SIGKILLs the run's processes ``after_s`` into the measured part

    def __init__(self, settings: CrashSettings, event: CrashEvent) -> None:
        self.settings = settings
        self.event = event
        self._injector: Injector | None = None

    @property
    def wrap_data(self) -> WrapData | None:
        """What goes over the data device while the workload runs (None: nothing)."""
        return None

    def measured(self, cgroup_dir: Path | None, directories: Iterable[Path]) -> AbstractContextManager[None]:
        """Entered around the measured part (every time: only the first is crashed). ``cgroup_dir``:
        the run's cgroup (None: none could be made); ``directories``: where its database's files are."""
        if self._injector is None:
            self._injector = Injector(self.event, cgroup_dir, directories, kill=self.kill)
        return self._injector.armed()

    def run(self, cell: Cell, workspace: Workspace, recover: bool) -> Outcome | None:
        """Run the workload, which dies mid-run, then its recover hook. None when ``recover`` is
        False: the crash phase alone, the crashed database left on the disk."""
        event = self.event
        try:
            cell.declaration.run_cell(cell, workspace, float(cell.timeout))
        except Exception as exc:
            if not event.fired:
                raise
            event.workload_error = f"{type(exc).__name__}: {short(str(exc))}"
            log.info("crash: the workload ended as expected: %s", event.workload_error)
        if not event.fired:
            raise not_injected(event)
        if not recover:
            return None
        hook = cell.declaration.recover
        assert hook is not None  # Cell.check refuses a crash setting for a workload without one
        return hook(cell, workspace, event)

    def after(
        self,
        cell: Cell,
        data_mount: Path,
        scratch: Path,
        reference: Mapping[str, Any] | None,
        environment: Mapping[str, Any],
    ) -> None:
        """After a run that returned an outcome, its storage unmounted: nothing by default."""


def not_injected(event: CrashEvent) -> CrashNotInjected:
    return CrashNotInjected(
        f"crash not injected: the workload ended after {event.measured_s or 0:g} s, "
        f"before crash.after_s={event.after_s:g}"
    )


@dataclass(frozen=True)
class CrashMode:
    """Everything fsmatrix knows about one crash mode."""

    name: str  # the value of the cell's ``crash.mode``
    help: str  # one line for `fsmatrix matrix settings` and the docs
    start: Callable[[CrashSettings, CrashEvent], CrashRun]  # the run's hooks (a CrashRun subclass)
    # Why only a VM backend can run it (it stops the machine, or needs disks the VM backend adds);
    # None: the host backend runs it too.
    needs_vm: str | None = None
    # A rule the cell must keep: given the cell, (the setting at fault, the message) or None.
    refuses: Callable[[Cell], tuple[str, str] | None] | None = None
    # The kernel module it needs (a device-mapper target), for the backends' checks before a run.
    kernel_module: str | None = None
