"""The report's "Race" section: rounds, runs used against the fixed design's, and when each cell left."""

from __future__ import annotations

from fsmatrix.results.store import Race


def race_section(race: Race) -> list[str]:
    """ "Race": rounds, runs used against the fixed design's, and one row per cell: when it left, why."""
    s = race.settings
    lines = [
        "## Race",
        "",
        f"{len(race.rounds)} rounds ({s.min_repeats} to {s.max_repeats} repeats, minimum effect {s.delta:.0%}); "
        + (f"stopped: {race.stopped.why}" if race.stopped is not None else "not finished")
        + f". {race.runs_used} runs of the fixed design's {race.runs_fixed} ({race.runs_fixed - race.runs_used} "
        f"saved). A retired cell was {_retired(race.retire_margin)} by TOST (docs/statistics-and-gate.md, 'Racing').",
        "",
        "| cell | left after round | why |",
        "|---|---|---|",
    ]
    for cell_id in race.cells:
        leaving = race.left.get(cell_id)
        if leaving:
            why = f"{leaving.action}: {leaving.reason}".replace("|", "\\|")
            lines.append(f"| {cell_id} | {leaving.round} | {why} |")
        else:
            lines.append(f"| {cell_id} | - | still racing |")
    return [*lines, ""]


def _retired(margin: float) -> str:
    if margin:
        return (
            "significantly worse than its group's best by more than the minimum effect (a one-sided Welch's t on "
            "logs shifted by ln(1 + δ), at Pocock's level); an equivalent one shown within that effect of it"
        )
    return (
        "significantly worse than its group's best (a one-sided Welch's t on logs, at Pocock's level); an "
        "equivalent one shown within the minimum effect of it"
    )
