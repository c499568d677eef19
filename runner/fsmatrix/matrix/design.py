"""A matrix's ``design:``: the full cross of its axes (``full``, the default), a two-level fraction
of it (``{kind: fractional, resolution: R}`` or ``{kind: fractional, runs: N}``), a Plackett–Burman
screening design (``{kind: screening, runs: N}``: ``Screening``) or a D-optimal choice of cells
(``{kind: optimal, runs: N, model: main|interactions, seed: S}``: ``Optimal``, by Fedorov's exchange
over the cells ``exclude`` leaves, axes of any number of values).

A fraction is taken over the axes with two values (an axis of one value is a constant; one of three or
more values is refused): the 2^(k−p) design of the fewest runs that reaches resolution R, or of the
highest resolution that fits in N runs. pyDOE builds it: ``fracfact_opt`` (the minimum-aberration
generators at a run size, by exhaustive search: used while the search is small, ``MAX_SEARCH``) and,
when the search would be too long, ``fracfact_by_res`` (the fewest runs at a resolution) or, for
``runs: N``, generators chosen one at a time (``_greedy_words``). The
generators chosen (``Fraction.generators``: a setting = the product of others) are what ``matrix.json``
stores; the defining relation, the resolution and the alias chains follow from them
(``defining_words``, ``alias_chains``) with bit masks, one bit a factor.

pyDOE (and so numpy and scipy) is imported only when a fraction is built: ``fsmatrix matrix`` and
``fsmatrix run`` start without statistics (tests/cli/test_command_loading.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsmatrix.matrix import yamlpos
from fsmatrix.matrix.flat import Flat, merge_flats

KINDS = ("full", "fractional", "screening", "optimal")
# The keys each kind takes besides ``kind`` (``runs`` is required for screening and optimal).
KEYS = {"full": (), "fractional": ("resolution", "runs"), "screening": ("runs",), "optimal": ("runs", "model", "seed")}
MODELS = ("main", "interactions")
NOUN = {"fractional": "fraction", "screening": "screening design", "optimal": "optimal design"}
# fracfact_opt tries every choice of generators: C(2^m − m − 1, p) designs of 2^k contrasts each. At
# 2,600 choices (8 settings in 32 runs) it takes 1.6 s here; past this, fracfact_by_res's design.
MAX_SEARCH = 3000
TIMES = " × "

Fail = Callable[[str, "int | None"], Exception]


@dataclass(frozen=True)
class DesignSpec:
    """What the file asked for: ``kind``, and for a fraction its ``resolution`` or its ``runs``."""

    kind: str = "full"
    resolution: int | None = None
    runs: int | None = None
    model: str = "main"  # an optimal design's model
    seed: int = 1  # an optimal design's seed (fixed by default: shards choose alike)


@dataclass(frozen=True)
class Fraction:
    """A two-level fraction: its factors (the two-valued axes, in the file's order), each factor's
    word (the factors whose product gives its level: itself for a base factor), the runs and the
    resolution it reaches."""

    factors: tuple[str, ...]
    words: tuple[int, ...]  # per factor, a bit mask over ``factors``
    runs: int
    resolution: int
    spec: DesignSpec | None = None  # the file's ``design:`` it was built for

    @property
    def full_runs(self) -> int:
        return 1 << len(self.factors)

    @property
    def generators(self) -> tuple[str, ...]:
        """The generated factors as people read them: "gtm.journal = gtm.sync_io × mount_options"."""
        return tuple(
            f"{self.factors[i]} = {term_name(word, self.factors)}"
            for i, word in enumerate(self.words)
            if word != 1 << i
        )

    def defining_words(self) -> list[int]:
        """The defining relation I = ...: every product of the generators' words (each word times
        its own factor), as bit masks."""
        gens = [word | 1 << i for i, word in enumerate(self.words) if word != 1 << i]
        group = {0}
        for g in gens:
            group |= {w ^ g for w in group}
        return sorted(group - {0}, key=lambda w: (w.bit_count(), w))

    def alias_chains(self, max_order: int = 2) -> list[list[int]]:
        """The chains in which two or more effects of order ``max_order`` or less are aliased (main
        effects and two-setting interactions): each chain's terms as bit masks, lowest order first."""
        words = self.defining_words()
        seen: set[int] = set()
        chains = []
        for term in low_order_terms(len(self.factors), max_order):
            if term in seen:
                continue
            chain = sorted(
                {term ^ w for w in [0, *words] if (term ^ w).bit_count() <= max_order},
                key=lambda t: (t.bit_count(), t),
            )
            seen.update(chain)
            if len(chain) > 1:
                chains.append(chain)
        return chains

    def levels(self) -> list[tuple[int, ...]]:
        """The fraction's cells as level tuples (0: the axis's first value, 1: its second), in the
        full cross's order: every base-factor combination, the generated factors' levels their
        words' parity."""
        rows = []
        for index in range(self.full_runs):
            bits = tuple((index >> (len(self.factors) - 1 - i)) & 1 for i in range(len(self.factors)))
            if all(_parity(word, bits) == bits[i] for i, word in enumerate(self.words)):
                rows.append(bits)
        return rows

    def describe(self) -> list[str]:
        """The design in lines for people (``fsmatrix matrix expand``)."""
        k, p = len(self.factors), len(self.generators)
        lines = [
            f"design: a 2^({k}−{p}) fraction of resolution {roman(self.resolution)}: {self.runs} of the full "
            f"cross's {self.full_runs} cells",
            *(f"generator: {g}" for g in self.generators),
            "defining relation: I = " + " = ".join(term_name(w, self.factors) for w in self.defining_words()),
        ]
        chains = self.alias_chains()
        lines += [f"aliased: {' = '.join(term_name(t, self.factors) for t in chain)}" for chain in chains]
        if not chains:
            lines.append("aliased: no setting or two-setting interaction with another")
        return lines

    def record(self) -> dict[str, Any]:
        """What ``matrix.json`` stores, so a resumed run or a shard reads the design, not rebuilds it
        (``asked``: the file's ``resolution`` or ``runs`` it was built for, ``from_record``'s check)."""
        return {
            "kind": "fractional",
            **({"asked": _asked(self.spec)} if self.spec is not None else {}),
            "factors": list(self.factors),
            "generators": list(self.generators),
            "words": list(self.words),
            "runs": self.runs,
            "full_runs": self.full_runs,
            "resolution": self.resolution,
        }


def _asked(spec: DesignSpec) -> dict[str, int]:
    return {"resolution": spec.resolution} if spec.resolution is not None else {"runs": spec.runs or 0}


def from_record(record: Any, spec: DesignSpec, factors: Sequence[str]) -> Fraction | None:
    """The fraction a run directory's ``matrix.json`` stored, when it was built for this ``spec`` over
    these ``factors`` (None otherwise: the file changed since, or the record is not one fsmatrix
    wrote): a resumed run and a shard take it as it was, whatever pyDOE or ``MAX_SEARCH`` would
    choose today."""
    if not isinstance(record, Mapping) or record.get("asked") != _asked(spec):
        return None
    if record.get("kind", "fractional") != "fractional":
        return None
    words = record.get("words")
    if record.get("factors") != list(factors) or not isinstance(words, list) or len(words) != len(factors):
        return None
    k = len(factors)
    if not all(isinstance(w, int) and not isinstance(w, bool) and 0 < w < 1 << k for w in words):
        return None
    base = [i for i, w in enumerate(words) if w == 1 << i]
    if any(w & ~sum(1 << i for i in base) for w in words):  # every word a product of base factors
        return None
    made = Fraction(tuple(factors), tuple(words), 1 << len(base), 0)
    if made.runs != record.get("runs") or (spec.runs is not None and made.runs != spec.runs):
        return None
    return Fraction(made.factors, made.words, made.runs, resolution_of(made.defining_words()))


def _parity(word: int, bits: tuple[int, ...]) -> int:
    """A factor's level from its word: the sum of the levels of the word's factors, mod 2 (the ±1
    product of their contrasts, with 0 ↔ −1 and 1 ↔ +1 flipped once per factor: the same fraction
    up to which half of it is taken)."""
    return sum(bits[i] for i in range(len(bits)) if word >> i & 1) % 2


def roman(n: int) -> str:
    """A resolution as designs are named: III, IV, V, ..."""
    return {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII"}.get(n, str(n))


def term_name(term: int, factors: Sequence[str]) -> str:
    """A term's name: its factors joined by " × "."""
    return TIMES.join(f for i, f in enumerate(factors) if term >> i & 1)


def low_order_terms(k: int, max_order: int) -> list[int]:
    """Every main effect, then every interaction up to ``max_order`` settings, as bit masks."""
    orders = range(1, max_order + 1)
    return [sum(1 << i for i in combo) for order in orders for combo in itertools.combinations(range(k), order)]


def resolution_of(words: Sequence[int]) -> int:
    """The length of the shortest defining word (a full cross: no word, resolution "infinite": 0)."""
    return min((w.bit_count() for w in words), default=0)


# ----------------------------------------------------------------------------------- the file's key


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def parse(value: Any, line: int | None, fail: Fail) -> DesignSpec:
    """``design:`` as the file gives it; one line naming ``design`` and why otherwise."""
    shape = (
        "design must be full, {kind: fractional, resolution: R | runs: N}, {kind: screening, runs: N} or "
        "{kind: optimal, runs: N, model: main|interactions, seed: S}"
    )
    if value is None or value == "full":
        return DesignSpec()
    if isinstance(value, str):
        raise fail(f"design: unknown kind {value!r}; {shape}", line)
    if not isinstance(value, dict):
        raise fail(f"{shape}, got {value!r}", line)
    kind = value.get("kind")
    if kind not in KINDS:
        raise fail(f"design: unknown kind {kind!r}; allowed: {', '.join(KINDS)}", line)
    unknown = set(value) - {"kind", *KEYS[kind]}
    if unknown:
        allowed = ", ".join(("kind", *KEYS[kind]))
        raise fail(f"design: unknown keys {', '.join(sorted(map(str, unknown)))} for {kind}; allowed: {allowed}", line)
    if kind == "full":
        return DesignSpec()
    for key in ("resolution", "runs", "seed"):
        number = value.get(key)
        if key in value and (isinstance(number, bool) or not isinstance(number, int)):
            raise fail(f"design: {key} {number!r} must be an integer", line)
    if kind == "fractional":
        return _parse_fraction(value, line, fail)
    runs = value.get("runs")
    if runs is None:
        raise fail(f"design: {_a(NOUN[kind])} takes runs: N", line)
    if runs < 4:
        raise fail(f"design: runs {runs} is below 4", line)
    if kind == "screening":
        return DesignSpec("screening", runs=runs)
    model = value.get("model", "main")
    if model not in MODELS:
        raise fail(f"design: model {model!r}; allowed: {', '.join(MODELS)}", line)
    return DesignSpec("optimal", runs=runs, model=model, seed=value.get("seed", 1))


def _parse_fraction(value: dict[str, Any], line: int | None, fail: Fail) -> DesignSpec:
    asked = [k for k in ("resolution", "runs") if k in value]
    if len(asked) != 1:
        raise fail(f"design: a fraction takes one of resolution or runs, not {' and '.join(asked) or 'neither'}", line)
    number = value[asked[0]]
    if asked[0] == "resolution":
        if number < 3:
            raise fail(f"design: resolution {number} is below III; a fraction has resolution 3 or more", line)
        return DesignSpec("fractional", resolution=number)
    if number < 4 or number & (number - 1):
        raise fail(f"design: runs {number} must be a power of two, 4 or more (a two-level fraction has 2^(k−p))", line)
    return DesignSpec("fractional", runs=number)


def fraction(spec: DesignSpec, factors: Sequence[str], line: int | None, fail: Fail) -> Fraction:
    """The fraction ``spec`` asks for over these two-valued settings; one line naming ``design``
    when none of them reaches it."""
    k = len(factors)
    if k < 3:
        raise fail(f"design: a fraction needs three or more axes of two values; this file has {k}", line)
    if spec.runs is not None:
        if spec.runs >= 2**k:
            raise fail(f"design: runs {spec.runs} is the full cross of {k} settings or more; give design: full", line)
        p = k - int(math.log2(spec.runs))
        m = k - p
        if p > 2**m - m - 1:
            least = next(2**n for n in range(2, k) if k - n <= 2**n - n - 1)
            raise fail(f"design: no fraction of {k} settings has {spec.runs} runs; at least {least} are needed", line)
        found = _fraction(k, p, None)
    else:
        assert spec.resolution is not None
        found = _fraction(k, None, spec.resolution)
        if found is None:
            raise fail(
                f"design: no fraction of {k} settings reaches resolution {spec.resolution}: only the full cross "
                f"({2**k} cells) does; give a lower resolution or design: full",
                line,
            )
    assert found is not None
    words = tuple(found)
    runs = 2 ** sum(1 for i, w in enumerate(words) if w == 1 << i)
    made = Fraction(tuple(factors), words, runs, 0)
    return Fraction(made.factors, words, runs, resolution_of(made.defining_words()))


def _fraction(k: int, p: int | None, resolution: int | None) -> list[int] | None:
    """Each factor's word (bit masks over the k factors, base factors first) of pyDOE's design: at p
    (2^(k−p) runs, the highest resolution there), or of the fewest runs reaching ``resolution``
    (None: only the full cross does)."""
    import numpy as np
    import pydoe

    if p is None:
        assert resolution is not None
        try:
            matrix = pydoe.fracfact_by_res(k, resolution)
        except ValueError:
            return None
        p = k - int(math.log2(matrix.shape[0]))
        if p == 0:
            return None
        if _search_size(k, p) > MAX_SEARCH:
            return _words_of(np.asarray(matrix))
    if _search_size(k, p) > MAX_SEARCH:
        return _greedy_words(k, p)
    generator, _, _ = pydoe.fracfact_opt(k, p)
    return _words_of(np.asarray(pydoe.fracfact(generator)))


def _greedy_words(k: int, p: int) -> list[int]:
    """A 2^(k−p) design when fracfact_opt's search would be too long: the generators taken one at a
    time, each the product of base factors that leaves the design so far the highest resolution and,
    at it, the fewest shortest words (lowest aberration; ties: the higher-order product, then the
    first). Not always the minimum-aberration design, but in milliseconds, and the same every time."""
    m = k - p
    words = [1 << i for i in range(m)]
    candidates = sorted((w for w in range(1, 1 << m) if w.bit_count() >= 2), key=lambda w: (-w.bit_count(), w))
    for _ in range(p):

        def score(word: int) -> tuple[int, int]:
            made = Fraction(tuple(map(str, range(len(words) + 1))), (*words, word), 1 << m, 0)
            defining = made.defining_words()
            shortest = resolution_of(defining)
            return (-shortest, sum(1 for w in defining if w.bit_count() == shortest))

        best = min((w for w in candidates if w not in words), key=score)
        words.append(best)
    return words


def _search_size(k: int, p: int) -> int:
    m = k - p
    return math.comb(2**m - m - 1, p)


def _words_of(design: Any) -> list[int]:
    """Each column's word from a design pyDOE built: its first m columns the base factors in full
    factorial order, every other column a product of some of them. Row 0 has every base factor low;
    the row where base factor i alone is high shows whether i is in a column's word."""
    import numpy as np

    rows, k = design.shape
    m = int(math.log2(rows))
    base = design[:, :m]
    flipped = [next(r for r in range(rows) if all((base[r, j] > 0) == (j == i) for j in range(m))) for i in range(m)]
    words = []
    for col in range(k):
        word = sum(1 << i for i in range(m) if design[flipped[i], col] != design[0, col])
        product = np.prod(base[:, [i for i in range(m) if word >> i & 1]], axis=1) if word else None
        if product is None or not (abs(product @ design[:, col]) == rows):
            raise RuntimeError(f"column {col} of pyDOE's design is no product of its base factors")
        words.append(word)
    return words


# ----------------------------------------------------------------------------------- screening


@dataclass(frozen=True)
class Screening:
    """A Plackett–Burman screening design (pyDOE's pbdesign) over two-valued settings: its factors
    and its rows (each cell's levels, 0 the axis's first value, 1 its second)."""

    factors: tuple[str, ...]
    rows: tuple[tuple[int, ...], ...]
    spec: DesignSpec | None = None

    @property
    def runs(self) -> int:
        return len(self.rows)

    @property
    def full_runs(self) -> int:
        return 1 << len(self.factors)

    def levels(self) -> list[tuple[int, ...]]:
        return list(self.rows)

    def describe(self) -> list[str]:
        return [
            f"design: a Plackett–Burman screening design of {len(self.factors)} settings: {self.runs} of the full "
            f"cross's {self.full_runs} cells",
            "aliased: each setting partially with the two-setting interactions of the others (Plackett–Burman's "
            "complex aliasing: no chain is whole, none is clear); the report estimates main effects only",
        ]

    def record(self) -> dict[str, Any]:
        return {
            "kind": "screening",
            **({"asked": {"runs": self.spec.runs}} if self.spec is not None else {}),
            "factors": list(self.factors),
            "rows": [list(r) for r in self.rows],
            "runs": self.runs,
            "full_runs": self.full_runs,
        }


def pb_runs(runs: int) -> int:
    """``runs`` rounded up to a multiple of 4 (a Plackett–Burman design's size)."""
    return -(-runs // 4) * 4


def pb_sizes(at_least: int) -> list[int]:
    """The Plackett–Burman sizes pyDOE builds (4, 12 or 20 times a power of two) from ``at_least``, three."""
    sizes = sorted({b << e for b in (4, 12, 20) for e in range(12)})
    return [n for n in sizes if n >= at_least][:3]


def screening(spec: DesignSpec, factors: Sequence[str], line: int | None, fail: Fail) -> Screening:
    """The Plackett–Burman design of ``spec.runs`` (rounded up to a multiple of 4) over these settings;
    one line naming ``design`` when it cannot be had."""
    import numpy as np
    import pydoe

    assert spec.runs is not None
    k, n = len(factors), pb_runs(spec.runs)
    if n <= k:
        raise fail(
            f"design: a screening design of {n} runs takes at most {n - 1} settings; this file has {k} axes of "
            f"two values: give runs: {pb_runs(k + 1)} or more",
            line,
        )
    if n >= 1 << k:
        raise fail(f"design: runs {n} is the full cross of {k} settings or more; give design: full", line)
    try:
        matrix = np.asarray(pydoe.pbdesign(n - 1))  # n − 1 columns: n rows
    except ValueError:
        sizes = ", ".join(map(str, pb_sizes(n)))
        raise fail(f"design: pyDOE has no Plackett–Burman design of {n} runs; it has {sizes}, ...", line) from None
    rows = tuple(tuple(int(v > 0) for v in row[:k]) for row in matrix)
    if len(set(rows)) < len(rows):
        repeats = f"design: the Plackett–Burman design of {n} runs repeats a cell over {k} settings"
        raise fail(f"{repeats}; give fewer runs, or design: fractional", line)
    return Screening(tuple(factors), rows, spec)


def screening_from_record(record: Any, spec: DesignSpec, factors: Sequence[str]) -> Screening | None:
    """The screening design a matrix.json stored, when built for this ``spec`` over these ``factors``."""
    if not isinstance(record, Mapping) or record.get("kind") != "screening":
        return None
    if record.get("asked") != {"runs": spec.runs} or record.get("factors") != list(factors):
        return None
    rows = record.get("rows")
    if not isinstance(rows, list) or len(rows) != pb_runs(spec.runs or 0):
        return None
    if not all(isinstance(r, list) and len(r) == len(factors) and all(v in (0, 1) for v in r) for r in rows):
        return None
    made = tuple(tuple(int(v) for v in r) for r in rows)
    return Screening(tuple(factors), made, spec) if len(set(made)) == len(made) else None


# ----------------------------------------------------------------------------------- D-optimal

STARTS = 5  # seeded random starts of the exchange; the best is kept
MAX_EXCHANGES = 2000  # per start: each one raises det(X'X), so this only bounds a pathological case
RIDGE = 1e-6  # added to X'X while the start is singular, so the exchange can leave it


@dataclass(frozen=True)
class Optimal:
    """A D-optimal choice of cells for a model: the axes of two or more values, their sizes, the model,
    the seed, the chosen cells (each its position on every axis), the candidate cells (the cross
    ``exclude`` left), the model's estimable terms over them and the D-efficiency (``d_efficiency``)."""

    axes: tuple[str, ...]
    sizes: tuple[int, ...]
    model: str
    seed: int
    chosen: tuple[tuple[int, ...], ...]
    candidates: int
    terms: int
    efficiency: float
    spec: DesignSpec | None = None

    @property
    def runs(self) -> int:
        return len(self.chosen)

    def levels(self) -> list[tuple[int, ...]]:
        return list(self.chosen)

    def describe(self) -> list[str]:
        model = (
            "an intercept and each axis's levels (sum-to-zero contrasts)"
            if self.model == "main"
            else "an intercept, each axis's levels (sum-to-zero contrasts) and every two-axis product"
        )
        return [
            f"design: D-optimal for the {self.model} model (seed {self.seed}): {self.runs} of the "
            f"{self.candidates} candidate cells (the cross that exclude leaves)",
            f"model: {self.terms} terms: {model}; terms the candidates cannot estimate are left out",
            f"D-efficiency: {self.efficiency:.3f} (per run, against all {self.candidates} candidates: "
            f"(det(X'X/{self.runs}) / det(X'X/{self.candidates}))^(1/{self.terms}))",
        ]

    def record(self) -> dict[str, Any]:
        return {
            "kind": "optimal",
            **({"asked": _optimal_asked(self.spec)} if self.spec is not None else {}),
            "axes": list(self.axes),
            "sizes": list(self.sizes),
            "model": self.model,
            "seed": self.seed,
            "levels": [list(c) for c in self.chosen],
            "runs": self.runs,
            "candidates": self.candidates,
            "terms": self.terms,
            "d_efficiency": round(self.efficiency, 6),
        }


def _optimal_asked(spec: DesignSpec) -> dict[str, Any]:
    return {"runs": spec.runs, "model": spec.model, "seed": spec.seed}


def model_matrix(cells: Sequence[Sequence[int]], sizes: Sequence[int], model: str) -> Any:
    """The model's columns over these cells (each its position on every axis): an intercept, each
    axis's s − 1 sum-to-zero contrasts (level l < s − 1: +1 at l, −1 at the last level, else 0), and
    for ``interactions`` every product of two axes' contrasts; then only the columns the cells can
    estimate (each independent of those before it: a setting that exists under one filesystem only,
    or an exclude, leaves some out)."""
    import numpy as np

    at = np.asarray(cells, dtype=int).reshape(len(cells), len(sizes))
    per_axis = [
        [(at[:, a] == lv).astype(float) - (at[:, a] == s - 1).astype(float) for lv in range(s - 1)]
        for a, s in enumerate(sizes)
    ]
    columns = [np.ones(len(cells))] + [c for cols in per_axis for c in cols]
    if model == "interactions":
        for a, b in itertools.combinations(range(len(sizes)), 2):
            columns += [x * y for x in per_axis[a] for y in per_axis[b]]
    kept: list[Any] = []
    basis = np.zeros((len(cells), 0))
    for column in columns:
        residual = column - basis @ (basis.T @ column)
        norm = float(np.linalg.norm(residual))
        if norm > 1e-8 * max(1.0, float(np.linalg.norm(column))):
            kept.append(column)
            basis = np.column_stack([basis, residual / norm])
    return np.column_stack(kept)


def fedorov(x: Any, n: int, seed: int, kept: Sequence[int] = ()) -> list[int]:
    """Fedorov's exchange: from a seeded random start of ``n`` distinct rows of ``x``, swap the chosen
    row and the unchosen one whose exchange raises det(X'X) most (the det ratio (1 + d_j)(1 − d_i) +
    d_ij², d the prediction variances under (X'X)⁻¹), until no swap raises it; the best of ``STARTS``
    starts. ``kept``: rows already in the design (cells that ran), counted in X'X but never chosen or
    swapped: the ``n`` rows returned augment them. Deterministic for a seed (and a numpy)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, p = x.shape
    fixed = x[list(kept)].T @ x[list(kept)] if kept else np.zeros((p, p))
    free = np.array([i for i in range(rows) if i not in set(kept)])
    best: tuple[float, list[int]] | None = None
    for _ in range(STARTS):
        chosen = [int(i) for i in rng.choice(free, n, replace=False)]
        for _ in range(MAX_EXCHANGES):
            design = x[chosen]
            inverse = np.linalg.inv(fixed + design.T @ design + RIDGE * np.eye(p))
            a = x @ inverse
            d = np.einsum("ij,ij->i", a, x)
            cross = a[chosen] @ x.T
            gain = (1 + d[None, :]) * (1 - d[chosen][:, None]) + cross**2
            gain[:, chosen] = 0.0
            gain[:, list(kept)] = 0.0
            i, j = np.unravel_index(int(np.argmax(gain)), gain.shape)
            if gain[i, j] <= 1 + 1e-9:
                break
            chosen[int(i)] = int(j)
        sign, logdet = np.linalg.slogdet(fixed + x[chosen].T @ x[chosen])
        score = float(logdet) if sign > 0 else -math.inf
        if best is None or score > best[0] + 1e-9:
            best = (score, sorted(chosen))
    assert best is not None
    return best[1]


def d_efficiency(x: Any, chosen: Sequence[int]) -> float:
    """(det(X_d'X_d/N) / det(X'X/C))^(1/p): the chosen cells' information per run against the
    candidates' (1: as informative per run as running every candidate; it can exceed 1)."""
    import numpy as np

    rows, p = x.shape
    design = x[list(chosen)]
    sign, mine = np.linalg.slogdet(design.T @ design / len(chosen))
    _, whole = np.linalg.slogdet(x.T @ x / rows)
    return math.exp((float(mine) - float(whole)) / p) if sign > 0 else 0.0


@dataclass(frozen=True)
class Candidates:
    """The cells an optimal design chooses among: the axes of two or more values, their sizes, and each
    candidate cell's position on them (the cross's combinations ``exclude`` left, in the cross's order)."""

    axes: tuple[str, ...]
    sizes: tuple[int, ...]
    cells: tuple[tuple[int, ...], ...]


def optimal(spec: DesignSpec, found: Candidates, line: int | None, fail: Fail, stored: Any = None) -> Optimal:
    """The D-optimal ``spec.runs`` of these candidate cells (or those ``stored`` recorded, when built
    for this ``spec`` over these axes and still candidates); one line naming ``design`` when the
    runs are fewer than the model's terms or not fewer than the candidates."""
    assert spec.runs is not None
    candidates = found.cells
    x = model_matrix(candidates, found.sizes, spec.model)
    terms = x.shape[1]
    if spec.runs < terms:
        raise fail(
            f"design: runs {spec.runs} is fewer than the {spec.model} model's {terms} terms over these axes; "
            f"give runs: {terms} or more",
            line,
        )
    if spec.runs >= len(candidates):
        raise fail(f"design: runs {spec.runs} takes every one of the {len(candidates)} cells; give design: full", line)
    index = {c: i for i, c in enumerate(candidates)}
    taken = _optimal_record(stored, spec, found, index)
    chosen = sorted(taken if taken is not None else fedorov(x, spec.runs, spec.seed))
    cells = tuple(candidates[i] for i in chosen)
    made = Optimal(found.axes, found.sizes, spec.model, spec.seed, cells, len(candidates), terms, 0.0, spec)
    return dataclasses.replace(made, efficiency=d_efficiency(x, chosen))


def _optimal_record(
    record: Any, spec: DesignSpec, found: Candidates, index: Mapping[tuple[int, ...], int]
) -> list[int] | None:
    """The candidates' indexes a matrix.json's optimal design chose, when built for this ``spec`` over
    these axes and every one is still a candidate; None otherwise."""
    if not isinstance(record, Mapping) or record.get("kind") != "optimal":
        return None
    if record.get("asked") != _optimal_asked(spec) or record.get("axes") != list(found.axes):
        return None
    levels = record.get("levels")
    if record.get("sizes") != list(found.sizes) or not isinstance(levels, list) or len(levels) != spec.runs:
        return None
    if not all(isinstance(c, list) and tuple(c) in index for c in levels):
        return None
    chosen = sorted({index[tuple(c)] for c in levels})
    return chosen if len(chosen) == len(levels) else None


Design = Fraction | Screening | Optimal
# What makes a record the design it describes (the rest: its resolution, generators in words, sizes,
# follow from these): the ``design:`` it was made for, its settings, and its cells.
IDENTITY = ("kind", "asked", "factors", "axes", "words", "rows", "levels")


def is_recorded(made: Design, record: Mapping[str, Any]) -> bool:
    """Whether ``made`` is the design ``record`` describes (expansion took it rather than building one)."""
    own = made.record()
    return all(own[key] == record.get(key) for key in IDENTITY if key in own)


# ----------------------------------------------------------------------------------- expansion's step


def step(
    doc: dict[str, Any],
    axes: dict[str, Any],
    axis_values: Sequence[Sequence[Flat]],
    kept: list[Flat],
    fail: Fail,
    stored: Mapping[str, Any] | None = None,
) -> tuple[list[Flat], Design | None]:
    """Expansion's design step, where the crossed combinations become the cells: ``kept`` (the cross
    ``exclude`` left) for a full cross; a design's cells otherwise, refusing ``include`` entries; for a
    fraction or a screening design also axes of three or more values and an ``exclude`` that removes
    any of its cells (each one line naming ``design``, exit 2); an optimal design chooses among
    ``kept``. ``stored``: the design a run directory's matrix.json recorded, taken instead of building
    it again when it was built for the same ``design:`` and settings (``from_record``)."""
    line = yamlpos.line_of(doc, "design")
    spec = parse(doc.get("design"), line, fail)
    if spec.kind == "full":
        return kept, None
    if doc.get("include"):
        noun = _a(NOUN[spec.kind])
        raise fail(f"design: {noun} takes no include entries (they would unbalance it); run them apart", line)
    sizes = [len(values) for values in axis_values]
    left = {combination_key(c) for c in kept}
    if spec.kind == "optimal":
        if max(sizes, default=0) < 2:
            raise fail("design: an optimal design needs an axis of two or more values", line)
        found, combos = candidates_of(list(axes), axis_values, left)
        made_optimal = optimal(spec, found, line, fail, stored)
        wanted_cells = set(made_optimal.chosen)
        return [c for c, at in zip(combos, found.cells, strict=True) if at in wanted_cells], made_optimal
    wide = [f"{key} ({size} values)" for key, size in zip(axes, sizes, strict=True) if size > 2]
    if wide:
        raise fail(f"design: a two-level {NOUN[spec.kind]} takes axes of two values; {', '.join(wide)}", line)
    two = [i for i, size in enumerate(sizes) if size == 2]
    factors = [key for key, size in zip(axes, sizes, strict=True) if size == 2]
    made: Fraction | Screening
    if spec.kind == "screening":
        made = screening_from_record(stored, spec, factors) or screening(spec, factors, line, fail)
    else:
        made = dataclasses.replace(from_record(stored, spec, factors) or fraction(spec, factors, line, fail), spec=spec)
    wanted = set(made.levels())
    chosen = []
    for index, parts in enumerate(itertools.product(*axis_values)):
        digits = _digits(index, sizes)
        if tuple(digits[i] for i in two) in wanted:
            combo = merge_flats(*parts)
            if combination_key(combo) not in left:
                raise fail(
                    f"design: 'exclude' removes a cell of the {NOUN[spec.kind]}, which would unbalance it; "
                    "leave the exclude out, or take the excluded value off its axis",
                    line,
                )
            chosen.append(combo)
    return chosen, made


def candidates_of(
    axes: Sequence[str], axis_values: Sequence[Sequence[Flat]], left: set[frozenset[tuple[str, str]]]
) -> tuple[Candidates, list[Flat]]:
    """The candidates of an optimal design (the cross's combinations ``exclude`` left, each its
    position on the axes of two or more values) and their settings, in the cross's order."""
    sizes = [len(values) for values in axis_values]
    varying = [i for i, size in enumerate(sizes) if size >= 2]
    cells: list[tuple[int, ...]] = []
    combos: list[Flat] = []
    for index, parts in enumerate(itertools.product(*axis_values)):
        combo = merge_flats(*parts)
        if combination_key(combo) in left:
            digits = _digits(index, sizes)
            cells.append(tuple(digits[i] for i in varying))
            combos.append(combo)
    names, used = tuple(axes[i] for i in varying), tuple(sizes[i] for i in varying)
    return Candidates(names, used, tuple(cells)), combos


def combination_key(flat: Flat) -> frozenset[tuple[str, str]]:
    """A combination of settings as a set of (path, JSON value) pairs: how the cross, `exclude` and a
    design tell combinations apart."""
    return frozenset((path, json.dumps(leaf.value, sort_keys=True)) for path, leaf in flat.items())


def _digits(index: int, sizes: Sequence[int]) -> list[int]:
    """The position in each axis of the ``index``-th combination of itertools.product."""
    out = []
    for size in reversed(sizes):
        out.append(index % size)
        index //= size
    return out[::-1]
