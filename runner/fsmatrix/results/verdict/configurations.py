"""The answer's groups and configurations: which cells answer one question, what each is called, and
which is the baseline.

A comparison group is ``store.comparison_group`` (``matrix.group_of`` on a typed cell): the same
workload with the same parameters and the same crash block. A *configuration* is one cell of the
group, named by the settings that vary
inside the group ("xfs", "ext4 data=writeback", "btrfs, gtm.journal=nobefore"). When the runs come
from several hardware classes (``hardware.py``: a fleet's mixed machines), each group is split by
class and its label ends "on <class>": numbers from unlike machines are never ranked together.

The baseline is the cell ``matrix.json`` marks ``"baseline": true`` (its ``baseline_rule`` says
whether the matrix named it or it is the cell with every setting at its default); without one, the
group's first cell in ``matrix.json``'s order; without ``matrix.json``, the first by cell id. Every
answer says which rule chose it.

``groups`` builds each ``Group`` once (its cells, their names, the baseline and the regime); the speed
and crash verdicts take it as it is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsmatrix.matrix import flatten
from fsmatrix.results.store import Result, RunMatrix, comparison_group
from fsmatrix.results.verdict import hardware
from fsmatrix.results.verdict.metrics import regime

# Where a baseline came from: matrix.json's ``baseline_rule`` ("named", "defaults"), or the fallbacks.
RULES = {
    "named": "named in the matrix",
    "defaults": "every setting at its default",
    "recorded": "marked in matrix.json",
    "first-cell": "first cell; the matrix names none",
    "absent": "first cell; the matrix's baseline has no results here",
    "first-id": "first by cell id; no matrix.json",
}


STORAGE_KEYS = ("filesystem", "mount_options", "mkfs_options")


STORAGE_PREFIXES = ("storage.", "device.")


@dataclass(frozen=True)
class Regime:
    overall: str  # "cpu", "io", "mixed" (each configuration the same), "varies", or "" (no samples)
    by_configuration: dict[str, str]
    storage_comparison: bool  # the group's configurations differ in the storage stack
    disks_not_bottleneck: bool  # a storage comparison in which every configuration was CPU-bound


@dataclass(frozen=True)
class Member:
    """A comparison group's member: one cell's runs, in repeat order, with its flattened settings and
    its comparison group (the matrix's typed cell is ``agent.cell.Cell``)."""

    id: str
    docs: tuple[Result, ...]
    flat: Mapping[str, Any]
    group_key: str
    group_label: str
    baseline_flag: bool | None  # as matrix.json marks it; None: no record


@dataclass(frozen=True)
class Group:
    """A comparison group, built once: its cells in the matrix's order, each one's configuration name
    and the settings that vary inside the group, the baseline and the rule that chose it, and the
    regime of its runs."""

    key: str
    label: str
    workload: str
    cells: tuple[Member, ...]
    names: Mapping[str, str]  # cell id -> configuration name
    settings: Mapping[str, dict[str, str]]  # cell id -> the varying settings, dotted key -> value as text
    baseline: Member
    baseline_rule: str  # a key of RULES
    regime: Regime

    def name(self, cell: Member) -> str:
        return self.names[cell.id]

    @property
    def baseline_name(self) -> str:
        return self.names[self.baseline.id]


def groups(docs: Sequence[Result], matrix: RunMatrix | None) -> list[Group]:
    """The comparison groups of these results, in the order of their first cells."""
    grouped: dict[str, list[Member]] = {}
    for c in _cells(docs, matrix):
        grouped.setdefault(c.group_key, []).append(c)
    return [_group(key, members, matrix) for key, members in grouped.items()]


def _group(key: str, members: list[Member], matrix: RunMatrix | None) -> Group:
    named = _names(members)
    names = {cid: name for cid, (name, _) in named.items()}
    base, rule = _baseline(members, matrix)
    return Group(
        key=key,
        label=members[0].group_label,
        workload=str(members[0].docs[0].workload),
        cells=tuple(members),
        names=names,
        settings={cid: settings for cid, (_, settings) in named.items()},
        baseline=base,
        baseline_rule=rule,
        regime=_regime(members, named),
    )


def _cells(docs: Sequence[Result], matrix: RunMatrix | None) -> list[Member]:
    """The cells the documents hold, in matrix.json's order (then by id), with their groups (as
    matrix.json records them, ``group`` and ``group_label``, else ``store.comparison_group``'s)."""
    by_cell: dict[str, list[Result]] = defaultdict(list)
    for doc in docs:
        by_cell[str(doc.cell_id)].append(doc)
    entries = {e.id: e for e in matrix.cells} if matrix is not None else {}
    order = [cid for cid in entries if cid in by_cell] + sorted(cid for cid in by_cell if cid not in entries)
    # Runs from several hardware classes: each class's runs are compared among themselves only.
    by_class = hardware.split({cid: by_cell[cid] for cid in order})
    cells = []
    for cid, klass in ((cid, k) for k, members in by_class.items() for cid in order if cid in members):
        ds = sorted(by_class[klass][cid], key=lambda d: d.repeat)
        params = ds[0].params
        key, label = comparison_group(params, str(ds[0].workload))
        section = next((d.crash for d in ds if d.crash is not None), None)
        if section is not None and "crash" not in params:  # a crash result whose params do not say so
            key += f"|crash:{section.get('mode')}"
            label += f" (crash: {section.get('mode')})"
        entry = entries.get(cid)
        flag = entry.baseline if entry is not None else None
        if entry is not None and entry.group:  # as the matrix grouped it
            key = entry.group
        if entry is not None and entry.group_label:
            label = entry.group_label
        if len(by_class) > 1:
            key += f"|hardware:{klass}"
            label += f" on {klass}"
        cells.append(Member(cid, tuple(ds), flatten(params), key, label, flag))
    return cells


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _names(cells: Sequence[Member]) -> dict[str, tuple[str, dict[str, str]]]:
    """cell id -> (configuration name, the varying settings) for the cells of one group."""
    keys = list(dict.fromkeys(k for c in cells for k in c.flat))
    varying = [k for k in keys if len({_show(c.flat.get(k, "–")) for c in cells}) > 1]
    out = {}
    for c in cells:
        settings = {k: _show(c.flat.get(k, "–")) for k in varying}
        head = ""
        if any(k in varying for k in STORAGE_KEYS) or not varying:
            head = str(c.flat.get("filesystem", c.id))
            if c.flat.get("mount_options"):
                head += f" {c.flat['mount_options']}"
            if "mkfs_options" in varying and c.flat.get("mkfs_options"):
                head += f" (mkfs {c.flat['mkfs_options']})"
        rest = [f"{k}={settings[k]}" for k in varying if k not in STORAGE_KEYS]
        out[c.id] = (", ".join(([head] if head else []) + rest), settings)
    names = [n for n, _ in out.values()]
    return {
        cid: (f"{name} ({cid})" if names.count(name) > 1 else name, settings) for cid, (name, settings) in out.items()
    }


def fingerprint(flat: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A configuration's settings without the workload's parameters, the crash block and the timeout:
    what a speed cell and a crash cell of the same stack share."""
    keep = (k for k in flat if not k.startswith(("workload.", "crash.")) and k != "timeout")
    return tuple(sorted((k, _show(flat[k])) for k in keep))


def _baseline(members: Sequence[Member], matrix: RunMatrix | None) -> tuple[Member, str]:
    rule_of_matrix = matrix.baseline_rule if matrix is not None else None
    flagged = [c for c in members if c.baseline_flag]
    if len(flagged) == 1:
        rule = rule_of_matrix if rule_of_matrix in ("named", "defaults") else "recorded"
        return flagged[0], rule
    if matrix is not None:
        # The matrix chose one, but not among these cells (a run of some of its cells only).
        absent = not flagged and rule_of_matrix in ("named", "defaults")
        return members[0], "absent" if absent else "first-cell"
    return min(members, key=lambda c: c.id), "first-id"


def _storage_comparison(settings: Mapping[str, str]) -> bool:
    return any(k in STORAGE_KEYS or k.startswith(STORAGE_PREFIXES) for k in settings)


def _regime(members: Sequence[Member], names: Mapping[str, tuple[str, dict[str, str]]]) -> Regime:
    by_config = {names[c.id][0]: regime(list(c.docs)) for c in members}
    known = {r for r in by_config.values() if r}
    overall = "" if not known else known.pop() if len(known) == 1 and all(by_config.values()) else "varies"
    storage = any(_storage_comparison(settings) for _, settings in names.values())
    return Regime(overall, by_config, storage, storage and overall == "cpu" and len(members) > 1)
