"""Expanding a matrix document into cells.

Semantics follow GitHub Actions' matrix, which users already know: ``axes`` are crossed, then
``exclude`` removes every combination an entry partially matches, then each ``include`` entry is
added to every combination whose *axis* values it does not contradict (or becomes a new combination
when it fits none). ``defaults`` fill what is still unset, then the schema's own defaults. Keys may
be dotted (``gtm.journal``) to reach nested settings; values are compared setting by setting."""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.matrix import design, yamlpos
from fsmatrix.matrix.baselines import (
    DEFAULTS_RULE,
    NAMED_RULE,
    baseline_entry,
    default_baselines,
    default_value,
    group_of,
    named_baselines,
)
from fsmatrix.matrix.design import Design
from fsmatrix.matrix.flat import (
    Flat,
    Leaf,
    check_path,
    entry_fits,
    entry_matches,
    flat_entries,
    flatten_mapping,
    flatten_value,
    merge_flats,
    top_setting,
    with_defaults,
)
from fsmatrix.matrix.ids import MatrixCell, make_cell
from fsmatrix.matrix.read import read_file
from fsmatrix.matrix.settings import (
    MAX_REPEAT,
    BuildSettings,
    RaceSettings,
    SearchSettings,
    race_settings,
    search_settings,
)

TOP_LEVEL = (
    "name",
    "description",
    "axes",
    "include",
    "exclude",
    "defaults",
    "baseline",
    "repeat",
    "race",
    "reproduces",
    "scales",
    "runner",
    "design",
    "search",
)
# What a scale (``scales: {NAME: {...}}``, chosen by ``fsmatrix run --scale NAME``) may set: each
# replaces the file's own key, except ``defaults``, which it layers over the file's defaults.
SCALE_KEYS = (
    "description", "axes", "include", "exclude", "defaults", "baseline", "repeat", "race", "reproduces", "runner",
    "design", "search",
)  # fmt: skip
# How a step refuses bad input: the message and its line in the file.
Fail = Callable[[str, int | None], UserError]
# Refused before any expansion work: a matrix beyond these is a typo (or an attack), not a plan.
MAX_CELLS = 10_000


@dataclass(frozen=True)
class IncludeEffect:
    """What one ``include`` entry did: added a cell of its own, or extended existing combinations
    (GitHub Actions' rule; the combination as it was is then no cell any more)."""

    index: int  # the entry's position in ``include`` (0-based)
    line: int | None  # the entry's line in the matrix file
    added: str | None  # the id of the cell it added, when it fitted no combination
    extended: tuple[str, ...]  # the ids of the cells it extended
    off_axes: tuple[str, ...]  # the settings it names that no axis has (what an extension adds)
    example: str = ""  # an axis that would make it a cell of its own, e.g. mount_options: ["", "data=writeback"]

    @property
    def warning(self) -> str | None:
        """The trap: an entry meant to add a cell that silently changed existing ones instead."""
        if not self.extended or not self.off_axes:
            return None
        names = ", ".join(self.off_axes)
        axis = self.example or f"{self.off_axes[0]}: [the default, the new value]"
        return (
            f"include entry {self.index + 1} names {names} (on no axis) and so extended {_plural(self.extended)} "
            f"({', '.join(self.extended)}) instead of adding a cell; to add one, put it on an axis "
            f"({axis}) and `exclude` the combinations you do not want"
        )

    def describe(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        if self.added is not None:
            return f"include entry {self.index + 1}{where}: added cell {self.added}"
        return f"include entry {self.index + 1}{where}: extended {_plural(self.extended)}: {', '.join(self.extended)}"


def _plural(ids: tuple[str, ...]) -> str:
    return f"{len(ids)} cell{'s' if len(ids) != 1 else ''}"


@dataclass(frozen=True)
class Cross:
    """The full cross a search chooses among (search/space_of.py): the axes of two or more values, their
    sizes and each combination ``exclude`` left as its position on them (``design.candidates_of``, in
    the cross's order), the id of each one's cell, and the lines of the file's top-level keys (a search
    refuses ``design`` and ``include`` there)."""

    candidates: design.Candidates
    values: tuple[tuple[Mapping[str, Any], ...], ...]  # each varying axis's values, {dotted path: value}
    ids: tuple[str, ...]
    lines: Mapping[str, int | None]


# The design a run of the matrix of this name recorded in its matrix.json (runs.stored_design), if any.
StoredDesign = Callable[[str], Mapping[str, Any] | None]


@dataclass
class Matrix:
    name: str
    path: str
    repeat: int
    cells: list[MatrixCell] = field(default_factory=list)
    scale: str | None = None  # the scale it was expanded at (None: the file's own)
    reproduces: list[dict[str, Any]] = field(default_factory=list)  # published tables (render/seed.py)
    # Comparison group key (``group_of(cell.spec).key``) -> the id of its baseline cell, for
    # every group of the whole matrix (whatever a selection keeps), and how they were chosen.
    baselines: dict[str, str] = field(default_factory=dict)
    baseline_rule: str = DEFAULTS_RULE
    race: RaceSettings | None = None  # the file's (or its scale's) ``race:``; None: the default race (racing.plan)
    includes: list[IncludeEffect] = field(default_factory=list)  # what each ``include`` entry did
    design: Design | None = None  # the file's ``design:`` unless a full cross (design.py)
    search: SearchSettings | None = None  # the file's (or its scale's) ``search:``; `fsmatrix run` ignores it
    cross: Cross | None = None  # the cross ``exclude`` left, for `fsmatrix search` (None: a design's cells)

    def is_baseline(self, cell: MatrixCell) -> bool:
        """Whether ``cell`` is the baseline of its comparison group."""
        return self.baselines.get(group_of(cell.spec).key) == cell.id

    def select(self, patterns: list[str] | None) -> list[MatrixCell]:
        """Cells whose id matches any glob (comma-separated lists allowed); all when none given."""
        if not patterns:
            return list(self.cells)
        globs = [g.strip() for p in patterns for g in p.split(",") if g.strip()]
        return [c for c in self.cells if any(fnmatch.fnmatchcase(c.id, g) for g in globs)]


def load(
    path: str | Path,
    scale: str | None = None,
    settings: BuildSettings | None = None,
    stored_design: StoredDesign | None = None,
) -> Matrix:
    """Read, validate and expand a matrix file, at one of its ``scales`` when ``scale`` names one,
    with the ``settings`` of a build under test (``read_settings``) when given; ``stored_design``: where
    a fraction recorded before is found (design.step). Raises UserError (exit 2) on any bad input."""
    return expand_document(read_file(path, "a matrix file"), str(path), scale, settings, stored_design)


def scale_names(doc: Any) -> list[str]:
    """The scales a matrix document declares."""
    scales = doc.get("scales") if isinstance(doc, dict) else None
    return [str(k) for k in scales] if isinstance(scales, dict) else []


def _at_scale(doc: dict[str, Any], scale: str, fail: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The document with the scale's keys in place of its own, and the scale's ``defaults`` (laid
    over the file's after both are flattened, so ``gtm.global_buffers: 1000`` changes one setting)."""
    scales = doc.get("scales")
    if scales is None:
        raise fail(f"--scale {scale}: this file has no 'scales'; run it without --scale", yamlpos.line_of(doc))
    if not isinstance(scales, dict) or not scales:
        raise fail("'scales' must be a mapping of scale name -> settings", yamlpos.line_of(doc, "scales"))
    if scale not in scales:
        names = ", ".join(map(str, scales))
        raise fail(f"unknown scale {scale!r}; this file has: {names}", yamlpos.line_of(doc, "scales"))
    chosen = scales[scale]
    if not isinstance(chosen, dict):
        raise fail(f"scale {scale!r} must be a mapping of {', '.join(SCALE_KEYS)}", yamlpos.line_of(scales, scale))
    for key in chosen:
        if key not in SCALE_KEYS:
            message = f"scale {scale!r}: unknown key {key!r}; a scale may set {', '.join(SCALE_KEYS)}"
            raise fail(message, yamlpos.line_of(chosen, key))
    result = yamlpos.LineDict(doc)
    result.line, result.key_lines = yamlpos.line_of(doc) or 0, dict(getattr(doc, "key_lines", {}))
    for key, value in chosen.items():
        if key != "defaults":
            result[key] = value
            result.key_lines[key] = yamlpos.line_of(chosen, key) or 0
    scale_defaults = chosen.get("defaults", {}) or {}
    if not isinstance(scale_defaults, dict):
        raise fail(f"scale {scale!r}: 'defaults' must be a mapping of settings", yamlpos.line_of(chosen, "defaults"))
    result["name"] = f"{doc.get('name', '')}-{scale}" if doc.get("name") else None
    return result, scale_defaults


def expand_document(
    doc: Any,
    name: str,
    scale: str | None = None,
    settings: BuildSettings | None = None,
    stored_design: StoredDesign | None = None,
) -> Matrix:
    """The matrix of a document read from ``name``, at ``scale`` (None: the file's own), with the
    ``settings`` of a build under test when given: its cells, their baselines, what each ``include``
    entry did; a fraction as ``stored_design`` (given the matrix's name) recorded it when it did.
    Raises UserError (exit 2, with the file's line) on any bad input."""

    def fail(message: str, line: int | None) -> UserError:
        return UserError(message, file=name, line=line)

    doc, scale_defaults = _checked_top_level(doc, name, scale, fail)
    reproduces = _reproduces(doc, fail)
    title, repeat = _title(doc, name, fail), _repeat(doc, fail)
    axis_values = _axes(doc, fail)
    _check_size(doc, axis_values, fail)
    crossed = _cross(axis_values)
    # The combinations that run: the cross ``exclude`` leaves, or a fraction of it (design.py; after
    # exclude, so that an exclude that would unbalance a fraction is refused).
    axes = doc.get("axes", {}) or {}
    stored = stored_design(title) if stored_design is not None and "design" in doc else None
    selected, fraction = design.step(doc, axes, axis_values, _exclude(doc, crossed, fail), fail, stored)
    included = _include(doc, selected, fail)
    defaults = _defaults(doc, scale_defaults, fail)
    cell_defaults = CellDefaults(defaults, _built_defaults(defaults, settings, included.flats, name), settings)
    race = _race(doc, repeat, fail)
    baseline = baseline_entry(doc, fail)
    matrix = Matrix(
        name=title, path=name, repeat=repeat, scale=scale, reproduces=reproduces, race=race, design=fraction
    )
    matrix.search = _search(doc, fail)
    matrix.cells, flat_ids = _cells(included.flats, cell_defaults, name, fail)
    if fraction is None:
        matrix.cross = _cross_of(doc, axis_values, selected, flat_ids)
    axis_paths = {path for values in axis_values for value in values for path in value}
    matrix.includes = _include_effects(included, flat_ids, axis_paths, defaults)
    if baseline is None:
        matrix.baselines, matrix.baseline_rule = default_baselines(matrix.cells, cell_defaults.built), DEFAULTS_RULE
    else:
        matrix.baselines = named_baselines(matrix.cells, baseline, yamlpos.line_of(doc, "baseline"), fail)
        matrix.baseline_rule = NAMED_RULE
    return matrix


def _checked_top_level(doc: Any, name: str, scale: str | None, fail: Fail) -> tuple[dict[str, Any], dict[str, Any]]:
    """The document (at ``scale``: with the scale's keys in place) once its top-level keys are known
    ones, and the scale's ``defaults`` ({} without a scale)."""
    if not isinstance(doc, dict):
        raise fail("a matrix file must be a mapping with 'axes' and/or 'include'", yamlpos.line_of(doc))
    for key in doc:
        if key not in TOP_LEVEL:
            raise fail(f"unknown top-level key {key!r}; allowed: {', '.join(TOP_LEVEL)}", yamlpos.line_of(doc, key))
    scale_defaults: dict[str, Any] = {}
    if scale is not None:
        doc, scale_defaults = _at_scale(doc, scale, fail)
        doc["name"] = doc["name"] or f"{Path(name).stem}-{scale}"
    elif doc.get("scales") is not None and not isinstance(doc.get("scales"), dict):
        raise fail("'scales' must be a mapping of scale name -> settings", yamlpos.line_of(doc, "scales"))
    return doc, scale_defaults


def _title(doc: dict[str, Any], name: str, fail: Fail) -> str:
    title = doc.get("name", Path(name).stem)
    if not isinstance(title, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", title):
        raise fail(f"name {title!r} must be letters, digits, '.', '_' or '-'", yamlpos.line_of(doc, "name"))
    return title


def _repeat(doc: dict[str, Any], fail: Fail) -> int:
    repeat = doc.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise fail(f"repeat {repeat!r} must be an integer from 1 to {MAX_REPEAT}", yamlpos.line_of(doc, "repeat"))
    return int(repeat)


def _axes(doc: dict[str, Any], fail: Fail) -> list[list[Flat]]:
    """Each axis's values, flattened (settings as dotted paths)."""
    axes = doc.get("axes", {}) or {}
    if not isinstance(axes, dict):
        raise fail("'axes' must be a mapping of setting -> list of values", yamlpos.line_of(doc, "axes"))
    axis_values: list[list[Flat]] = []
    for key, values in axes.items():
        line = yamlpos.line_of(axes, key)
        check_path(key, line, fail)
        if not isinstance(values, list):
            raise fail(f"axis {key!r} must be a list of values, got {values!r}", line)
        if not values:
            raise fail(f"axis {key!r} is empty; give it at least one value", line)
        axis_values.append([flatten_value(key, v, yamlpos.line_of(values, i), fail) for i, v in enumerate(values)])
    return axis_values


def _check_size(doc: dict[str, Any], axis_values: list[list[Flat]], fail: Fail) -> None:
    """Refuse a matrix over MAX_CELLS, counted before crossing anything: the product of the axes'
    lengths, plus what include may add."""
    include_doc = doc.get("include", []) or []
    at_most = (math.prod(len(v) for v in axis_values) if axis_values else 0) + (
        len(include_doc) if isinstance(include_doc, list) else 0
    )
    if at_most > MAX_CELLS:
        sizes = " × ".join(str(len(v)) for v in axis_values) or "0"
        raise fail(
            f"the matrix would have up to {at_most} cells (axes {sizes}); at most {MAX_CELLS} are allowed: "
            "split it, or select cells with --only",
            yamlpos.line_of(doc, "axes"),
        )


def _cross(axis_values: list[list[Flat]]) -> list[Flat]:
    """Every combination of the axes' values (none without axes)."""
    return [merge_flats(*parts) for parts in itertools.product(*axis_values)] if axis_values else []


def _exclude(doc: dict[str, Any], combos: list[Flat], fail: Fail) -> list[Flat]:
    """``combos`` without those an ``exclude`` entry matches; refused when none would be left."""
    excludes = flat_entries(doc, "exclude", fail)
    if excludes:
        before = len(combos)
        for entry in excludes:
            combos = [c for c in combos if not entry_matches(entry, c)]
        if before and not combos:
            raise fail(
                "'exclude' removes every combination of the axes; nothing would run",
                yamlpos.line_of(doc, "exclude"),
            )
    return combos


@dataclass(frozen=True)
class Included:
    """The combinations once every ``include`` entry was applied (``flats``), and per entry
    (``entries``, as ``doc_list`` gives them) the flats it extended (indexes into ``flats``) or the
    one it created (``touched``)."""

    flats: list[Flat]
    entries: list[Flat]
    doc_list: list[Any]
    touched: list[tuple[list[int], int | None]]


def _include(doc: dict[str, Any], combos: list[Flat], fail: Fail) -> Included:
    """Each ``include`` entry added to every combination whose settings it does not contradict, or
    a combination of its own when it fits none; refused when no combination is left."""
    originals = [(c, dict[str, Leaf]()) for c in combos]
    created: list[Flat] = []
    touched: list[tuple[list[int], int | None]] = []
    include_entries = flat_entries(doc, "include", fail)
    for entry in include_entries:
        fitted = []
        for i, (original, added) in enumerate(originals):
            if entry_fits(entry, original):
                added.update(entry)
                fitted.append(i)
        touched.append((fitted, None if fitted else len(originals) + len(created)))
        if not fitted:
            created.append(dict(entry))
    flats = [merge_flats(orig, added) for orig, added in originals] + created
    if not flats:
        raise fail("the matrix has no cells: give 'axes' or 'include'", yamlpos.line_of(doc))
    return Included(flats, include_entries, doc.get("include", []) or [], touched)


def _defaults(doc: dict[str, Any], scale_defaults: dict[str, Any], fail: Fail) -> Flat:
    """``defaults``, the scale's over them, and the top-level ``runner`` (a default every cell may override)."""
    defaults_doc = doc.get("defaults", {}) or {}
    if not isinstance(defaults_doc, dict):
        raise fail("'defaults' must be a mapping of settings", yamlpos.line_of(doc, "defaults"))
    defaults = flatten_mapping(defaults_doc, "", fail)
    defaults.update(flatten_mapping(scale_defaults, "", fail))
    if doc.get("runner") is not None:
        if any(p.startswith("runner.") for p in defaults):
            raise fail(
                "runner is set at the top level and in defaults; set it in one place", yamlpos.line_of(doc, "runner")
            )
        defaults.update(flatten_value("runner", doc["runner"], yamlpos.line_of(doc, "runner"), fail))
    return defaults


def _built_defaults(defaults: Flat, settings: BuildSettings | None, flats: list[Flat], name: str) -> Flat:
    """The defaults with a build's settings over them; a setting the axes or include set is refused."""
    if settings is None:
        return defaults
    for path, leaf in settings.flat.items():
        if any(path in flat for flat in flats):
            raise UserError(
                f"{path} is set by the matrix's axes or include ({name}); the settings of a build under test "
                "may only set what the matrix leaves to its defaults",
                file=settings.file,
                line=leaf.line,
            )
    return {**defaults, **settings.flat}


def _race(doc: dict[str, Any], repeat: int, fail: Fail) -> RaceSettings | None:
    if "race" not in doc:
        return None
    race_doc = doc["race"]
    return race_settings(
        race_doc,
        repeat,
        lambda key: yamlpos.line_of(race_doc, key)
        if key is not None and isinstance(race_doc, dict)
        else yamlpos.line_of(doc, "race"),
        fail,
    )


def _search(doc: dict[str, Any], fail: Fail) -> SearchSettings | None:
    if "search" not in doc:
        return None
    search_doc = doc["search"]
    return search_settings(
        search_doc,
        lambda key: yamlpos.line_of(search_doc, key)
        if key is not None and isinstance(search_doc, dict)
        else yamlpos.line_of(doc, "search"),
        fail,
    )


def _cross_of(doc: dict[str, Any], axis_values: list[list[Flat]], kept: list[Flat], flat_ids: list[str]) -> Cross:
    """The cross ``exclude`` left (``kept``, the first flats expansion made cells of: ``flat_ids`` in
    the same order) as ``design.candidates_of`` places it on the axes."""
    axes = list((doc.get("axes", {}) or {}).keys())
    left = {design.combination_key(c) for c in kept}  # design.step's own key of a combination
    found, _ = design.candidates_of(axes, axis_values, left)
    lines = {key: yamlpos.line_of(doc, key) for key in ("design", "include", "search", "axes") if key in doc}
    values = tuple(
        tuple({path: leaf.value for path, leaf in value.items()} for value in axis)
        for axis in axis_values
        if len(axis) >= 2
    )
    return Cross(found, values, tuple(flat_ids[: len(kept)]), lines)


@dataclass(frozen=True)
class CellDefaults:
    """What fills a cell's unset settings: the matrix's defaults (``own``; they make its id) and,
    for a build under test, those with its ``settings`` over them (``built``; they make its spec)."""

    own: Flat
    built: Flat
    settings: BuildSettings | None = None


def _cells(flats: list[Flat], defaults: CellDefaults, name: str, fail: Fail) -> tuple[list[MatrixCell], list[str]]:
    """The cells (each id once) and every flat's cell id, in order."""
    settings = defaults.settings

    def settings_fail(message: str, line: int | None) -> UserError:
        # a cell valid without the settings and invalid with them: their file is to blame
        return UserError(f"with these settings, a cell of {name}: {message}", file=settings.file if settings else name)

    cells: list[MatrixCell] = []
    seen: set[str] = set()
    flat_ids: list[str] = []
    for flat in flats:
        cell = make_cell(with_defaults(flat, defaults.own), fail)
        if settings is not None:  # the build's settings, under the id the cell has without them
            cell = replace(cell, spec=make_cell(with_defaults(flat, defaults.built), settings_fail).spec)
        flat_ids.append(cell.id)
        if cell.id not in seen:  # settings that do not apply to a workload can make cells identical
            seen.add(cell.id)
            cells.append(cell)
    return cells, flat_ids


def _include_effects(
    included: Included, flat_ids: list[str], axis_paths: set[str], defaults: Flat
) -> list[IncludeEffect]:
    """What each ``include`` entry did, by cell id."""
    effects = []
    for i, (entry, (fitted, made)) in enumerate(zip(included.entries, included.touched, strict=True)):
        off = [p for p in entry if p not in axis_paths and not p.startswith(("workload.", "runner."))]
        example = ""
        if off:
            has_default, default = default_value(off[0], defaults)
            shown = [default, entry[off[0]].value] if has_default else [entry[off[0]].value]
            example = f"{off[0]}: {json.dumps(shown, ensure_ascii=False)}"
        effects.append(
            IncludeEffect(
                index=i,
                line=yamlpos.line_of(included.doc_list, i),
                added=flat_ids[made] if made is not None else None,
                extended=tuple(dict.fromkeys(flat_ids[f] for f in fitted)),
                # Giving existing cells a runner class is what an include is for: no trap there.
                off_axes=tuple(
                    dict.fromkeys(
                        top_setting(p, axis_paths) for p in entry if p not in axis_paths and not p.startswith("runner.")
                    )
                ),
                example=example,
            )
        )
    return effects


def _reproduces(doc: dict[str, Any], fail: Any) -> list[dict[str, Any]]:
    """``reproduces``: the published tables (matrix/seeds/published/tables.yml) this file's
    results stand beside, each ``{table: SEED/TABLE, stand_in: [{setting, ours, theirs}]}`` (a
    cell whose SETTING is OURS is placed where the table has THEIRS: a small scale's input). The
    tables themselves are checked by the tests and by the report, not here (the published data
    lives beside the project, not in the installed package)."""
    entries = doc.get("reproduces", []) or []
    line = yamlpos.line_of(doc, "reproduces")
    if not isinstance(entries, list):
        raise fail("'reproduces' must be a list of {table: SEED/TABLE, stand_in: {...}}", line)
    out = []
    for i, entry in enumerate(entries):
        at = yamlpos.line_of(entries, i)
        if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
            raise fail(f"each 'reproduces' entry needs table: SEED/TABLE, got {entry!r}", at)
        if not re.fullmatch(r"\d{3}/[a-z0-9_]+", entry["table"]):
            raise fail(f"reproduces: table {entry['table']!r} is not SEED/TABLE (e.g. 000/elapsed)", at)
        unknown = set(entry) - {"table", "stand_in"}
        if unknown:
            raise fail(f"reproduces: unknown keys {', '.join(sorted(unknown))}; allowed: table, stand_in", at)
        stand_in = entry.get("stand_in", []) or []
        shape = "stand_in must be a list of {setting: SETTING, ours: OUR VALUE, theirs: PUBLISHED VALUE}"
        if not isinstance(stand_in, list):
            raise fail(f"reproduces: {shape}", at)
        for item in stand_in:
            if not isinstance(item, dict) or set(item) != {"setting", "ours", "theirs"}:
                raise fail(f"reproduces: {shape}, got {item!r}", at)
            check_path(str(item["setting"]), at, fail)
        out.append({"table": entry["table"], "stand_in": [dict(item) for item in stand_in]})
    return out
