"""A race's decisions in the answer's words. A raced group's answer is what the race decided
(``race.py``: retired, or shown equivalent, at round r under its group-sequential error control),
not a fixed-sample test of the runs it stopped at: those runs were stopped *because* of what they
showed, and a test that ignores that would neither carry the race's error control nor agree with
its decisions. Pure: the run's typed ``race.json`` (``store.Race``) in; the words: ``render/answer_text.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsmatrix.results.store import Race


@dataclass(frozen=True)
class RacedCell:
    status: str  # one of groups.STATUSES
    round: int  # the round after which it left the race
    reason: str


@dataclass(frozen=True)
class RacedGroup:
    """A group every cell of which left the race: each cell's decision, and what decided them (for the
    answer's words). ``decided`` False: the race stopped (its budget spent, or its last round) with
    some cells not separated from the best: those are "not separated", the others' decisions stand."""

    cells: dict[str, RacedCell]  # by cell id
    decided: bool
    look_alpha: float | None  # Pocock's level α' of every test at the group's last look (None: not recorded)
    race: Race  # its settings, α, retire margin, rounds and why it stopped


def raced_groups(race: Race | None) -> list[RacedGroup]:
    """The raced groups of a stored race whose every cell left it with a decision (a race cut short
    decides nothing: its groups are answered by the intervals)."""
    if race is None:
        return []
    out = []
    for g in race.groups:
        if not g.raced or not g.metric:
            continue
        if not g.cells or any(c not in race.left or race.left[c].status is None for c in g.cells):
            continue
        decided = {c: RacedCell(str(race.left[c].status), race.left[c].round, race.left[c].reason) for c in g.cells}
        looks = race.look_alpha.get(g.key, ())
        settled = g.decided if g.decided is not None else all(d.status != "not separated" for d in decided.values())
        out.append(RacedGroup(decided, settled, looks[-1] if looks else None, race))
    return out
