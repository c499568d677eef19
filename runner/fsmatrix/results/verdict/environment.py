"""Which environment results come from, and what may differ on purpose.

Runs from environments that change numbers (``ENV_KEYS``: backend, accelerator, kernel, image,
device profile, CPU, memory, the host under a VM) are not comparable unless a crossing explains the
difference: ``--across NAME`` compares on purpose what differs in one of ``ACROSS`` — an environment
axis (``ENV_AXES``: a cell's guest image, with the kernel and packages it brings), BASE's cells on
one image with HEAD's on another, matched by every other setting; or what is under test at one cell
id (a different vm.kernel file, by sha256), refused unless named. The report names its own smaller
set (``REPORT_KEYS``) and warns when they differ with no axis to explain it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.matrix import schema
from fsmatrix.results.store import Result, dotted
from fsmatrix.results.store.sides import Side

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


@dataclass(frozen=True)
class Across:
    """``--across NAME[=BASE_VALUE,HEAD_VALUE]`` (an ACROSS name): for an environment axis, BASE's
    cells with it at one value against HEAD's at another (each side's only value when none are
    named); for what is under test (a kernel), the sides' as they are."""

    axis: str
    base: str | None = None
    head: str | None = None


def environment(docs: Sequence[Result]) -> dict[str, list[str]]:
    """For each ENV_KEY, the distinct values these documents report (sorted, as text)."""
    env: dict[str, set[str]] = {key: set() for key in ENV_KEYS}
    for doc in docs:
        for key in ENV_KEYS:
            value = doc.provenance.value(key)
            env[key].add(json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value))
    return {key: sorted(values) for key, values in env.items()}


def env_differences(base: Sequence[Result], head: Sequence[Result]) -> list[tuple[str, list[str], list[str]]]:
    eb, eh = environment(base), environment(head)
    return [(key, eb[key], eh[key]) for key in ENV_KEYS if eb[key] != eh[key]]


def axis_value(doc: Result, axis: str) -> str:
    """The value of environment axis ``axis`` (a dotted setting) in a result's cell: the setting's
    default when the cell does not name it (a cell at the default leaves it out of its JSON form)."""
    value = dotted(doc.params, axis)
    if value is None:
        value = (schema.spec_at(axis) or {}).get("default")
    return str(value)


def axis_values(docs: Sequence[Result], axis: str) -> list[str]:
    """The values of environment axis ``axis`` these results hold: the setting's default first (the
    baseline an upgrade is measured against), then the others by name."""
    default = str((schema.spec_at(axis) or {}).get("default"))
    return sorted({axis_value(d, axis) for d in docs}, key=lambda value: (value != default, value))


def without_axis(params: Mapping[str, Any], axis: str) -> str:
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


def _side_value(side: Side, axis: str, named: str | None, which: str) -> tuple[str, list[Result]]:
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
    twin = {without_axis(d.params, across.axis): d.cell_id for d in base_docs}
    renamed = []
    for doc in head_docs:
        match = twin.get(without_axis(doc.params, across.axis))
        renamed.append(replace(doc, cell_id=match) if match else doc)  # a view: the document stays
    return Side(base.label, base_docs), Side(head.label, renamed), Across(across.axis, bv, hv)


def varying_axes(docs: Sequence[Result]) -> list[str]:
    """The environment axes (``ENV_AXES``) whose value differs among these results' cells."""
    return [axis for axis in ENV_AXES if len({axis_value(d, axis) for d in docs}) > 1]


class WithAxes(list[Result]):
    """Results as a report sees them (``with_environment_axes``): derived once, passed on as they are."""


def with_environment_axes(docs: Sequence[Result]) -> WithAxes:
    """The documents with each environment axis that varies among them written into their ``params``
    (a cell at the axis's default leaves it out of its JSON form): every table then shows the value
    in its columns, and no cell stands apart for lacking it. Results already seen so, as they are: a
    report derives its axes once, however many of its parts ask."""
    if isinstance(docs, WithAxes):
        return docs
    axes = varying_axes(docs)
    if not axes:
        return WithAxes(docs)
    out = []
    for doc in docs:
        params = json.loads(json.dumps(doc.params))
        for axis in axes:
            *parents, last = axis.split(".")
            node = params
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = axis_value(doc, axis)
        out.append(replace(doc, params=params))  # a view for the tables: the document stays as stored
    return WithAxes(out)


def under_test(docs: Sequence[Result], name: str) -> list[str]:
    """The distinct things under test ``name`` (an ACROSS key with ``told_by``) these documents ran, for people:
    "RELEASE (sha256 PREFIX)" for a vm.kernel, "the image's kernel" without one."""
    labels = set()
    for doc in docs:
        source = doc.provenance.kernel_source
        if name == "kernel":
            if source is not None and source.get("sha256"):
                labels.add(f"{source.get('release', '?')} (sha256 {str(source['sha256'])[:12]})")
            else:
                labels.add(f"the image's kernel ({doc.provenance.section.get('kernel', '?')})")
        else:
            labels.add(str(doc.provenance.value(ACROSS[name].told_by or "")))
    return sorted(labels)


def across_differences(base: Sequence[Result], head: Sequence[Result]) -> list[tuple[str, list[str], list[str]]]:
    """The things under test (ACROSS with ``told_by``) that differ between the sides: (name, base's,
    head's)."""
    found = []
    for name, crossing in ACROSS.items():
        key = crossing.told_by
        if key is not None and environment_of(base, key) != environment_of(head, key):
            found.append((name, under_test(base, name), under_test(head, name)))
    return found


def environment_of(docs: Sequence[Result], key: str) -> set[str]:
    return {str(doc.provenance.value(key)) for doc in docs}


def env_hash(docs: Sequence[Result]) -> str:
    """A short stable hash of the environment, naming stored calibrations."""
    text = json.dumps(environment(docs), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def format_env_diffs(diffs: list[tuple[str, list[str], list[str]]]) -> str:
    return "\n".join(f"  {key}: base {', '.join(b)} | head {', '.join(h)}" for key, b, h in diffs)


# The environment a report names (kernel/CPU/memory of where the workload ran: the guest under a VM
# backend; host.*: the machine under it). Results that differ in any of these are flagged.
REPORT_KEYS = (
    "backend",
    "accel",
    "kernel",
    "cpu_model",
    "memory_kib",
    "host.machine_id",
    "host.cpu_model",
    "host.kernel",
    "host.memory_kib",
)


def explained_by_axes(docs: Sequence[Result]) -> dict[str, dict[str, set[str]]]:
    """REPORT_KEYS entry -> {axis value -> the entry's values}, for the entries that differ among these
    results only because an environment axis of their cells does (each image's own kernel)."""
    explained: dict[str, dict[str, set[str]]] = {}
    for axis in varying_axes(docs):
        by_value: dict[str, list[Result]] = {value: [] for value in axis_values(docs, axis)}
        for doc in docs:
            by_value[axis_value(doc, axis)].append(doc)
        for key in REPORT_KEYS:
            if key not in ENV_AXES[axis]:
                continue
            per_value = {value: environments(group)[key] for value, group in by_value.items()}
            if all(len(values) == 1 for values in per_value.values()):
                explained[key] = per_value
    return explained


def mixed_environments(docs: Sequence[Result]) -> list[str]:
    """The REPORT_KEYS entries whose values differ among these results with no environment axis of
    their cells to explain it: numbers across them are not comparable."""
    explained = explained_by_axes(docs)
    return [k for k, v in environments(docs).items() if len(v) > 1 and k not in explained]


def environments(docs: Sequence[Result]) -> dict[str, set[str]]:
    """Each REPORT_KEYS entry → the values the documents hold for it."""
    envs: dict[str, set[str]] = {k: set() for k in REPORT_KEYS}
    for doc in docs:
        for key in REPORT_KEYS:
            envs[key].add(str(doc.provenance.value(key)))
    return envs
