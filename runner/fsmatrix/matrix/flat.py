"""Settings as flat dotted paths, each value with its line: nested or dotted settings <-> ``{path: Leaf}``,
and the one-line message that says where a setting is wrong and why."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from fsmatrix.matrix import schema, yamlpos


@dataclass(frozen=True)
class Leaf:
    value: Any
    line: int | None


Flat = dict[str, Leaf]


def show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A cell's (or a result's) nested ``params`` as dotted keys: ``{"gtm": {"journal": x}}`` gives
    ``{"gtm.journal": x}``."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_path(path: str, line: int | None, fail: Any) -> None:
    if schema.spec_at(path) is None:
        parent, _, _ = path.rpartition(".")
        siblings = schema.spec_at(parent) if parent else schema.CELL
        allowed = ", ".join((siblings or {}).get("properties", {})) or "none"
        raise fail(f"unknown setting {path!r}; allowed{' under ' + repr(parent) if parent else ''}: {allowed}", line)


def flatten_value(path: str, value: Any, line: int | None, fail: Any) -> Flat:
    check_path(path, line, fail)
    spec = schema.spec_at(path) or {}
    if isinstance(value, dict) and spec.get("type") == "object":
        return flatten_mapping(value, path + ".", fail)
    if isinstance(value, dict) or (isinstance(value, list) and spec.get("type") != "array"):
        raise fail(f"{path}: {show(value)} is not allowed; expected {schema.describe(spec)}", line)
    return {path: Leaf(value, line)}


def flatten_mapping(mapping: dict[str, Any], prefix: str, fail: Any) -> Flat:
    flat: Flat = {}
    for key, value in mapping.items():
        flat.update(flatten_value(prefix + str(key), value, yamlpos.line_of(mapping, key), fail))
    return flat


def flat_entries(doc: dict[str, Any], key: str, fail: Any) -> list[Flat]:
    entries = doc.get(key, []) or []
    if not isinstance(entries, list):
        raise fail(f"'{key}' must be a list of mappings", yamlpos.line_of(doc, key))
    result = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry:
            raise fail(f"each '{key}' entry must be a non-empty mapping, got {entry!r}", yamlpos.line_of(entries, i))
        result.append(flatten_mapping(entry, "", fail))
    return result


def merge_flats(*parts: Flat) -> Flat:
    merged: Flat = {}
    for part in parts:
        merged.update(part)
    return merged


def top_setting(path: str, axis_paths: set[str]) -> str:
    """A dotted path as people named it: ``workload.fio.runtime`` is ``workload`` unless an axis
    varies inside the workload block."""
    if path.startswith("workload.") and not any(p.startswith("workload.") for p in axis_paths):
        return "workload"
    return path


def workload_kind(flat: Flat) -> str | None:
    kinds = {p.split(".")[1] for p in flat if p.startswith("workload.")}
    return kinds.pop() if len(kinds) == 1 else None


def entry_matches(entry: Flat, combo: Flat) -> bool:
    return all(p in combo and combo[p].value == leaf.value for p, leaf in entry.items())


def entry_fits(entry: Flat, original: Flat) -> bool:
    """An include entry fits a combination when it changes none of its axis values."""
    kind = workload_kind(original)
    if kind is not None and workload_kind(entry) not in (None, kind):
        return False
    return all(p not in original or original[p].value == leaf.value for p, leaf in entry.items())


def with_defaults(flat: Flat, defaults: Flat) -> Flat:
    kind = workload_kind(flat)
    result = dict(flat)
    for path, leaf in defaults.items():
        if kind is not None and path.startswith("workload.") and path.split(".")[1] != kind:
            continue  # defaults for another workload kind do not apply to this cell
        result.setdefault(path, leaf)
    return result


def unflatten(flat: Flat) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, leaf in flat.items():
        *parents, last = path.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = leaf.value
    return nested


def line_for(flat: Flat, path: str) -> int | None:
    """The line of the setting at ``path``, or of the nearest setting above it (a list's item) or below it."""
    for above in (path[:i] for i in range(len(path), 0, -1) if i == len(path) or path[i] == "."):
        if above in flat:
            return flat[above].line
    lines = [leaf.line for p, leaf in flat.items() if p.startswith(path + ".") or not path]
    return min((x for x in lines if x is not None), default=None)


def schema_message(err: jsonschema.ValidationError, path: str) -> str:
    spec = err.schema if isinstance(err.schema, dict) else {}
    where = path or "cell"
    if err.validator == "required":
        missing = err.message.split("'")[1]
        target = f"{path}.{missing}" if path else missing
        return f"{target} is required but not set (in this cell, from axes, include or defaults)"
    if err.validator in ("minProperties", "maxProperties") and path == "workload":
        return f"workload must name exactly one of {', '.join(schema.WORKLOAD_NAMES)}, got {show(err.instance)}"
    hint = ""
    if isinstance(err.instance, bool) and any(isinstance(c, str) for c in spec.get("enum", ())):
        hint = " (quote it: YAML reads unquoted on, off, yes and no as true or false)"
    return f"{where}: {show(err.instance)} is not allowed; expected {schema.describe(spec)}{hint}"
