"""The GT.M 3n+1 benchmark (seeds 000 and 002): ``threen1.m`` on a fresh database, verified.

Parameters (``cell["workload"]["threen1"]``): ``start``, ``end``, ``workers`` (that many GT.M
processes), ``block`` (starting numbers a worker claims at a time) and ``keys``: ``spelled`` (every
``^step`` subscript and value is written in the digit words of ``digit_words.txt``, as the
published benchmark does; its answers and totals stay plain integers, as there) or ``integer``.
GT.M settings: ``cell["gtm"]``, see ``gtm.Settings``.

The workers keep the answers in the database as the published program does (``threen1.m`` says
how): ``^result`` (longest sequence) and ``^highest`` (largest number), updated in one TP transaction
per computed sequence that sets them only when this sequence beats them, so almost all of these
transactions are read-only; and ``^reads`` / ``^updates``, to which each worker adds its counts in
one transaction at its end. The result's figures are read from these globals. One documented
departure: ``^highest`` is kept in the per-sequence transaction too (the published program sets it
only in each worker's final one), so that it survives a crash with the ``^step`` entries it
covers; this adds a read-write transaction each time a sequence climbs higher than any before it
without being the longest (counted: ``details.transactions.read_write_highest_only``).

Verification, besides the answers against the reference (``expected``, computed before the timed
run; a VM backend computes it on the host and passes it in the job): the shared totals equal the
workers' own counts; reads - updates equals the number of starting numbers; GT.M's own TP counters
(``dse dump -fileheader -gvstat``: TTR, TTW) equal the transactions the workers counted; and a seeded
random sample of at least 1,000 stored ``^step`` entries (``SAMPLE_SIZE`` starting numbers and one
number from each one's sequence) is read back and checked against a plain iteration.

Timing is done inside GT.M: the elapsed time runs from the moment every worker is running and has
been released (the parent holds a LOCK they wait on) to the end of the last one, from $ZHOROLOG.
Each worker reports its CPU time at its end with $ZGETJPI("","CPUTIM"): the workers are detached
from the parent (JOB), so no wait()-based accounting sees them, and /proc is gone once they exit.

Whatever happens (success, error, timeout, Ctrl-C), no GT.M process outlives ``run_cell`` and the
database is run down, so its filesystem can be unmounted. The parent's output is parsed by
``parse_output`` only.

Modules: ``params`` (``Params``, the shared names), ``parse`` (the parent's output), ``run``,
``verify`` (the reference, the sample, the checks), ``recover`` (after a crash), ``reference`` and
``memory`` (the plain computations). This one holds the declaration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsmatrix.agent import declare
from fsmatrix.agent.contract import Footprint, Metric, Workload
from fsmatrix.agent.databases import gtm
from fsmatrix.agent.workloads.threen1 import recover, run, verify
from fsmatrix.agent.workloads.threen1.params import Params

if TYPE_CHECKING:
    from fsmatrix.agent.cell import Cell

# Bytes per starting number, measured on ext4 with 4 KiB blocks (1..20,000 and 1..100,000, two
# workers): the database's used blocks and the before-image journal's size; FIT_MARGIN on top.
DATA_PER_NUMBER = {"spelled": 180, "integer": 90}
JOURNAL_PER_NUMBER = {"spelled": 300, "integer": 180}
FIT_MARGIN = 1.25
HEADER = 5 << 20  # the database file's header and bitmaps (4.0 MiB measured at the default allocation)
FIXED = 1 << 20  # the journal's first records


def footprint(cell: Cell) -> Footprint:
    """The database file (its allocation, grown by whole extensions once that is full) and its journal."""
    p, db = cell.typed_params(Params), cell.settings_of(gtm.Settings)
    numbers = p.end - p.start + 1
    used = int(numbers * DATA_PER_NUMBER[p.keys] * FIT_MARGIN)
    allocated = db.allocation * db.block_size
    data = HEADER + (allocated if used <= allocated else used + db.extension * db.block_size)
    journal = 0 if db.journal == "off" else int(numbers * JOURNAL_PER_NUMBER[p.keys] * FIT_MARGIN) + FIXED
    return Footprint(data=data, journal=journal, setting="workload.threen1.end")


WORKLOAD = Workload(
    name="threen1",
    help="the GT.M 3n+1 benchmark (seeds 000, 002): a fresh database, N workers, verified",
    params=Params,
    run_cell=run.run_cell,
    metrics=(
        Metric("elapsed_s", "Elapsed time (s)", "s", "lower"),
        Metric("reads_per_s", "Read rate (reads/s)", "reads/s", "higher"),
        Metric("updates_per_s", "Update rate (updates/s)", "updates/s", "higher"),
        Metric("worker_cpu_s", "Worker CPU time (s)", "s", "lower"),
    ),
    primary="elapsed_s",
    # Wall time is what a user waits for, but on a shared machine it drifts between batches by more
    # than a real regression (bench_gate: -35 %..+40 % between two batches of the same cell at load
    # 8); the CPU-seconds of the run's own processes (its cgroup) hold within a few per cent there.
    gated=("elapsed_s", "cpu_busy_s"),
    slug=lambda p: f"{p.start}-{p.end}-w{p.workers}",
    summary=lambda p: f"threen1 {p.start}..{p.end} w{p.workers} b{p.block} {p.keys}",
    row_keys=("start", "end"),
    row_label=lambda v: f"{v['start']:,}..{v['end']:,}",
    operation="database update",
    operations=lambda m: m.get("updates"),
    reference=verify.expected,
    settings=(gtm.BLOCK,),
    journal="the GT.M journal",
    guest_tools=(gtm.TOOL,),
    host_packages=("fis-gtm",),
    recover=recover.recover,
    footprint=footprint,
)
KEY_METRICS = {m.name: m.better for m in WORKLOAD.metrics}
DEFAULTS = declare.defaults(Params)
