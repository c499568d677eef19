"""A result document as the host side reads it: schema version 1 (results/README.md), checked once
where documents enter (``document_problem``) and typed (``Result``), so that no reader indexes a
field that is not there and every reader after the store takes the typed object.

The typed parts are what the verdicts and the renderers read: the cell's parameters, the metrics
with their directions, the verification, the sampler's class and series, the provenance with its
host, the crash section. The stored document stays whole beside them (``Result.document``): the
exports and a store that keeps documents read it, nothing else does. Plain frozen dataclasses: a
typed object per document costs a few microseconds next to the JSON parse (docs/measurements.md,
"Loading result documents").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fsmatrix import matrix
from fsmatrix.agent.parsing import parse_cell

DIRECTIONS = ("lower", "higher")


def document_problem(doc: Mapping[str, Any]) -> str | None:
    """What makes a result document unusable for compare/report (None when nothing does): the
    fields every reader indexes without looking, checked once here instead of a KeyError later."""
    cell_id = doc.get("cell_id")
    if not isinstance(cell_id, str) or not cell_id:
        return f"cell_id is {cell_id!r}; expected the cell's id (a non-empty string)"
    repeat = doc.get("repeat")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        return f"repeat is {repeat!r}; expected an integer >= 1"
    if not isinstance(doc.get("status"), str):
        return f"status is {doc.get('status')!r}; expected a string such as 'passed'"
    metrics = doc.get("metrics", {})
    if not isinstance(metrics, dict):
        return f"metrics is {type(metrics).__name__}; expected a mapping of metric -> number"
    key_metrics = doc.get("key_metrics", {})
    if not isinstance(key_metrics, dict):
        return f"key_metrics is {type(key_metrics).__name__}; expected a mapping of metric -> 'lower' or 'higher'"
    for name, direction in key_metrics.items():
        if direction not in DIRECTIONS:
            return f"key_metrics.{name} is {direction!r}; expected 'lower' or 'higher'"
    for name, value in metrics.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"metrics.{name} is {value!r}; expected a number"
    return None


Direction = Literal["lower", "higher"]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def dotted(section: Mapping[str, Any], key: str) -> Any:
    """``section[key]``, where a dotted key reaches into nested sections (``host.workdir.fstype``);
    None where a part is missing."""
    value: Any = section
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


@dataclass(frozen=True, slots=True)
class Verification:
    """``verification``: whether the database held what the run promised."""

    status: str | None  # passed, failed, not-applicable, not-run; None: not recorded
    message: str | None
    reference: Mapping[str, Any] | None  # 3n+1: the reference answer checked against

    @classmethod
    def read(cls, section: Any) -> Verification:
        section = _mapping(section)
        reference = section.get("reference")
        return cls(
            _text(section.get("status")),
            _text(section.get("message")),
            reference if isinstance(reference, Mapping) and reference else None,
        )


@dataclass(frozen=True, slots=True)
class Samples:
    """``samples``: the sampler's per-second series and the run's class."""

    bound: str  # cpu, io, mixed; "" when not classified
    series: Sequence[Mapping[str, Any]]

    @classmethod
    def read(cls, section: Any) -> Samples:
        section = _mapping(section)
        series = section.get("series")
        return cls(str(section.get("bound") or ""), tuple(series) if isinstance(series, list) else ())


@dataclass(frozen=True, slots=True)
class Host:
    """``provenance.host``: the machine that ran the result, as the host sees itself (also under a VM)."""

    cpu_model: str | None
    cpu_count: int | None
    memory_kib: float | None
    machine_id: str | None
    fsmatrix_git: str | None  # a VM result: the host side's commit (the guest agent's is the image's)
    workdir_disk: Mapping[str, Any]  # model, rotational, ... of the disk under the work directory

    @classmethod
    def read(cls, section: Any) -> Host:
        section = _mapping(section)
        count, memory = section.get("cpu_count"), section.get("memory_kib")
        return cls(
            _text(section.get("cpu_model")) or None,
            count if isinstance(count, int) and not isinstance(count, bool) else None,
            memory if isinstance(memory, int | float) and not isinstance(memory, bool) else None,
            _text(section.get("machine_id")),
            _text(section.get("fsmatrix_git")) or None,
            _mapping(_mapping(section.get("workdir")).get("disk")),
        )


@dataclass(frozen=True, slots=True)
class Provenance:
    """``provenance``: where and with what the result was made."""

    git_sha: str | None
    kernel: str | None
    backend: str | None
    image: Mapping[str, Any] | None  # the guest image's manifest summary; None on the host backend
    kernel_source: Mapping[str, Any] | None  # a vm.kernel file: its release and sha256
    host: Host
    section: Mapping[str, Any]  # the whole section, for the environment keys (``value``)

    @classmethod
    def read(cls, section: Any) -> Provenance:
        section = _mapping(section)
        image, source = section.get("image"), section.get("kernel_source")
        return cls(
            _text(_mapping(section.get("git")).get("sha")),
            _text(section.get("kernel")),
            _text(section.get("backend")),
            image if isinstance(image, Mapping) else None,
            source if isinstance(source, Mapping) else None,
            Host.read(section.get("host")),
            section,
        )

    def value(self, key: str) -> Any:
        """The value of a dotted key (``host.workdir.fstype``), as stored; None when missing."""
        return dotted(self.section, key)


@dataclass(frozen=True, slots=True)
class Result:
    """One result document, typed: built once where documents enter (``read``), read by the verdicts
    and the renderers. The stored document itself (schema version 1) is ``document``, for the exports
    and a store that keeps it whole."""

    run_id: str  # "" when the document does not say (older files: the run folder's name)
    cell_id: str
    repeat: int
    workload: str
    status: str  # passed, failed, error, timeout, skipped
    reason: str | None
    params: Mapping[str, Any]  # the cell's complete parameters (JSON form)
    metrics: Mapping[str, float | None]
    key_metrics: Mapping[str, Direction]  # what comparisons look at, and which way is better
    verification: Verification
    samples: Samples
    provenance: Provenance
    crash: Mapping[str, Any] | None  # a crash cell's crash and recovery section
    storage: Mapping[str, Any]  # what the kernel and the mkfs tool did (read back)
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    path: Path | None  # where it was read from (None: made in memory)
    document: Mapping[str, Any]

    @classmethod
    def read(cls, doc: Mapping[str, Any], path: Path | None = None) -> Result:
        """``doc`` typed; ValueError naming the field when it is not a usable result document."""
        problem = document_problem(doc)
        if problem:
            raise ValueError(problem)
        crash, duration = doc.get("crash"), doc.get("duration_s")
        return cls(
            run_id=str(doc.get("run_id") or ""),
            cell_id=doc["cell_id"],
            repeat=doc["repeat"],
            workload=str(doc.get("workload")),
            status=doc["status"],
            reason=_text(doc.get("reason")),
            params=_mapping(doc.get("params")),
            metrics=doc.get("metrics") or {},
            key_metrics=doc.get("key_metrics") or {},
            verification=Verification.read(doc.get("verification")),
            samples=Samples.read(doc.get("samples")),
            provenance=Provenance.read(doc.get("provenance")),
            crash=crash if isinstance(crash, Mapping) else None,
            storage=_mapping(doc.get("storage")),
            started_at=_text(doc.get("started_at")),
            finished_at=_text(doc.get("finished_at")),
            duration_s=duration if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
            path=path,
            document=doc,
        )


UNKNOWN_HOST = "unknown host"  # results without provenance.host (old ones, or a failure before it was known)


def _host(doc: Result) -> Mapping[str, Any]:
    host = (doc.provenance.section).get("host")
    return host if isinstance(host, Mapping) else {}


def hardware_class(doc: Result) -> str:
    """The hardware class of one result (verdict/hardware.py: what of its host changes the numbers), in
    words: "Intel Xeon E-2288G, 16 CPUs, 64 GiB, disk SAMSUNG MZ7L3 (SSD)"; ``UNKNOWN_HOST`` when the
    result does not describe its host. A column of the store, so it lives with the document."""
    host = _host(doc)
    if not host.get("cpu_model") and not host.get("cpu_count"):
        return UNKNOWN_HOST
    parts = [str(host.get("cpu_model") or "unknown CPU")]
    if host.get("cpu_count"):
        parts.append(f"{host['cpu_count']} CPUs")
    memory = host.get("memory_kib")
    if isinstance(memory, int | float) and memory > 0:
        parts.append(f"{round(memory / 2**20)} GiB")
    disk = (host.get("workdir") or {}).get("disk") if isinstance(host.get("workdir"), Mapping) else None
    if isinstance(disk, Mapping) and (disk.get("model") or disk.get("rotational") is not None):
        rotational = disk.get("rotational")
        kind = " (rotational)" if rotational is True else " (SSD)" if rotational is False else ""
        parts.append(f"disk {disk.get('model') or 'unknown model'}{kind}")
    return ", ".join(parts)


def comparison_group(params: Mapping[str, Any], workload: str) -> tuple[str, str]:
    """The comparison group of a stored result, from its parameters as JSON: ``matrix.group_of``'s key
    and label of the cell they parse into; for parameters this fsmatrix cannot parse (an old result),
    the same key built from the stored JSON and the workload's name as the label."""
    try:
        group = matrix.group_of(parse_cell(params))
    except (ValueError, TypeError, KeyError, AttributeError):
        label = workload + (f" (crash: {params['crash'].get('mode')})" if isinstance(params.get("crash"), dict) else "")
        return matrix.group_key(params), label
    return group.key, group.label
