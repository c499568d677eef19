"""``fsmatrix search FILE``: the best configuration of a matrix's space in stages (docs/search.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from fsmatrix import matrix
from fsmatrix.backends import BACKENDS
from fsmatrix.cli._common import writable_directory
from fsmatrix.cli.run import console, local_backend, workdir_option
from fsmatrix.errors import UserError
from fsmatrix.matrix import SearchSettings
from fsmatrix.results.verdict.space import Config, Space
from fsmatrix.search.space_of import MatrixSpace, space_of


@click.command("search")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="host", show_default=True)
@click.option("--results", "results_root", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--run-id", default=None, help="The search goes to RESULTS/RUN_ID (default: the matrix name).")
@click.option("--scale", default=None, help="Search at this one of the file's `scales` (e.g. small).")
@workdir_option("Scratch space for a run: loop image files and mount points (host), overlays and disks (qemu).")
@click.option("--dry-run", is_flag=True, help="Print the space, the screening plan and the budget; run nothing.")
@click.option(
    "--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True, help="What stdout gets."
)
def search(
    file: Path,
    backend: str,
    results_root: Path,
    run_id: str | None,
    scale: str | None,
    workdir: Path,
    dry_run: bool,
    fmt: str,
) -> None:
    """Find the best configuration of matrix FILE's space (its axes' full cross) in stages: screen,
    refine, race, confirm; each stage an ordinary run folder under RESULTS/RUN_ID. What was never run
    is bounded by a model (docs/search.md). The same command resumes a killed search."""
    from fsmatrix.search import lab, stages

    m = matrix.load(file, scale)
    found = space_of(m)
    settings = m.search or SearchSettings()
    place = lab.SearchPlace(results_root, run_id or m.name)
    line = m.cross.lines.get("search") if m.cross is not None else None
    try:
        plan = stages.screen_plan(found.space, settings)
    except stages.SearchError as exc:
        raise UserError(str(exc), file=str(file), line=line) from exc
    budget = budget_runs(settings, found, results_root)
    if dry_run:
        _dry_run(found, settings, plan, budget, fmt)
        return
    lab.check_earlier(place, settings, found.space)
    writable_directory(results_root, "--results")
    chosen = local_backend(backend, (), False, workdir)
    real = lab.RealLab(found, chosen, place, settings, console)
    try:
        answer = stages.run_search(found.space, settings, real, _alpha())
    except stages.SearchError as exc:
        raise UserError(str(exc), file=str(file), line=line) from exc
    finally:
        chosen.close()
    _finish(answer, real, f"{m.name} ({place.run_id})", fmt)


def _alpha() -> float:
    from fsmatrix.results.verdict import stats

    return stats.ALPHA


def _finish(answer: Any, real: Any, title: str, fmt: str) -> None:
    """The answer's files in RESULTS/RUN_ID (search.md, search.html, search.json with the answer) and
    stdout: the Markdown answer (or its JSON), then where the files are."""
    from fsmatrix.results.render import search as render
    from fsmatrix.search import lab

    answer_json = answer.to_json()
    record = lab.write_record(real.place, real.settings, answer.space, real.stages, answer_json, real.budget_runs)
    written = [*render.write_answer(answer, title, real.place.directory), record]
    if fmt == "json":
        click.echo(json.dumps(answer_json, indent=2, ensure_ascii=False))
        for path in written:
            console.print(f"written: {path.resolve()}", markup=False, highlight=False)
        return
    click.echo(render.markdown(answer, title))
    for path in written:
        click.echo(f"written: {path.resolve()}")


def budget_runs(settings: SearchSettings, found: MatrixSpace, results_root: Path) -> tuple[int | None, str]:
    """The budget in runs (None: none) and in words: the file's runs, its time over the cells'
    estimates (their past runs under RESULTS on this host), or the full cross's runs at ``repeats``."""
    from fsmatrix import runs

    if settings.budget_runs is not None:
        return settings.budget_runs, f"{settings.budget_runs} runs (search.budget)"
    if settings.budget_s is not None:
        found_est = runs.cell_estimates(results_root, list(found.cells.values()))
        seconds = [e.seconds for e in found_est.values() if e.seconds is not None and e.seconds > 0]
        hours = f"{settings.budget_s / 3600:g} h"
        if not seconds:
            return None, f"{hours} (search.budget; no past runs of these cells here to turn it into runs)"
        per_run = sum(seconds) / len(seconds)
        n = math.floor(settings.budget_s / per_run)
        return n, f"{hours} (search.budget): about {n} runs at {per_run:.1f} s a run (the cells' past runs here)"
    cross = found.space.full_cross_runs(settings.repeats)
    return None, f"none (no search.budget): at most the full cross's {cross} runs at {settings.repeats} repeats"


def _dry_run(
    found: MatrixSpace, settings: SearchSettings, plan: list[Config], budget: tuple[int | None, str], fmt: str
) -> None:
    """``--dry-run``: the space, the screening plan and the budget, on stdout; nothing runs."""
    space = found.space
    if fmt == "json":
        click.echo(json.dumps(_plan_json(space, settings, plan, budget[0]), indent=2, ensure_ascii=False))
        return
    sizes = " × ".join(str(len(s.levels)) for s in space.settings)
    click.echo(f"search: {found.matrix.name}: {found.group}; {space.metric} ({space.direction} is better)")
    click.echo(f"settings ({len(space.settings)}):")
    for s in space.settings:
        levels = ", ".join(f"{v} (default)" if i == s.default else v for i, v in enumerate(s.levels))
        click.echo(f"  {s.name}: {levels}")
    click.echo(f"configurations: {len(space.configurations)} (the cross {sizes} that exclude left)")
    click.echo(f"full cross: {space.full_cross_runs(3)} runs at 3 repeats")
    runs = len(plan) * settings.repeats
    click.echo(f"screening: {len(plan)} configurations × {settings.repeats} repeats = {runs} runs")
    for config in plan:
        click.echo(f"  {found.cell(config).id}: {space.label(config)}")
    click.echo(f"budget: {budget[1]}")
    click.echo(
        f"then: refine, race (at most {settings.max_candidates} candidates, {settings.max_repeats} repeats), "
        f"confirm ({settings.confirm} fresh runs of the winner and of the baseline); δ {settings.delta:g}, "
        f"seed {settings.seed}"
    )


def _plan_json(space: Space, settings: SearchSettings, plan: list[Config], budget: int | None) -> dict[str, Any]:
    from fsmatrix.search import lab

    return {
        "space": lab.space_record(space),
        "full_cross_runs": space.full_cross_runs(3),
        "settings": settings.to_dict(),
        "screen": [{"config": list(c), "label": space.label(c)} for c in plan],
        "screen_runs": len(plan) * settings.repeats,
        "budget_runs": budget,
    }
