"""Racing (issue 25, item 1): ``fsmatrix run`` in rounds, cells leaving as the statistics rule them out.

Most tests here run ``runs.run_matrix`` with ``Drawn``, a backend in this process that runs nothing:
each run's primary metric is drawn from a known distribution per filesystem (seeded by cell and
repeat, so a rerun draws the same). They test the race's decisions and bookkeeping (who leaves
when, race.json, resume, the budget), not the machine: nothing is formatted, mounted or measured.
The one real race (host backend, GT.M on tmpfs) is at the end, marked ``system``.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from conftest import FSMATRIX, invoke, needs_root
from fsmatrix import matrix, racing, runs
from fsmatrix.agent import job
from fsmatrix.backends import BACKENDS, BackendEntry
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell, RaceSettings
from fsmatrix.results import store
from fsmatrix.results.render import markdown
from test_bad_input import expand_refuses, refused

# elapsed_s (threen1's primary metric, lower is better) per filesystem: (median, sd of its log).
# None: the run fails.
Law = tuple[float, float] | None


class Drawn:
    """A stand-in backend: the value of a run is drawn, not measured (see the module's docstring)."""

    name = "drawn"

    def __init__(
        self,
        laws: dict[str, Law | Callable[[int], Law]],
        *,
        duration_s: float = 1.0,
        stop_at: int | None = None,
    ) -> None:
        self.laws = laws
        self.duration_s = duration_s
        self.stop_at = stop_at  # raise on this call (1-based): an interrupted race
        self.calls: list[tuple[str, int]] = []

    def preflight(self, cells: list[MatrixCell]) -> None:
        pass

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        self.calls.append((cell.spec.filesystem, repeat))
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            raise UserError("interrupted (the test's stand-in for Ctrl-C)")
        law = self.laws[cell.spec.filesystem]
        if callable(law):
            law = law(repeat)
        doc = job.result_document(
            job.CellRepeat(cell.spec, cell.id, repeat),
            status="passed" if law else "failed",
            reason=None if law else "the workload failed (drawn)",
            started_at="2026-11-26T00:00:00+00:00",
            provenance={},
        )
        if law:
            median, sd = law
            rng = np.random.default_rng(zlib.crc32(f"{cell.spec.filesystem}/{repeat}".encode()))
            doc["metrics"] = {"elapsed_s": round(median * math.exp(rng.normal(0.0, sd)), 6)}
        doc["duration_s"] = self.duration_s
        return doc

    def environment(self) -> dict[str, Any]:
        return {"backend": self.name}

    def close(self) -> None:
        pass


def _matrix(filesystems: list[str], ends: tuple[int, ...] = (100,)) -> matrix.Matrix:
    text = (
        f"axes:\n  filesystem: [{', '.join(filesystems)}]\n  workload.threen1.end: [{', '.join(map(str, ends))}]\n"
        "defaults: {workload.threen1: {start: 1}}\n"
    )
    return matrix.expand_document(matrix.yamlpos.load(text), "m.yaml")


def race(
    tmp_path: Path,
    backend: Drawn,
    filesystems: list[str],
    settings: RaceSettings,
    run_id: str = "r",
    ends: tuple[int, ...] = (100,),
) -> dict[str, Any]:
    """A race of one cell per filesystem and 3n+1 range end (a comparison group per end); returns
    race.json."""
    m = _matrix(filesystems, ends)
    options = runs.RunOptions(tmp_path, run_id, racing.RunPlan(settings, settings.max_repeats))
    summary = runs.run_matrix(m, m.cells, backend, options, Console(file=io.StringIO()))
    stored = json.loads((summary.run_dir / racing.RACE_FILE).read_text())
    assert summary.race is not None and stored == summary.race.record()
    return stored


def left(stored: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """filesystem (a cell id's first part) -> (how it left, after which round)."""
    return {cid.split("-")[0]: (v["action"], v["round"]) for cid, v in stored["left"].items()}


def runs_of(tmp_path: Path, run_id: str = "r") -> dict[str, int]:
    """filesystem -> runs stored."""
    found: dict[str, int] = {}
    for p in (tmp_path / run_id).glob("*/r*.json"):
        fs = json.loads(p.read_text())["params"]["filesystem"]
        found[fs] = found.get(fs, 0) + 1
    return found


FAST, SLOW = (10.0, 0.02), (20.0, 0.02)


def test_a_clear_loser_is_retired_at_the_minimum_and_the_race_ends(tmp_path: Path) -> None:
    stored = race(tmp_path, Drawn({"ext4": FAST, "xfs": SLOW}), ["ext4", "xfs"], RaceSettings(3, 8))
    assert left(stored) == {"xfs": ("retired", 3), "ext4": ("best", 3)}
    assert stored["left"][next(c for c in stored["cells"] if "xfs" in c)]["reason"].endswith(": significantly worse")
    assert stored["format_version"] == 3 and stored["retire_margin"] == 0.0
    assert stored["stopped"] == {
        "after_round": 3,
        "why": "one cell or one equivalent set left in every comparison group",
        "reason": "decided",
    }
    (group,) = stored["groups"]
    assert (group["raced"], group["decided"], group["closed_after_round"]) == (True, True, 3)
    assert (stored["runs_used"], stored["runs_fixed"]) == (6, 16)
    assert runs_of(tmp_path) == {"ext4": 3, "xfs": 3}
    lines = racing.race_summary_lines(store.Race.read(stored))
    assert "6 runs of the fixed design's 16 (10 saved, 62%)" in lines[0]


def test_nothing_is_decided_before_min_repeats(tmp_path: Path) -> None:
    stored = race(tmp_path, Drawn({"ext4": FAST, "xfs": (100.0, 0.01)}), ["ext4", "xfs"], RaceSettings(5, 8))
    assert left(stored) == {"xfs": ("retired", 5), "ext4": ("best", 5)}
    for early in stored["rounds"][:4]:
        (group,) = early["groups"].values()
        assert [d["action"] for d in group["decisions"]] == ["keep", "keep"]
        assert all("nothing before the minimum of 5 runs" in d["reason"] for d in group["decisions"])


def test_equivalent_cells_stop_as_equivalent(tmp_path: Path) -> None:
    stored = race(tmp_path, Drawn({"ext4": (10.0, 0.003), "xfs": (10.02, 0.003)}), ["ext4", "xfs"], RaceSettings(3, 8))
    actions = left(stored)
    assert sorted(a for a, _ in actions.values()) == ["best", "equivalent"]
    assert {r for _, r in actions.values()} == {3}
    assert stored["stopped"]["why"] == "one cell or one equivalent set left in every comparison group"


def test_an_undecided_race_ends_at_max_repeats(tmp_path: Path) -> None:
    # 3 % apart with 10 % noise: neither worse by more than 5 % nor shown within ±5 % in 4 runs.
    stored = race(tmp_path, Drawn({"ext4": (10.0, 0.1), "xfs": (10.3, 0.1)}), ["ext4", "xfs"], RaceSettings(3, 4))
    assert sorted(a for a, _ in left(stored).values()) == ["leader", "remained"]
    assert stored["stopped"] == {"after_round": 4, "why": "max_repeats (4) reached", "reason": "max_repeats"}
    assert stored["runs_used"] == stored["runs_fixed"] == 8
    assert [(g["decided"], g["closed_after_round"]) for g in stored["groups"]] == [(False, 4)]


def test_a_retired_cell_never_comes_back(tmp_path: Path) -> None:
    # xfs is far behind in its first three runs, then would be the fastest of all: retired at round
    # 3, it never runs again and stays retired while ext4 and btrfs (undecided, 10 % noise) go on.
    def xfs(repeat: int) -> Law:
        return (30.0, 0.01) if repeat <= 3 else (1.0, 0.01)

    laws: dict[str, Law | Callable[[int], Law]] = {"ext4": (10.0, 0.1), "btrfs": (10.3, 0.1), "xfs": xfs}
    stored = race(tmp_path, Drawn(laws), ["ext4", "btrfs", "xfs"], RaceSettings(3, 6))
    assert left(stored)["xfs"] == ("retired", 3)
    assert runs_of(tmp_path)["xfs"] == 3
    xfs_id = next(c for c in stored["cells"] if "xfs" in c)
    for later in stored["rounds"][3:]:
        assert xfs_id not in later["ran"]
        (group,) = later["groups"].values()
        (decision,) = [d for d in group["decisions"] if d["cell"] == xfs_id]
        assert (decision["action"], decision["reason"]) == ("retire", "retired earlier")
    assert len(stored["rounds"]) == 6


def test_groups_race_apart(tmp_path: Path) -> None:
    # Two comparison groups (3n+1 to 100 and to 200): the first is decided at round 3 (xfs far
    # behind), the second (xfs 3 % behind in 10 % noise) runs on to max_repeats without the first.
    class ByGroup(Drawn):
        def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
            end = cell.spec.params.end
            self.laws = {"ext4": FAST, "xfs": SLOW} if end == 100 else {"ext4": (10.0, 0.1), "xfs": (10.3, 0.1)}
            doc = super().run(cell, repeat)
            self.calls[-1] = (f"{cell.spec.filesystem}/{end}", repeat)
            return doc

    backend = ByGroup({})
    stored = race(tmp_path, backend, ["ext4", "xfs"], RaceSettings(3, 5), ends=(100, 200))
    by_cell = {(cid.split("-")[0], cid.split("-")[3]): (v["action"], v["round"]) for cid, v in stored["left"].items()}
    assert by_cell[("xfs", "100")] == ("retired", 3) and by_cell[("ext4", "100")] == ("best", 3)
    assert sorted(by_cell[(fs, "200")] for fs in ("ext4", "xfs")) == [("leader", 5), ("remained", 5)]
    assert [r for name, r in backend.calls if name.endswith("/100")] == [1, 1, 2, 2, 3, 3]
    assert stored["runs_used"] == 6 + 10 and len(stored["rounds"][0]["groups"]) == 2


def test_a_skipped_cell_leaves_at_once(tmp_path: Path) -> None:
    class Skipping(Drawn):
        def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
            doc = super().run(cell, repeat)
            if cell.spec.filesystem == "jfs":
                doc.update(status="skipped", reason="jfs is not available here", metrics={})
            return doc

    stored = race(
        tmp_path, Skipping({"ext4": FAST, "xfs": SLOW, "jfs": FAST}), ["ext4", "xfs", "jfs"], RaceSettings(3, 6)
    )
    assert left(stored) == {"jfs": ("skipped", 1), "xfs": ("retired", 3), "ext4": ("best", 3)}
    assert runs_of(tmp_path)["jfs"] == 1


def test_a_cell_whose_runs_fail_never_wins(tmp_path: Path) -> None:
    stored = race(tmp_path, Drawn({"ext4": FAST, "xfs": None}), ["ext4", "xfs"], RaceSettings(3, 8))
    assert left(stored) == {"xfs": ("failed", 3), "ext4": ("best", 3)}
    xfs_id = next(c for c in stored["cells"] if "xfs" in c)
    assert "a cell whose runs fail never wins" in stored["left"][xfs_id]["reason"]


def test_the_budget_stops_the_race(tmp_path: Path) -> None:
    laws: dict[str, Law | Callable[[int], Law]] = {"ext4": (10.0, 0.1), "xfs": (10.3, 0.1)}
    stored = race(tmp_path, Drawn(laws, duration_s=100.0), ["ext4", "xfs"], RaceSettings(3, 8, budget_s=500.0))
    assert stored["stopped"] == {
        "after_round": 3,
        "why": "the budget (500 s) was spent: the runs took 600 s",
        "reason": "budget",
    }
    assert sorted(left(stored).values()) == [("leader", 3), ("remained", 3)]
    assert stored["runs_used"] == 6
    assert [g["decided"] for g in stored["groups"]] == [False]
    read = store.Race.read(stored).stopped  # what the report reads: stopped.why, unchanged
    assert read is not None and (read.after_round, read.why) == (3, stored["stopped"]["why"])


def test_resume_mid_race_continues_the_same_race(tmp_path: Path) -> None:
    laws: dict[str, Law | Callable[[int], Law]] = {"ext4": (10.0, 0.06), "btrfs": (10.4, 0.06), "xfs": SLOW}
    settings = RaceSettings(3, 6)
    filesystems = ["ext4", "btrfs", "xfs"]
    whole = race(tmp_path / "whole", Drawn(laws), filesystems, settings)
    assert left(whole)["xfs"][0] == "retired" and left(whole)["xfs"][1] < 5
    assert len(whole["rounds"]) == 6  # ext4 and btrfs undecided to the end: a later round to cut
    assert len(whole["rounds"][4]["ran"]) == 2

    # Cut in round 5: the first four rounds and one run of round 5 done, then the next raises.
    done_before = sum(len(r["ran"]) for r in whole["rounds"][:4]) + 1
    cut = Drawn(laws, stop_at=done_before + 1)
    with pytest.raises(UserError, match="interrupted"):
        race(tmp_path / "cut", cut, filesystems, settings)
    half = json.loads((tmp_path / "cut" / "r" / racing.RACE_FILE).read_text())
    assert len(half["rounds"]) == 4 and half["stopped"] is None
    assert left(half) == {"xfs": left(whole)["xfs"]}

    again = Drawn(laws)
    resumed = race(tmp_path / "cut", again, filesystems, settings)
    assert resumed == whole  # the same rounds, decisions, departures and end
    # Completed rounds were read back, not run again; nor was the run of round 5 that completed.
    assert all(r >= 5 for _, r in again.calls)
    assert len(again.calls) == sum(len(r["ran"]) for r in whole["rounds"][4:]) - 1


def test_resume_keeps_a_stored_decision(tmp_path: Path) -> None:
    """A completed round's decision is read back from race.json, not computed again from the runs."""
    settings = RaceSettings(3, 8)
    first = race(tmp_path, Drawn({"ext4": FAST, "xfs": SLOW}), ["ext4", "xfs"], settings)
    # Someone rewrites xfs's runs to be the fastest: the race is over and stays as it was decided.
    for p in (tmp_path / "r").glob("*xfs*/r*.json"):
        doc = json.loads(p.read_text())
        doc["metrics"]["elapsed_s"] = 1.0
        p.write_text(json.dumps(doc))
    again = Drawn({"ext4": FAST, "xfs": SLOW})
    assert race(tmp_path, again, ["ext4", "xfs"], settings) == first
    assert again.calls == []


def test_a_stored_race_with_other_settings_is_refused(tmp_path: Path) -> None:
    race(tmp_path, Drawn({"ext4": FAST, "xfs": SLOW}), ["ext4", "xfs"], RaceSettings(3, 8))
    with pytest.raises(UserError, match="the stored race has other settings"):
        race(tmp_path, Drawn({"ext4": FAST, "xfs": SLOW}), ["ext4", "xfs"], RaceSettings(3, 8, delta=0.1))


def test_report_has_a_race_section(tmp_path: Path) -> None:
    race(tmp_path, Drawn({"ext4": FAST, "xfs": SLOW}), ["ext4", "xfs"], RaceSettings(3, 8))
    text = markdown.write_report(tmp_path / "r", "t")[0].read_text()
    section = text.split("## Race\n", 1)[1].split("\n## ", 1)[0]
    assert "6 runs of the fixed design's 16 (10 saved)" in section
    assert "| cell | left after round | why |" in section
    assert text.index("## Race") < text.index("## Environment")
    rows = [line for line in section.splitlines() if line.startswith("| ") and "xfs" in line]
    assert len(rows) == 1 and "| 3 | retired: " in rows[0]


# --------------------------------------------------------------------------------------------
# settings: the file's race:, --race, bad input


def test_race_flag_and_race_key() -> None:
    """racing.plan, ``fsmatrix run``'s rule: a comparison group races by default; --repeat N and
    --no-race run fixed repeats; --race --repeat N is a race of at most N."""
    m = _matrix(["ext4", "xfs"])  # repeat 1, no race:
    plan = racing.plan(m, m.cells)
    assert (plan.race, plan.repeat) == (RaceSettings(3, 10, 0.05, None), 10)
    assert plan.why == (
        "race: 3 to 10 repeats a cell, δ 5%, no time budget "
        "(the default with a comparison group; --repeat N or --no-race: fixed repeats)"
    )
    assert racing.plan(m, m.cells, repeat=5) == racing.RunPlan(None, 5, "fixed repeats: 5 a cell (--repeat 5)")
    assert racing.plan(m, m.cells, race=False) == racing.RunPlan(None, 1, "fixed repeats: 1 a cell (--no-race)")
    assert racing.plan(m, m.cells, race=True, repeat=5).race == RaceSettings(3, 5, 0.05, None)
    with pytest.raises(UserError, match=r"--repeat 2 is below the race's min_repeats \(3\)"):
        racing.plan(m, m.cells, race=True, repeat=2)
    assert racing.plan(m, m.cells, budget_s=1800.0).race == RaceSettings(3, 10, 0.05, 1800.0)
    assert "budget 30 min" in racing.plan(m, m.cells, budget_s=1800.0).why
    text = "axes:\n  filesystem: [ext4, xfs]\ndefaults: {workload.threen1: {start: 1, end: 100}}\nrepeat: 5\n"
    five = matrix.expand_document(matrix.yamlpos.load(text), "m.yaml")
    # The matrix's repeat is the race's minimum: every cell runs at least that often.
    assert racing.plan(five, five.cells).race == RaceSettings(5, 10, 0.05, None)
    many = matrix.expand_document(matrix.yamlpos.load(text.replace("repeat: 5", "repeat: 12")), "m.yaml")
    assert racing.plan(many, many.cells).race == RaceSettings(12, 12, 0.05, None)
    raced = matrix.expand_document(matrix.yamlpos.load(text + "race: {delta: 0.1, budget: 2h}\n"), "m.yaml")
    assert raced.race == RaceSettings(5, 10, 0.1, 7200.0)
    assert racing.plan(raced, raced.cells).race == raced.race
    assert racing.plan(raced, raced.cells, budget_s=60.0).race == RaceSettings(5, 10, 0.1, 60.0)
    assert racing.plan(raced, raced.cells, race=False).race is None
    assert racing.plan(raced, raced.cells, repeat=8) == racing.RunPlan(None, 8, "fixed repeats: 8 a cell (--repeat 8)")
    assert racing.plan(raced, raced.cells, race=True, repeat=8).race == RaceSettings(5, 8, 0.1, 7200.0)
    scaled = text + "scales:\n  small:\n    race: {min_repeats: 3, max_repeats: 4, budget: 90}\n"
    small = matrix.expand_document(matrix.yamlpos.load(scaled), "m.yaml", "small")
    assert small.race == RaceSettings(3, 4, 0.05, 90)


def test_budget_with_fixed_repeats_is_refused_and_a_matrix_without_groups_runs_fixed_repeats() -> None:
    m = _matrix(["ext4", "xfs"])
    with pytest.raises(UserError, match=r"--budget limits a race, and --repeat 4 \(fixed repeats\) runs fixed"):
        racing.plan(m, m.cells, repeat=4, budget_s=60.0)
    with pytest.raises(UserError, match="--budget limits a race, and --no-race runs fixed repeats"):
        racing.plan(m, m.cells, race=False, budget_s=60.0)
    # Every group a single cell (one filesystem, two inputs): nothing to race, whatever is asked.
    single = _matrix(["ext4"], ends=(100, 200))
    for asked in ({}, {"race": True}, {"budget_s": 60.0}):
        plan = racing.plan(single, single.cells, **asked)  # type: ignore[arg-type]
        assert plan.race is None and plan.repeat == 1
        assert "no comparison group of two or more cells to race" in plan.why
    # --only keeps one cell of the group: nothing to race either.
    assert racing.plan(m, m.cells[:1]).race is None
    # Only crash groups: their runs measure recoveries, not a speed to race on.
    crash = matrix.expand_document(
        matrix.yamlpos.load(
            "axes:\n  filesystem: [ext4, xfs]\n"
            "defaults: {workload.threen1: {start: 1, end: 100}, crash: {mode: kill, after_s: 1}}\nrepeat: 2\n"
        ),
        "m.yaml",
    )
    assert racing.plan(crash, crash.cells) == racing.RunPlan(
        None, 2, "fixed repeats: 2 a cell (no comparison group of two or more cells to race)"
    )


def test_slurm_runs_fixed_repeats_when_the_race_is_only_the_default() -> None:
    m = _matrix(["ext4", "xfs"])
    plan = racing.plan(m, m.cells, one_machine=False)
    assert (plan.race, plan.repeat) == (None, 1)
    assert "--executor slurm: a race decides between rounds on one machine" in plan.why
    raced = matrix.expand_document(matrix.yamlpos.load(RACE_BASE + "race: {}\n"), "m.yaml")
    with pytest.raises(UserError, match=r"the matrix races \(the matrix's race:\).*give --no-race"):
        racing.plan(raced, raced.cells, one_machine=False)
    with pytest.raises(UserError, match="--budget limits a race; --executor slurm runs fixed repeats"):
        racing.plan(m, m.cells, one_machine=False, budget_s=60.0)


RACE_BASE = "axes:\n  filesystem: [ext4, xfs]\ndefaults: {workload.threen1: {start: 1, end: 100}}\nrepeat: 5\n"


@pytest.mark.parametrize(
    ("race_text", "why"),
    [
        ("race: {max_repeats: 4}", ":5: race.max_repeats 4 is below min_repeats, which is the matrix's repeat (5)"),
        ("race: {min_repeats: 4, max_repeats: 3}", ":5: race.min_repeats 4 is above max_repeats 3"),
        ("race: {max_repeats: 2}", ":5: race.max_repeats 2 must be an integer from 3 to 1000"),
        ("race: {max_repeats: 4, min_repeats: 5}", ":5: race.min_repeats 5 is above max_repeats 4"),
        ("race: {budget: -30}", ":5: race.budget -30 must be a duration > 0"),
        ("race: {budget: 0}", ":5: race.budget 0 must be a duration > 0"),
        ("race:\n  delta: 1.5", ":6: race.delta 1.5 must be a number in (0, 1)"),
        ("race: {delta: 0}", ":5: race.delta 0 must be a number in (0, 1)"),
        ("race: {speed: fast}", ":5: race: unknown key 'speed'; allowed: min_repeats, max_repeats, delta, budget"),
        ("race: {budget: soon}", ":5: race.budget 'soon' must be a duration > 0"),
    ],
)
def test_bad_race_refused_by_expand(tmp_path: Path, race_text: str, why: str) -> None:
    line = expand_refuses(tmp_path, RACE_BASE + race_text + "\n")
    assert why in line


def test_bad_race_options_refused(tmp_path: Path) -> None:
    """``fsmatrix run``'s race options: one line, exit status 2, nothing run."""
    path = tmp_path / "m.yaml"
    path.write_text("axes:\n  filesystem: [ext4, xfs]\ndefaults: {workload.threen1: {start: 1, end: 100}}\n")
    args = ("--results", str(tmp_path / "r"), "--workdir", str(tmp_path / "w"))
    assert "--repeat 2 is below the race's min_repeats (3)" in refused(
        "run", str(path), "--race", "--repeat", "2", *args
    )
    for bad in ("soon", "0", "-5m", "30 minutes", "1d"):
        line = refused("run", str(path), "--budget", bad, *args)
        assert f"--budget '{bad}' must be a duration > 0: seconds (e.g. 1800) or a number with s, m or h" in line
    assert "--budget limits a race, and --no-race runs fixed repeats" in refused(
        "run", str(path), "--no-race", "--budget", "1h", *args
    )
    assert "--order cells is for fixed repeats; a race runs in rounds" in refused(
        "run", str(path), "--order", "cells", *args
    )
    assert not (tmp_path / "r").exists()


def test_bad_race_in_a_scale_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(RACE_BASE + "scales:\n  small:\n    race: {budget: -1h}\n")
    with pytest.raises(UserError, match=r"m.yaml:7: race.budget '-1h' must be a duration > 0"):
        matrix.load(path, "small")


# --------------------------------------------------------------------------------------------
# `fsmatrix run` races by default (issue 45): the command in this process, its backend a Drawn one


TWO = "name: m\naxes:\n  filesystem: [ext4, xfs]\ndefaults: {workload.threen1: {start: 1, end: 100}}\n"


@pytest.fixture
def drawn_host(monkeypatch: pytest.MonkeyPatch) -> Callable[[Drawn], None]:
    """``--backend host`` made to run ``Drawn`` instead: the command's own rule, runs and race.json."""

    def use(backend: Drawn) -> None:
        monkeypatch.setitem(BACKENDS, "host", BackendEntry("host", "drawn", False, lambda workdir, devices: backend))

    return use


def run_cli(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    done = invoke("run", str(path), "--results", str(tmp_path / "r"), "--workdir", str(tmp_path / "w"), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_matrix_with_a_comparison_group_races_by_default(tmp_path: Path, drawn_host: Any) -> None:
    backend = Drawn({"ext4": FAST, "xfs": SLOW})
    drawn_host(backend)
    done = run_cli(tmp_path, TWO)
    assert "race: 3 to 10 repeats a cell, δ 5%, no time budget (the default with a comparison group" in done.stderr
    stored = json.loads((tmp_path / "r" / "m" / racing.RACE_FILE).read_text())
    assert stored["settings"] == {"min_repeats": 3, "max_repeats": 10, "delta": 0.05, "budget_s": None}
    assert stored["stopped"]["reason"] == "decided" and stored["stopped"]["after_round"] == 3
    assert left(stored) == {"xfs": ("retired", 3), "ext4": ("best", 3)}
    assert backend.calls == [("ext4", 1), ("xfs", 1), ("ext4", 2), ("xfs", 2), ("ext4", 3), ("xfs", 3)]
    assert "race: 3 rounds, stopped: one cell or one equivalent set left in every comparison group" in done.stdout
    assert "6 runs of the fixed design's 20 (14 saved, 70%)" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("report: ")


@pytest.mark.parametrize(
    ("args", "repeats"), [(("--repeat", "4"), 4), (("--no-race",), 2), (("--no-race", "--repeat", "3"), 3)]
)
def test_repeat_or_no_race_runs_fixed_repeats_in_rounds(
    tmp_path: Path, drawn_host: Any, args: tuple[str, ...], repeats: int
) -> None:
    backend = Drawn({"ext4": FAST, "xfs": SLOW})
    drawn_host(backend)
    done = run_cli(tmp_path, TWO + "repeat: 2\n", *args)
    assert f"fixed repeats: {repeats} a cell" in done.stderr
    assert not (tmp_path / "r" / "m" / racing.RACE_FILE).exists() and "race: " not in done.stdout
    # Rounds by default: every cell once per round, in the round's order matrix.json records.
    assert sorted(backend.calls) == sorted((fs, r) for r in range(1, repeats + 1) for fs in ("ext4", "xfs"))
    assert [r for _, r in backend.calls] == [r for r in range(1, repeats + 1) for _ in range(2)]
    rounds = json.loads((tmp_path / "r" / "m" / "matrix.json").read_text())["order"]["rounds"]
    fs_of = {
        c["id"]: c["params"]["filesystem"]
        for c in json.loads((tmp_path / "r" / "m" / "matrix.json").read_text())["cells"]
    }
    assert backend.calls == [(fs_of[c], r) for r, ids in enumerate(rounds, 1) for c in ids]
    assert runs_of(tmp_path / "r", "m") == {"ext4": repeats, "xfs": repeats}


def test_order_cells_stays_available(tmp_path: Path, drawn_host: Any) -> None:
    backend = Drawn({"ext4": FAST, "xfs": SLOW})
    drawn_host(backend)
    run_cli(tmp_path, TWO + "repeat: 2\n", "--no-race", "--order", "cells")
    assert backend.calls == [("ext4", 1), ("ext4", 2), ("xfs", 1), ("xfs", 2)]


def test_a_matrix_without_a_comparison_group_runs_fixed_repeats(tmp_path: Path, drawn_host: Any) -> None:
    backend = Drawn({"ext4": FAST})
    drawn_host(backend)
    text = "name: m\naxes:\n  filesystem: [ext4]\n  workload.threen1.end: [100, 200]\n"
    done = run_cli(tmp_path, text + "defaults: {workload.threen1: {start: 1}}\nrepeat: 2\n", "--budget", "1h")
    assert "fixed repeats: 2 a cell (no comparison group of two or more cells to race; --budget does not apply)" in (
        done.stderr
    )
    assert not (tmp_path / "r" / "m" / racing.RACE_FILE).exists()
    assert [r for _, r in backend.calls] == [1, 1, 2, 2]  # in rounds


def test_the_budget_stops_the_default_race_and_a_larger_one_continues_it(tmp_path: Path, drawn_host: Any) -> None:
    # Two cells of 100 s a run: 200 s a round. A 250 s budget is spent after round 2 (400 s), before
    # anything can be decided (the minimum is 3 runs).
    laws: dict[str, Law | Callable[[int], Law]] = {"ext4": FAST, "xfs": SLOW}
    drawn_host(Drawn(laws, duration_s=100.0))
    done = run_cli(tmp_path, TWO, "--budget", "250s")
    assert "race: 3 to 10 repeats a cell, δ 5%, budget 250 s" in done.stderr
    path = tmp_path / "r" / "m" / racing.RACE_FILE
    stored = json.loads(path.read_text())
    assert stored["settings"]["budget_s"] == 250.0
    assert stored["stopped"] == {
        "after_round": 2,
        "why": "the budget (250 s) was spent: the runs took 400 s",
        "reason": "budget",
    }
    (group,) = stored["groups"]
    assert (group["decided"], group["closed_after_round"]) == (False, 2)
    assert left(stored) == {"ext4": ("remained", 2), "xfs": ("remained", 2)}  # no best before the minimum
    assert "stopped: the budget (250 s) was spent" in done.stdout
    # The same command again: the race stays stopped, nothing runs.
    again = Drawn(laws, duration_s=100.0)
    drawn_host(again)
    run_cli(tmp_path, TWO, "--budget", "250s")
    assert again.calls == [] and json.loads(path.read_text()) == stored
    # A larger budget: the race goes on from round 3 and is decided there.
    more = Drawn(laws, duration_s=100.0)
    drawn_host(more)
    run_cli(tmp_path, TWO, "--budget", "2h")
    stored = json.loads(path.read_text())
    assert more.calls == [("ext4", 3), ("xfs", 3)]
    assert stored["settings"]["budget_s"] == 7200.0
    assert stored["stopped"]["reason"] == "decided" and stored["groups"][0]["decided"] is True
    assert left(stored) == {"xfs": ("retired", 3), "ext4": ("best", 3)}


def test_a_cell_alone_in_its_group_runs_the_race_minimum_and_does_not_hold_the_race(tmp_path: Path) -> None:
    """A raced matrix's group of one cell (and a crash group) is not raced: it runs every round up to
    the race's minimum and leaves; the raced groups decide when the race stops."""
    m = matrix.expand_document(
        matrix.yamlpos.load(
            "axes:\n  filesystem: [ext4, xfs]\ndefaults: {workload.threen1: {start: 1, end: 100}}\n"
            "include:\n  - {filesystem: btrfs, workload: {threen1: {start: 1, end: 300}}}\n"
        ),
        "m.yaml",
    )
    backend = Drawn({"ext4": (10.0, 0.1), "xfs": (10.3, 0.1), "btrfs": FAST})
    options = runs.RunOptions(tmp_path, "r", racing.RunPlan(RaceSettings(4, 6), 6))
    summary = runs.run_matrix(m, m.cells, backend, options, Console(file=io.StringIO()))
    assert summary.race is not None
    stored = summary.race.record()
    assert runs_of(tmp_path) == {"ext4": 6, "xfs": 6, "btrfs": 4}
    alone = next(g for g in stored["groups"] if len(g["cells"]) == 1)
    assert (alone["raced"], alone["decided"], alone["closed_after_round"]) == (False, None, 4)
    assert left(stored)["btrfs"] == ("remained", 4)
    assert stored["stopped"]["reason"] == "max_repeats"


# --------------------------------------------------------------------------------------------
# the real thing


@needs_root
@pytest.mark.system
def test_a_real_race_on_the_host(tmp_path: Path) -> None:
    """Two cells of 3n+1 1..2000 on tmpfs (GT.M's buffers differ), at most 4 repeats: the race runs,
    stores race.json, and the report and summary show it."""
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: race\naxes:\n  gtm.global_buffers: [1000, 4000]\n"
        "defaults: {filesystem: tmpfs, workload.threen1: {start: 1, end: 2000, workers: 2}}\n"
        "repeat: 4\nrace: {max_repeats: 4}\n"
    )
    workdir = tmp_path / "work"  # tmpfs cells: no loop image files, so /tmp will do
    done = subprocess.run(
        [*FSMATRIX, "run", str(path), "--results", str(tmp_path / "res"), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    stored = json.loads((tmp_path / "res" / "race" / racing.RACE_FILE).read_text())
    assert stored["stopped"] is not None and 3 <= len(stored["rounds"]) <= 4
    assert set(stored["left"]) == set(stored["cells"])
    assert "race: " in done.stdout and "runs of the fixed design's 8" in done.stdout
    report = (tmp_path / "res" / "race" / "report.md").read_text()
    assert "## Race" in report and "tied" not in report
    if all(left["action"] != "remained" for left in stored["left"].values()):  # decided: the answer is the race's
        assert "Decided by the race (race.json" in report.split("## Race")[0]
    assert len(store.load_results(tmp_path / "res" / "race")) == stored["runs_used"]
