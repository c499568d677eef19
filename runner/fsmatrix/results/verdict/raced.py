"""A race's decisions in the answer's words. A raced group's answer is what the race decided
(``race.py``: retired, or shown equivalent, at round r under its group-sequential error control),
not a fixed-sample test of the runs it stopped at: those runs were stopped *because* of what they
showed, and a test that ignores that would neither carry the race's error control nor agree with
its decisions. Pure: the run's ``race.json`` (as `fsmatrix run --race` writes it) in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsmatrix.results.verdict.words import _pct

# race.json's "left" actions -> the answer's statuses ("tied" is what races before the answer's
# version 2 wrote for "equivalent").
STATUS_OF = {
    "retired": "worse",
    "equivalent": "equivalent",
    "tied": "equivalent",
    "best": "best",
    "remained": "not separated",
    "skipped": "not enough data",
}


def current_words(text: str) -> str:
    """A stored race's text in today's words: races before the answer's version 2 wrote "tied" (and
    "tied set") for what is now "equivalent"."""
    return text.replace("tied set", "equivalent set").replace("retired or tied", "retired or equivalent")


def current_action(action: str) -> str:
    return "equivalent" if action == "tied" else action


@dataclass(frozen=True)
class RacedCell:
    status: str  # one of groups.STATUSES
    round: int  # the round after which it left the race
    reason: str


@dataclass(frozen=True)
class RacedGroup:
    cells: dict[str, RacedCell]  # by cell id
    rule: str  # one sentence: how the race decided


def raced_groups(race: Mapping[str, Any] | None) -> list[RacedGroup]:
    """The raced groups of a stored race whose every cell left it with a decision (a race cut short
    decides nothing: its groups are answered by the intervals)."""
    if not race:
        return []
    left = race.get("left") or {}
    settings = race.get("settings") or {}
    alpha = float(race.get("alpha") or 0.05)
    delta = float(settings.get("delta") or 0.05)
    stopped = race.get("stopped") or {}
    out = []
    for g in race.get("groups") or []:
        if not g.get("raced") or not g.get("metric"):
            continue
        cells = [str(c) for c in g.get("cells") or []]
        if not cells or any(c not in left or left[c].get("action") not in STATUS_OF for c in cells):
            continue
        decided = {
            c: RacedCell(
                STATUS_OF[left[c]["action"]],
                int(left[c].get("round") or 0),
                current_words(str(left[c].get("reason") or "")),
            )
            for c in cells
        }
        if any(d.status == "not separated" for d in decided.values()):  # a best with undecided others is not best
            decided = {
                c: RacedCell("not separated", d.round, d.reason) if d.status == "best" else d
                for c, d in decided.items()
            }
        looks = [
            float(r["groups"][g["key"]]["look_alpha"])
            for r in race.get("rounds") or []
            if g.get("key") in (r.get("groups") or {})
        ]
        level = f"Pocock's level α' = {looks[-1]:.2g} per test" if looks else "Pocock's level per test"
        why = current_words(str(stopped.get("why") or "stopped"))
        rule = (
            f"Decided by the race (race.json, {why}): a configuration retired when "
            f"worse than the best by more than {_pct(delta)} (one-sided Welch's t on logs shifted by "
            f"ln(1 + {delta:g})), equivalent when TOST shows it within ±{_pct(delta)}, each test at {level} so "
            f"that all its decisions over every round err with probability at most {_pct(alpha)}; the intervals "
            "are fixed-sample ones on the runs it stopped at, not adjusted for its stopping."
        )
        out.append(RacedGroup(decided, rule))
    return out
