"""A matrix file's space (``results.verdict.space.Space``): its axes of two or more values as settings,
the full cross ``exclude`` left as configurations, and the matrix cell of each configuration.

The cells are the ones ``fsmatrix run`` (and ``fsmatrix matrix expand``) gives for the same file: a
configuration's runs under a search are the same cell's as under a run. A search refuses, before any
run (one line, exit 2): a file whose cells form more than one comparison group, a crash group, a
``design:`` other than full, ``include`` entries, a file without an axis of two or more values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.matrix import Matrix, MatrixCell, groups
from fsmatrix.matrix.expand import Cross
from fsmatrix.results.verdict.space import Config, Space, SpaceSetting

MAX_LABEL = 24  # a mapping value's label past this length names its settings by their initials


@dataclass(frozen=True)
class MatrixSpace:
    """A matrix's space and what runs it: the cell of every configuration (``cells``), the comparison
    group's label (the workload and its input) and the matrix it came from."""

    space: Space
    cells: Mapping[Config, MatrixCell]
    group: str
    matrix: Matrix

    def cell(self, config: Config) -> MatrixCell:
        return self.cells[config]


def space_of(m: Matrix) -> MatrixSpace:
    """The space of matrix ``m`` (loaded as ``fsmatrix run`` loads it), or UserError (exit 2) for a
    matrix a search cannot take (the module's docstring)."""
    cross = _searchable(m)
    found = groups(m.cells)
    (group, members), *_ = found.values()
    spec = members[0].spec
    if spec.crash is not None:
        raise UserError(
            "search: a crash group's runs measure recoveries, not a metric to search; leave crash: out",
            file=m.path,
        )
    by_id = {c.id: c for c in m.cells}
    configs = cross.candidates.cells
    if len(set(cross.ids)) != len(cross.ids):
        twice = next(i for i in cross.ids if cross.ids.count(i) > 1)
        raise UserError(
            f"search: two configurations of the cross are the same cell ({twice}): a setting on an axis does not "
            "apply to this workload; take it off the axes",
            file=m.path,
            line=cross.lines.get("axes"),
        )
    baseline_id = m.baselines.get(group.key)
    base = configs[cross.ids.index(baseline_id)] if baseline_id in cross.ids else tuple(0 for _ in configs[0])
    settings = tuple(
        SpaceSetting(name, tuple(level_label(name, v) for v in values), base[i])
        for i, (name, values) in enumerate(zip(cross.candidates.axes, cross.values, strict=True))
    )
    primary = spec.declaration.primary_metric
    space = Space(settings, tuple(configs), primary.name, primary.better)
    cells = {config: by_id[cid] for config, cid in zip(configs, cross.ids, strict=True)}
    return MatrixSpace(space, cells, group.label, m)


def _searchable(m: Matrix) -> Cross:
    """The matrix's cross, once it is one a search can take (UserError otherwise)."""
    cross = m.cross
    if m.design is not None or cross is None:
        line = cross.lines.get("design") if cross is not None else None
        raise UserError("search: makes its own designs; leave design: out", file=m.path, line=line)
    if m.includes:
        raise UserError(
            "search: takes no include entries (a configuration is a combination of the axes' values); put the "
            "setting on an axis and exclude what should not run",
            file=m.path,
            line=cross.lines.get("include"),
        )
    found = groups(m.cells)
    if len(found) > 1:
        labels = "; ".join(group.label for group, _ in found.values())
        raise UserError(
            f"search: {m.path}'s cells form {len(found)} comparison groups ({labels}); a search needs one: select "
            "with one workload and input (its parameters in defaults, not on an axis), one file per group",
            file=m.path,
            line=cross.lines.get("axes"),
        )
    if not cross.candidates.axes:
        raise UserError(
            "search: no axis has two or more values: a space of one configuration has nothing to search",
            file=m.path,
            line=cross.lines.get("axes"),
        )
    return cross


def level_label(axis: str, value: Mapping[str, Any]) -> str:
    """A level's label as the report shows a value: true/false as on/off, "" as "none"; a mapping
    value (``gtm: {global_buffers: 1000, journal_buffers: 2312}``) as its settings by their last names
    ("global_buffers=1000 journal_buffers=2312"), by their initials past ``MAX_LABEL`` ("gb=1000 jb=2312")."""
    if list(value) == [axis]:
        return _show(value[axis])
    names = [path.rsplit(".", 1)[-1] for path in value]
    text = " ".join(f"{name}={_show(v)}" for name, v in zip(names, value.values(), strict=True))
    if len(text) <= MAX_LABEL:
        return text
    return " ".join(
        f"{''.join(w[:1] for w in name.split('_'))}={_show(v)}" for name, v in zip(names, value.values(), strict=True)
    )


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value == "":
        return "none"
    return str(value)
