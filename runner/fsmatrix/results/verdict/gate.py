"""Compare two sets of results (BASE and HEAD) cell by cell: the table and the regression gate.

A side is a results directory (a run directory or a whole results root) or a run id looked up in
the SQLite index of a results root. Cells are matched by id; every key metric the documents
declare is compared, plus the noise-robust ones (CPU-seconds, device bytes and IOs per operation)
that move far less than wall time on a shared machine. Runs from environments that change numbers
(backend, accelerator, kernel, image, device profile, CPU, memory) are refused unless allowed.

``--across NAME`` compares on purpose what differs in one of ``ACROSS``: an environment axis
(``ENV_AXES``: a cell's guest image, with the kernel and packages it brings), BASE's cells on one
image with HEAD's on another, matched by every other setting; or what is under test at one cell id
(a different vm.kernel file, by sha256), refused unless named. Only the environment keys they
explain may differ.

With a threshold, the gate's verdict is PASS, FAIL or NOT DECIDED (``outcome``), at one look or at
each of the planned looks of a gate that adds pairs (``Judging.looks``). The gate decides on work too:
each of ``WORK_THRESHOLDS`` a cell's runs measured on both sides is a gated row with its own threshold,
in the same Holm family as time's tests and in the same PASS (every gated row shown not worse).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from fsmatrix.errors import UserError
from fsmatrix.results.store import Result
from fsmatrix.results.store.sides import Side
from fsmatrix.results.verdict import outcome, stats
from fsmatrix.results.verdict.environment import (
    ACROSS,
    ENV_AXES,
    Across,
    across_differences,
    across_sides,
    axis_value,
    env_differences,
    format_env_diffs,
)
from fsmatrix.results.verdict.metrics import DURABILITY, compared_metrics, gate_metrics, metric_pairs, metric_values

# The work per operation the gate decides on beside time, each with its own threshold (lower is better
# for all). Each is about three times the largest run-to-run CV measured for it on the demo's cells
# (docs/measurements.md "Work per operation": bytes written 0.3-0.4 %, write requests 0.6-3.5 %,
# flushes 1.8-2.3 %, fsync calls 1.5-3.0 %), rounded up to 2, 10 or 15 %: an A/A estimate from 8 pairs
# (its sd about CV/2) then lies some 6 sd below the threshold, so only a spike of a short run's counts
# could raise a false alarm, while the PASS test's upper bound (about one CV above the estimate at 8
# pairs) lies well below it. CPU instructions were not measured (no counters under TCG): the time
# threshold's default, 5 %, until they are. docs/statistics-and-gate.md.
WORK_THRESHOLDS: Mapping[str, float] = MappingProxyType(
    {
        "device_write_bytes_per_op": 0.02,
        "device_write_ios_per_op": 0.15,
        "device_flushes_per_op": 0.10,
        "fsyncs_per_op": 0.10,
        "instructions_per_op": 0.05,
    }
)
NOT_MEASURED, ZERO = "not measured", "0 (no ratio)"


@dataclass(frozen=True)
class DurabilityLost:
    """A durability metric (``DURABILITY``) HEAD stopped doing in a cell: every passed run of BASE
    measured some, every one of HEAD's 0 (no flush request sent, no fsync called). Its writes are then
    no longer made durable on a disk with a volatile write cache, whatever time says: the gate fails
    (confirmed like a regression). A fact of the runs, not a test: there is no ratio to 0."""

    cell_id: str
    metric: str
    base_median: float
    n_base: int
    n_head: int

    @property
    def words(self) -> str:
        return (
            f"{self.cell_id} {self.metric}: head did none in {self.n_head} runs where base did "
            f"{self.base_median:.3g} per operation in every one of {self.n_base} (durability lost)"
        )


@dataclass
class MetricComparison:
    """One cell's metric, BASE against HEAD: a row of `compare`'s table."""

    cell_id: str
    metric: str
    direction: str
    comparison: stats.Comparison  # for a gated row: its verdict taken at the Holm-adjusted p-value
    regression: bool
    noise_floor: float
    gated: bool = False  # the cell's primary metric: the gate decides on it; every other row is advisory
    p_holm: float = math.nan  # the gated rows' p-values adjusted together (Holm)
    bound: outcome.Bound | None = None  # a gated row's PASS test (with a threshold); None: it cannot be made
    threshold: float | None = None  # a gated row's threshold (a work metric's own); None: no gate


@dataclass
class CompareResult:
    base: str
    head: str
    threshold: float | None
    rows: list[MetricComparison] = field(default_factory=list)
    env_diffs: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    # What differs and is compared on purpose (--across): (name, base's, head's).
    across: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_head: list[str] = field(default_factory=list)
    looks: outcome.Looks | None = None  # the planned looks of a gate that adds pairs; None: one look
    fail_level: float = stats.ALPHA  # the two-sided level the FAIL test compared with (after Holm)
    pass_level: float = stats.ALPHA  # the one-sided level of the PASS tests
    work: Mapping[str, float] = field(default_factory=dict)  # the work metrics gated, and their thresholds
    # Work metrics the gate left out of a cell: (cell, metric, on which side: NOT_MEASURED or ZERO).
    work_left_out: list[tuple[str, str, str]] = field(default_factory=list)
    stopped: list[DurabilityLost] = field(default_factory=list)  # durability HEAD stopped doing: each a FAIL

    @property
    def explained(self) -> set[str]:
        """The environment keys the crossings compared on purpose explain."""
        return {key for name, _, _ in self.across for key in ACROSS[name].explains}

    @property
    def regressions(self) -> list[MetricComparison]:
        return [r for r in self.rows if r.regression]

    @property
    def flagged(self) -> bool:
        """A regression or a durability stopped: what fails the gate, and what a confirmation runs again."""
        return bool(self.regressions or self.stopped)

    @property
    def verdict(self) -> str | None:
        """The gate's verdict (``outcome``), None without a threshold: FAIL on a regression or a
        durability metric stopped; PASS when every gated row's PASS test shows it not worse than the
        threshold; NOT DECIDED otherwise."""
        if self.threshold is None:
            return None
        if self.flagged:
            return outcome.FAIL
        gated = [r for r in self.rows if r.gated]
        if gated and all(r.bound is not None and r.bound.shown for r in gated):
            return outcome.PASS
        return outcome.NOT_DECIDED

    @property
    def undecided(self) -> list[MetricComparison]:
        """The gated rows that keep the gate from PASS (none when it failed)."""
        if self.verdict != outcome.NOT_DECIDED:
            return []
        return [r for r in self.rows if r.gated and not (r.bound and r.bound.shown)]

    def exit_status(self, not_decided: str = "distinct") -> int:
        """0 without a threshold or on PASS, 1 on FAIL, NOT DECIDED as ``not_decided`` says
        (``outcome.ON_NOT_DECIDED``: 3 by default)."""
        return outcome.exit_status(self.verdict, not_decided)


# ----------------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Judging:
    """How ``compare`` judges each row: the gate's threshold (None: no gate), α, the noise floor of
    each (cell, metric) from stored calibrations, whether the sides ran in pairs (repeat i of BASE
    next to repeat i of HEAD: ``stats.compare_paired``), and the planned looks of a gate that adds
    pairs (None: one look, at α; ``outcome.Looks``: each test at Pocock's level for those looks), and the
    work metrics gated beside time with their thresholds (``WORK_THRESHOLDS``; empty: time alone)."""

    threshold: float | None = None
    alpha: float = stats.ALPHA
    noise_floors: Mapping[tuple[str, str], float] = field(default_factory=dict)
    paired: bool = False
    looks: outcome.Looks | None = None
    work: Mapping[str, float] = field(default_factory=lambda: dict(WORK_THRESHOLDS))

    @property
    def fail_alpha(self) -> float:
        return self.looks.fail_level(self.alpha) if self.looks else self.alpha

    @property
    def pass_alpha(self) -> float:
        return self.looks.pass_level(self.alpha) if self.looks else self.alpha


def compare(
    base: Side,
    head: Side,
    judging: Judging | None = None,
    *,
    allow_env_diff: bool = False,
    across: Sequence[Across] = (),
) -> CompareResult:
    """Compare every cell present on both sides; UserError on incomparable environments, and on
    different things under test (ACROSS with ``told_by``) unless ``across`` names them. ``across``:
    what is compared on purpose; for an environment axis, BASE's cells at one value against HEAD's at
    another (``across_sides``). The environment keys they explain may differ, no other."""
    judging = judging or Judging()
    base, head, result = _comparable(base, head, judging.threshold, allow_env_diff, across)
    result.looks, result.fail_level, result.pass_level = judging.looks, judging.fail_alpha, judging.pass_alpha
    result.work = dict(judging.work) if judging.threshold is not None else {}
    bc, hc = base.by_cell(), head.by_cell()
    common = sorted(set(bc) & set(hc))
    result.only_base = sorted(set(bc) - set(hc))
    result.only_head = sorted(set(hc) - set(bc))
    if not common:
        raise UserError(f"{base.label} and {head.label} have no cell in common")
    for cell_id in common:
        work, left_out = work_gated(bc[cell_id], hc[cell_id], result.work)
        result.rows += _rows(cell_id, bc[cell_id], hc[cell_id], judging, work)
        stopped = stopped_durability(cell_id, bc[cell_id], hc[cell_id], [m for m, _ in left_out])
        result.stopped += stopped
        said = {s.metric for s in stopped}
        result.work_left_out += [(cell_id, metric, why) for metric, why in left_out if metric not in said]
    # A few declared metrics per cell decide — time's and the work metrics measured on both sides — and
    # all of those tests are corrected together: k uncorrected tests at alpha would cry wolf up to k
    # times as often. The other metrics (rates derived from the same time) explain a verdict; they
    # never fail the gate.
    decisive = [r for r in result.rows if r.gated]
    for row, p_holm in zip(decisive, stats.holm([r.comparison.p_value for r in decisive]), strict=True):
        row.p_holm = p_holm
        row.comparison = stats.decide(row.comparison, p_holm, alpha=judging.fail_alpha, noise_floor=row.noise_floor)
        row.regression = row.threshold is not None and stats.is_regression(row.comparison, row.threshold)
    return result


def work_gated(
    base: list[Result], head: list[Result], thresholds: Mapping[str, float]
) -> tuple[dict[str, float], list[tuple[str, str]]]:
    """The work metrics of ``thresholds`` the gate decides on in one cell, with their thresholds, and
    those it leaves out, with why: not measured on a side (no passed run of it has the metric: CPU
    instructions without counters, flushes on an old kernel) or 0 there (jfs sends no flush: no
    ratio). What counts is fixed by what was measured, never by whether the values differ. Measured
    differently (``provenance.work_measurement``: the agent's mark of its method) none counts: a
    change of method moves the work with nothing else changed."""
    gated: dict[str, float] = {}
    left_out: list[tuple[str, str]] = []
    differently = measured_differently(base, head)
    if differently is not None:
        return gated, [(metric, differently) for metric in thresholds]
    for metric, threshold in thresholds.items():
        why = [
            f"{NOT_MEASURED if not values else ZERO} on {name}"
            for name, docs in (("base", base), ("head", head))
            if not (values := metric_values(docs, metric)) or min(values) <= 0
        ]
        if why:
            left_out.append((metric, ", ".join(why)))
        else:
            gated[metric] = threshold
    return gated, left_out


def stopped_durability(
    cell_id: str, base: list[Result], head: list[Result], left_out: Sequence[str]
) -> list[DurabilityLost]:
    """The durability metrics among the work metrics ``left_out`` of a cell (no ratio) that HEAD stopped
    doing: BASE above 0 in every passed run that measured it, HEAD 0 in every one (``DurabilityLost``)."""
    found = []
    for metric in (m for m in DURABILITY if m in left_out):
        b, h = metric_values(base, metric), metric_values(head, metric)
        if b and h and min(b) > 0 and max(h) == 0:
            found.append(DurabilityLost(cell_id, metric, stats.median(b), len(b), len(h)))
    return found


def measured_differently(base: Sequence[Result], head: Sequence[Result]) -> str | None:
    """Why the work of ``base`` and ``head`` is not comparable (their ``provenance.work_measurement``
    marks differ: e.g. one side's windows synced at both ends, the other's not), or None."""
    marks = [sorted({str(d.provenance.value("work_measurement")) for d in docs}) for docs in (base, head)]
    if marks[0] == marks[1]:
        return None
    return "measured differently, provenance.work_measurement: base {} | head {}".format(
        *(" + ".join(repr(m) for m in side) for side in marks)
    )


def _comparable(
    base: Side, head: Side, threshold: float | None, allow_env_diff: bool, across: Sequence[Across]
) -> tuple[Side, Side, CompareResult]:
    """The sides as compared (an environment axis crossed: each side's cells at its value) and the
    result's record of what differs; UserError for what may not be compared."""
    names = [a.axis for a in across]
    if len(set(names)) != len(names):
        raise UserError(f"--across: each name once ({', '.join(names)})")
    crossed: list[tuple[str, list[str], list[str]]] = []
    for crossing in across:
        if crossing.axis in ENV_AXES:
            base, head, crossing = across_sides(base, head, crossing)
            crossed.append((crossing.axis, [str(crossing.base)], [str(crossing.head)]))
    result = CompareResult(base.label, head.label, threshold)
    differing = across_differences(base.docs, head.docs)
    refused_under_test = [diff for diff in differing if diff[0] not in names]
    if refused_under_test:
        listed = ", ".join(name for name, _, _ in refused_under_test)
        raise UserError(
            f"refusing to compare different {listed}s under test (use --across {refused_under_test[0][0]} to compare "
            f"them on purpose):\n" + format_env_diffs(refused_under_test)
        )
    result.across = crossed + differing
    result.env_diffs = env_differences(base.docs, head.docs)
    refused = [diff for diff in result.env_diffs if diff[0] not in result.explained]
    if refused and not allow_env_diff:
        hint = ""
        for axis, keys in ENV_AXES.items():
            axis_differs = {axis_value(d, axis) for d in base.docs} != {axis_value(d, axis) for d in head.docs}
            if axis not in names and axis_differs and all(diff[0] in keys for diff in refused):
                hint = f"; to compare one {axis}'s cells with another's on purpose: --across {axis}"
        raise UserError(
            f"refusing to compare results from different environments (use --allow-env-diff to compare anyway{hint}):\n"
            + format_env_diffs(refused)
        )
    return base, head, result


def _rows(
    cell_id: str, base: list[Result], head: list[Result], judging: Judging, work: Mapping[str, float]
) -> list[MetricComparison]:
    """One row per metric the cell's runs on both sides have, and per work metric gated (``work``);
    a gated row with its threshold and its PASS test when there is a gate."""
    docs = base + head
    # Time's declared metrics are gated (Holm) with or without a gate; work's only in a gate (``work``).
    thresholds: dict[str, float | None] = {**dict.fromkeys(gate_metrics(docs), judging.threshold), **work}
    compared = {**compared_metrics(docs), **dict.fromkeys(work, "lower")}
    rows = []
    alpha = judging.fail_alpha
    for metric, direction in compared.items():
        floor = judging.noise_floors.get((cell_id, metric), 0.0)
        threshold = thresholds.get(metric)
        bound = None
        if judging.paired:
            pairs = metric_pairs(base, head, metric)
            c = stats.compare_paired(pairs, direction, alpha=alpha, noise_floor=floor)
            if threshold is not None:
                bound = outcome.bound_paired(pairs, direction, threshold, judging.pass_alpha, alpha=alpha)
        else:
            b_values, h_values = metric_values(base, metric), metric_values(head, metric)
            c = stats.compare_samples(b_values, h_values, direction, alpha=alpha, noise_floor=floor)
            if threshold is not None:
                bound = outcome.bound_samples(b_values, h_values, direction, threshold, judging.pass_alpha, alpha=alpha)
        gated = metric in thresholds
        rows.append(
            MetricComparison(cell_id, metric, direction, c, False, floor, gated, bound=bound, threshold=threshold)
        )
    return rows


@dataclass
class Confirmed:
    """The gate with confirmation: the first batch's regressions, each judged again on a second,
    independent batch of runs (the flagged cells, base and head run again). A regression fails the
    gate only when it holds again — the same cell and metric significantly worse beyond the threshold
    in the second batch ("confirmed"); one that does not is reported as "not confirmed", and the gate
    is NOT DECIDED (``verdict``). A flagged cell the second batch did not run cannot be confirmed or
    cleared: it fails."""

    first: CompareResult
    second: CompareResult | None

    def _again(self, row: MetricComparison) -> MetricComparison | None:
        if self.second is None:
            return None
        return next((r for r in self.second.rows if (r.cell_id, r.metric) == (row.cell_id, row.metric)), None)

    @property
    def confirmed(self) -> list[tuple[MetricComparison, MetricComparison]]:
        return [(row, again) for row in self.first.regressions if (again := self._again(row)) and again.regression]

    @property
    def not_confirmed(self) -> list[tuple[MetricComparison, MetricComparison]]:
        return [(row, again) for row in self.first.regressions if (again := self._again(row)) and not again.regression]

    @property
    def not_rerun(self) -> list[MetricComparison]:
        return [row for row in self.first.regressions if self._again(row) is None]

    def stopped_again(self) -> tuple[list[DurabilityLost], list[DurabilityLost], list[DurabilityLost]]:
        """The first batch's stopped durability metrics: stopped again in the second batch, measured
        there after all (not confirmed), and in a cell the second batch did not compare (not rerun)."""
        again: list[DurabilityLost] = []
        not_again: list[DurabilityLost] = []
        not_rerun: list[DurabilityLost] = []
        rerun = {r.cell_id for r in self.second.rows} if self.second else set()
        stopped = {(s.cell_id, s.metric) for s in self.second.stopped} if self.second else set()
        for s in self.first.stopped:
            which = not_rerun if s.cell_id not in rerun else again if (s.cell_id, s.metric) in stopped else not_again
            which.append(s)
        return again, not_again, not_rerun

    @property
    def verdict(self) -> str | None:
        """FAIL on a confirmed or unconfirmable regression (or durability stopped). One the second
        batch does not show is NOT DECIDED: PASS needs the first batch's own PASS test, which a batch
        that found a regression did not give (so a PASS keeps its level). Nothing flagged: the first
        batch's verdict."""
        again, _, not_rerun = self.stopped_again()
        if self.confirmed or self.not_rerun or again or not_rerun:
            return outcome.FAIL
        if self.first.flagged:
            return outcome.NOT_DECIDED
        return self.first.verdict

    def exit_status(self, not_decided: str = "distinct") -> int:
        return outcome.exit_status(self.verdict, not_decided)


def flagged_cells(result: CompareResult) -> list[str]:
    """The cells with a regression or a durability stopped, in order: the ones a confirmation batch runs again."""
    return sorted({row.cell_id for row in result.regressions} | {s.cell_id for s in result.stopped})


def parse_work_thresholds(texts: Sequence[str]) -> dict[str, float]:
    """``--work-threshold METRIC=PCT`` (repeatable) laid over ``WORK_THRESHOLDS``; ``METRIC=off``: that
    metric not gated (advisory). UserError naming the option's value otherwise."""
    found = dict(WORK_THRESHOLDS)
    for text in texts:
        metric, sep, value = (part.strip() for part in text.partition("="))
        if not sep or metric not in WORK_THRESHOLDS:
            raise UserError(
                f"--work-threshold {text!r}: expected METRIC=PCT (or METRIC=off), METRIC one of "
                + ", ".join(WORK_THRESHOLDS)
            )
        if value == "off":
            found.pop(metric, None)
        else:
            found[metric] = parse_threshold(value)
    return found


def parse_threshold(text: str) -> float:
    """``5%`` or ``0.05`` → 0.05."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UserError(f"threshold {text!r}: expected a percentage such as 5% or a fraction such as 0.05") from None
    if not raw.endswith("%") and value >= 1:
        raise UserError(f"threshold {text!r}: a fraction must be below 1 (write {value:g}% for a percentage)")
    if value < 0 or not math.isfinite(value):
        raise UserError(f"threshold {text!r} must not be negative")
    return value


# ----------------------------------------------------------------------------------- output
