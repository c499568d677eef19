"""Comparison groups and their baselines.

Each comparison group (``group_of`` a cell: one workload with its parameters) has one **baseline**
cell, the one the others are compared to: the cell the file's ``baseline`` names (settings, or a cell
id glob), or else the cell with the fewest settings off their defaults (``DEFAULTS_RULE``)."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from fsmatrix.agent.cell import Cell
from fsmatrix.matrix import schema, yamlpos
from fsmatrix.matrix.flat import Flat, flatten, flatten_mapping, schema_message, show, unflatten
from fsmatrix.matrix.ids import MatrixCell

# How each group's baseline was chosen: the file's ``baseline`` named it, or (without one) it is the
# cell with the fewest settings off their defaults, the first of those in expansion order.
NAMED_RULE = "named"
DEFAULTS_RULE = "defaults"


@dataclass(frozen=True)
class ComparisonGroup:
    """The cells that answer one question: the same workload with the same parameters (and the same
    crash setting, whose runs measure a recovery, not the workload). What differs inside a group
    (filesystem, options, layout, device, database settings, ...) is the configuration compared."""

    key: str  # canonical: the workload's name, its parameters' JSON and the crash block's
    label: str  # for people: the workload's summary, and the crash mode when there is one


def group_key(params: Mapping[str, Any]) -> str:
    """A comparison group's key from a cell's complete JSON form (``Cell.to_dict()``, what results
    store): the workload block's canonical JSON and the crash block's."""
    workload = json.dumps(params.get("workload"), sort_keys=True, separators=(",", ":"))
    crashing = json.dumps(params.get("crash"), sort_keys=True, separators=(",", ":"))
    return f"{workload}|{crashing}"


def group_of(spec: Cell) -> ComparisonGroup:
    """The comparison group of a typed cell (reports, the answer, baselines and racing group cells by it).
    A stored result's, from its parameters as JSON: ``fsmatrix.results.store.comparison_group``."""
    label = spec.declaration.summary(spec.params)
    if spec.crash is not None:
        label += f" (crash: {spec.crash.mode})"
    return ComparisonGroup(key=group_key(spec.to_dict()), label=label)


def groups(cells: list[MatrixCell]) -> dict[str, tuple[ComparisonGroup, list[MatrixCell]]]:
    """The cells of each comparison group, in expansion order (groups in order of first cell)."""
    found: dict[str, tuple[ComparisonGroup, list[MatrixCell]]] = {}
    for cell in cells:
        group = group_of(cell.spec)
        found.setdefault(group.key, (group, []))[1].append(cell)
    return found


def baseline_entry(doc: dict[str, Any], fail: Any) -> Flat | str | None:
    """The file's ``baseline``: settings (flattened and checked like an ``exclude`` entry, each
    value against its setting's schema), a cell id glob, or None when it names none."""
    value = doc.get("baseline")
    line = yamlpos.line_of(doc, "baseline")
    shape = "'baseline' must be a non-empty mapping of settings (e.g. {filesystem: ext4}) or a cell id glob"
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            raise fail(f"{shape}, got an empty string", line)
        return value.strip()
    if not isinstance(value, dict) or not value:
        raise fail(f"{shape}, got {show(value)}", line)
    flat = flatten_mapping(value, "", fail)
    for path, leaf in flat.items():
        spec = schema.spec_at(path) or {}
        errors = list(jsonschema.Draft202012Validator(spec).iter_errors(leaf.value))
        if errors:
            raise fail("baseline: " + schema_message(errors[0], path), leaf.line)
    return flat


def _baseline_matches(baseline: Flat | str, cell: MatrixCell) -> bool:
    """A glob matches the cell's id; settings match when each the cell has equals its value (a
    setting the cell does not have, such as another workload's, is not compared)."""
    if isinstance(baseline, str):
        return fnmatch.fnmatchcase(cell.id, baseline)
    values = flatten(cell.params)
    return all(values[p] == leaf.value for p, leaf in baseline.items() if p in values)


def _ids(cells: list[MatrixCell], most: int = 6) -> str:
    shown = ", ".join(c.id for c in cells[:most])
    return shown + (f" and {len(cells) - most} more" if len(cells) > most else "")


def named_baselines(cells: list[MatrixCell], baseline: Flat | str, line: int | None, fail: Any) -> dict[str, str]:
    """Group key -> the one cell the file's ``baseline`` matches in that group; refused unless it
    matches exactly one in every group."""
    shown = repr(baseline) if isinstance(baseline, str) else show(unflatten(baseline))
    chosen: dict[str, str] = {}
    for key, (group, members) in groups(cells).items():
        matched = [c for c in members if _baseline_matches(baseline, c)]
        if not matched:
            raise fail(
                f"baseline {shown} matches no cell in group {group.label!r} (its cells: {_ids(members)}); "
                "it must match exactly one cell in each group",
                line,
            )
        if len(matched) > 1:
            raise fail(
                f"baseline {shown} matches {len(matched)} cells in group {group.label!r}: {_ids(matched)}; "
                "it must match exactly one cell in each group: name more settings",
                line,
            )
        chosen[key] = matched[0].id
    return chosen


def default_value(path: str, defaults: Flat) -> tuple[bool, Any]:
    """The value a cell gets for ``path`` when it names none: the matrix's ``defaults`` (a scale's
    laid over the file's), else the schema's; (False, None) when the setting has no default."""
    if path in defaults:
        return True, defaults[path].value
    spec = schema.spec_at(path) or {}
    return ("default" in spec), spec.get("default")


def _off_defaults(cell: MatrixCell, defaults: Flat) -> int:
    """How many of the cell's settings differ from their defaults (``default_value``). The
    workload and crash blocks are not counted: they are what a comparison group holds equal."""
    count = 0
    for path, value in flatten(cell.params).items():
        if path.split(".")[0] in ("workload", "crash"):
            continue
        has_default, default = default_value(path, defaults)
        if has_default and value != default:
            count += 1
    return count


def default_baselines(cells: list[MatrixCell], defaults: Flat) -> dict[str, str]:
    """Group key -> the cell with the fewest settings off their defaults; of several, the first in
    expansion order (the axes crossed in the file's order, then the cells ``include`` adds)."""
    return {
        key: min(members, key=lambda c: _off_defaults(c, defaults)).id  # min keeps the first of equals
        for key, (_, members) in groups(cells).items()
    }
