"""Crash verdicts of ``crash.mode: flush-points`` runs: each point is a recovery of its own, with its
steps and checks inside the point, so a run whose points all passed recovered (it used to read "no
recovery recorded", and the answer called ext4 UNSAFE); a stack that sent no flush or FUA request
between the marks has no point to recover at: no verdict, saying why. The sections are cut down from
real runs (GT.M 3n+1 1..20,000 on ext4 and jfs, qemu under TCG, 2026-12-07)."""

from __future__ import annotations

from typing import Any

from conftest import typed
from fsmatrix.results.render.sentences import crash_text, said
from fsmatrix.results.verdict import answering, crash
from test_answer import cells

THREEN1 = {"threen1": {"start": 1, "end": 20000, "workers": 2, "block": 1000, "keys": "integer"}}
NO_FLUSH = "recovery failed: log: no flush or FUA entry between the marks fsmatrix-start and fsmatrix-end"


def _point(index: int, verdict: str = "passed") -> dict[str, Any]:
    return {
        "index": index,
        "verdict": verdict,
        "reason": "" if verdict == "passed" else "mupip integ: errors",
        "mount_s": 0.078,
        "recovery_s": 0.326,
        "steps": [{"name": "mupip journal -recover -backward", "status": "ok"}],
        "checks": [
            {"name": "mupip integ", "verdict": "passed" if verdict == "passed" else "failed"},
            {"name": "work reused", "verdict": "failed"},  # informational: an early point finds little done
        ],
    }


def _section(points: list[dict[str, Any]], available: int) -> dict[str, Any]:
    return {
        "mode": "flush-points",
        "after_s": 1,
        "fired": bool(points),
        "mount_s": 0.296 if points else None,
        "recovery_s": 0.826 if points else None,
        "steps": [],
        "checks": [],
        "points": points,
        "flush_points": {"seed": 1, "asked": 10, "available": available, "chosen": [p["index"] for p in points]},
    }


def _group(ext4_points: list[dict[str, Any]]) -> Any:
    spec = {
        "axes": {"filesystem": ["ext4", "jfs"]},
        "defaults": {"workload": THREEN1, "crash": {"mode": "flush-points", "after_s": 1, "points": 10, "seed": 1}},
    }
    ext4, jfs = cells(spec)
    docs = []
    for cell, section, status, reason in (
        (
            ext4,
            _section(ext4_points, 62),
            "passed" if all(p["verdict"] == "passed" for p in ext4_points) else "failed",
            None,
        ),
        (jfs, _section([], 0), "failed", NO_FLUSH),
    ):
        doc = {
            "schema_version": 1,
            "run_id": "t",
            "cell_id": cell.id,
            "repeat": 1,
            "status": status,
            "reason": reason,
            "params": cell.params,
            "metrics": {"elapsed_s": 0.98},
            "crash": section,
        }
        docs.append(doc)
    (g,) = answering.build(typed(docs)).groups
    return g


def test_a_run_whose_flush_points_all_recovered_is_safe() -> None:
    points = [_point(i) for i in range(10)]
    assert crash.recovery_status(_section(points, 62)) == "yes"
    g = _group(points)
    ext4 = g.crash[0]
    assert (ext4.configuration, ext4.verdict, ext4.recovered) == ("ext4", "safe", 1)
    assert "recovered from every crash: ext4" in said(g, 0.05).headline
    assert "UNSAFE" not in said(g, 0.05).headline


def test_one_failed_flush_point_fails_the_recovery() -> None:
    points = [_point(i) for i in range(9)] + [_point(9, "failed")]
    assert crash.recovery_status(_section(points, 62)) == "no: 1 of 10 flush points failed"
    assert _group(points).crash[0].verdict == "unsafe"


def test_no_flush_point_is_no_verdict_and_says_why() -> None:
    jfs = _group([_point(0)]).crash[1]
    assert (jfs.configuration, jfs.verdict, jfs.not_crashed) == ("jfs", "no verdict", 1)
    assert crash_text(jfs) == (
        f"jfs: no verdict, no run crashed and recovered ({NO_FLUSH}). Not counted: 1 never crashed: no verdict on "
        "the configuration."
    )
