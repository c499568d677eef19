"""Settings a matrix run takes besides its cells: ``race:`` (``RaceSettings``), ``search:``
(``SearchSettings``, ``fsmatrix search``) and the settings of a build under test (``BuildSettings``,
``fsmatrix run --settings FILE``)."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jsonschema

from fsmatrix.errors import UserError
from fsmatrix.matrix import schema
from fsmatrix.matrix.flat import Flat, flatten_mapping, schema_message, show
from fsmatrix.matrix.read import read_file

MAX_REPEAT = 1_000
RACE_KEYS = ("min_repeats", "max_repeats", "delta", "budget")
RACE_MIN_REPEATS = 3  # race.race_step decides nothing before the third run (stats.MIN_SAMPLES)
RACE_MAX_REPEATS = 10  # a race's last round when the matrix does not say (or its repeat, when higher)
RACE_DELTA = 0.05


@dataclass(frozen=True)
class RaceSettings:
    """``race:``: runs go in rounds and cells that the statistics rule out leave (runs.py, results/verdict/race.py)."""

    min_repeats: int = RACE_MIN_REPEATS  # nothing is decided before every cell has this many runs
    max_repeats: int = RACE_MAX_REPEATS  # the race's last round
    delta: float = RACE_DELTA  # the minimum effect: worse by more than this retires, within ±this ties
    budget_s: float | None = None  # stop at the first round's end after the runs took this long

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SEARCH_KEYS = ("budget", "delta", "repeats", "confirm", "screen_runs", "max_candidates", "max_repeats", "seed")
SEARCH_REPEATS = 2  # runs of each screening and refining cell: replicates for pure error, half a cross's 3+
SEARCH_CONFIRM = 5  # fresh runs of the winner and of the baseline, interleaved
SEARCH_MAX_CANDIDATES = 4  # configurations raced at most (the model's best first)
MAX_SEARCH_RUNS = 100_000  # a search's budget in runs at most: beyond it, a typo


@dataclass(frozen=True)
class SearchSettings:
    """``search:`` (``fsmatrix search``, runner/fsmatrix/search/): how a search spends its runs.
    ``budget``: runs (an integer) or time ("3h", "90m"), at most one of ``budget_runs`` and
    ``budget_s`` set (neither: the full cross's runs at ``repeats``, i.e. no limit but the space);
    ``delta``: the minimum effect (a setting whose effect lies within ±δ is fixed at its default; the
    untried configurations are bounded at δ); ``repeats``: runs of each screening and refining cell;
    ``confirm``: fresh runs of the winner and of the baseline at the end; ``screen_runs``: the screening
    design's cells (None: the smallest design of the screening model); ``max_candidates``: the race's
    entrants at most; ``max_repeats``: the race's last round; ``seed``: the designs' and orders' seed."""

    budget_runs: int | None = None
    budget_s: float | None = None
    delta: float = RACE_DELTA
    repeats: int = SEARCH_REPEATS
    confirm: int = SEARCH_CONFIRM
    screen_runs: int | None = None
    max_candidates: int = SEARCH_MAX_CANDIDATES
    max_repeats: int = RACE_MAX_REPEATS
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def search_settings(value: Any, where: Any, fail: Any) -> SearchSettings:
    """A ``search:`` mapping (None or ``{}``: the defaults) checked; ``where(key)`` is the line of a key
    (``where(None)``: the block's). Each bad value is one line naming the key and what is allowed."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise fail(f"search {show(value)} must be a mapping of {', '.join(SEARCH_KEYS)} (or empty)", where(None))
    for key in value:
        if key not in SEARCH_KEYS:
            raise fail(f"search: unknown key {key!r}; allowed: {', '.join(SEARCH_KEYS)}", where(key))

    def count(key: str, low: int, default: int, why: str) -> int:
        v = value.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_REPEAT:
            raise fail(f"search.{key} {show(v)} must be an integer from {low} to {MAX_REPEAT} ({why})", where(key))
        return int(v)

    budget_runs, budget_s = _search_budget(value.get("budget"), where, fail)
    delta = value.get("delta", RACE_DELTA)
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise fail(
            f"search.delta {show(delta)} must be a number in (0, 1): the minimum effect, e.g. 0.05 for 5 %",
            where("delta"),
        )
    seed = value.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise fail(f"search.seed {show(seed)} must be an integer >= 0 (the designs' and orders' seed)", where("seed"))
    return SearchSettings(
        budget_runs=budget_runs,
        budget_s=budget_s,
        delta=float(delta),
        repeats=count("repeats", 2, SEARCH_REPEATS, "replicates are required: at least 2"),
        confirm=count("confirm", 3, SEARCH_CONFIRM, "fresh runs of the winner and the baseline: at least 3"),
        screen_runs=None if value.get("screen_runs") is None else count("screen_runs", 2, 0, "the screening cells"),
        max_candidates=count("max_candidates", 2, SEARCH_MAX_CANDIDATES, "the race's entrants: a race needs two"),
        max_repeats=count("max_repeats", RACE_MIN_REPEATS, RACE_MAX_REPEATS, "the race's last round: at least 3"),
        seed=int(seed),
    )


def _search_budget(budget: Any, where: Any, fail: Any) -> tuple[int | None, float | None]:
    """``search.budget``: a number of runs (an integer), or a duration ("3h", "90m", "1800s"); None: none."""
    if budget is None:
        return None, None
    if isinstance(budget, int) and not isinstance(budget, bool):
        if 1 <= budget <= MAX_SEARCH_RUNS:
            return int(budget), None
    elif isinstance(budget, str) and re.search(r"[smh]\s*$", budget):
        seconds = parse_duration(budget)
        if seconds is not None:
            return None, seconds
    raise fail(
        f"search.budget {show(budget)} must be a number of runs (an integer from 1 to {MAX_SEARCH_RUNS}) or a "
        "duration with s, m or h (e.g. 90m, 3h, 1.5h)",
        where("budget"),
    )


def default_race(repeat: int) -> RaceSettings:
    """The race of a matrix without ``race:`` (``fsmatrix run`` races a matrix with a comparison group
    by default): every cell at least the matrix's ``repeat`` runs (and at least ``RACE_MIN_REPEATS``),
    at most ``RACE_MAX_REPEATS`` (or that minimum, when higher), δ 5 %, no budget."""
    low = max(RACE_MIN_REPEATS, repeat)
    return RaceSettings(low, max(RACE_MAX_REPEATS, low))


def race_settings(value: Any, repeat: int, where: Any, fail: Any) -> RaceSettings:
    """A ``race:`` mapping (None or ``{}``: the defaults) checked; ``where(key)`` is the line of a key.
    The defaults are ``default_race(repeat)``'s: ``min_repeats`` the matrix's ``repeat`` (at least 3),
    ``max_repeats`` 10 (or ``min_repeats``, when higher)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise fail(f"race {show(value)} must be a mapping of {', '.join(RACE_KEYS)} (or empty)", where(None))
    for key in value:
        if key not in RACE_KEYS:
            raise fail(f"race: unknown key {key!r}; allowed: {', '.join(RACE_KEYS)}", where(key))

    def count(key: str, default: int) -> int:
        v = value.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or not RACE_MIN_REPEATS <= v <= MAX_REPEAT:
            raise fail(
                f"race.{key} {show(v)} must be an integer from {RACE_MIN_REPEATS} to {MAX_REPEAT} "
                f"(nothing is decided before the {RACE_MIN_REPEATS}rd run)",
                where(key),
            )
        return int(v)

    defaults = default_race(repeat)
    low = count("min_repeats", defaults.min_repeats)
    high = count("max_repeats", max(RACE_MAX_REPEATS, low))
    if low > high and "min_repeats" not in value:
        raise fail(
            f"race.max_repeats {high} is below min_repeats, which is the matrix's repeat ({low}): a race runs "
            "every cell at least `repeat` times; set race.min_repeats (at least 3), or a lower repeat",
            where("max_repeats"),
        )
    if low > high:
        raise fail(
            f"race.min_repeats {low} is above max_repeats {high}; min_repeats must be at most max_repeats",
            where("min_repeats"),
        )
    delta = value.get("delta", RACE_DELTA)
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise fail(
            f"race.delta {show(delta)} must be a number in (0, 1): the minimum effect, e.g. 0.05 for 5 %",
            where("delta"),
        )
    budget = value.get("budget")
    budget_s = None if budget is None else parse_duration(budget)
    if budget is not None and budget_s is None:
        raise fail(
            f"race.budget {show(budget)} must be a duration > 0: seconds (e.g. 1800) or a number with "
            "s, m or h (e.g. 30m, 2h, 1.5h)",
            where("budget"),
        )
    return RaceSettings(low, high, float(delta), budget_s)


def parse_duration(value: Any) -> float | None:
    """Seconds from 1800, 90.5, "90s", "30m", "2h" or "1.5h"; None when not a duration > 0."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", value)
        if not found:
            return None
        seconds = float(found.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[found.group(2)]
    else:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


@dataclass(frozen=True)
class BuildSettings:
    """``fsmatrix run --settings FILE``: the settings of the build under test (what a gate's or a
    bisect's prepare command printed: ``vm.kernel: /path/linux.deb``), laid over every cell's
    defaults. The cells keep the ids they have without them, so the runs of two builds of one cell
    are the same cell to ``compare``; each result records the settings it ran with."""

    file: str
    flat: Flat
    sha256: str = ""  # of the file's bytes: two builds' settings told apart in a store

    def record(self) -> dict[str, Any]:
        """``provenance.settings`` of every result run with these settings."""
        return {"file": self.file, "sha256": self.sha256, "values": {k: leaf.value for k, leaf in self.flat.items()}}


def read_settings(path: str | Path) -> BuildSettings:
    """A settings file: a YAML mapping of settings, dotted or nested as in ``defaults`` (empty: none).
    Raises UserError (exit 2) naming the file and line of an unknown setting or a bad value."""
    name = str(path)

    def fail(message: str, line: int | None) -> UserError:
        return UserError(message, file=name, line=line)

    doc = read_file(path, "a settings file")
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if doc is None:
        return BuildSettings(name, {}, digest)
    if not isinstance(doc, dict):
        raise fail(
            f"settings must be a mapping of setting -> value (e.g. gtm.global_buffers: 4000), got {show(doc)}", 1
        )
    flat = flatten_mapping(doc, "", fail)
    for setting, leaf in flat.items():
        errors = list(jsonschema.Draft202012Validator(schema.spec_at(setting) or {}).iter_errors(leaf.value))
        if errors:
            raise fail(schema_message(errors[0], setting), leaf.line)
    return BuildSettings(name, flat, digest)
