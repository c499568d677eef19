"""The stand-in lab: run values drawn from known distributions instead of measured (the one place a
stand-in is right: it tests the bisect's decisions, not the machine). Each run's value is drawn from
LogNormal(ln median, sigma) of its commit, seeded by (seed, run id, repeat), so the same run asked for
again (a resumed bisect) gives the same value, and stored runs are returned as they were."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fsmatrix.bisect.driver import Commit, PreparedCommit
from fsmatrix.results.store import Result

METRIC = "value_s"  # the stand-in workload's one key metric (lower is better)


def commits(n: int) -> list[Commit]:
    """The good end and ``n`` commits after it."""
    return [Commit(f"{i:02d}" + "c" * 38, f"commit {i}", i) for i in range(n + 1)]


@dataclass
class StandInLab:
    medians: list[float]  # per commit index
    sigma: float = 0.03  # sd of ln values
    seed: int = 0
    sigmas: dict[int, float] = field(default_factory=dict)  # per commit index, instead of sigma
    unprepared: set[int] = field(default_factory=set)  # commits whose --prepare fails
    failing: set[int] = field(default_factory=set)  # commits whose runs fail
    interrupt_after: int | None = None  # raise KeyboardInterrupt when this many new runs were made
    stored: dict[tuple[str, int], Result] = field(default_factory=dict)
    made: int = 0
    released: list[str] = field(default_factory=list)
    on_run: Callable[[str, int], None] | None = None

    def prepare(self, commit: Commit) -> PreparedCommit:
        if commit.index in self.unprepared:
            return PreparedCommit(commit, {}, "make: *** [vmlinux] Error 2")
        return PreparedCommit(commit, {"standin.commit": commit.index})

    def run(self, prepared: PreparedCommit, run_id: str, repeat: int) -> Result:
        key = (run_id, repeat)
        if key in self.stored:
            return self.stored[key]
        if self.interrupt_after is not None and self.made >= self.interrupt_after:
            raise KeyboardInterrupt
        i = prepared.commit.index
        rng = np.random.default_rng([self.seed, zlib.crc32(run_id.encode()), repeat])
        value = float(self.medians[i] * np.exp(rng.normal(0.0, self.sigmas.get(i, self.sigma))))
        status = "failed" if i in self.failing else "passed"
        doc = {
            "cell_id": "standin-cell",
            "repeat": repeat,
            "run_id": run_id,
            "status": status,
            "reason": "the workload's verification failed" if status == "failed" else None,
            "workload": "standin",
            "key_metrics": {METRIC: "lower"},
            "metrics": {METRIC: value} if status == "passed" else {},
            "duration_s": value,
            "provenance": {"bisect": {"commit": prepared.commit.sha}},
        }
        self.stored[key] = result = Result.read(doc)
        self.made += 1
        if self.on_run:
            self.on_run(run_id, repeat)
        return result

    def release(self, commit: Commit) -> None:
        self.released.append(commit.sha)


def step_change(n: int, culprit: int, effect: float) -> list[float]:
    """Medians of commits 0..n: 1.0 before ``culprit``, 1 + effect from it on."""
    return [1.0 if i < culprit else 1.0 + effect for i in range(n + 1)]
