"""How well does ``fsmatrix bisect`` find a regression on this machine? ``python -m fsmatrix.bench.bisect``

The realistic case: a throwaway repository of ``--commits`` commits (16) after a good one, and a
regression of ``--effect`` (20 %) from a commit drawn at random; ``--bisects`` (10) bisects of it,
each a real one — a clone per tested commit, the cell of ``--matrix``/``--only`` (the PR gate's 3n+1
cell) run on ``--backend`` (host) — with one thing injected: the runs of the commits from the drawn
one on have the gated metrics made ``--effect`` worse, as a program doing that much more work would
have them (``bench.gate.scaled``'s rule: the machine's real noise, a regression of known size and
place; the stored runs stay as measured). Each bisect has a results directory of its own under
``--results``, so an interrupted benchmark resumes where it stopped.

Prints, as Markdown: how often the drawn commit was named (and confirmed; and how often a wrong one), with the 95 %
Clopper-Pearson interval; runs and minutes per bisect; date, machine, commit, load averages, command.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix.agent import provenance
from fsmatrix.backends import BACKENDS
from fsmatrix.bisect import driver
from fsmatrix.bisect import git as bisect_git
from fsmatrix.bisect.lab import GitLab, LabSetup, one_cell
from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm
from fsmatrix.results import store
from fsmatrix.results.verdict import gate, stats
from fsmatrix.results.verdict.metrics import gate_metrics

SETTINGS = "bisect-settings.yaml"
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost"}


class InjectedLab:
    """A lab whose documents from commit ``culprit`` on have their gated metrics ``effect`` worse."""

    def __init__(self, inner: GitLab, culprit: int, effect: float) -> None:
        self.inner, self.culprit, self.effect = inner, culprit, effect

    def prepare(self, commit: driver.Commit) -> driver.PreparedCommit:
        return self.inner.prepare(commit)

    def run(self, prepared: driver.PreparedCommit, run_id: str, repeat: int) -> store.Result:
        doc = self.inner.run(prepared, run_id, repeat)
        if prepared.commit.index < self.culprit or doc.status != "passed":
            return doc
        metrics = dict(doc.metrics)
        for metric in gate_metrics([doc]):
            value = metrics.get(metric)
            if value is not None:
                better = doc.key_metrics.get(metric, "lower")
                metrics[metric] = value * (1 + self.effect if better == "lower" else 1 / (1 + self.effect))
        return replace(doc, metrics=metrics)  # a stand-in: the stored document is unchanged

    def release(self, commit: driver.Commit) -> None:
        self.inner.release(commit)


def make_repo(where: Path, commits: int) -> None:
    """A repository of a good commit and ``commits`` after it, all with the same (empty) settings."""
    env = {**os.environ, **GIT_ENV, "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
    # Fixed dates: the same shas every time, so that a re-run finds its stored runs and resumes.
    env |= {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(where)], check=True, env=env)
    (where / SETTINGS).write_text("{}\n")
    for i in range(commits + 1):
        (where / "code.txt").write_text(f"version {i}\n")
        subprocess.run(["git", "-C", str(where), "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", str(where), "commit", "-q", "-m", f"change {i}"], check=True, env=env)


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()  # a timeout's SIGTERM unmounts and detaches as Ctrl-C does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bisects", type=int, default=10)
    parser.add_argument("--commits", type=int, default=16, help="commits after the good one")
    parser.add_argument("--effect", type=float, default=0.2, help="the injected regression (0.2: 20 %% worse)")
    parser.add_argument("--threshold", default="5%")
    parser.add_argument("--seed", type=int, default=0, help="draws the regressing commit of each bisect")
    parser.add_argument("--matrix", type=Path, default=Path("matrix/pr.yaml"))
    parser.add_argument("--only", default="ext4-threen1-*")
    parser.add_argument("--backend", choices=list(BACKENDS), default="host")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/fsmatrix"))
    parser.add_argument("--results", type=Path, default=Path("results/bench-bisect"))
    args = parser.parse_args(argv)
    try:
        if args.bisects < 1 or args.commits < 1 or not 0 < args.effect < 10:
            raise UserError("--bisects and --commits must be at least 1, --effect in (0, 10)")
        plan = driver.Plan(threshold=gate.parse_threshold(args.threshold))
        base = one_cell(args.matrix, args.only)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    backend = BACKENDS[args.backend].make(args.workdir, [])
    outcomes: list[tuple[str, dict[str, Any]]] = []  # the drawn culprit's sha, the bisect's report
    loads = [os.getloadavg()[0]]
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="fsmatrix-bench-bisect-") as tmp:
            repo = Path(tmp) / "repo"
            make_repo(repo, args.commits)
            commits = bisect_git.commits(repo, "main~" + str(args.commits), "main")
            for b in range(1, args.bisects + 1):
                culprit = random.Random(args.seed * 1000 + b).randint(1, args.commits)
                results_root = args.results / f"b{b}"
                setup = LabSetup(
                    repo=repo,
                    base=base,
                    matrix_file=args.matrix,
                    prepare=None,
                    settings_file=SETTINGS,
                    results_root=results_root,
                    workdir=args.workdir,
                )
                lab = GitLab(setup, backend)
                try:
                    report = driver.Bisector(commits, InjectedLab(lab, culprit, args.effect), plan, cell=base.id).run()
                finally:
                    lab.close()
                loads.append(os.getloadavg()[0])
                outcomes.append((commits[culprit].sha, report))
                named = (report["culprit"] or {}).get("index")
                print(f"bisect {b}: regression at {culprit}, named {named}: {report['first_line']}", file=sys.stderr)
    finally:
        backend.close()
    print(table(args, outcomes, loads, time.monotonic() - started))
    return 0


def table(args: Any, outcomes: list[tuple[str, dict[str, Any]]], loads: list[float], seconds: float) -> str:
    n = len(outcomes)
    named = [(culprit, (r["culprit"] or {}).get("sha")) for culprit, r in outcomes]
    found = sum(c == x for c, x in named)
    wrong = sum(x is not None and c != x for c, x in named)
    confirmed = sum(
        c == x and bool((r["confirmation"] or {}).get("confirmed"))
        for (c, x), (_, r) in zip(named, outcomes, strict=True)
    )
    # Skipped steps end in a range of candidates (as git bisect's "one of these"): holding the culprit or not.
    ranges = [(c, r["candidates"]) for c, r in outcomes if r.get("finding") == "range"]
    held = [len(candidates) for c, candidates in ranges if c in candidates]
    runs = [r["runs"]["total"] for _, r in outcomes]
    minutes = [r["runs"]["seconds"] / 60 for _, r in outcomes]

    def rate(hits: int) -> str:
        low, high = stats.clopper_pearson(hits, n)
        return f"{hits}/{n} ({hits / n:.0%}, 95 % CI {low:.0%}-{high:.0%})"

    sizes = f", of {min(held)}..{max(held)} commits" if held else ""
    prov = provenance.collect()
    return "\n".join(
        [
            f"Bisect benchmark: {args.commits} commits, a {args.effect:.0%} regression injected at a random commit, "
            f"{args.only} of {args.matrix}, backend {args.backend}, threshold {args.threshold}; "
            f"{datetime.now(UTC):%Y-%m-%d}, {prov['cpu_model']} × {prov['cpu_count']}, kernel {platform.release()}, "
            f"git {prov['git']['sha'][:10]}; 1-min load average {min(loads):.2f}..{max(loads):.2f}; "
            f"{seconds / 60:.1f} min in all",
            "",
            "| bisects | culprit named | and confirmed | wrong commit named | a range holding it (skips) | "
            "runs per bisect, median (min..max) | minutes of runs per bisect, median (min..max) |",
            "|---|---|---|---|---|---|---|",
            f"| {n} | {rate(found)} | {rate(confirmed)} | {rate(wrong)} | {len(held)} of {len(ranges)}{sizes} | "
            f"{statistics.median(runs):g} ({min(runs)}..{max(runs)}) | "
            f"{statistics.median(minutes):.1f} ({min(minutes):.1f}..{max(minutes):.1f}) |",
            "",
            "Command: python -m fsmatrix.bench.bisect " + " ".join(sys.argv[1:]),
        ]
    )


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.bisect")
