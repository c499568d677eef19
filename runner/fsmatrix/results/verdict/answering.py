"""Building the answer: result documents (and, when there is one, the run's ``matrix.json`` as a
dict) in, an ``answer.Answer`` out. Crash groups first: their verdicts mark configurations unsafe in
the speed groups too. How it is computed, for people: docs/answer.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fsmatrix.results.store import Result
from fsmatrix.results.verdict import environment, power, stats
from fsmatrix.results.verdict.answer import Answer, CrashVerdict, GroupResult
from fsmatrix.results.verdict.configurations import _Cell, _cells, _fingerprint
from fsmatrix.results.verdict.crash import _crash_group
from fsmatrix.results.verdict.groups import DELTA
from fsmatrix.results.verdict.raced import raced_groups
from fsmatrix.results.verdict.speed import _speed_group


def build(
    docs: Sequence[Result],
    matrix_json: Mapping[str, Any] | None = None,
    race: Mapping[str, Any] | None = None,
    *,
    delta: float = DELTA,
    alpha: float = stats.ALPHA,
    draws: int = power.DRAWS,
    seed: int = 0,
) -> Answer:
    """The answer for these result documents (see the module's docstring). ``matrix_json``: the
    run's ``matrix.json`` (baselines, cell order); ``race``: its ``race.json`` when it raced (a raced
    group's answer is the race's decisions: raced.py); ``delta``: the minimum effect of the repeat advice
    and of the equivalence test; ``draws``: the repeat advice's simulated draws per n."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), not {delta}")
    cells = _cells(environment.with_environment_axes(docs), matrix_json)  # an image axis names every image
    grouped: dict[str, list[_Cell]] = {}
    for c in cells:
        grouped.setdefault(c.group_key, []).append(c)
    has_matrix = matrix_json is not None
    rule_of_matrix = (matrix_json or {}).get("baseline_rule")
    # Crash groups first: their verdicts mark configurations unsafe in the speed groups too.
    crash_results: dict[str, GroupResult] = {}
    unsafe_elsewhere: dict[tuple[tuple[str, str], ...], tuple[str, CrashVerdict]] = {}
    for key, members in grouped.items():
        if any(d.crash is not None for c in members for d in c.docs):
            result = crash_results[key] = _crash_group(key, members, has_matrix, rule_of_matrix)
            for c, v in zip(members, result.crash, strict=True):
                if v.verdict in ("unsafe", "unsafe by design"):
                    unsafe_elsewhere[_fingerprint(c.flat)] = (result.label, v)
    races = raced_groups(race)
    groups = []
    for key, members in grouped.items():
        ids = {c.id for c in members}
        raced = next((r for r in races if ids <= set(r.cells)), None)
        if key in crash_results:
            groups.append(crash_results[key])
        else:
            groups.append(
                _speed_group(
                    key, members, has_matrix, rule_of_matrix, unsafe_elsewhere, delta=delta, alpha=alpha,
                    draws=draws, seed=seed, raced=raced,
                )
            )  # fmt: skip
    return Answer(alpha=alpha, delta=delta, confidence=1 - alpha, groups=tuple(groups))
