"""The settings a cell can have: one JSON Schema, which also carries every default.

The schema is the single source of truth for what a matrix file may say: validation, defaults and
`fsmatrix matrix settings` (the documentation listing) all read it. It is derived, never written by
hand: from the cell's declared blocks (``fsmatrix.agent.cell``), the filesystem registry, each
registered workload's parameters and the settings blocks the workloads own (``gtm``).
"""

from __future__ import annotations

import copy
from typing import Any

from fsmatrix import image_definitions
from fsmatrix.agent import cell as cells
from fsmatrix.agent import crash, declare
from fsmatrix.agent.storage import filesystems
from fsmatrix.agent.storage import settings as storage_settings
from fsmatrix.agent.workloads import WORKLOADS, all_workloads, settings_blocks

FILESYSTEMS = filesystems.FILESYSTEMS
LAYOUTS = storage_settings.LAYOUTS
DEVICE_PROFILES = cells.DEVICE_PROFILES
DEVICE_BUSES = cells.DEVICE_BUSES


def _cell_schema() -> dict[str, Any]:
    options = declare.json_schema(cells.Options)["properties"]
    workloads = {w.name: declare.json_schema(w.params, with_default=False) for w in all_workloads()}
    blocks = {name: declare.json_schema(b.settings) for name, b in settings_blocks().items()}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["filesystem", "workload"],
        "properties": {
            "filesystem": options["filesystem"],
            "mkfs_options": options["mkfs_options"],
            "mount_options": options["mount_options"],
            # The images known: the definitions in packer/images/ (a bad name is refused with this list).
            "image": {**options["image"], "enum": image_definitions.names()},
            **{name: declare.json_schema(block) for name, block in cells.BLOCKS.items()},
            **blocks,
            "workload": {
                "type": "object",
                "additionalProperties": False,
                "minProperties": 1,
                "maxProperties": 1,
                "properties": workloads,
            },
            "timeout": _timeout_schema(options["timeout"]),
            # No default: a cell without a crash block is never crashed (and keeps its id).
            "crash": declare.json_schema(crash.CrashSettings, with_default=False),
            "runner": RUNNER,
        },
    }


# ``runner: {labels: [...]}``: the hardware class a cell needs, as GitHub Actions runner labels (the
# shard's `runs-on`). Where a cell runs, not what it is: the matrix layer keeps it (MatrixCell.runner)
# and the agent never sees it. No default: a cell without one keeps its id (like ``crash``).
RUNNER_LABEL = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
RUNNER_LABEL_WORDS = "a runner label: letters, digits, '.', '_' or '-', starting with a letter or digit"
RUNNER: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["labels"],
    "properties": {
        "labels": {
            "type": "array",
            "minItems": 1,
            "maxItems": 20,
            "uniqueItems": True,
            "items": {"type": "string", "pattern": RUNNER_LABEL, "description": RUNNER_LABEL_WORDS},
            "description": "runner labels the cell's CI job needs (its hardware class; GitHub's runs-on)",
        }
    },
}


def _timeout_schema(seconds: dict[str, Any]) -> dict[str, Any]:
    """Seconds, or "auto" (cells.TIMEOUT_AUTO: from the cell's stored runs); the default stays the
    integer, so the ids of cells that do not say "auto" are unchanged."""
    number = {k: v for k, v in seconds.items() if k not in ("default", "description")}
    either = {"anyOf": [number, {"const": cells.TIMEOUT_AUTO}]}
    return {**either, **{k: v for k, v in seconds.items() if k in ("default", "description")}}


CELL: dict[str, Any] = _cell_schema()
WORKLOAD_NAMES = WORKLOADS


def fill_defaults(value: dict[str, Any], schema: dict[str, Any] = CELL) -> dict[str, Any]:
    """A copy of ``value`` with every schema default filled in, recursively."""
    result = copy.deepcopy(value)
    for key, spec in schema.get("properties", {}).items():
        if key not in result and "default" in spec:
            result[key] = copy.deepcopy(spec["default"])
        if isinstance(result.get(key), dict) and spec.get("properties"):
            result[key] = fill_defaults(result[key], spec)
    return result


def setting_paths(schema: dict[str, Any] = CELL, prefix: str = "") -> list[str]:
    """Every dotted path a matrix may set, objects included (``gtm``, ``gtm.journal``, ...)."""
    paths: list[str] = []
    for key, spec in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        paths.append(path)
        paths.extend(setting_paths(spec, path + "."))
    return paths


def describe(spec: dict[str, Any]) -> str:
    """What a setting allows, in words, for error messages and the settings listing."""
    if "enum" in spec:
        return "one of " + ", ".join(str(v) for v in spec["enum"])
    if "anyOf" in spec:
        return " or ".join(repr(s["const"]) if "const" in s else describe(s) for s in spec["anyOf"])
    kind = spec.get("type", "value")
    if kind == "number" and ("minimum" in spec or "exclusiveMinimum" in spec):
        return f"a number >= {spec['minimum']}" if "minimum" in spec else f"a number > {spec['exclusiveMinimum']}"
    if kind == "integer":
        bounds = f"an integer >= {spec.get('minimum', 0)}"
        if "maximum" in spec:
            bounds += f" and <= {spec['maximum']}"
        if "multipleOf" in spec:
            bounds += f", a multiple of {spec['multipleOf']}"
        return bounds
    if kind == "string" and "pattern" in spec:
        return "a size such as 512M or 8G" if spec["pattern"] == declare.SIZE_PATTERN else spec["description"]
    if kind == "array":
        size = f"{spec.get('minItems', 0)} to {spec['maxItems']}" if "maxItems" in spec else "any number of"
        unique = " different" if spec.get("uniqueItems") else ""
        return f"a list of {size}{unique} values, each {describe(spec.get('items', {}))}"
    if kind == "object":
        return "a mapping with keys " + ", ".join(spec.get("properties", {}))
    return {"boolean": "true or false", "string": "a string", "number": "a number"}.get(kind, kind)


def spec_at(path: str, schema: dict[str, Any] = CELL) -> dict[str, Any] | None:
    """The schema of a dotted setting path, or None when there is no such setting."""
    spec: dict[str, Any] | None = schema
    for part in path.split("."):
        if spec is None:
            return None
        spec = spec.get("properties", {}).get(part)
    return spec
