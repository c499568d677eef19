"""The bisect's loop: the ends, the steps, the confirmation and the finding, over a ``Lab``.

A ``Lab`` prepares a commit (its settings, or why it cannot be tested) and runs it (one result
document per run id and repeat). The loop is a deterministic function of the documents the lab
returns: run again after an interruption, it asks for the same runs in the same order, the real lab
(``bisect.lab``) returns the ones already stored without running them, and the same decisions follow.
That is the resume. The tests' lab draws the values from known distributions instead.

Run ids name the phase and the commit (``ends-<sha12>``, ``s<k>-<sha12>``, ``confirm-<sha12>``), so
no phase ever reuses another commit's runs; the repeat number is the round.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from fsmatrix.bisect import bisection
from fsmatrix.errors import UserError
from fsmatrix.results import store
from fsmatrix.results.verdict import metrics, stats

FORMAT_VERSION = 1
FINDINGS = ("culprit", "range", "no regression", "stopped")


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    index: int  # 0: the good end; the last: the bad end

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclass(frozen=True)
class PreparedCommit:
    """A commit prepared for its runs: the settings its build gives the cell, or why it cannot be tested."""

    commit: Commit
    settings: dict[str, Any] = field(default_factory=dict)  # what --prepare printed (or the settings file)
    failure: str | None = None  # why the commit cannot be tested: it is skipped


class Lab(Protocol):
    def prepare(self, commit: Commit) -> PreparedCommit:
        """The commit's settings, or why it cannot be tested."""

    def run(self, prepared: PreparedCommit, run_id: str, repeat: int) -> store.Result:
        """Repeat ``repeat`` of the cell with the commit's settings under ``run_id``: its result document
        (the stored one when that run is complete: the resume)."""

    def release(self, commit: Commit) -> None:
        """The commit's runs are over (its temporary clone can go)."""


@dataclass(frozen=True)
class Plan:
    """How the bisect decides (docs/bisect.md)."""

    threshold: float = 0.05  # δ: a regression is worse by more than this
    alpha: float = stats.ALPHA  # the bound on naming a wrong commit; also the ends' and confirmation's level
    min_rounds: int = stats.MIN_SAMPLES  # nothing is decided before this many rounds
    max_rounds: int = 20  # a step undecided after this many rounds is skipped (the budget)
    max_skips: int = 3  # more skipped commits than this stop the search (a range is reported)
    confirm_rounds: int = 8  # fresh pairs of the culprit and its parent (the PR gate confirms with 8)
    metric: str | None = None  # None: the gated metric the ends show regressed most clearly

    def look(self, after_round: int, alpha: float) -> bisection.JudgeLook:
        """The look after round ``after_round`` at level ``alpha`` (a step's, or one metric's share)."""
        return bisection.JudgeLook(
            after_round=after_round,
            max_rounds=self.max_rounds,
            delta=self.threshold,
            alpha=alpha,
            min_rounds=self.min_rounds,
        )

    def check(self) -> None:
        if not 0 < self.threshold < 1:
            raise UserError(f"--threshold {self.threshold:g}: must be between 0 and 100 %")
        if not 0 < self.alpha < 0.5:
            raise UserError(f"--alpha {self.alpha:g}: must be between 0 and 0.5")
        if not stats.MIN_SAMPLES <= self.min_rounds <= self.max_rounds:
            raise UserError(
                f"--max-rounds {self.max_rounds}: must be at least the minimum rounds ({self.min_rounds}, >= 3)"
            )
        if self.max_skips < 0 or self.confirm_rounds < stats.MIN_SAMPLES:
            raise UserError(f"--max-skips must be >= 0 and --confirm-rounds >= {stats.MIN_SAMPLES}")


@dataclass(frozen=True)
class ComparedEnds:
    """The bisect's two ends, prepared, and what a step compares against them: the metric and its direction."""

    good: PreparedCommit
    bad: PreparedCommit
    metric: str
    direction: str


@dataclass
class _Tally:
    runs: int = 0
    seconds: float = 0.0
    failed: int = 0


def _value(doc: store.Result, metric: str) -> float | None:
    return metrics.metric_value(doc, metric) if doc.status == "passed" else None


def _values(docs: list[store.Result], metric: str) -> list[float]:
    return [v for d in docs if (v := _value(d, metric)) is not None and v > 0]


def _failure(doc: store.Result) -> str | None:
    if doc.status == "passed":
        return None
    return f"{doc.status}: {doc.reason or 'no reason recorded'}"


def _check_end(side: str, prepared: PreparedCommit, docs: list[store.Result]) -> None:
    """An end's run may fail once (a hiccup of the machine; its value is left out); a second failure
    stops the bisect: without both ends nothing can be decided."""
    failures = [f for d in docs if (f := _failure(d))]
    if len(failures) > 1:
        raise UserError(
            f"the {side} end {prepared.commit.short}'s runs fail ({failures[-1]}): the bisect needs both ends to run"
        )


class Bisector:
    """One bisect of ``commits`` (the good end first, the bad end last) with ``lab``."""

    def __init__(
        self, commits: list[Commit], lab: Lab, plan: Plan, *, cell: str, say: Callable[[str], None] = lambda _: None
    ) -> None:
        if len(commits) < 2:
            raise UserError("the range holds no commit after the good end")
        plan.check()
        self.commits, self.lab, self.plan, self.cell, self.say = commits, lab, plan, cell, say
        self.tally = _Tally()
        self.n = len(commits) - 1

    # --------------------------------------------------------------------------- running

    def _run(self, prepared: PreparedCommit, phase: str, repeat: int) -> store.Result:
        doc = self.lab.run(prepared, f"{phase}-{prepared.commit.short}", repeat)
        self.tally.runs += 1
        self.tally.seconds += float(doc.duration_s or 0.0)
        if doc.status != "passed":
            self.tally.failed += 1
        return doc

    def _prepare_end(self, commit: Commit, which: str) -> PreparedCommit:
        prepared = self.lab.prepare(commit)
        if prepared.failure:
            raise UserError(f"the {which} end {commit.short} cannot be tested: {prepared.failure}")
        return prepared

    @staticmethod
    def _order(r: int, items: list[PreparedCommit]) -> list[PreparedCommit]:
        """Round r's order: rotated each round, so no side always runs first (or after the same one)."""
        k = (r - 1) % len(items)
        return items[k:] + items[:k]

    # --------------------------------------------------------------------------- phases

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        plan = self.plan
        good_c, bad_c = self.commits[0], self.commits[-1]
        good_p, bad_p = self._prepare_end(good_c, "good"), self._prepare_end(bad_c, "bad")
        report: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "cell": self.cell,
            "good": {"sha": good_c.sha, "subject": good_c.subject},
            "bad": {"sha": bad_c.sha, "subject": bad_c.subject},
            "commits": self.n,
            "plan": asdict(plan),
            "steps": [],
            "skipped": [],
            "culprit": None,
            "candidates": [],
            "confirmation": None,
        }
        metric, direction, ends = self._ends(good_p, bad_p)
        report.update(metric=metric, direction=direction, ends=ends)
        if metric is None:
            report["finding"] = "no regression"
        else:
            self._search(ComparedEnds(good_p, bad_p, metric, direction), report)
        report["runs"] = {
            "total": self.tally.runs,
            "failed": self.tally.failed,
            "seconds": round(self.tally.seconds, 1),
        }
        report["wall_s"] = round(time.monotonic() - started, 1)
        report["first_line"] = first_line(report)
        return report

    def _ends(self, good_p: PreparedCommit, bad_p: PreparedCommit) -> tuple[str | None, str, dict[str, Any]]:
        """Rounds of both ends until some metric shows the bad end slower by more than δ (the one with
        the smallest p-value is followed), every metric shows it is not, or the last round."""
        plan = self.plan
        docs: dict[str, list[store.Result]] = {"good": [], "bad": []}
        metrics: dict[str, str] = {}
        verdicts: dict[str, bisection.Judgement] = {}
        r = 0
        for r in range(1, plan.max_rounds + 1):
            for p in self._order(r, [good_p, bad_p]):
                side = "good" if p is good_p else "bad"
                doc = self._run(p, "ends", r)
                docs[side].append(doc)
                _check_end(side, p, docs[side])
            if not metrics:
                metrics = self._metrics(docs["good"] + docs["bad"])
            if r < plan.min_rounds:
                continue
            per_metric = plan.alpha / len(metrics)
            verdicts = {
                m: bisection.judge_ends(_values(docs["good"], m), _values(docs["bad"], m), d, plan.look(r, per_metric))
                for m, d in metrics.items()
            }
            if any(j.verdict == "regression" for j in verdicts.values()) or all(
                j.verdict != "open" for j in verdicts.values()
            ):
                break
        figures = {}
        for m, j in verdicts.items():
            g, b = _values(docs["good"], m), _values(docs["bad"], m)
            low, high = stats.bootstrap_ratio_ci(g, b) if g and b else (math.nan, math.nan)
            figures[m] = {
                "direction": metrics[m],
                "ratio": j.ratio_good,
                "ci_low": low,
                "ci_high": high,
                "n_good": len(g),
                "n_bad": len(b),
                "verdict": j.verdict if j.verdict != "open" else f"not shown in {r} rounds",
                "reason": j.reason,
            }
        regressed = [m for m, j in verdicts.items() if j.verdict == "regression"]
        followed = min(regressed, key=lambda m: (verdicts[m].p_value, list(metrics).index(m))) if regressed else None
        for m in regressed:
            self.say(f"ends: {m} regressed ({verdicts[m].reason})")
        ends = {"rounds": r, "metrics": figures}
        return followed, metrics[followed] if followed else "lower", ends

    def _metrics(self, docs: list[store.Result]) -> dict[str, str]:
        """The metrics to judge the ends on (name -> direction): --metric, or the cell's gated metrics."""
        available = metrics.compared_metrics(docs)
        if self.plan.metric is not None:
            if self.plan.metric not in available:
                raise UserError(
                    f"--metric {self.plan.metric}: not a metric of cell {self.cell}; it has: {', '.join(available)}"
                )
            return {self.plan.metric: available[self.plan.metric]}
        gated = {m: available[m] for m in metrics.gate_metrics(docs) if m in available}
        if not gated:
            raise UserError(f"cell {self.cell} has no gated metric in its runs; choose one with --metric")
        return gated

    def _search(self, ends: ComparedEnds, report: dict[str, Any]) -> None:
        plan = self.plan
        s = bisection.Search(self.n)
        planned = bisection.planned_steps(self.n, plan.max_skips)
        alpha_step = bisection.step_alpha(plan.alpha, self.n, plan.max_skips)
        report.update(planned_steps=planned, step_alpha=alpha_step)
        decided, k = 0, 0
        stopped = None
        while (i := s.next()) is not None:
            if decided >= planned:
                stopped = f"the planned {planned} decided steps are used up"
                break
            if len(s.skipped) > plan.max_skips:
                stopped = f"more than --max-skips {plan.max_skips} commits were skipped"
                break
            k += 1
            commit = self.commits[i]
            verdict, entry = self._step(k, commit, ends, alpha_step)
            s.mark(i, verdict)
            decided += verdict != "skip"
            # Clones are kept while their commit may still be confirmed (the last good, the first bad).
            for c in self.commits[1:-1]:
                if c.index not in (s.good, s.bad):
                    self.lab.release(c)
            report["steps"].append(entry)
            if verdict == "skip":
                report["skipped"].append({"sha": commit.sha, "subject": commit.subject, "reason": entry["reason"]})
            self.say(f"step {k}: {commit.short} {commit.subject!r}: {verdict} ({entry['reason']})")
        report["candidates"] = [self.commits[c].sha for c in s.candidates]
        if s.culprit is not None:
            report["finding"] = "culprit"
            culprit, parent = self.commits[s.culprit], self.commits[s.culprit - 1]
            report["culprit"] = {
                "sha": culprit.sha,
                "subject": culprit.subject,
                "index": culprit.index,
                "parent": parent.sha,
            }
            report["confirmation"] = self._confirm(parent, culprit, ends)
        else:
            report["finding"] = "stopped" if stopped else "range"
            report["stopped"] = stopped

    def _step(self, k: int, commit: Commit, ends: ComparedEnds, alpha_step: float) -> tuple[str, dict[str, Any]]:
        plan = self.plan
        good_p, bad_p = ends.good, ends.bad
        entry: dict[str, Any] = {"step": k, "sha": commit.sha, "subject": commit.subject, "index": commit.index}
        prepared = self.lab.prepare(commit)
        if prepared.failure:
            entry.update(verdict="skip", rounds=0, reason=f"--prepare failed: {prepared.failure}")
            return "skip", entry
        entry["settings"] = prepared.settings
        docs: dict[str, list[store.Result]] = {"good": [], "bad": [], "commit": []}
        verdict, reason, judgement = "skip", "", None
        r = 0
        for r in range(1, plan.max_rounds + 1):
            for p in self._order(r, [good_p, prepared, bad_p]):
                side = "good" if p is good_p else "bad" if p is bad_p else "commit"
                doc = self._run(p, f"s{k}", r)
                docs[side].append(doc)
                why = _failure(doc)
                if why and side == "commit":
                    reason = f"its run r{r} failed ({why})"
                    break
                if why:
                    _check_end(side, p, docs[side])
            if reason:
                break
            if r < plan.min_rounds:
                continue
            judgement = bisection.judge_step(
                _values(docs["good"], ends.metric),
                _values(docs["bad"], ends.metric),
                _values(docs["commit"], ends.metric),
                ends.direction,
                plan.look(r, alpha_step),
            )
            if judgement.verdict != "open":
                verdict, reason = judgement.verdict, judgement.reason
                break
        else:
            last = judgement.reason if judgement else "no look"
            reason = f"not decided within {plan.max_rounds} rounds (the budget): {last}"
        entry.update(verdict=verdict, rounds=r, reason=reason)
        if judgement is not None:
            entry.update(ratio_good=judgement.ratio_good, ratio_bad=judgement.ratio_bad, between=judgement.between)
        return verdict, entry

    def _confirm(self, parent: Commit, culprit: Commit, ends: ComparedEnds) -> dict[str, Any]:
        """Fresh pairs of the culprit and its parent: the effect, its 95 % interval, and whether the gate's
        test (paired, at α) shows it worse by more than δ again."""
        plan = self.plan
        known = {ends.good.commit.sha: ends.good, ends.bad.commit.sha: ends.bad}
        parent_p = known.get(parent.sha) or self.lab.prepare(parent)
        culprit_p = known.get(culprit.sha) or self.lab.prepare(culprit)
        for p in (parent_p, culprit_p):
            if p.failure:
                return {"confirmed": False, "reason": f"{p.commit.short} cannot be prepared again: {p.failure}"}
        docs: dict[str, list[store.Result]] = {"parent": [], "culprit": []}
        for r in range(1, plan.confirm_rounds + 1):
            for p in self._order(r, [parent_p, culprit_p]):
                docs["parent" if p is parent_p else "culprit"].append(self._run(p, "confirm", r))
        for c in (parent, culprit):
            self.lab.release(c)
        pairs = metrics.metric_pairs(docs["parent"], docs["culprit"], ends.metric)
        effect = stats.compare_paired(pairs, ends.direction, alpha=plan.alpha)
        confirmed = stats.is_regression(effect, plan.threshold)
        return {
            "confirmed": confirmed,
            "pairs": len(pairs),
            "ratio": effect.ratio,
            "ci_low": effect.ci_low,
            "ci_high": effect.ci_high,
            "p_value": effect.p_value,
            "test": effect.test,
            "verdict": effect.verdict,
            "worse_by": effect.worse_by,
            "reason": (
                f"{effect.verdict} by {abs(effect.worse_by):.1%} "
                f"({effect.test}, p {effect.p_value:.2g}, {len(pairs)} pairs)"
                + ("" if confirmed else f": not {stats.regression_rule(plan.threshold, plan.alpha)}")
            ),
        }


# ----------------------------------------------------------------------------------- output


def _minutes(report: dict[str, Any]) -> str:
    runs = report["runs"]
    return f"{runs['total']} runs, {runs['seconds'] / 60:.1f} min of runs"


def first_line(report: dict[str, Any]) -> str:
    """The finding in one line, ready for an issue or an e-mail."""
    cell, metric = report["cell"], report.get("metric")
    good, bad = report["good"]["sha"][:12], report["bad"]["sha"][:12]
    tested = sum(1 for s in report["steps"] if s["verdict"] != "skip")
    skipped = len(report["skipped"])
    cost = f"{tested} commit{'s' if tested != 1 else ''} tested, {skipped} skipped, {_minutes(report)}"
    finding = report.get("finding")
    if finding == "no regression":
        parts = []
        for m, f in report["ends"]["metrics"].items():
            parts.append(
                f"{m} bad/good ×{f['ratio']:.3f} (95 % CI {f['ci_low']:.3f}–{f['ci_high']:.3f}, {f['verdict']})"
            )
        rounds = report["ends"]["rounds"]
        return (
            f"No regression to find in {cell} between {good} and {bad}: {'; '.join(parts) or 'no figures'} "
            f"after {rounds} runs of each end; the bisect needs the bad end slower by more than "
            f"{report['plan']['threshold']:.0%} (significantly)"
        )
    if finding == "culprit":
        culprit = report["culprit"]
        conf = report["confirmation"] or {}
        status = "confirmed by a re-run of both" if conf.get("confirmed") else "NOT confirmed by a re-run of both"
        size, effect = "a", ""
        if "ratio" in conf:
            size = f"a {conf['worse_by']:.1%}"
            effect = f"×{conf['ratio']:.3f}, 95 % CI {conf['ci_low']:.3f}–{conf['ci_high']:.3f} against its parent, "
        return (
            f"fsmatrix bisect noticed {size} regression of {metric} in {cell} at commit {culprit['sha'][:12]} "
            f"\"{culprit['subject']}\" ({effect}{status}; the first bad commit between {good} and {bad}; {cost})"
        )
    candidates = ", ".join(c[:12] for c in report["candidates"])
    why = f" ({report['stopped']})" if report.get("stopped") else ""
    return (
        f"{metric} of {cell} regressed between {good} and {bad}; the first bad commit is one of "
        f"{len(report['candidates'])}: {candidates}{why}; {cost}"
    )


def _num(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) and math.isfinite(x) else "-"


def markdown(report: dict[str, Any]) -> str:
    """The summary: the finding first, then the ends, every step, the confirmation and the cost."""
    lines = [report["first_line"], "", f"## fsmatrix bisect: {report['cell']}", ""]
    plan = report["plan"]
    lines.append(
        f"- range: {report['good']['sha'][:12]} (good, \"{report['good']['subject']}\") .. "
        f"{report['bad']['sha'][:12]} (bad, \"{report['bad']['subject']}\"), {report['commits']} commits"
    )
    lines.append(
        f"- decided on: {report.get('metric') or '-'} ({report.get('direction')} is better); threshold "
        f"{plan['threshold']:.0%}, α {plan['alpha']:g}"
        + (
            f", {report['planned_steps']} planned steps at α_step {report['step_alpha']:.2g}"
            if "step_alpha" in report
            else ""
        )
    )
    lines += ["", "### The ends", "", "| metric | bad/good | 95 % CI | runs | verdict |", "|---|---|---|---|---|"]
    for m, f in report["ends"]["metrics"].items():
        lines.append(
            f"| {m} | {_num(f['ratio'])} | {_num(f['ci_low'])}–{_num(f['ci_high'])} | "
            f"{f['n_good']}+{f['n_bad']} | {f['verdict']} |"
        )
    if report["steps"]:
        lines += [
            "",
            "### Steps",
            "",
            "| step | commit | subject | rounds | verdict | why |",
            "|---|---|---|---|---|---|",
        ]
        for s in report["steps"]:
            subject = s["subject"].replace("|", "\\|")
            why = s["reason"].replace("|", "\\|")
            lines.append(f"| {s['step']} | {s['sha'][:12]} | {subject} | {s['rounds']} | {s['verdict']} | {why} |")
    conf = report.get("confirmation")
    if conf:
        lines += ["", "### Confirmation", "", f"- culprit against its parent, fresh pairs: {conf['reason']}"]
        if "ratio" in conf:
            lines.append(f"- ratio {_num(conf['ratio'])}, 95 % CI {_num(conf['ci_low'])}–{_num(conf['ci_high'])}")
    if report["skipped"]:
        lines += ["", "### Skipped", ""]
        lines += [f"- {s['sha'][:12]} \"{s['subject']}\": {s['reason']}" for s in report["skipped"]]
    lines += [
        "",
        f"- cost: {_minutes(report)} ({report['runs']['failed']} failed), {report['wall_s'] / 60:.1f} min here",
    ]
    return "\n".join(lines) + "\n"
