"""race.json's formats (issue 49): `fsmatrix run` writes format 3, typed from its first write as
``store.Race``; formats 1 and 2 are read in today's words, from stored examples: the race golden's
input (format 1, ``tests/data/goldens/race``) and a race `fsmatrix run` wrote in format 2
(``tests/data/race/format2``: ext4, xfs and btrfs, 100 s a run, its 800 s budget spent after round 3;
btrfs's runs all failed, ext4 the best median then, xfs undecided).

Format 3 names what format 2 said otherwise: "leader" (the best median of a group the race left
undecided, 2's "best") and "failed" (a cell whose runs failed, 2's "retired"), which the answer calls
"not enough data" as it does without a race, not "worse"."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from fsmatrix import racing, runs
from fsmatrix.errors import UserError
from fsmatrix.matrix import RaceSettings
from fsmatrix.results import store
from fsmatrix.results.store.records import LEFT_ACTIONS, RACE_FORMAT, STATUS_OF_ACTION
from fsmatrix.results.verdict import answer, groups, race, report
from test_race import Drawn, _matrix

DATA = Path(__file__).resolve().parents[1] / "data"
FORMAT_1 = DATA / "goldens" / "race" / "race"
FORMAT_2 = DATA / "race" / "format2" / "r"
LAWS = {"ext4": (10.0, 0.1), "xfs": (10.3, 0.1), "btrfs": None}


def by_fs(race_: store.Race) -> dict[str, tuple[str, int]]:
    return {cell.split("-")[0]: (e.action, e.round) for cell, e in race_.left.items()}


def test_one_vocabulary_from_the_race_to_the_answer() -> None:
    """Every way a cell leaves a race is one of the answer's statuses; a group's verdict is one of them
    (but "worse") or its own "single" and "crash"; a look's decisions are the race rule's own."""
    assert set(STATUS_OF_ACTION.values()) <= set(groups.STATUSES)
    assert set(answer.VERDICTS) == {s for s in groups.STATUSES if s != "worse"} | {"single", "crash"}
    assert LEFT_ACTIONS == ("retired", "equivalent", "best", "leader", "remained", "failed", "skipped")
    assert (STATUS_OF_ACTION["leader"], STATUS_OF_ACTION["failed"]) == ("not separated", "not enough data")
    assert race.ACTIONS == ("keep", "retire", "equivalent")


def test_format_1_is_read_in_todays_words_and_written_as_format_3() -> None:
    stored = json.loads((FORMAT_1 / "race.json").read_text())
    assert stored["format_version"] == 1
    read = store.Race.read(stored)
    assert read.retire_margin == 0.05  # format 1 retired only beyond δ
    assert sorted(e.action for e in read.left.values()) == ["best", "retired"]
    assert "tied" not in json.dumps(read.record()) and "tied" in json.dumps(stored)
    assert (
        read.stopped is not None and read.stopped.why == "one cell or one equivalent set left in every comparison group"
    )
    first = read.rounds[0].groups[read.groups[0].key].decisions[0]
    assert (first.action, first.p_equivalent, first.ratio) == ("keep", None, None)  # format 1's p_tied
    again = store.Race.read(read.record())
    assert read.record()["format_version"] == RACE_FORMAT == 3 and again == read
    assert again.look_alpha == read.look_alpha and len(again.look_alpha[read.groups[0].key]) == 3


def test_format_2_leader_and_failed_are_read_as_format_3s() -> None:
    stored = json.loads((FORMAT_2 / "race.json").read_text())
    assert stored["format_version"] == 2
    assert {c.split("-")[0]: e["action"] for c, e in stored["left"].items()} == {
        "btrfs": "retired",
        "ext4": "best",
        "xfs": "remained",
    }
    read = store.Race.read(stored)
    assert by_fs(read) == {"btrfs": ("failed", 3), "ext4": ("leader", 3), "xfs": ("remained", 3)}
    assert {e.stopped_by for e in read.left.values()} == {None, "budget"}
    assert store.Race.read(read.record()) == read


def test_a_failed_cell_is_not_enough_data_and_the_leader_not_separated_in_the_answer() -> None:
    """The one intended change: a raced group answers a cell whose runs failed as the unraced answer
    does ("not enough data", not "worse"); an undecided race's leader reads as before."""
    (g,) = report.of_run(store.load_run_records(FORMAT_2)).answer.groups
    assert isinstance(g, answer.SpeedGroup) and g.raced is not None and not g.raced.decided
    statuses = {c.name: (c.status, c.decided_by) for c in g.configurations}
    assert statuses == {
        "btrfs": ("not enough data", "race"),
        "ext4": ("not separated", "race"),
        "xfs": ("not separated", "race"),
    }
    assert g.worse == () and g.not_enough_data == ("btrfs",)
    assert (g.verdict, g.leader, g.not_separated) == ("not separated", "ext4", ("ext4", "xfs"))


def _run(root: Path, backend: Drawn, settings: RaceSettings) -> store.Race:
    m = _matrix(["ext4", "xfs", "btrfs"])
    options = runs.RunOptions(root, "r", racing.RunPlan(settings, settings.max_repeats))
    summary = runs.run_matrix(m, m.cells, backend, options, Console(file=io.StringIO()))
    assert summary.race is not None
    return summary.race


def test_fsmatrix_run_continues_a_race_of_format_2_as_format_3(tmp_path: Path) -> None:
    shutil.copytree(FORMAT_2, tmp_path / "r")
    # The same command again with the same budget: the race stays stopped, nothing runs, nothing changes.
    same = Drawn(LAWS, duration_s=100.0)
    kept = _run(tmp_path, same, RaceSettings(3, 8, budget_s=800.0))
    assert same.calls == [] and by_fs(kept)["ext4"] == ("leader", 3)
    # A larger budget: the budget's leader and the undecided cell come back, the failed cell stays out.
    more = Drawn(LAWS, duration_s=100.0)
    went_on = _run(tmp_path, more, RaceSettings(3, 8, budget_s=1000.0))
    assert more.calls == [("ext4", 4), ("xfs", 4)]  # rounds 1-3 read back, btrfs no more
    written = json.loads((tmp_path / "r" / racing.RACE_FILE).read_text())
    assert written["format_version"] == 3 and store.Race.read(written) == went_on
    assert [r.round for r in went_on.rounds] == [1, 2, 3, 4]
    now = by_fs(went_on)
    assert now["btrfs"] == ("failed", 3) and sorted([now["ext4"], now["xfs"]]) == [("leader", 4), ("remained", 4)]
    assert went_on.stopped is not None and went_on.stopped.reason == "budget"


def test_fsmatrix_run_refuses_to_continue_a_race_of_format_1(tmp_path: Path) -> None:
    """Format 1 retired a cell only when worse by more than δ: another rule, so another race (--force)."""
    (tmp_path / "r").mkdir()
    shutil.copy(FORMAT_1 / "race.json", tmp_path / "r" / "race.json")
    with pytest.raises(
        UserError, match=r"the stored race has other retire margin \(0.05, now 0: a race.json of format 1"
    ):
        _run(tmp_path, Drawn(LAWS), RaceSettings(3, 5))


def test_run_help_describes_the_retire_test_the_race_makes_not_the_old_margin() -> None:
    # issue 51: the race retires on "worse" (one-sided, no margin) since race.json format 2
    from click.testing import CliRunner

    from fsmatrix.cli import main

    text = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert "worse than their group's best leave" in text and "by more than delta" not in text
