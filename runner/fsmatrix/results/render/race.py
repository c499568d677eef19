"""The report's "Race" section: rounds, runs used against the fixed design's, and when each cell left."""

from __future__ import annotations

from typing import Any

from fsmatrix.results.verdict import raced


def race_section(race: dict[str, Any]) -> list[str]:
    """ "Race": rounds, runs used against the fixed design's, and one row per cell: when it left, why."""
    rounds = len(race.get("rounds") or [])
    used, fixed = int(race.get("runs_used") or 0), int(race.get("runs_fixed") or 0)
    stopped = race.get("stopped") or {}
    settings = race.get("settings") or {}
    lines = [
        "## Race",
        "",
        f"{rounds} rounds ({settings.get('min_repeats')} to {settings.get('max_repeats')} repeats, minimum effect "
        f"{float(settings.get('delta') or 0):.0%}); "
        + (f"stopped: {raced.current_words(str(stopped.get('why')))}" if stopped else "not finished")
        + f". {used} runs of the fixed design's {fixed} ({fixed - used} saved). A retired cell was "
        "significantly worse than its group's best by more than the minimum effect (a one-sided Welch's t on "
        "logs shifted by ln(1 + δ), at Pocock's level); an equivalent one shown within that effect of it by "
        "TOST (docs/statistics-and-gate.md, 'Racing').",
        "",
        "| cell | left after round | why |",
        "|---|---|---|",
    ]
    left = race.get("left") or {}
    for cell_id in race.get("cells") or []:
        leaving = left.get(cell_id)
        if leaving:
            action = raced.current_action(str(leaving.get("action")))
            why = f"{action}: {raced.current_words(str(leaving.get('reason')))}".replace("|", "\\|")
            lines.append(f"| {cell_id} | {leaving.get('round')} | {why} |")
        else:
            lines.append(f"| {cell_id} | - | still racing |")
    return [*lines, ""]
