"""The workload contract: what a workload declares (``Workload``, its ``Metric``s and ``SettingsBlock``s)
and what it is handed and hands back (``Workspace``, ``Outcome``).

The bottom layer of the agent: it imports nothing of fsmatrix but ``declare`` (and, for type hints
only, the crash event), so the registry, the cell, the crash modes and every workload can import it
without a cycle, type hints included. The cell a workload's hooks take is its type parameter ``C``
(``agent/cell.py``'s ``Cell``, which sits above this module: a cell carries its declaration).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fsmatrix.agent import declare

if TYPE_CHECKING:
    from fsmatrix.agent.crash.event import CrashEvent

P = TypeVar("P")
C = TypeVar("C")  # the cell the hooks take (fsmatrix.agent.cell.Cell)


@dataclass(frozen=True)
class Workspace:
    """Where a workload may write."""

    data: Path  # a directory on the filesystem under test
    journal: Path  # where a database journal / WAL goes (== data unless the layout splits it)
    scratch: Path  # per-run directory *off* the device under test: logs, temporary files
    # Wrap the measured part (not layout, prepare or cleanup) in ``with ws.measure():`` so the
    # sampler's totals cover only it. Without a sampler it does nothing. Entering and leaving it
    # sync the filesystems under test (the window holds its own writeback): a workload's own
    # clock starts and stops inside the ``with``, so its times leave those syncs out.
    measure: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    # Filesystem "raw": the block device the workload runs on (data is then an empty directory on
    # no filesystem under test). None when there is a filesystem.
    device: str | None = None
    # What the workload's declared ``reference`` computed for this cell before the run (on the host
    # for the VM backends: it comes in the job); None: the workload computes it itself if it needs it.
    reference: Mapping[str, Any] | None = None
    # A crash cell (cell.crash): the crash as it happens; ``crash.fired`` turns True when the
    # injector has killed the workload's processes (its cleanup must then leave the crashed
    # database as it is for the recover hook). None for every other cell.
    crash: CrashEvent | None = None


@dataclass
class Outcome:
    """What a workload hands back. Numbers in ``metrics`` are plain floats/ints, units in the name."""

    metrics: dict[str, float | int]
    verification: dict[str, Any]  # {"status": "passed" | "failed" | "not-applicable", ...}
    details: dict[str, Any] = field(default_factory=dict)  # everything else parsed from the tool
    versions: dict[str, str] = field(default_factory=dict)  # versions of tools that affect numbers


@dataclass(frozen=True)
class Metric:
    """A key metric: what a comparison and the reports look at."""

    name: str  # the key in Outcome.metrics
    title: str  # report table heading, e.g. "Elapsed time (s)"
    unit: str  # "s", "reads/s", "MiB/s", ...
    better: str  # "lower" | "higher"


# The throughput metrics every file-I/O benchmark reports (sysbench fileio, fio).
FILE_IO_METRICS = (
    Metric("iops", "IO requests per second", "requests/s", "higher"),
    Metric("read_mib_s", "Read throughput (MiB/s)", "MiB/s", "higher"),
    Metric("write_mib_s", "Write throughput (MiB/s)", "MiB/s", "higher"),
)


@dataclass(frozen=True)
class Footprint:
    """The most a cell writes to the filesystem under test, in bytes (apparent file sizes: a full
    disk fails a run whatever is sparse). ``journal`` is the part that layout split-journal moves to
    its own device (a database journal / WAL); 0 for workloads without one."""

    data: int
    journal: int = 0
    setting: str = "workload"  # what to lower when it does not fit, e.g. "workload.fio.file_size"

    @property
    def total(self) -> int:
        return self.data + self.journal


@dataclass(frozen=True)
class SettingsBlock:
    """A top-level settings block of a cell that a database owns (``gtm``, later ``postgres``).

    ``settings`` is its declared dataclass (``fsmatrix.agent.declare.setting`` fields); a cell
    carries the block only when its workload owns it.
    """

    name: str
    settings: type
    help: str
    summary: Callable[[Any], str]  # a few words for the `matrix expand` table, e.g. "BG jnl=before"
    # Bytes of shared memory the database allocates with these settings (buffers): checked against
    # the guest's memory (vm.memory) by matrix expand, and against the host's by the host backend.
    memory: Callable[[Any], int] | None = None
    memory_settings: tuple[str, ...] = ()  # the settings ``memory`` counts, named in the messages


@dataclass(frozen=True)
class Workload(Generic[P, C]):
    """Everything fsmatrix knows about one workload. ``P`` is its parameters dataclass, ``C`` the cell
    its hooks take."""

    name: str
    help: str  # one line: `fsmatrix matrix settings`, `fsmatrix workload --help`
    params: type[P]  # frozen dataclass of declare.setting fields: defaults, bounds, help
    run_cell: Callable[[C, Workspace, float], Outcome]
    metrics: tuple[Metric, ...]  # the key metrics, in report order
    primary: str  # the metric the reports lead with and the regression gate decides on (one of ``metrics``)
    slug: Callable[[P], str]  # the workload part of a cell id, e.g. "1-100000-w4"
    summary: Callable[[P], str]  # a short description for tables and progress
    row_keys: tuple[str, ...]  # parameters that name a report row (its input)
    operation: str  # what one operation is, for the per-operation device metrics
    operations: Callable[[Mapping[str, float | int]], float | None]  # how many, from Outcome.metrics
    needs_filesystem: bool = True  # False: can run on filesystem "raw" (the block device itself)
    settings: tuple[SettingsBlock, ...] = ()  # the database settings blocks it owns
    # What layout "split-journal" puts on the second device ("the GT.M journal"); None: not supported.
    journal: str | None = None
    guest_packages: tuple[str, ...] = ()  # Debian packages every guest image needs (packer/packages.txt)
    # Tools it finds where the guest image declares them (the image manifest's ``tools``, from
    # packer/images/NAME.yaml, which also names each one's package): what differs between images.
    guest_tools: tuple[str, ...] = ()
    host_packages: tuple[str, ...] = ()  # Debian packages the host backend needs (usually the same)
    # The key metrics for given parameters (a direction a mode never does is left out); default all.
    key_metrics_for: Callable[[P], tuple[str, ...]] | None = None
    # Formats a row label from the row_keys' values (default: the values joined by " ").
    row_label: Callable[[Mapping[str, Any]], str] | None = None
    # What the regression gate decides on, when more than the primary metric: the primary first,
    # then e.g. "cpu_busy_s" (the run's own CPU-seconds, which run_job measures for every workload).
    # The gate adjusts these tests' p-values together with those of every other cell (Holm).
    gated: tuple[str, ...] = ()
    # Expected answers its verification needs that may take long to compute (3n+1: longest sequence
    # and largest number of a range outside the published table). Computed before the run, outside
    # its timeout: by run_job, or by a VM backend on the host and passed in the job (JSON values).
    reference: Callable[[P], dict[str, Any]] | None = None
    # Metrics the reports also show side by side in one table per input, the storage stacks as rows
    # (seed 004's shape: create, load, index, total, TPS, latency); () for none.
    overview: tuple[str, ...] = ()
    # A sentence the reports print under the workload's heading (what its numbers cannot be compared with).
    note: str = ""
    # Recovery after a crash (cells with a ``crash`` setting; None: the workload refuses them).
    # Called on the crashed database in the same workspace (or, after a power cut, a workspace on
    # the same filesystem mounted again): recover it, check its integrity, resume the work, verify.
    # It records its steps, checks and reused work in the CrashEvent (``event.step(...)``,
    # ``event.check(...)``, ``event.reused``) and returns the Outcome of the resumed work.
    recover: Callable[[C, Workspace, CrashEvent], Outcome] | None = None
    # The most the cell writes to the filesystem under test (its files, its database and journal),
    # from its parameters and its settings blocks: matrix expand refuses a cell that cannot fit its
    # data disk(s) (fsmatrix.agent.fit). None: not checked.
    footprint: Callable[[C], Footprint] | None = None
    # For a workload whose client acknowledges commits: how many it acknowledged, counted from the
    # lines it wrote to a VM's serial console before a power cut (the host reads the console; the
    # recover hook compares with what survived). None: nothing to count.
    acknowledged_on_console: Callable[[C, str], int] | None = None

    def parse_params(self, values: Mapping[str, Any] | None) -> P:
        return declare.parse(self.params, values, f"workload.{self.name}")

    def key_metrics(self, params: P) -> dict[str, str]:
        """{metric: better direction} for these parameters, the primary metric first."""
        chosen = self.key_metrics_for(params) if self.key_metrics_for else tuple(m.name for m in self.metrics)
        by_name = {m.name: m for m in self.metrics}
        ordered = [self.primary] + [n for n in chosen if n != self.primary]
        return {n: by_name[n].better for n in ordered if n in chosen or n == self.primary}

    def label(self, values: Mapping[str, Any]) -> str:
        """The report row label from ``{row key: value}``."""
        if self.row_label is not None:
            return self.row_label(values)
        return " ".join(str(values[k]) for k in self.row_keys)

    @property
    def primary_metric(self) -> Metric:
        """The declared ``Metric`` named by ``primary`` (its title, unit and direction)."""
        return next(m for m in self.metrics if m.name == self.primary)

    @property
    def gate_metrics(self) -> tuple[str, ...]:
        """The metrics the regression gate decides on: ``gated``, or just the primary metric."""
        return self.gated or (self.primary,)
