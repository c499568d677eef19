"""Settings declared once, as frozen dataclasses whose fields carry their bounds and help text.

A workload's parameters, a database's settings block (``gtm``) and the cell's own blocks
(``storage``, ``device``, ``vm``) are each one dataclass; every field is made with ``setting(...)``.
From that one declaration come the defaults, the checks the guest applies when it reads its job
(``parse``), the JSON form stored in results (``to_dict``) and, on the host, the JSON Schema a matrix
file is validated against (``json_schema``). Standard library only: the guest runs this too.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# The one size syntax: bytes, or a number with a binary unit (as qemu-img and fio read them).
# The one size syntax, for the matrix schema and parse_size alike: bytes, or a whole number with a
# binary unit K/M/G/T (either case), which sysbench, fio and qemu-img all read the same way.
SIZE_PATTERN = r"^([0-9]+)([KMGTkmgt]?)$"
_SIZE = re.compile(SIZE_PATTERN)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
KEY = "fsmatrix"  # the field-metadata key holding a Setting


class Invalid(ValueError):
    """A value a declaration does not allow; ``path`` is the dotted setting it concerns."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Setting:
    """What a field allows, beyond its Python type (int, float, bool, str)."""

    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    multiple_of: int | None = None
    choices: tuple[Any, ...] = ()
    size: bool = False  # a str holding a size: 4096, 512M, 8G
    matrix: bool = True  # False: an internal knob, not a matrix setting (not in schema or to_dict)
    cli: bool = False  # an argument of the standalone `fsmatrix workload NAME` command
    # Left out of to_dict (so of cell ids) while it has its default: a setting added to a block
    # later (``vm.kernel``) keeps the ids of every cell that does not use it.
    omit_default: bool = False


def setting(default: Any = MISSING, **allowed: Any) -> Any:
    """A dataclass field with its bounds: ``workers: int = setting(4, minimum=1, maximum=1024, help=...)``.

    No default means required. ``choices`` may be any sequence; it is stored as a tuple.
    """
    if "choices" in allowed:
        allowed["choices"] = tuple(allowed["choices"])
    meta = {KEY: Setting(**allowed)}
    if default is MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Field:
    name: str
    kind: type
    default: Any  # MISSING when required
    spec: Setting

    @property
    def required(self) -> bool:
        return self.default is MISSING


def fields(cls: type) -> tuple[Field, ...]:
    """The declared settings of ``cls``, in declaration order."""
    return _fields(cls)


@functools.cache  # a class's declaration does not change; resolving its type hints compiles them every time
def _fields(cls: Any) -> tuple[Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(KEY)
        if isinstance(spec, Setting):
            out.append(Field(f.name, hints[f.name], f.default, spec))
    return tuple(out)


def parse_size(text: str | int) -> int:
    """Bytes in a size such as "8G", "512m", "1T", "4096" (binary units, as qemu-img and fio)."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"negative size: {text}")
        return text
    match = _SIZE.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"not a size: {text!r} (expected e.g. 4096, 512M, 8G, 1T)")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def describe(spec: Setting, kind: type) -> str:
    """What a setting allows, in words."""
    if spec.choices:
        return "one of " + ", ".join(str(c) for c in spec.choices)
    if spec.size:
        return "a size such as 512M or 8G"
    if kind is bool:
        return "true or false"
    if kind in (int, float):
        word = "an integer" if kind is int else "a number"
        low = "" if spec.minimum is None else f" {'>' if spec.exclusive_minimum else '>='} {spec.minimum:g}"
        text = word + low
        if spec.maximum is not None:
            text += f" and <= {spec.maximum:g}"
        if spec.multiple_of:
            text += f", a multiple of {spec.multiple_of}"
        return text
    return "a string"


def check_value(f: Field, value: Any, where: str) -> Any:
    """``value`` if field ``f`` allows it, else Invalid naming ``where``."""
    ok = isinstance(value, f.kind) and not (isinstance(value, bool) and f.kind is not bool)
    if f.kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True  # kept as written: 2 and 2.0 would hash to different cell ids
    spec = f.spec
    if ok and spec.choices:
        ok = value in spec.choices
    if ok and spec.size:
        try:
            parse_size(value)
        except ValueError:
            ok = False
    if ok and f.kind in (int, float):
        if spec.minimum is not None:
            ok = value > spec.minimum if spec.exclusive_minimum else value >= spec.minimum
        if spec.maximum is not None and value > spec.maximum:
            ok = False
        if spec.multiple_of and value % spec.multiple_of:
            ok = False
    if not ok:
        hint = ""
        if isinstance(value, bool) and f.kind is str:  # YAML 1.1 reads unquoted on/off/yes/no as booleans
            hint = " (quote it: YAML reads unquoted on, off, yes and no as true or false)"
        raise Invalid(where, f"{where} must be {describe(spec, f.kind)}, not {value!r}{hint}")
    return value


def parse(cls: type[T], values: Mapping[str, Any] | None, where: str) -> T:
    """An instance of ``cls`` from ``values``: defaults filled, every value checked (Invalid if not).

    ``cls.__post_init__`` may raise Invalid for combinations a single field cannot express.
    """
    values = dict(values or {})
    declared = fields(cls)
    names = {f.name for f in declared}
    unknown = sorted(set(values) - names)
    if unknown:
        raise Invalid(f"{where}.{unknown[0]}", f"{where}: unknown setting(s) {', '.join(unknown)}")
    kwargs = {}
    for f in declared:
        if f.name in values:
            kwargs[f.name] = check_value(f, values[f.name], f"{where}.{f.name}")
        elif f.required:
            raise Invalid(f"{where}.{f.name}", f"{where}.{f.name} is required but not set")
    return cls(**kwargs)


def to_dict(value: Any) -> dict[str, Any]:
    """The matrix settings of a declared instance as plain JSON values (internal knobs left out,
    and ``omit_default`` settings while they have their default)."""
    return {
        f.name: getattr(value, f.name)
        for f in fields(type(value))
        if f.spec.matrix and not (f.spec.omit_default and getattr(value, f.name) == f.default)
    }


def defaults(cls: type) -> dict[str, Any]:
    """The declared defaults (required settings have none)."""
    return {f.name: f.default for f in fields(cls) if not f.required and f.spec.matrix}


def json_schema(cls: type, *, with_default: bool = True) -> dict[str, Any]:
    """The JSON Schema of a declared dataclass: an object with one property per matrix setting."""
    properties: dict[str, Any] = {}
    for f in fields(cls):
        if not f.spec.matrix:
            continue
        spec = f.spec
        prop: dict[str, Any]
        if spec.choices:
            prop = {"enum": list(spec.choices)}
        elif spec.size:
            prop = {"type": "string", "pattern": SIZE_PATTERN, "description": "bytes, or a number with K/M/G/T"}
        else:
            prop = {"type": {bool: "boolean", int: "integer", float: "number", str: "string"}[f.kind]}
            if spec.minimum is not None:
                prop["exclusiveMinimum" if spec.exclusive_minimum else "minimum"] = spec.minimum
            if spec.maximum is not None:
                prop["maximum"] = spec.maximum
            if spec.multiple_of:
                prop["multipleOf"] = spec.multiple_of
        if spec.help:
            prop["description"] = spec.help
        if not f.required:
            prop["default"] = f.default
        properties[f.name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": [f.name for f in fields(cls) if f.required and f.spec.matrix],
        "properties": properties,
    }
    if with_default:
        schema["default"] = {}
    return schema


def member(module: str, attribute: str, kind: type[T], name: str) -> T:
    """A registry's member: the declaration ``attribute`` of ``module`` (imported on first use, so a
    member's module may import its registry's helpers), checked to be a ``kind`` called ``name``."""
    loaded = importlib.import_module(module)
    declared = getattr(loaded, attribute, None)
    if not isinstance(declared, kind) or getattr(declared, "name", None) != name:
        raise TypeError(f"{module}.{attribute} does not declare {name}")
    return declared
