"""A raced group the race did not decide (its budget spent, or its last round reached): the answer says
so and why, keeps what the race did decide, and says what would settle the rest and how long it would take."""

from __future__ import annotations

from typing import Any

from conftest import typed
from fsmatrix.results import store
from fsmatrix.results.render import sentences
from fsmatrix.results.verdict import answer, answering
from test_answer import THREEN1, cells, runs


def budget_race(ids: dict[str, str]) -> dict[str, Any]:
    """A race.json as `fsmatrix run` writes one stopped by its budget after round 4: btrfs retired,
    ext4 and xfs sent away undecided (xfs the best median then)."""
    return {
        "format_version": 1,
        "settings": {"min_repeats": 3, "max_repeats": 10, "delta": 0.05, "budget_s": 720.0},
        "alpha": 0.05,
        "cells": list(ids.values()),
        "groups": [{"key": "g", "label": "l", "metric": "elapsed_s", "direction": "lower", "raced": True,
                    "cells": list(ids.values()), "decided": False, "closed_after_round": 4}],
        "rounds": [
            {"round": r, "ran": list(ids.values()), "groups": {"g": {"look_alpha": 0.0011}}} for r in (1, 2, 3, 4)
        ],
        "left": {
            ids["btrfs"]: {"round": 3, "action": "retired", "reason": "1.5x the best, p = 0.0001: significantly worse"},
            ids["xfs"]: {"round": 4, "action": "best", "reason": "the budget (12 min) is spent; the best median then",
                         "stopped_by": "budget"},
            ids["ext4"]: {"round": 4, "action": "remained", "reason": "the budget (12 min) is spent",
                          "stopped_by": "budget"},
        },
        "stopped": {"after_round": 4, "why": "the budget (12 min) is spent", "reason": "budget"},
        "runs_used": 11,
        "runs_fixed": 30,
    }  # fmt: skip


def test_a_race_its_budget_stopped_says_so_keeps_its_decisions_and_says_what_would_settle_the_rest() -> None:
    made = cells({"axes": {"filesystem": ["ext4", "xfs", "btrfs"]}, "defaults": {"workload": THREEN1}})
    ext4, xfs, btrfs = made
    docs = runs(ext4, [10.0, 10.3, 9.8, 10.1]) + runs(xfs, [9.9, 10.2, 9.7, 10.0]) + runs(btrfs, [15.0, 15.2, 14.9])
    for d in docs:
        d["duration_s"] = 60.0
    race = store.Race.read(budget_race({"ext4": ext4.id, "xfs": xfs.id, "btrfs": btrfs.id}))
    (g,) = answering.build(typed(docs), None, race).groups
    assert isinstance(g, answer.SpeedGroup) and g.raced is not None and not g.raced.decided
    assert g.verdict == "not separated" and g.worse == ("btrfs",)  # the race's retirement stands
    assert not g.decided_on_time and g.still_open  # what would settle ext4 against xfs
    said = sentences.said(g, 0.05)
    assert "(the race stopped at its 12 min budget after round 4)" in said.headline
    assert "runs per configuration would settle ±5 %" in said.headline and "more of runs)" in said.headline
    assert any(s.startswith("Not decided by the race (the race stopped at its 12 min budget") for s in said.details)
    assert g.settle_s is not None and g.settle_s > 0


def test_a_race_that_decided_says_decided_and_needs_no_advice() -> None:
    made = cells({"axes": {"filesystem": ["ext4", "xfs", "btrfs"]}, "defaults": {"workload": THREEN1}})
    ext4, xfs, btrfs = made
    docs = runs(ext4, [10.0, 10.1, 9.9]) + runs(xfs, [12.0, 12.1, 11.9]) + runs(btrfs, [15.0, 15.2, 14.9])
    stored = budget_race({"ext4": ext4.id, "xfs": xfs.id, "btrfs": btrfs.id})
    stored["groups"][0]["decided"] = True
    stored["left"][xfs.id] = {"round": 3, "action": "retired", "reason": "worse"}
    stored["left"][ext4.id] = {"round": 3, "action": "best", "reason": "every other cell retired"}
    stored["stopped"] = {"after_round": 3, "why": "every group decided", "reason": "decided"}
    (g,) = answering.build(typed(docs), None, store.Race.read(stored)).groups
    assert isinstance(g, answer.SpeedGroup) and g.raced is not None and g.raced.decided
    assert g.verdict == "best" and g.decided_on_time and g.still_open == ()
    assert any(
        s.startswith("Decided by the race (race.json, every group decided)") for s in sentences.said(g, 0.05).details
    )


def test_format_3_says_leader_and_failed_and_the_answer_reads_as_before() -> None:
    """race.json format 3 names an undecided race's leader "leader" (format 1 and 2: "best") and a cell
    whose runs failed "failed" (before: "retired", answered worse): the leader's sentences are the same
    as from the older file; the failed cell is "not enough data", as without a race."""
    made = cells({"axes": {"filesystem": ["ext4", "xfs", "btrfs"]}, "defaults": {"workload": THREEN1}})
    ext4, xfs, btrfs = made
    docs = runs(ext4, [10.0, 10.3, 9.8, 10.1]) + runs(xfs, [9.9, 10.2, 9.7, 10.0]) + runs(btrfs, [15.0, 15.2, 14.9])
    old = budget_race({"ext4": ext4.id, "xfs": xfs.id, "btrfs": btrfs.id})
    new = {**old, "format_version": 3, "retire_margin": 0.0, "left": {**old["left"]}}
    new["left"][xfs.id] = {**old["left"][xfs.id], "action": "leader"}
    (before,) = answering.build(typed(docs), None, store.Race.read(old)).groups
    (after,) = answering.build(typed(docs), None, store.Race.read(new)).groups
    assert isinstance(before, answer.SpeedGroup) and isinstance(after, answer.SpeedGroup)
    assert (after.verdict, after.leader, after.not_separated) == ("not separated", "xfs", ("ext4", "xfs"))
    assert sentences.said(after, 0.05).headline == sentences.said(before, 0.05).headline
    failing = "3 of 3 runs failed or measured <= 0: a cell whose runs fail never wins"
    new["left"][btrfs.id] = {"round": 3, "action": "failed", "reason": failing}
    old["left"][btrfs.id] = {"round": 3, "action": "retired", "reason": failing}  # format 1 and 2's words for it
    for stored in (new, old):
        (g,) = answering.build(typed(docs), None, store.Race.read(stored)).groups
        assert isinstance(g, answer.SpeedGroup)
        assert g.configuration("btrfs").status == "not enough data" and g.worse == ()
