"""A cell's identity: ``MatrixCell`` (its id and typed ``Cell``), made from flat settings and checked
once, and ``cell_id``: readable slug + hash of the complete JSON form (pinned: tests/matrix/test_cell_ids_pinned.py)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

from fsmatrix.agent import cell as cells
from fsmatrix.agent import fit
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.declare import Invalid
from fsmatrix.agent.storage.settings import SINGLE
from fsmatrix.matrix import schema
from fsmatrix.matrix.flat import Flat, line_for, schema_message, unflatten


@dataclass(frozen=True)
class MatrixCell:
    """One combination of settings: its id and the parsed, typed cell (``spec``)."""

    id: str
    spec: Cell
    # The runner labels its CI job needs (``runner.labels``; schema.RUNNER); () when it names none.
    # Not part of ``params``: the agent never sees where it is scheduled.
    runner: tuple[str, ...] = ()

    @property
    def params(self) -> dict[str, Any]:
        """The complete JSON form (every default filled): what results store and the id hashes."""
        return self.spec.to_dict()

    @property
    def workload_kind(self) -> str:
        return self.spec.workload

    def summary(self) -> str:
        """A short human description of the workload, for tables and progress."""
        return self.spec.declaration.summary(self.spec.params)

    @classmethod
    def from_params(cls, cell_id: str, params: dict[str, Any]) -> MatrixCell:
        """A cell from its stored JSON form (a result's or a job's ``params``)."""
        return cls(cell_id, Cell.from_dict(params))


def make_cell(flat: Flat, fail: Any) -> MatrixCell:
    params = schema.fill_defaults(unflatten(flat))
    validator = jsonschema.Draft202012Validator(schema.CELL)
    errors = sorted(validator.iter_errors(params), key=lambda e: (len(e.absolute_path), list(e.absolute_path)))
    if errors:
        err = errors[0]
        path = ".".join(str(p) for p in err.absolute_path)
        raise fail(schema_message(err, path), line_for(flat, path))
    runner = tuple(params.pop("runner", {}).get("labels", ()))  # the matrix's own: schema.RUNNER
    try:
        spec = Cell.from_dict(params)  # also the rules that span settings (declare.Invalid)
        fit.check(spec)  # its disks and memory hold what it writes (not for `fsmatrix workload --dir`)
    except Invalid as exc:
        # A setting left at its default has no line: the cell's own then (fit checks name vm.memory).
        raise fail(str(exc), line_for(flat, exc.path) or line_for(flat, "")) from exc
    return MatrixCell(id=cell_id(spec, runner), spec=spec, runner=runner)


def cell_id(spec: Cell, runner: tuple[str, ...] = ()) -> str:
    """Readable slug + hash of the canonical parameters: the same settings give the same id anywhere.
    ``runner``: the cell's runner labels, hashed only when it names some (ids without stay as they were)."""
    params: dict[str, Any] = spec.to_dict()
    if runner:
        params["runner"] = {"labels": list(runner)}
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    detail = spec.declaration.slug(spec.params)
    # What is not the default about the storage shows in the id too: cells that differ only there
    # would otherwise be told apart by their hash alone.
    stack = [spec.filesystem]
    if spec.image != cells.DEFAULT_IMAGE:  # the guest image: what an upgrade changes
        stack.append(spec.image)
    if spec.storage.layout != SINGLE:
        stack.append(spec.storage.layout)
    stack += [
        value
        for value, default in ((spec.device.bus, cells.DEFAULT_BUS), (spec.device.profile, cells.NATIVE))
        if value != default
    ]
    if spec.crash is not None:  # a crash cell is not a benchmark of the same settings
        stack.append(f"crash-{spec.crash.mode}")
    slug = re.sub(r"[^a-z0-9.]+", "-", f"{'-'.join(stack)}-{spec.workload}-{detail}".lower()).strip("-")
    return f"{slug}-{digest}"
