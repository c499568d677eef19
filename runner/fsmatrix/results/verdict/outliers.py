"""Outlier runs, named and kept. A run is an *outlier* when its value lies far outside the spread of
its cell's other runs, by one stated rule (``RULE``): on logs, further from the median of the others
than ``K`` times their robust spread (1.4826 × their median absolute deviation, the normal-consistent
MAD), that spread taken as at least ``FLOOR`` (3 %) so that a few nearly identical runs do not make
every ordinary run an outlier. Leave-one-out: each run is judged against the others only, so one wild
run cannot hide itself by widening the spread it is judged by.

An outlier is shown, never dropped: the answer's statistics use every run (a stack that sometimes
stalls is slower, and dropping the stall would hide it); the report names the run, its value and how
far off it is, so a reader can look at what happened (its log, its time series).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

K = 3.5  # how many robust standard deviations from the others' median
FLOOR = 0.03  # the least robust spread on logs: 3 %, the wall-time noise of a quiet machine
MIN_OTHERS = 3  # a run is judged against at least this many others (a cell of 4 runs or more)
RULE = (
    f"a run more than {K:g} robust standard deviations (1.4826 × the median absolute deviation, at least "
    f"{FLOOR:.0%}) from the median of its cell's other runs, on logs"
)


@dataclass(frozen=True)
class Outlier:
    """One run of a configuration, outside its other runs' spread by ``RULE``."""

    configuration: str
    repeat: int
    value: float
    ratio: float  # its value over the median of the other runs
    spreads: float  # how many robust standard deviations (of the others' logs) away
    run_id: str = ""  # the run it belongs to ("" unknown): a results root holds several runs' r2


def outliers(configuration: str, runs: Sequence[tuple[int, float]], run_ids: Sequence[str] = ()) -> tuple[Outlier, ...]:
    """The outlier runs among ``runs`` ((repeat, value) of one configuration's passed runs; values <= 0,
    which have no logarithm, are never judged); ``run_ids``: the run each belongs to, in that order."""
    ids = list(run_ids) or [""] * len(runs)
    usable = [(r, v, i) for (r, v), i in zip(runs, ids, strict=True) if v > 0 and math.isfinite(v)]
    if len(usable) < MIN_OTHERS + 1:
        return ()
    found = []
    for i, (repeat, value, run_id) in enumerate(usable):
        others = [math.log(v) for j, (_, v, _) in enumerate(usable) if j != i]
        centre = statistics.median(others)
        spread = max(1.4826 * statistics.median(abs(x - centre) for x in others), math.log1p(FLOOR))
        away = abs(math.log(value) - centre) / spread
        if away > K:
            found.append(Outlier(configuration, repeat, value, value / math.exp(centre), away, run_id))
    return tuple(found)


def name(o: Outlier) -> str:
    """How the answer names an outlier run: its configuration, repeat and run ("ext4 r2 of run
    20250101-1200"; a results root holds several runs' r2), the run left out where unknown."""
    return f"{o.configuration} r{o.repeat}" + (f" of run {o.run_id}" if o.run_id else "")
