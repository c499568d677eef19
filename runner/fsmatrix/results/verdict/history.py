"""Change points over a series' history, each with its size and what changed (``fsmatrix history``).

Otava (``store/otava.py``) says where a series changed and how surely (its t-test's p-value); this
module says by how much — the ratio of the geometric means after and before, between the
neighbouring change points, with Welch's 95 % interval on logs, the answer's one method
(``welch.intervals``; the bootstrap's where a value is <= 0). The interval is descriptive: the
change point was placed where these very runs differ most, so it is no test of the change — Otava's
p is — and answers never pool history (docs/history.md) — and **what
changed**: the fields in ``FIELDS`` that differ between the run just before and the run just after.
Only declared fields, never run-local noise (run ids, times, loop devices, values read back): a field
that differs between two runs of one build would name a culprit at every change point. What changed is
read from the stored documents of those two runs (``attributed_from``: the store reads them, for the
change points only); every other number is the series' own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fsmatrix.matrix import flatten
from fsmatrix.results.store.document import Result
from fsmatrix.results.store.history import Point, Series
from fsmatrix.results.verdict import stats, welch
from fsmatrix.results.verdict.metrics import DURABILITY

NOTHING_RECORDED = "no recorded change (noise, or something fsmatrix does not record)"
# A change's size is measured over at most this many points either side (within the neighbouring change
# points): Otava's window, so that a long stretch's distant past (its own slow drift) does not blur it.
SIDE = 50


def _settings(result: Result) -> Any:
    settings = result.provenance.section.get("settings")
    if not isinstance(settings, Mapping):
        return None
    return f"{settings.get('file')} (sha256 {str(settings.get('sha256'))[:12]})"


def _commit(result: Result) -> Any:
    git = result.provenance.section.get("git")
    if not isinstance(git, Mapping) or not git.get("sha"):
        return None
    return str(git["sha"]) + ("-dirty" if git.get("dirty") else "")


def _image(result: Result) -> Any:
    image = result.provenance.image
    return f"{image.get('name')} (sha256 {str(image.get('sha256'))[:12]})" if image else None


def _kernel_source(result: Result) -> Any:
    source = result.provenance.kernel_source
    return f"{source.get('release')} (sha256 {str(source.get('sha256'))[:12]})" if source else None


def _provenance(key: str) -> Callable[[Result], Any]:
    return lambda result: result.provenance.value(key)


def _cpu_source(result: Result) -> Any:
    samples = result.document.get("samples")
    return samples.get("run_cpu_source") if isinstance(samples, Mapping) else None


# What a change point is attributed to: (name, its value in a result). The cell's parameters come on top,
# each under its own dotted name (``gtm.global_buffers``, ``vm.kernel``), and each tool of
# ``provenance.tools`` as ``tools.NAME``. docs/history.md lists them.
FIELDS: tuple[tuple[str, Callable[[Result], Any]], ...] = (
    ("fsmatrix commit", _commit),
    # How the work per operation and cpu_busy_s were measured (the agent's mark of its method: which
    # processes the run's cgroup holds), and where cpu_busy_s came from (cgroup2, cgroup1, or none: the
    # whole machine's): a change of either moves those series without the storage stack doing anything else.
    ("work measurement", _provenance("work_measurement")),
    ("cpu_busy_s from", _cpu_source),
    ("settings", _settings),  # the build's settings file (`run --settings`); its values are in the parameters
    ("bisect.repo", _provenance("bisect.repo")),
    ("bisect.commit", _provenance("bisect.commit")),
    ("bisect.settings", _provenance("bisect.settings")),
    ("kernel", _provenance("kernel")),  # what the workload ran on: the guest's under a VM backend
    ("kernel build", _provenance("kernel_build")),
    ("kernel file", _kernel_source),  # a vm.kernel file: its release and hash
    ("image", _image),
    ("os", _provenance("os")),
    ("backend", _provenance("backend")),
    ("accel", _provenance("accel")),
    ("host.machine_id", _provenance("host.machine_id")),
    ("host.cpu_model", _provenance("host.cpu_model")),
    ("host.kernel", _provenance("host.kernel")),
    ("host.cpu_governor", _provenance("host.cpu_governor")),
    ("host.qemu_version", _provenance("host.qemu_version")),
    ("host.libvirt_version", _provenance("host.libvirt_version")),
    ("host.container_image", _provenance("host.container_image.inputs_hash")),
)


def recorded(result: Result) -> dict[str, Any]:
    """The declared fields of one result: FIELDS, the cell's parameters, the tool versions."""
    out = {name: value for name, value in ((n, get(result)) for n, get in FIELDS) if value is not None}
    out.update(flatten(result.params, ""))
    tools = result.provenance.section.get("tools")
    if isinstance(tools, Mapping):
        out.update({f"tools.{name}": version for name, version in tools.items() if version is not None})
    return out


def changed(before: Result, after: Result) -> dict[str, list[Any]]:
    """The declared fields that differ between two results: {field: [before, after]}, fields sorted
    (a field one result lacks is None there)."""
    a, b = recorded(before), recorded(after)
    return {name: [a.get(name), b.get(name)] for name in sorted(a.keys() | b.keys()) if a.get(name) != b.get(name)}


def bisect_command(series: Series, before: Result, after: Result, ratio: float) -> str | None:
    """The ``fsmatrix bisect`` command for a change between two commits of a repository fsmatrix knows
    (a bisect's runs record it: ``provenance.bisect``), when the change made the metric worse (bisect
    looks for the commit that made a cell slower). The matrix and --prepare are the bisect's own."""
    old, new = before.provenance.section.get("bisect"), after.provenance.section.get("bisect")
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return None
    if old.get("repo") != new.get("repo") or not old.get("commit") or old.get("commit") == new.get("commit"):
        return None
    if stats.worse_by(ratio, series.direction) <= 0:
        return None
    return (
        f"fsmatrix bisect --repo {old['repo']} --good {old['commit']} --bad {new['commit']} "
        f"--matrix MATRIX --only '{series.cell_id}' --metric {series.metric} --prepare CMD"
    )


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point after the change
    time: str
    before_run: str
    after_run: str
    ratio: float  # geometric mean after / before, up to SIDE points either side within the neighbouring change points
    interval: tuple[float, float]  # Welch's 95 % interval of the ratio on logs (descriptive)
    p: float  # Otava's t-test
    changed: dict[str, list[Any]]
    bisect: str | None

    @property
    def attributed(self) -> bool:
        return bool(self.changed)


@dataclass(frozen=True)
class History:
    series: Series
    change_points: list[ChangePoint] = field(default_factory=list)
    # (first index, end index, median) of each stretch between change points: the levels a chart draws
    levels: list[tuple[int, int, float]] = field(default_factory=list)


def _indices(series: Series, found: Sequence[tuple[int, float]]) -> list[int]:
    """The change points' indices the detector found, each once, in order (none at either end)."""
    return sorted({i for i, _ in found if 0 < i < len(series.points)})


def attributed_from(series: Series, found: Sequence[tuple[int, float]]) -> set[str]:
    """The stored documents what changed is read from (``Point.result_id``): the run just before and the
    run just after each change point, and no other."""
    points = series.points
    return {points[i].result_id for index in _indices(series, found) for i in (index - 1, index)}


def history(series: Series, found: Sequence[tuple[int, float]], documents: Mapping[str, Result]) -> History:
    """A series with its change points: ``found`` is (index, p) of each, as the detector says;
    ``documents``: at least the results ``attributed_from`` names, by id."""
    points = series.points
    indices = _indices(series, found)
    p_of = dict(found)
    bounds = [0, *indices, len(points)]
    out = []
    for k, index in enumerate(indices):
        before_values = [p.value for p in points[max(bounds[k], index - SIDE) : index]]
        after_values = [p.value for p in points[index : min(bounds[k + 2], index + SIDE)]]
        ratio, low, high = _size(before_values, after_values, index)
        before, after = points[index - 1], points[index]
        old, new = documents[before.result_id], documents[after.result_id]
        out.append(
            ChangePoint(
                index=index,
                time=after.time,
                before_run=_run(before),
                after_run=_run(after),
                ratio=ratio,
                interval=(low, high),
                p=p_of[index],
                changed=changed(old, new),
                bisect=bisect_command(series, old, new, ratio),
            )
        )
    levels = [
        (start, stop, stats.median([p.value for p in points[start:stop]]))
        for start, stop in itertools.pairwise(bounds)
        if stop > start
    ]
    return History(series, out, levels)


def _size(before: list[float], after: list[float], seed: int) -> tuple[float, float, float]:
    """The ratio after/before and its 95 % interval: of geometric means with Welch's interval on logs,
    or (a value <= 0 has no logarithm) of medians with the seeded bootstrap's."""
    if len(before) < 2 or len(after) < 2 or min(before + after) <= 0:
        low, high = stats.bootstrap_ratio_ci(before, after, seed=seed)
        return stats.ratio_of_medians(before, after), low, high
    lb, la = np.log(before), np.log(after)
    diff = float(la.mean() - lb.mean())
    lo, hi, _ = welch.intervals(
        np.array(diff), np.array(lb.var(ddof=1)), np.array(lb.size), np.array(la.var(ddof=1)), np.array(la.size),
        stats.ALPHA,
    )  # fmt: skip
    return math.exp(diff), math.exp(float(lo)), math.exp(float(hi))


def _run(point: Point) -> str:
    return f"{point.run_id} r{point.repeat}"


def worse_than(cp: ChangePoint, series: Series, threshold: float) -> bool:
    """The change made the metric worse by more than ``threshold`` (0.1: 10 %), or stopped a durability
    metric (``metrics.DURABILITY``: its median after the change 0, where it was above 0 before)."""
    return stopped(cp, series) or stats.worse_by(cp.ratio, series.direction) > threshold


def stopped(cp: ChangePoint, series: Series) -> bool:
    """The change stopped the flushes or fsync calls of the series: a loss of durability, not a saving."""
    return series.metric in DURABILITY and cp.ratio == 0


@dataclass(frozen=True)
class Histories:
    """``fsmatrix history``'s answer: each selected series with its change points and what changed, and
    the detector that found them (``Apache Otava <version>``)."""

    histories: tuple[History, ...]
    detector: str


def to_read(series: Sequence[Series], found: Sequence[Sequence[tuple[int, float]]]) -> set[str]:
    """The stored documents the store reads for ``histories`` (``found[i]``: ``series[i]``'s change
    points): the runs either side of each change point and no other."""
    return {rid for s, cps in zip(series, found, strict=True) for rid in attributed_from(s, cps)}


def histories(
    series: Sequence[Series],
    found: Sequence[Sequence[tuple[int, float]]],
    documents: Mapping[str, Result],
    detector: str,
) -> Histories:
    """The one way history is decided: the store's series the selection picked, their change points
    (``found[i]``: ``series[i]``'s, as (index, p) from ``detector``) and what changed at each, from
    ``documents`` (at least those ``to_read`` names)."""
    made = tuple(history(s, cps, documents) for s, cps in zip(series, found, strict=True))
    return Histories(made, detector)
