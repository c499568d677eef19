"""A matrix's ``design:``: the full cross of its axes (``full``, the default), or a two-level fraction
of it (``{kind: fractional, resolution: R}`` or ``{kind: fractional, runs: N}``).

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

KINDS = ("full", "fractional")
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


def parse(value: Any, line: int | None, fail: Fail) -> DesignSpec:
    """``design:`` as the file gives it; one line naming ``design`` and why otherwise."""
    shape = "design must be full, {kind: fractional, resolution: R} or {kind: fractional, runs: N}"
    if value is None or value == "full":
        return DesignSpec()
    if isinstance(value, str):
        raise fail(f"design: unknown kind {value!r}; {shape}", line)
    if not isinstance(value, dict):
        raise fail(f"{shape}, got {value!r}", line)
    kind = value.get("kind")
    if kind not in KINDS:
        raise fail(f"design: unknown kind {kind!r}; allowed: {', '.join(KINDS)}", line)
    unknown = set(value) - {"kind", "resolution", "runs"}
    if unknown:
        raise fail(
            f"design: unknown keys {', '.join(sorted(map(str, unknown)))}; allowed: kind, resolution, runs", line
        )
    if kind == "full":
        if set(value) != {"kind"}:
            raise fail("design: a full cross takes no resolution or runs", line)
        return DesignSpec()
    asked = [k for k in ("resolution", "runs") if k in value]
    if len(asked) != 1:
        raise fail(f"design: a fraction takes one of resolution or runs, not {' and '.join(asked) or 'neither'}", line)
    number = value[asked[0]]
    if isinstance(number, bool) or not isinstance(number, int):
        raise fail(f"design: {asked[0]} {number!r} must be an integer", line)
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


# ----------------------------------------------------------------------------------- expansion's step


def step(
    doc: dict[str, Any],
    axes: dict[str, Any],
    axis_values: Sequence[Sequence[Flat]],
    kept: list[Flat],
    fail: Fail,
    stored: Mapping[str, Any] | None = None,
) -> tuple[list[Flat], Fraction | None]:
    """Expansion's design step, where the crossed combinations become the cells: ``kept`` (the cross
    ``exclude`` left) for a full cross; a fraction's cells otherwise, refusing ``include`` entries, axes of
    three or more values and an ``exclude`` that removes any of its cells (each one line naming
    ``design``, exit 2). ``stored``: the design a run directory's matrix.json recorded, taken instead of
    building it again when it was built for the same ``design:`` and settings (``from_record``)."""
    line = yamlpos.line_of(doc, "design")
    spec = parse(doc.get("design"), line, fail)
    if spec.kind == "full":
        return kept, None
    if doc.get("include"):
        raise fail("design: a fraction takes no include entries (they would unbalance it); run them apart", line)
    sizes = [len(values) for values in axis_values]
    wide = [f"{key} ({size} values)" for key, size in zip(axes, sizes, strict=True) if size > 2]
    if wide:
        raise fail(f"design: a two-level fraction takes axes of two values; {', '.join(wide)}", line)
    two = [i for i, size in enumerate(sizes) if size == 2]
    factors = [key for key, size in zip(axes, sizes, strict=True) if size == 2]
    made = dataclasses.replace(from_record(stored, spec, factors) or fraction(spec, factors, line, fail), spec=spec)
    wanted = set(made.levels())
    left = {_key(c) for c in kept}
    chosen = []
    for index, parts in enumerate(itertools.product(*axis_values)):
        digits = _digits(index, sizes)
        if tuple(digits[i] for i in two) in wanted:
            combo = merge_flats(*parts)
            if _key(combo) not in left:
                raise fail(
                    "design: 'exclude' removes a cell of the fraction, which would unbalance it; "
                    "leave the exclude out, or take the excluded value off its axis",
                    line,
                )
            chosen.append(combo)
    return chosen, made


def _key(flat: Flat) -> frozenset[tuple[str, str]]:
    return frozenset((path, json.dumps(leaf.value, sort_keys=True)) for path, leaf in flat.items())


def _digits(index: int, sizes: Sequence[int]) -> list[int]:
    """The position in each axis of the ``index``-th combination of itertools.product."""
    out = []
    for size in reversed(sizes):
        out.append(index % size)
        index //= size
    return out[::-1]
