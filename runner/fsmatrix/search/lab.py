"""The real lab of a search (``search.stages.SearchLab``): each stage an ordinary run of the matrix's cells
on a backend, under the search's results directory, stored and resumable.

**Layout.** A search with run id RUN_ID keeps everything in RESULTS/RUN_ID: one run folder per stage
(``screen/``, ``refine/``, ``race/``, ``confirm/``), each written by ``runs.run_matrix`` as ``fsmatrix
run`` writes one (its matrix.json, a folder per cell, ``rN.json`` per run; the race's race.json), so
``fsmatrix report RESULTS/RUN_ID/refine`` reads a stage like any run; and ``search.json``: the search's
settings, its space and the stages so far (``SEARCH_FILE``, written atomically after every stage; the
answer goes in at the end). A killed search is resumed by the same command: the stages are
deterministic given the seed, so it plans them again and every run already stored is reused."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from fsmatrix import racing, runs
from fsmatrix.agent import jsonfile
from fsmatrix.backends import Backend
from fsmatrix.errors import UserError
from fsmatrix.matrix import RACE_MIN_REPEATS, MatrixCell, RaceSettings, SearchSettings
from fsmatrix.results import store
from fsmatrix.results.verdict import metrics
from fsmatrix.results.verdict.search import STAGES
from fsmatrix.results.verdict.space import Config, Observation, Space
from fsmatrix.search.space_of import MatrixSpace
from fsmatrix.search.stages import RaceResult

SEARCH_FILE = "search.json"
SEARCH_FORMAT = 1


@dataclass(frozen=True)
class SearchPlace:
    """Where a search keeps its runs: RESULTS (``results_root``) / ``run_id``, one folder per stage."""

    results_root: Path
    run_id: str

    @property
    def directory(self) -> Path:
        return self.results_root / self.run_id

    def stage_dir(self, stage: str) -> Path:
        return self.directory / stage


def space_record(space: Space) -> dict[str, Any]:
    """The space as search.json records it: its settings (levels, default), size and metric."""
    return {
        "settings": [{"name": s.name, "levels": list(s.levels), "default": s.default} for s in space.settings],
        "configurations": len(space.configurations),
        "metric": space.metric,
        "direction": space.direction,
    }


def check_earlier(place: SearchPlace, settings: SearchSettings, space: Space) -> None:
    """UserError (before any run) when RESULTS/RUN_ID holds a search of other settings or another space:
    its stored runs would be reused for a plan they were not made for."""
    path = place.directory / SEARCH_FILE
    if not path.is_file():
        return
    try:
        earlier = jsonfile.read(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable search record ({exc}); give another --run-id") from exc
    if not isinstance(earlier, dict):
        raise UserError(f"{path}: not a search record; give another --run-id")
    for key, now in (("settings", settings.to_dict()), ("space", space_record(space))):
        if earlier.get(key) != jsonfile.strict(now):
            raise UserError(
                f"{path}: an earlier search there had other {key} ({earlier.get(key)!r}); resuming it needs the "
                "same file and settings: give another --run-id (or remove that directory)"
            )


@dataclass
class RealLab:
    """``SearchLab`` on a backend: every stage a run of the configurations' cells (``runs.run_matrix``)
    in its own folder under ``place`` (module docstring). ``console``: the runs' progress and the
    stage lines."""

    found: MatrixSpace
    backend: Backend
    place: SearchPlace
    settings: SearchSettings
    console: Console
    stages: list[dict[str, Any]] = field(default_factory=list)  # what search.json records of each stage
    # The stages asked for so far: ``runs_used`` counts their runs only, so a resumed search, whose later
    # stages' runs are already stored, plans each stage on the same budget left as the first time.
    asked: set[str] = field(default_factory=set)
    budget_runs: int | None = None  # a time budget in runs, as first worked out (search.json keeps it)

    def measure(self, stage: str, configs: Sequence[Config], repeats: int) -> list[Observation]:
        """Every configuration ``repeats`` fixed repeats in rounds (each round in the run's recorded
        random order), in the stage's folder; stored runs are reused. The passed runs' observations."""
        cells = self._cells(configs)
        self.asked.add(stage)
        self._say(stage, f"{len(cells)} configurations × {repeats} repeats")
        summary = self._run(stage, cells, racing.RunPlan.fixed(repeats))
        self._record(stage, len(cells), repeats)
        return self._observations(stage, cells, summary.docs)

    def race(self, configs: Sequence[Config], max_repeats: int, delta: float) -> RaceResult:
        """These configurations raced as ``fsmatrix run`` races a comparison group (``racing.run_race``:
        rounds from the third run on, δ ``delta``, at most ``max_repeats``) in the folder "race"."""
        cells = self._cells(configs)
        self.asked.add("race")
        settings = RaceSettings(RACE_MIN_REPEATS, max(RACE_MIN_REPEATS, max_repeats), delta)
        self._say("race", f"{len(cells)} configurations, {racing.describe(settings)}")
        plan = racing.RunPlan(settings, settings.max_repeats, f"race: {racing.describe(settings)}")
        summary = self._run("race", cells, plan)
        self._record("race", len(cells), settings.max_repeats)
        observations = self._observations("race", cells, summary.docs)
        if summary.race is None:  # run_matrix races whenever the plan says so: never here
            return RaceResult(tuple(observations), None, (), False)
        return race_result(summary.race, self._configs_of(cells), tuple(observations))

    def runs_used(self) -> int:
        """The result documents under the folders of the stages asked for so far (runs made, or found
        stored)."""
        dirs = [self.place.stage_dir(stage) for stage in STAGES if stage in self.asked]
        return sum(len(list(store.iter_result_files(d))) for d in dirs if d.is_dir())

    def runs_of(self, budget_s: float) -> int | None:
        """``budget_s`` in runs: over the mean of the space's cells' estimates (their past runs stored
        under RESULTS on this host: ``runs.cell_estimates``); None when no cell has one. Worked out once:
        a resumed search takes the number search.json kept (its own runs would change the estimates)."""
        path = self.place.directory / SEARCH_FILE
        earlier = jsonfile.read(path) if path.is_file() else None
        if isinstance(earlier, dict) and isinstance(earlier.get("budget_runs"), int):
            self.budget_runs = earlier["budget_runs"]
            return self.budget_runs
        found = runs.cell_estimates(self.place.results_root, list(self.found.cells.values()))
        seconds = [e.seconds for e in found.values() if e.seconds is not None and e.seconds > 0]
        if not seconds:
            return None
        self.budget_runs = int(budget_s // (sum(seconds) / len(seconds)))
        return self.budget_runs

    def _cells(self, configs: Sequence[Config]) -> list[MatrixCell]:
        return list({self.found.cell(c).id: self.found.cell(c) for c in configs}.values())

    def _configs_of(self, cells: Sequence[MatrixCell]) -> dict[str, Config]:
        wanted = {c.id for c in cells}
        return {cell.id: config for config, cell in self.found.cells.items() if cell.id in wanted}

    def _run(self, stage: str, cells: list[MatrixCell], plan: racing.RunPlan) -> runs.RunSummary:
        run_id = f"{self.place.run_id}/{stage}"
        options = runs.RunOptions(self.place.results_root, run_id, plan, order="rounds")
        return runs.run_matrix(self.found.matrix, cells, self.backend, options, self.console)

    def _observations(
        self, stage: str, cells: Sequence[MatrixCell], docs: dict[str, list[store.Result]]
    ) -> list[Observation]:
        configs = self._configs_of(cells)
        metric = self.found.space.metric
        out = []
        for cell in cells:
            for doc in sorted(docs.get(cell.id, []), key=lambda d: d.repeat):
                value = metrics.metric_value(doc, metric) if doc.status == "passed" else None
                if value is not None:
                    out.append(Observation(configs[cell.id], float(value), stage, doc.repeat))
        return out

    def _say(self, stage: str, what: str) -> None:
        number = STAGES.index(stage) + 1 if stage in STAGES else 0
        self.console.print(f"stage {number}/{len(STAGES)} {stage}: {what}", markup=False, highlight=False)

    def _record(self, stage: str, configurations: int, repeats: int) -> None:
        """The stage into search.json (replacing an earlier record of it: a resumed search's)."""
        entry = {"name": stage, "configurations": configurations, "repeats": repeats, "folder": stage}
        self.stages[:] = [s for s in self.stages if s["name"] != stage] + [entry]
        write_record(self.place, self.settings, self.found.space, self.stages, None, self.budget_runs)


def write_record(
    place: SearchPlace,
    settings: SearchSettings,
    space: Space,
    stages: Sequence[dict[str, Any]],
    answer: dict[str, Any] | None,
    budget_runs: int | None = None,
) -> Path:
    """RESULTS/RUN_ID/search.json, atomically: the settings, the space, the stages so far, a time budget
    in runs (``RealLab.runs_of``) and the answer (None until the search ends)."""
    path = place.directory / SEARCH_FILE
    record = {
        "format": SEARCH_FORMAT,
        "settings": settings.to_dict(),
        "space": space_record(space),
        "stages": list(stages),
        "budget_runs": budget_runs,
        "answer": answer,
    }
    place.directory.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(path, jsonfile.strict(record))
    return path


def race_result(race: store.Race, configs: dict[str, Config], observations: tuple[Observation, ...]) -> RaceResult:
    """What the stored race decided, in configurations: its best (the cell decided best, else the one
    left leading, else the last look's best), the cells left equivalent to it, whether it was decided."""
    best_id = next((c for c, e in race.left.items() if e.action in ("best", "leader")), None)
    if best_id is None and race.rounds:
        looks = list(race.rounds[-1].groups.values())
        best_id = looks[0].best if looks else None
    equivalent = tuple(configs[c] for c, e in race.left.items() if e.action == "equivalent" and c in configs)
    decided = bool(race.groups) and all(g.decided for g in race.groups if g.raced)
    best = configs.get(best_id) if best_id is not None else None
    return RaceResult(observations, best, equivalent, decided and race.stopped is not None)
