"""``fsmatrix search FILE`` before any run (docs/search.md): the matrix file's ``search:`` block (every key,
each bad value one line with the file, line and what is allowed, exit 2), the files a search refuses,
the space of a matrix (settings, configurations with an exclude, defaults from the baseline, the cells
``fsmatrix matrix expand`` gives) and ``--dry-run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke
from fsmatrix import matrix
from fsmatrix.errors import UserError
from fsmatrix.matrix import SearchSettings
from fsmatrix.matrix.settings import search_settings
from fsmatrix.results.verdict.space import Config, Space
from fsmatrix.search import stages
from fsmatrix.search.space_of import level_label, space_of

HEAD = """name: s
axes:
  gtm.global_buffers: [35000, 64]
  gtm.journal: [before, nobefore]
  mount_options: ["", noatime]
defaults:
  filesystem: ext4
  workload.threen1: {start: 1, end: 1000}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def refused_line(*args: str) -> str:
    done = invoke(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsmatrix: error: "), done.stderr
    return lines[0]


# --------------------------------------------------------------------------------------------
# the search: block


def test_every_key_is_read() -> None:
    def fail(message: str, line: int | None) -> UserError:
        return UserError(message, line=line)

    got = search_settings(
        {"budget": 60, "delta": 0.1, "repeats": 3, "confirm": 4, "screen_runs": 12, "max_candidates": 5,
         "max_repeats": 8, "seed": 7},
        lambda key: None,
        fail,
    )  # fmt: skip
    assert got == SearchSettings(60, None, 0.1, 3, 4, 12, 5, 8, 7)
    assert search_settings({"budget": "90m"}, lambda key: None, fail).budget_s == 5400
    assert search_settings({"budget": "1.5h"}, lambda key: None, fail).budget_s == 5400
    assert search_settings(None, lambda key: None, fail) == SearchSettings()


def test_the_matrix_carries_it_and_run_ignores_it(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + "search: {budget: 3h, seed: 2}\n")
    m = matrix.load(path)
    assert m.search == SearchSettings(budget_s=10800.0, seed=2)
    assert matrix.load(write(tmp_path, HEAD)).search is None
    assert invoke("matrix", "expand", str(path)).returncode == 0  # run's expansion takes the file as it is


@pytest.mark.parametrize(
    ("block", "line", "words"),
    [
        ("search: {color: red}", 9, "allowed: budget, delta, repeats, confirm, screen_runs, max_candidates"),
        ("search: [1, 2]", 9, "must be a mapping of budget, delta"),
        ("search:\n  budget: 1800x", 10, "a number of runs (an integer from 1 to 100000) or a duration"),
        ("search:\n  budget: 0", 10, "a number of runs"),
        ("search:\n  budget: '1800'", 10, "with s, m or h"),
        ("search:\n  delta: 1.5", 10, "search.delta 1.5 must be a number in (0, 1)"),
        ("search:\n  delta: 0", 10, "must be a number in (0, 1)"),
        ("search:\n  repeats: 1", 10, "search.repeats 1 must be an integer from 2 to 1000 (replicates are required"),
        ("search:\n  confirm: 2", 10, "search.confirm 2 must be an integer from 3"),
        ("search:\n  screen_runs: 1", 10, "search.screen_runs 1 must be an integer from 2"),
        ("search:\n  max_candidates: 1", 10, "search.max_candidates 1 must be an integer from 2"),
        ("search:\n  max_repeats: 2", 10, "search.max_repeats 2 must be an integer from 3"),
        ("search:\n  seed: -1", 10, "search.seed -1 must be an integer >= 0"),
        ("search:\n  repeats: true", 10, "search.repeats true must be an integer"),
    ],
)
def test_a_bad_value_is_one_line_with_the_file_and_line(tmp_path: Path, block: str, line: int, words: str) -> None:
    path = write(tmp_path, HEAD + block + "\n")
    said = refused_line("search", str(path), "--dry-run")
    assert f"{path}:{line}: " in said and words in said, said


# --------------------------------------------------------------------------------------------
# the files a search refuses


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("design: {kind: fractional, resolution: 3}\n", "search: makes its own designs; leave design: out"),
        ("include:\n  - {filesystem: xfs}\n", "search: takes no include entries"),
    ],
)
def test_a_design_or_an_include_is_refused(tmp_path: Path, extra: str, words: str) -> None:
    said = refused_line("search", str(write(tmp_path, HEAD + extra)), "--dry-run")
    assert words in said


def test_more_than_one_comparison_group_is_refused(tmp_path: Path) -> None:
    # an axis of the workload's input: its two values are two comparison groups
    path = write(tmp_path, HEAD.replace("axes:\n", "axes:\n  workload.threen1.workers: [1, 2]\n"))
    said = refused_line("search", str(path), "--dry-run")
    assert "cells form 2 comparison groups" in said and "a search needs one" in said


def test_a_space_of_one_configuration_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "axes: {filesystem: [ext4]}\ndefaults: {workload.threen1: {start: 1, end: 100}}\n")
    assert "no axis has two or more values" in refused_line("search", str(path), "--dry-run")


# --------------------------------------------------------------------------------------------
# the space of a matrix


def test_the_space_of_a_matrix(tmp_path: Path) -> None:
    text = HEAD + "exclude:\n  - {gtm.global_buffers: 64, mount_options: noatime}\nbaseline: {gtm.journal: nobefore, "
    text += "gtm.global_buffers: 35000, mount_options: ''}\n"
    path = write(tmp_path, text)
    found = space_of(matrix.load(path))
    space = found.space
    assert [(s.name, s.levels) for s in space.settings] == [
        ("gtm.global_buffers", ("35000", "64")),
        ("gtm.journal", ("before", "nobefore")),
        ("mount_options", ("none", "noatime")),
    ]
    assert len(space.configurations) == 6
    assert (1, 0, 1) not in space.configurations and (1, 1, 1) not in space.configurations
    assert space.baseline == (0, 1, 0)  # the named baseline's levels are the defaults
    assert (space.metric, space.direction) == ("elapsed_s", "lower")
    expanded = json.loads(invoke("matrix", "expand", str(path), "--format", "json").stdout)
    ids = [c["id"] for c in (expanded["cells"] if isinstance(expanded, dict) else expanded)]
    assert sorted(found.cells[c].id for c in space.configurations) == sorted(ids)  # the same cells as a run's
    assert found.cell(space.baseline).params["gtm"]["journal"] == "nobefore"


def test_defaults_without_a_named_baseline_are_the_first_values(tmp_path: Path) -> None:
    space = space_of(matrix.load(write(tmp_path, HEAD))).space
    assert space.baseline == (0, 0, 0) and len(space.configurations) == 8


def test_a_mapping_value_gets_a_short_label() -> None:
    assert level_label("gtm", {"gtm.global_buffers": 1000, "gtm.journal_buffers": 2312}) == "gb=1000 jb=2312"
    assert level_label("gtm", {"gtm.global_buffers": 1000}) == "global_buffers=1000"
    assert level_label("gtm.sync_io", {"gtm.sync_io": True}) == "on"


# --------------------------------------------------------------------------------------------
# --dry-run (the screening plan from a stand-in: stages.screen_plan is the engine's)


def stand_in_plan(space: Space, settings: SearchSettings) -> list[Config]:
    return [space.baseline, *space.configurations[-2:]]


def test_dry_run_prints_the_space_the_plan_and_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stages, "screen_plan", stand_in_plan)
    path = write(tmp_path, HEAD + "search: {budget: 40}\n")
    done = invoke("search", str(path), "--dry-run", "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "settings (3):" in out and "gtm.global_buffers: 35000 (default), 64" in out
    assert "mount_options: none (default), noatime" in out
    assert "configurations: 8 (the cross 2 × 2 × 2 that exclude left)" in out
    assert "full cross: 24 runs at 3 repeats" in out
    assert "screening: 3 configurations × 2 repeats = 6 runs" in out
    assert ": baseline" in out and "budget: 40 runs (search.budget)" in out
    assert not (tmp_path / "r").exists()  # nothing ran, nothing was written
    as_json = json.loads(invoke("search", str(path), "--dry-run", "--format", "json").stdout)
    assert as_json["screen_runs"] == 6 and as_json["budget_runs"] == 40 and as_json["space"]["configurations"] == 8


def test_a_search_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(space: Space, settings: SearchSettings) -> list[Config]:
        raise stages.SearchError("search.budget 4 is smaller than the screening stage's 8 runs")

    monkeypatch.setattr(stages, "screen_plan", refuse)
    path = write(tmp_path, HEAD + "search: {budget: 4}\n")
    said = refused_line("search", str(path), "--dry-run")
    assert f"{path}:9: search.budget 4 is smaller" in said
