"""Building the answer: typed result documents (and, when there is one, the run's ``matrix.json`` and
``race.json``, typed by the store) in, an ``answer.Answer`` out. Crash groups first: their verdicts
mark configurations unsafe in the speed groups too. How it is computed, for people: docs/answer.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from fsmatrix.results.store import Race, Result, RunMatrix
from fsmatrix.results.verdict import configurations, effects, environment
from fsmatrix.results.verdict.answer import (
    DEFAULT_RULE,
    Answer,
    CrashGroup,
    CrashVerdict,
    GroupResult,
    Rule,
    SpeedGroup,
)
from fsmatrix.results.verdict.crash import UNSAFE, crash_group
from fsmatrix.results.verdict.raced import raced_groups
from fsmatrix.results.verdict.speed import speed_group


def build(
    docs: Sequence[Result], matrix: RunMatrix | None = None, race: Race | None = None, rule: Rule = DEFAULT_RULE
) -> Answer:
    """The answer for these result documents (see the module's docstring). ``matrix``: the run's
    ``matrix.json`` (baselines, cell order); ``race``: its ``race.json`` when it raced (a raced group's
    answer is the race's decisions: raced.py); ``rule``: α, the minimum effect δ of the equivalence
    test and the repeat advice, the advice's simulated draws per n."""
    if not 0 < rule.delta < 1:
        raise ValueError(f"delta must be in (0, 1), not {rule.delta}")
    found = configurations.groups(environment.with_environment_axes(docs), matrix)  # an image axis names every image
    # Crash groups first: their verdicts mark configurations unsafe in the speed groups too.
    crashed: dict[str, CrashGroup] = {}
    unsafe_elsewhere: dict[tuple[tuple[str, str], ...], tuple[str, CrashVerdict]] = {}
    for g in found:
        if any(d.crash is not None for c in g.cells for d in c.docs):
            result = crashed[g.key] = crash_group(g)
            for c, v in zip(g.cells, result.crash, strict=True):
                if v.verdict in UNSAFE:
                    unsafe_elsewhere[configurations.fingerprint(c.flat)] = (g.label, v)
    races = raced_groups(race)
    answered: list[GroupResult] = []
    for g in found:
        ids = {c.id for c in g.cells}
        raced = next((r for r in races if ids <= set(r.cells)), None)
        answered.append(
            crashed[g.key]
            if g.key in crashed
            else with_effects(speed_group(g, rule, unsafe_elsewhere, raced), matrix, rule)
        )
    return Answer(alpha=rule.alpha, delta=rule.delta, confidence=1 - rule.alpha, groups=tuple(answered))


def with_effects(g: SpeedGroup, matrix: RunMatrix | None, rule: Rule) -> SpeedGroup:
    """The speed group with its settings' effects, where it has two or more settings of two values (effects.py)."""
    found = effects.of_group(g.group, g.metric, g.direction, matrix, rule.alpha, rule.delta)
    return replace(g, effects=found) if found is not None else g
