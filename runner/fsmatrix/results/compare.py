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
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from fsmatrix.agent import workloads
from fsmatrix.errors import UserError
from fsmatrix.matrix import schema
from fsmatrix.results import load_document, load_results, stats

# Provenance that changes the numbers: runs that differ in any of these are not comparable.
ENV_KEYS = (
    "backend",
    "accel",
    "kernel",
    "image",
    "device_profile",
    "device_source",
    "cpu_model",
    "cpu_count",
    "memory_kib",
    # A guest restored from a saved booted one, or booted: its page cache and timing start differently.
    "vm.start",
    # The machine under the run (provenance.host): for a VM result the keys above describe the guest,
    # which looks the same on every host; these tell two hosts (and two QEMUs) apart.
    *(
        f"host.{key}"
        for key in (
            "machine_id",
            "cpu_model",
            "cpu_count",
            "kernel",
            "memory_kib",
            "cpu_governor",
            "qemu_version",
            "libvirt_version",
            "container",
            "workdir.fstype",
            "workdir.disk.model",
            "workdir.disk.rotational",
        )
    ),
)


@dataclass(frozen=True)
class Crossing:
    """What ``compare --across NAME`` compares on purpose, with the environment keys (ENV_KEYS) it
    explains: results that differ in those keys because of it are compared; any other difference is
    still refused.

    Either a cell setting (``told_by`` None): BASE's cells at one value against HEAD's at another,
    matched by every other setting (a report puts its values side by side as columns). Or what is
    under test besides the cell's settings (``told_by``: the provenance key that tells the runs of
    one cell id apart): refused unless named, since nothing in the id shows it."""

    explains: tuple[str, ...]
    told_by: str | None = None


# Every name --across takes.
ACROSS: dict[str, Crossing] = {
    # A guest image brings its own kernel, PostgreSQL and GT.M; its kernel also reserves its own share
    # of the guest's memory: memory_kib (MemTotal) differs.
    "image": Crossing(("image", "kernel", "memory_kib")),
    # A cell's id names its vm.kernel by path, not by what is there, so two runs of one cell may have
    # booted different kernels (a bisect rebuilds at one path): the kernel file's sha256 tells them
    # apart, and the guest's release moves with it.
    "kernel": Crossing(("kernel",), told_by="kernel_source.sha256"),
}
# The cell settings among them (environment axes), each with the keys it explains.
ENV_AXES: dict[str, tuple[str, ...]] = {name: c.explains for name, c in ACROSS.items() if c.told_by is None}
# Gated next to the workload's own key metrics when a document has them (lower is better for all).
ROBUST_METRICS = ("cpu_busy_s", "device_write_bytes_per_op", "device_ios_per_op")


@dataclass
class Side:
    label: str
    docs: list[dict[str, Any]]

    def by_cell(self) -> dict[str, list[dict[str, Any]]]:
        cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for doc in self.docs:
            cells[doc["cell_id"]].append(doc)
        return dict(cells)


@dataclass
class Row:
    cell_id: str
    metric: str
    direction: str
    comparison: stats.Comparison  # for a gated row: its verdict taken at the Holm-adjusted p-value
    regression: bool
    noise_floor: float
    gated: bool = False  # the cell's primary metric: the gate decides on it; every other row is advisory
    p_holm: float = math.nan  # the gated rows' p-values adjusted together (Holm)


@dataclass(frozen=True)
class Across:
    """``--across NAME[=BASE_VALUE,HEAD_VALUE]`` (an ACROSS name): for an environment axis, BASE's
    cells with it at one value against HEAD's at another (each side's only value when none are
    named); for what is under test (a kernel), the sides' as they are."""

    axis: str
    base: str | None = None
    head: str | None = None


@dataclass
class CompareResult:
    base: str
    head: str
    threshold: float | None
    rows: list[Row] = field(default_factory=list)
    env_diffs: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    # What differs and is compared on purpose (--across): (name, base's, head's).
    across: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_head: list[str] = field(default_factory=list)

    @property
    def explained(self) -> set[str]:
        """The environment keys the crossings compared on purpose explain."""
        return {key for name, _, _ in self.across for key in ACROSS[name].explains}

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regression]

    def exit_status(self) -> int:
        """The gate: 1 when a threshold was given and some metric regressed beyond it, else 0."""
        return 1 if self.threshold is not None and self.regressions else 0


# ----------------------------------------------------------------------------------- loading


def load_side(spec: str, results_root: Path) -> Side:
    """A directory of results, or a run id in ``results_root``'s index."""
    path = Path(spec)
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{spec}: not a directory of results")
        return Side(spec, load_results(path))
    index = results_root / "index.sqlite"
    if index.is_file():
        db = sqlite3.connect(index)
        try:
            paths = [Path(row[0]) for row in db.execute("SELECT path FROM runs WHERE run_id = ?", (spec,))]
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{index}: not a readable fsmatrix index ({exc})") from exc
        finally:
            db.close()
        if paths:
            return Side(spec, [load_document(p) for p in paths])
    raise UserError(f"{spec}: no such results directory, and no run with that id in {index}")


# ----------------------------------------------------------------------------------- environment


def environment(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """For each ENV_KEY, the distinct values these documents report (sorted, as text)."""
    env: dict[str, set[str]] = {key: set() for key in ENV_KEYS}
    for doc in docs:
        prov = doc.get("provenance") or {}
        for key in ENV_KEYS:
            value = provenance_value(prov, key)
            env[key].add(json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value))
    return {key: sorted(values) for key, values in env.items()}


def provenance_value(prov: dict[str, Any], key: str) -> Any:
    """``prov[key]``, where a dotted key reaches into nested sections (``host.workdir.fstype``)."""
    value: Any = prov
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def env_differences(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> list[tuple[str, list[str], list[str]]]:
    eb, eh = environment(base), environment(head)
    return [(key, eb[key], eh[key]) for key in ENV_KEYS if eb[key] != eh[key]]


def axis_value(doc: dict[str, Any], axis: str) -> str:
    """The value of environment axis ``axis`` (a dotted setting) in a result's cell: the setting's
    default when the cell does not name it (a cell at the default leaves it out of its JSON form)."""
    value: Any = doc.get("params") or {}
    for part in axis.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        value = (schema.spec_at(axis) or {}).get("default")
    return str(value)


def axis_values(docs: list[dict[str, Any]], axis: str) -> list[str]:
    """The values of environment axis ``axis`` these results hold: the setting's default first (the
    baseline an upgrade is measured against), then the others by name."""
    default = str((schema.spec_at(axis) or {}).get("default"))
    return sorted({axis_value(d, axis) for d in docs}, key=lambda value: (value != default, value))


def without_axis(params: dict[str, Any], axis: str) -> str:
    """A cell's JSON form without the axis setting, canonical: what the cell's twins on the axis's
    other values share."""
    copy = json.loads(json.dumps(params))
    *parents, last = axis.split(".")
    node = copy
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)
    return json.dumps(copy, sort_keys=True, separators=(",", ":"))


def parse_across(text: str) -> Across:
    """``image``, ``image=debian12,debian13`` or ``kernel``."""
    axis, named, values = text.partition("=")
    axis = axis.strip()
    if axis not in ACROSS:
        raise UserError(
            f"--across {text!r}: compare across one of {', '.join(ACROSS)} "
            f"(a cell setting: {', '.join(ENV_AXES)}; or a different vm.kernel file at one cell: kernel)"
        )
    if not named:
        return Across(axis)
    if ACROSS[axis].told_by is not None:
        raise UserError(f"--across {text!r}: the runs tell their {axis}s apart themselves; name none: --across {axis}")
    parts = [v.strip() for v in values.split(",")]
    if len(parts) != 2 or not all(parts):
        raise UserError(f"--across {text!r}: name two values, BASE's then HEAD's, e.g. {axis}=A,B")
    return Across(axis, parts[0], parts[1])


def _side_value(side: Side, axis: str, named: str | None, which: str) -> tuple[str, list[dict[str, Any]]]:
    """The axis value a side is compared at, and its documents at that value."""
    values = sorted({axis_value(d, axis) for d in side.docs})
    if named is None:
        if len(values) != 1:
            raise UserError(
                f"--across {axis}: {which} {side.label} holds {axis} {', '.join(values)}; "
                f"name the two to compare: --across {axis}=BASE_VALUE,HEAD_VALUE"
            )
        named = values[0]
    docs = [d for d in side.docs if axis_value(d, axis) == named]
    if not docs:
        raise UserError(
            f"--across {axis}: {which} {side.label} has no results with {axis} {named} (it has {', '.join(values)})"
        )
    return named, docs


def across_sides(base: Side, head: Side, across: Across) -> tuple[Side, Side, Across]:
    """BASE's documents at the axis's base value and HEAD's at its head value; HEAD's cells renamed
    to the id of their twin in BASE (the cell with every other setting equal), so rows pair them."""
    bv, base_docs = _side_value(base, across.axis, across.base, "BASE")
    hv, head_docs = _side_value(head, across.axis, across.head, "HEAD")
    if bv == hv:
        raise UserError(f"--across {across.axis}: both sides are {across.axis} {bv}; compare them without --across")
    twin = {without_axis(d.get("params") or {}, across.axis): d["cell_id"] for d in base_docs}
    renamed = []
    for doc in head_docs:
        match = twin.get(without_axis(doc.get("params") or {}, across.axis))
        renamed.append({**doc, "cell_id": match, "head_cell_id": doc["cell_id"]} if match else doc)
    return Side(base.label, base_docs), Side(head.label, renamed), Across(across.axis, bv, hv)


def varying_axes(docs: list[dict[str, Any]]) -> list[str]:
    """The environment axes (``ENV_AXES``) whose value differs among these results' cells."""
    return [axis for axis in ENV_AXES if len({axis_value(d, axis) for d in docs}) > 1]


def with_environment_axes(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents with each environment axis that varies among them written into their ``params``
    (a cell at the axis's default leaves it out of its JSON form): every table then shows the value
    in its columns, and no cell stands apart for lacking it."""
    axes = varying_axes(docs)
    if not axes:
        return docs
    out = []
    for doc in docs:
        params = json.loads(json.dumps(doc.get("params") or {}))
        for axis in axes:
            *parents, last = axis.split(".")
            node = params
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = axis_value(doc, axis)
        out.append({**doc, "params": params})
    return out


def under_test(docs: list[dict[str, Any]], name: str) -> list[str]:
    """The distinct things under test ``name`` (an ACROSS key with ``told_by``) these documents ran, for people:
    "RELEASE (sha256 PREFIX)" for a vm.kernel, "the image's kernel" without one."""
    labels = set()
    for doc in docs:
        prov = doc.get("provenance") or {}
        if name == "kernel":
            source = prov.get("kernel_source")
            if isinstance(source, dict) and source.get("sha256"):
                labels.add(f"{source.get('release', '?')} (sha256 {str(source['sha256'])[:12]})")
            else:
                labels.add(f"the image's kernel ({prov.get('kernel', '?')})")
        else:
            labels.add(str(provenance_value(prov, ACROSS[name].told_by or "")))
    return sorted(labels)


def across_differences(
    base: list[dict[str, Any]], head: list[dict[str, Any]]
) -> list[tuple[str, list[str], list[str]]]:
    """The things under test (ACROSS with ``told_by``) that differ between the sides: (name, base's,
    head's)."""
    found = []
    for name, crossing in ACROSS.items():
        key = crossing.told_by
        if key is not None and environment_of(base, key) != environment_of(head, key):
            found.append((name, under_test(base, name), under_test(head, name)))
    return found


def environment_of(docs: list[dict[str, Any]], key: str) -> set[str]:
    return {str(provenance_value(doc.get("provenance") or {}, key)) for doc in docs}


def env_hash(docs: list[dict[str, Any]]) -> str:
    """A short stable hash of the environment, naming stored calibrations."""
    text = json.dumps(environment(docs), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------------- metrics


def metric_value(doc: dict[str, Any], metric: str) -> float | None:
    metrics = doc.get("metrics") or {}
    if metric == "device_ios_per_op" and metric not in metrics:
        return _ios_per_op(metrics)
    value = metrics.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _ios_per_op(metrics: dict[str, Any]) -> float | None:
    # The agent divides device bytes by the workload's operation count; recover that count from it.
    per_op, total = metrics.get("device_write_bytes_per_op"), metrics.get("device_write_bytes")
    if not per_op or not total:
        return None
    ops = float(total) / float(per_op)
    return (float(metrics.get("device_reads", 0)) + float(metrics.get("device_writes", 0))) / ops


def metric_values(docs: list[dict[str, Any]], metric: str) -> list[float]:
    """The metric over the passed runs that have it."""
    values = [metric_value(d, metric) for d in docs if d.get("status") == "passed"]
    return [v for v in values if v is not None]


def metric_pairs(base: list[dict[str, Any]], head: list[dict[str, Any]], metric: str) -> list[tuple[float, float]]:
    """(BASE, HEAD) values of the metric for each repeat number both sides passed and measured."""

    def by_repeat(docs: list[dict[str, Any]]) -> dict[int, float]:
        values = {}
        for doc in docs:
            value = metric_value(doc, metric) if doc.get("status") == "passed" else None
            if value is not None and isinstance(doc.get("repeat"), int):
                values[doc["repeat"]] = value
        return values

    b, h = by_repeat(base), by_repeat(head)
    return [(b[r], h[r]) for r in sorted(set(b) & set(h))]


def gate_metrics(docs: list[dict[str, Any]]) -> tuple[str, ...]:
    """The metrics the gate decides on for these runs of one cell: the workload's declaration
    (its primary metric, and what else it gates); for a workload the registry does not know, the
    first key metric its documents name."""
    kind = docs[0].get("workload") if docs else None
    if kind in workloads.WORKLOADS:
        return workloads.get(str(kind)).gate_metrics
    for doc in docs:
        for name in doc.get("key_metrics") or {}:
            return (str(name),)
    return ()


def compared_metrics(docs: list[dict[str, Any]]) -> dict[str, str]:
    """Metric name → direction: the documents' key metrics, then the robust ones they have."""
    metrics: dict[str, str] = {}
    for doc in docs:
        for name, direction in (doc.get("key_metrics") or {}).items():
            metrics.setdefault(name, direction)
    for name in ROBUST_METRICS:
        if name not in metrics and any(metric_value(d, name) is not None for d in docs):
            metrics[name] = "lower"
    return metrics


# ----------------------------------------------------------------------------------- compare


def compare(
    base: Side,
    head: Side,
    *,
    threshold: float | None = None,
    alpha: float = stats.ALPHA,
    allow_env_diff: bool = False,
    noise_floors: dict[tuple[str, str], float] | None = None,
    paired: bool = False,
    across: Sequence[Across] = (),
) -> CompareResult:
    """Compare every cell present on both sides; UserError on incomparable environments, and on
    different things under test (ACROSS with ``told_by``) unless ``across`` names them. ``paired``:
    the sides ran in pairs, repeat i of BASE next to repeat i of HEAD (``stats.compare_paired``).
    ``across``: what is compared on purpose; for an environment axis, BASE's cells at one value
    against HEAD's at another (``across_sides``). The environment keys they explain may differ, no other."""
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
    bc, hc = base.by_cell(), head.by_cell()
    common = sorted(set(bc) & set(hc))
    result.only_base = sorted(set(bc) - set(hc))
    result.only_head = sorted(set(hc) - set(bc))
    if not common:
        raise UserError(f"{base.label} and {head.label} have no cell in common")
    floors = noise_floors or {}
    for cell_id in common:
        docs = bc[cell_id] + hc[cell_id]
        gated = gate_metrics(docs)
        for metric, direction in compared_metrics(docs).items():
            floor = floors.get((cell_id, metric), 0.0)
            if paired:
                pairs = metric_pairs(bc[cell_id], hc[cell_id], metric)
                c = stats.compare_paired(pairs, direction, alpha=alpha, noise_floor=floor)
            else:
                c = stats.compare_samples(
                    metric_values(bc[cell_id], metric),
                    metric_values(hc[cell_id], metric),
                    direction,
                    alpha=alpha,
                    noise_floor=floor,
                )
            result.rows.append(Row(cell_id, metric, direction, c, False, floor, gated=metric in gated))
    # A few declared metrics per cell decide, and all of those tests are corrected together: k
    # uncorrected tests at alpha would cry wolf up to k times as often. The other metrics (rates
    # derived from the same time, device counters) explain a verdict; they never fail the gate.
    decisive = [r for r in result.rows if r.gated]
    for row, p_holm in zip(decisive, stats.holm([r.comparison.p_value for r in decisive]), strict=True):
        row.p_holm = p_holm
        row.comparison = stats.decide(row.comparison, p_holm, alpha=alpha, noise_floor=row.noise_floor)
        row.regression = threshold is not None and stats.is_regression(row.comparison, threshold)
    return result


@dataclass
class Confirmed:
    """The gate with confirmation: the first batch's regressions, each judged again on a second,
    independent batch of runs (the flagged cells, base and head run again). A regression fails the
    gate only when it holds again — the same cell and metric significantly worse beyond the threshold
    in the second batch ("confirmed"); one that does not is reported as "not confirmed" and passes.
    A flagged cell the second batch did not run cannot be confirmed or cleared: it fails."""

    first: CompareResult
    second: CompareResult | None

    def _again(self, row: Row) -> Row | None:
        if self.second is None:
            return None
        return next((r for r in self.second.rows if (r.cell_id, r.metric) == (row.cell_id, row.metric)), None)

    @property
    def confirmed(self) -> list[tuple[Row, Row]]:
        return [(row, again) for row in self.first.regressions if (again := self._again(row)) and again.regression]

    @property
    def not_confirmed(self) -> list[tuple[Row, Row]]:
        return [(row, again) for row in self.first.regressions if (again := self._again(row)) and not again.regression]

    @property
    def not_rerun(self) -> list[Row]:
        return [row for row in self.first.regressions if self._again(row) is None]

    def exit_status(self) -> int:
        return 1 if self.confirmed or self.not_rerun else 0

    def summary_lines(self) -> list[str]:
        def figures(row: Row) -> str:
            c = row.comparison
            return f"{c.ratio:.3f} [{_ci(c)}], p Holm {row.p_holm:.2g}, n {c.n_base}/{c.n_head}"

        lines = []
        for row, again in self.confirmed:
            lines.append(
                f"CONFIRMED regression: {row.cell_id} {row.metric} +{again.comparison.worse_by:.1%} "
                f"(first batch {figures(row)}; confirmation {figures(again)})"
            )
        for row, again in self.not_confirmed:
            lines.append(
                f"not confirmed (passes): {row.cell_id} {row.metric} flagged +{row.comparison.worse_by:.1%} "
                f"(first batch {figures(row)}), not again (confirmation {figures(again)}: {again.comparison.verdict})"
            )
        for row in self.not_rerun:
            lines.append(
                f"UNCONFIRMABLE regression: {row.cell_id} {row.metric} +{row.comparison.worse_by:.1%} "
                f"(first batch {figures(row)}) has no confirmation runs: the gate fails"
            )
        if not self.first.regressions:
            lines.append("nothing to confirm: the first batch found no regression")
        verdict = "GATE FAILED" if self.exit_status() else "gate passed"
        lines.append(f"{verdict} after confirmation (threshold {self.first.threshold or 0:.1%})")
        return lines


def flagged_cells(result: CompareResult) -> list[str]:
    """The cells with a regression, in order: the ones a confirmation batch runs again."""
    return sorted({row.cell_id for row in result.regressions})


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


def format_env_diffs(diffs: list[tuple[str, list[str], list[str]]]) -> str:
    return "\n".join(f"  {key}: base {', '.join(b)} | head {', '.join(h)}" for key, b, h in diffs)


def _num(value: float) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _ci(c: stats.Comparison) -> str:
    return "-" if math.isnan(c.ci_low) else f"{c.ci_low:.3f}..{c.ci_high:.3f}"


def _verdict(row: Row) -> str:
    text = row.comparison.verdict
    if row.comparison.significant:
        text += f" {abs(row.comparison.worse_by) * 100:.1f}%"
    return text + (" REGRESSION" if row.regression else "")


def _p(row: Row) -> str:
    c = row.comparison
    if math.isnan(c.p_value):
        return "-"
    return f"{c.p_value:.3g}" + (f" (Holm {row.p_holm:.3g})" if row.gated and not math.isnan(row.p_holm) else "")


HEADERS = ("cell", "metric", "gate", "better", "n", "base median", "head median", "ratio", "95% CI", "p", "verdict")


def _cells(row: Row) -> list[str]:
    c = row.comparison
    return [
        row.cell_id,
        row.metric,
        "gated" if row.gated else "advisory",
        row.direction,
        f"{c.n_base}/{c.n_head}",
        _num(c.median_base),
        _num(c.median_head),
        "-" if math.isnan(c.ratio) else f"{c.ratio:.3f}",
        _ci(c),
        _p(row),
        _verdict(row),
    ]


def rich_table(result: CompareResult) -> Table:
    table = Table(title=f"{result.base} → {result.head}")
    for header in HEADERS:
        table.add_column(header, no_wrap=header == "cell")
    colours = {"slower": "red", "faster": "green", "not enough data": "yellow"}
    for row in result.rows:
        cells = _cells(row)
        colour = colours.get(row.comparison.verdict)
        if colour:
            cells[-1] = f"[{colour}]{cells[-1]}[/{colour}]"
        table.add_row(*cells)
    return table


def summary_lines(result: CompareResult) -> list[str]:
    lines = []
    for name, b, h in result.across:
        matched = "; cells matched by every other setting (rows name BASE's cell)" if name in ENV_AXES else ""
        lines.append(f"compared across {name}s (--across {name}): base {', '.join(b)} | head {', '.join(h)}{matched}")
    if result.across:
        on_purpose = [key for key, _, _ in result.env_diffs if key in result.explained]
        lines.append(f"differing on purpose: {', '.join(on_purpose) or 'nothing'}")
    unexplained = [diff for diff in result.env_diffs if diff[0] not in result.explained]
    if unexplained:
        lines += ["environments differ (compared anyway, --allow-env-diff):", format_env_diffs(unexplained)]
    if result.only_base:
        lines.append(f"only in base (not compared): {', '.join(result.only_base)}")
    if result.only_head:
        lines.append(f"only in head (not compared): {', '.join(result.only_head)}")
    counts: dict[str, int] = defaultdict(int)
    for row in result.rows:
        counts[row.comparison.verdict] += 1
    lines.append("; ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    if result.threshold is not None:
        gated = sorted({f"{r.metric}" for r in result.rows if r.gated})
        lines.append(
            f"the gate decides on {', '.join(gated) or 'nothing'} (each workload's declaration), p-values "
            f"Holm-adjusted across all {sum(r.gated for r in result.rows)} of those tests; the other rows are advisory"
        )
        regs = result.regressions
        if regs:
            names = ", ".join(f"{r.cell_id} {r.metric} +{r.comparison.worse_by * 100:.1f}%" for r in regs)
            lines.append(f"GATE FAILED: {len(regs)} significant regression(s) above {result.threshold:.1%}: {names}")
        else:
            lines.append(f"gate passed: no significant regression above {result.threshold:.1%}")
    return lines


def markdown(result: CompareResult) -> str:
    lines = [f"## fsmatrix compare: {result.base} → {result.head}", ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in result.rows:
        cells = _cells(row)
        if row.regression:
            cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines.append("")
    for line in summary_lines(result):
        lines.append(f"- {line}" if not line.startswith("  ") else f"  - {line.strip()}")
    return "\n".join(lines) + "\n"


def to_json(result: CompareResult) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    return {
        "base": result.base,
        "head": result.head,
        "threshold": result.threshold,
        "env_diffs": [{"key": k, "base": b, "head": h} for k, b, h in result.env_diffs],
        "across": [{"name": k, "base": b, "head": h} for k, b, h in result.across],
        "only_base": result.only_base,
        "only_head": result.only_head,
        "rows": [
            {
                "cell_id": r.cell_id,
                "metric": r.metric,
                "direction": r.direction,
                "regression": r.regression,
                "gated": r.gated,
                "p_holm": clean(r.p_holm),
                "noise_floor": r.noise_floor,
                **{k: clean(v) for k, v in r.comparison.to_dict().items()},
            }
            for r in result.rows
        ],
        "exit_status": result.exit_status(),
    }
