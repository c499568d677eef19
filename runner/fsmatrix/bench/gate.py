"""How well does the regression gate work on this machine? ``python -m fsmatrix.bench.gate``

Real runs (host backend, as root: loop devices, mkfs, mount) of one cell of the PR gate's own
matrix (``--matrix matrix/pr.yaml``, ``--only ext4-threen1-*``: the 3n+1 cell on ext4), made the
way ``.github/scripts/pr-gate.sh`` makes them. Each **round** runs

- a **first batch**: ``--repeats`` N triples A, B, V back to back (``--design interleaved``, the
  workflow's: repeat i of each side next to the others, as base and head alternate there), where
  A and B are the same cell (an A/A pair: nothing changed) and V is the cell with a real cost added
  (``--variant``, the stand-in regression, default ``gtm.sync_io=true``: GT.M syncs every journal
  write; or ``--settings FILE``, a settings file laid over V's runs as ``fsmatrix run --settings``
  lays a build's settings over a gate side, the cell keeping its id: the stand-in of a change of
  work, e.g. one that writes more bytes per operation at about the same time).
  ``--design batches`` runs A×N, then B×N, then V×N instead: the pessimistic case of
  separate batches, which carries the drift between them;
- a **confirmation batch**: the same with ``--confirm-repeats`` triples, independent of the first.

The first batch grows look by look: the gate's **designs** (``gate_designs``) are judged on it — the
fixed one on its first ``--repeats`` pairs, the sequential one (``pr-gate.sh``'s: looks after
``--repeats``, + ``--step``, ... ``--max-pairs`` pairs) on the first n at each look until PASS or FAIL,
a FAIL confirmed by the confirmation batch — each with its verdicts (FAIL, PASS, NOT DECIDED) and the
pairs it used, next to the pairs' spread of each round. The batch stops growing once the sequential
design has stopped on every kind of comparison below (``every_design_stopped``): no design would use
the pairs after that (``--full-rounds``: ``--max-pairs`` triples every round, as before 2026-12-07).
``--load-hog N`` runs N busy loops pinned to the first CPU during the runs: the loaded condition.
``--simulate SPREADS`` runs nothing and plays the designs on drawn pairs at those spreads.

Per round, each kind of comparison is judged by the gate as pr-gate.sh applies it — paired test
(``compare --paired``), Holm across the cell's gated metrics, ``--fail-on-regression THRESHOLD``,
and a regression failing only when the confirmation batch shows it again (``gate.Confirmed``):

- A vs B: a failure is a **false alarm**;
- A vs V: a failure is a **detection** of the stand-in regression;

every comparison judged on time and work together (``gate.WORK_THRESHOLDS``: one Holm family, one
verdict);
- A vs B with B's gated metrics made 10 % and 20 % worse (``--slowdowns``): detections of
  slowdowns of known size on top of the machine's real noise.

The same runs are also judged by the gate's other forms (unpaired samples, no confirmation), so one
measurement shows what pairing and confirmation each buy. Every round is stored (its run
directories and ``gate-rN.json`` with the load averages before and after it): an interrupted
measurement resumes at the first round not finished, and ``--analyse`` judges the stored rounds
again with today's gate, so the measurement may be split over several sittings. Prints, as
Markdown, every rate with its 95 % Clopper-Pearson interval, the load averages, the stand-in's
measured effect over all rounds, date, commit and command.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from fsmatrix import matrix, racing, runs
from fsmatrix.agent import jsonfile, provenance
from fsmatrix.backends import BACKENDS, Backend
from fsmatrix.bench import gate_designs
from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm
from fsmatrix.results import store
from fsmatrix.results.store import sides
from fsmatrix.results.verdict import gate, metrics, outcome, stats
from fsmatrix.results.verdict.metrics import gate_metrics

SIDES = ("a", "b", "v")
DEFAULT_ONLY = "ext4-threen1-*"
# The stand-in change of work (its comments: what it does to the PR cell).
WORK_CHANGE = Path(__file__).with_name("work-change.yaml")


@dataclass(frozen=True)
class GateForm:
    """One way of applying the gate to a pair of batches."""

    name: str
    paired: bool
    confirm: bool


# The first is the gate pr-gate.sh applies; the others show what pairing and confirmation buy.
FORMS = (
    GateForm("paired, confirmed", paired=True, confirm=True),
    GateForm("paired, one batch", paired=True, confirm=False),
    GateForm("unpaired, confirmed", paired=False, confirm=True),
    GateForm("unpaired, one batch", paired=False, confirm=False),
)


def scaled(side: sides.Side, slowdown: float) -> sides.Side:
    """``side`` with each metric the gate decides on made ``slowdown`` worse (0.2: 20 % slower), as
    a program doing 20 % more work would be: its time and its CPU-seconds alike."""
    docs = []
    for doc in side.docs:
        metrics = dict(doc.metrics)
        for metric in gate_metrics([doc]):
            value = metrics.get(metric)
            if value is not None:
                better = doc.key_metrics.get(metric, "lower")
                factor = 1 + slowdown if better == "lower" else 1 / (1 + slowdown)
                metrics[metric] = value * factor
        docs.append(replace(doc, metrics=metrics))  # a stand-in: the stored document is unchanged
    return sides.Side(f"{side.label}+{slowdown:.0%}", docs)


def judge(
    first: tuple[sides.Side, sides.Side],
    second: tuple[sides.Side, sides.Side],
    threshold: float,
    paired: bool,
) -> tuple[gate.CompareResult, dict[GateForm, bool]]:
    """The first batch's comparison, and whether each form of the gate with this ``paired`` fails on
    base/head ``first`` (confirmed on ``second`` by the forms that confirm; the second batch is
    compared only when the first found a regression). A form fails on FAIL only (exit status 1)."""
    judging = gate.Judging(threshold, paired=paired)
    result = gate.compare(*first, judging)
    again = gate.compare(*second, judging) if result.flagged else None
    fails = {
        form: (gate.Confirmed(result, again).exit_status() if form.confirm and again else result.exit_status()) == 1
        for form in FORMS
        if form.paired == paired
    }
    return result, fails


@dataclass
class Round:
    """One round's batches: ``first[side]`` and ``second[side]`` for side in a, b, v."""

    number: int
    first: dict[str, sides.Side]
    second: dict[str, sides.Side]
    loads: tuple[float, float]  # 1-minute load average before and after the round


def first_pairs(side: sides.Side, n: int) -> sides.Side:
    """The side's runs of repeats 1..n: what the gate saw after n pairs."""
    return sides.Side(side.label, [d for d in side.docs if d.repeat <= n])


def design_verdict(
    design: gate_designs.Design,
    first: tuple[sides.Side, sides.Side],
    second: tuple[sides.Side, sides.Side] | None,
    threshold: float,
) -> tuple[str, int]:
    """The design's verdict on base/head ``first`` (its looks on the first n pairs; a FAIL confirmed on
    ``second``, as ``compare --confirm`` does; None: a batch not made yet, a FAIL left unconfirmed) and
    the pairs it used."""
    judging = gate.Judging(threshold, paired=True, looks=design.planned)
    results: dict[int, gate.CompareResult] = {}

    def look(n: int) -> str:
        results[n] = gate.compare(first_pairs(first[0], n), first_pairs(first[1], n), judging)
        return results[n].verdict or outcome.NOT_DECIDED

    def confirmed(n: int) -> str:
        if second is None:
            return outcome.FAIL
        again = gate.compare(*second, gate.Judging(threshold, paired=True))
        return gate.Confirmed(results[n], again).verdict or outcome.NOT_DECIDED

    available = min(len({d.repeat for d in side.docs}) for side in first)
    return gate_designs.run_design(design, look, confirmed, available)


def judged_metrics(base: sides.Side, head: sides.Side) -> list[str]:
    """The metrics the gate decides on for these sides: time's, and the work metrics both measured."""
    work, _ = gate.work_gated(list(base.docs), list(head.docs), gate.WORK_THRESHOLDS)
    return [*gate_metrics(base.docs), *work]


class Tally:
    """The gate's verdicts per kind of comparison and form or design of the gate, round by round.
    The forms judge the first ``repeats`` pairs of a round's first batch; the designs as many as they look at."""

    def __init__(
        self,
        variant: str,
        slowdowns: list[float],
        threshold: float,
        repeats: int = 8,
        designs: tuple[gate_designs.Design, ...] = (),
    ) -> None:
        self.slowdowns, self.threshold, self.repeats, self.designs = slowdowns, threshold, repeats, designs
        self.kinds = ["A/A (nothing changed)", f"stand-in regression {variant}", *(f"+{s:.0%} on B" for s in slowdowns)]
        self.fails: dict[tuple[str, str], list[bool]] = {(k, f.name): [] for k in self.kinds for f in FORMS}
        self.outcomes = {(k, d.name): gate_designs.Outcomes() for k in self.kinds for d in designs}
        self.changes: dict[str, dict[str, list[float]]] = {k: {} for k in self.kinds}
        self.loads: list[tuple[float, float]] = []
        self.stand_in: dict[str, list[float]] = {}  # gated metric -> log ratios V/A over every pair
        self.spreads: dict[str, list[float]] = {}  # gated metric -> each round's A/B pair spread (first batch)

    def heads(self, batch: Mapping[str, sides.Side]) -> list[sides.Side]:
        """The head of each kind of comparison (A is every kind's base): B, V, B made slower."""
        return [batch["b"], batch["v"], *(scaled(batch["b"], s) for s in self.slowdowns)]

    def add(self, rnd: Round) -> None:
        self.loads.append(rnd.loads)
        for kind, head1, head2 in zip(self.kinds, self.heads(rnd.first), self.heads(rnd.second), strict=True):
            for design in self.designs:
                verdict = design_verdict(design, (rnd.first["a"], head1), (rnd.second["a"], head2), self.threshold)
                self.outcomes[(kind, design.name)].add(*verdict)
            base1, head1 = first_pairs(rnd.first["a"], self.repeats), first_pairs(head1, self.repeats)
            for paired in (True, False):
                first, fails = judge((base1, head1), (rnd.second["a"], head2), self.threshold, paired)
                for form, failed in fails.items():
                    self.fails[(kind, form.name)].append(failed)
                if paired:
                    for row in first.rows:
                        if row.gated and math.isfinite(row.comparison.ratio):
                            self.changes[kind].setdefault(row.metric, []).append(row.comparison.ratio - 1)
        a_docs = rnd.first["a"].docs
        for metric in judged_metrics(rnd.first["a"], rnd.first["b"]):
            pairs = metrics.metric_pairs(a_docs, rnd.first["b"].docs, metric)
            logs = [math.log(b / a) for a, b in pairs if a > 0 and b > 0]
            if len(logs) > 1:
                self.spreads.setdefault(metric, []).append(math.expm1(statistics.stdev(logs)))
        for batch in (rnd.first, rnd.second):
            a_docs = batch["a"].docs
            for metric in judged_metrics(batch["a"], batch["v"]):
                pairs = metrics.metric_pairs(a_docs, batch["v"].docs, metric)
                self.stand_in.setdefault(metric, []).extend(math.log(v / a) for a, v in pairs if a > 0 and v > 0)

    @property
    def rounds(self) -> int:
        return len(self.loads)

    def last(self) -> str:
        form = FORMS[0].name
        return "; ".join(f"{k}: {'FAIL' if self.fails[(k, form)][-1] else 'pass'}" for k in self.kinds)


# ----------------------------------------------------------------------------------- running


@dataclass
class Setup:
    """The cell and its stand-in variant, expanded from the gate's matrix; ``build``: the settings laid
    over the variant's runs (``--settings``), None when the variant is a changed default (``--variant``)."""

    base: matrix.Matrix
    variant: matrix.Matrix
    build: matrix.BuildSettings | None = None

    @property
    def cell_id(self) -> str:
        return self.base.cells[0].id


def setup(matrix_file: Path, only: str, variant: str, settings: Path | None = None) -> Setup:
    """The one cell of ``matrix_file`` matching ``only``, and the same cell with ``variant`` set (or,
    with ``settings``, the same cell with that settings file laid over it, keeping its id)."""
    try:
        doc = yaml.safe_load(matrix_file.read_text())
    except OSError as exc:
        raise UserError(f"--matrix {matrix_file}: {exc.strerror}") from None
    if settings is not None:
        build = matrix.read_settings(settings)
        base = matrix.expand_document(doc, "gate")
        index = _chosen(base, only, matrix_file)
        changed = matrix.expand_document(doc, "gate", None, build)
        if changed.cells[index].params == base.cells[index].params:
            raise UserError(f"--settings {settings}: changes nothing in cell {base.cells[index].id}")
        return Setup(_one(base, index), _one(changed, index), build)
    if "=" not in variant:
        raise UserError(f"--variant {variant!r}: expected KEY=VALUE, e.g. gtm.sync_io=true")
    base = matrix.expand_document(doc, "gate")
    index = _chosen(base, only, matrix_file)
    changed = matrix.expand_document(_with(doc, variant), "gate")
    if changed.cells[index].id == base.cells[index].id:
        raise UserError(f"--variant {variant}: changes nothing in cell {base.cells[index].id}")
    return Setup(_one(base, index), _one(changed, index))


def _chosen(m: matrix.Matrix, only: str, matrix_file: Path) -> int:
    """The index of the one cell of ``m`` matching ``only``; UserError when not exactly one does."""
    chosen = [i for i, cell in enumerate(m.cells) if fnmatch.fnmatchcase(cell.id, only)]
    if len(chosen) != 1:
        ids = ", ".join(c.id for c in m.cells)
        raise UserError(f"--only {only!r} matches {len(chosen)} cells of {matrix_file} (need one): {ids}")
    return chosen[0]


def _one(m: matrix.Matrix, index: int) -> matrix.Matrix:
    m.cells = [m.cells[index]]
    return m


def _with(matrix_doc: dict[str, Any], setting: str) -> dict[str, Any]:
    """The matrix document with one more default (``key=value``, the value read as YAML)."""
    key, _, value = setting.partition("=")
    defaults = {**(matrix_doc.get("defaults") or {}), key.strip(): yaml.safe_load(value)}
    return {**matrix_doc, "defaults": defaults}


def run_round(
    number: int,
    args: Any,
    cells: Setup,
    backend: Backend,
    console: Console,
    stopped: Callable[[int], bool] = lambda made: False,
) -> tuple[float, float]:
    """Run round ``number``'s two batches into ``args.results``; the load averages before and after.
    The first batch grows look by look (``args.looks``) until ``stopped(pairs made)`` or the last look:
    pairs after every design stopped are used by none (``--full-rounds``: every look's pairs)."""
    for stale in args.results.glob(f"gate-r{number}-*"):
        shutil.rmtree(stale)  # an interrupted round starts again: its pairs must be complete and adjacent
    before = os.getloadavg()[0]
    made = 0
    for look in args.looks:
        _run_triples((number, ""), range(made + 1, look + 1), args, cells, backend, console)
        made = look
        if stopped(made):
            break
    _run_triples((number, "2"), range(1, args.confirm_repeats + 1), args, cells, backend, console)
    after = os.getloadavg()[0]
    jsonfile.write_atomic(
        args.results / f"gate-r{number}.json",
        {
            "round": number,
            "design": args.design,
            "repeats": args.repeats,
            "max_pairs": max(args.repeats, args.max_pairs),
            "first_pairs": made,
            "confirm_repeats": args.confirm_repeats,
            "load_hog": args.load_hog,
            "variant": stand_in(args),
            "cell_id": cells.cell_id,
            "load_before": before,
            "load_after": after,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    return before, after


def _run_triples(
    batch: tuple[int, str], repeats: range, args: Any, cells: Setup, backend: Backend, console: Console
) -> None:
    """Repeats ``repeats`` of A, B and V into ``batch`` (round number, "" the first batch or "2" the
    confirmation; interleaved: repeat i of each side next to the others; ``--design batches``: A's, then
    B's, then V's)."""
    number, suffix = batch
    plan = [(side, i) for i in repeats for side in SIDES]
    if args.design == "batches":
        plan = [(side, i) for side in SIDES for i in repeats]
    for side, i in plan:
        which = cells.variant if side == "v" else cells.base
        build = cells.build if side == "v" else None
        run_id = f"gate-r{number}-{side}{suffix}"
        options = runs.RunOptions(args.results, run_id, racing.RunPlan.fixed(i), settings=build)
        runs.run_matrix(which, which.cells, backend, options, console)


def every_design_stopped(
    results_root: Path, number: int, cell_id: str, design: gate_designs.Design, tally: Tally
) -> Callable[[int], bool]:
    """Whether, on round ``number``'s first batch as made so far, ``design`` (the sequential one) has
    stopped on every kind of comparison the tally judges: decided at a look, or at its last look."""

    def stopped(made: int) -> bool:
        if made >= max(design.looks):
            return True
        batch = {side: _side(results_root / f"gate-r{number}-{side}", cell_id) for side in SIDES}
        for head in tally.heads(batch):
            if design_verdict(design, (batch["a"], head), None, tally.threshold)[0] == outcome.NOT_DECIDED:
                return False
        return True

    return stopped


def load_round(results_root: Path, number: int, pairs: tuple[int, int] | None = None) -> Round | None:
    """A finished round's batches, or None when round ``number`` did not finish. ``pairs``: keep
    only the first N1 and N2 repeats of the two batches (a smaller design judged on the same runs)."""
    marker = results_root / f"gate-r{number}.json"
    if not marker.is_file():
        return None
    info = jsonfile.read(marker)
    batches: dict[str, dict[str, sides.Side]] = {"": {}, "2": {}}
    for suffix, batch in batches.items():
        for side in SIDES:
            run_id = f"gate-r{number}-{side}{suffix}"
            side_of = _side(results_root / run_id, info["cell_id"])
            if pairs:
                side_of = first_pairs(side_of, pairs[0 if suffix == "" else 1])
            batch[side] = side_of
    return Round(number, batches[""], batches["2"], (info["load_before"], info["load_after"]))


def _side(run_dir: Path, cell_id: str) -> sides.Side:
    """A run directory's results as one side of a comparison of cell ``cell_id``: the variant's
    documents stand in for the base cell's, as a slower version of that cell would."""
    return sides.Side(run_dir.name, [replace(d, cell_id=cell_id) for d in store.load_results(run_dir)])


@contextmanager
def cpu_hogs(count: int) -> Iterator[list[int]]:
    """``count`` busy loops pinned to CPU 0 (the loaded condition: a neighbour on one core) while the
    block runs; their process ids. Each is ended by its id afterwards."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"])
        for _ in range(count)
    ]
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=40, help="rounds (each: an A/A pair and every detection)")
    parser.add_argument(
        "--repeats", type=int, default=8, help="pairs of the fixed design and the first look (pr-gate.yml's REPEATS)"
    )
    parser.add_argument("--step", type=int, default=4, help="pairs the sequential design adds per look (PAIRS_STEP)")
    parser.add_argument("--max-pairs", type=int, default=24, help="the sequential design's last look (MAX_PAIRS)")
    parser.add_argument(
        "--load-hog", type=int, default=0, metavar="N", help="run N busy loops pinned to CPU 0 during the runs"
    )
    parser.add_argument(
        "--simulate",
        default=None,
        metavar="SPREADS",
        help="run nothing: play the designs on pairs drawn at these pair spreads (e.g. 0.064,0.14), --rounds each",
    )
    parser.add_argument(
        "--confirm-repeats", type=int, default=8, help="pairs in the confirmation batch (pr-gate.yml's CONFIRM_REPEATS)"
    )
    parser.add_argument("--threshold", default="5%", help="pr-gate.yml's THRESHOLD")
    parser.add_argument("--slowdowns", default="0.1,0.2", help="injected slowdowns of B's gated metrics")
    parser.add_argument("--variant", default="gtm.sync_io=true", metavar="KEY=VALUE", help="the stand-in regression")
    parser.add_argument(
        "--settings",
        type=Path,
        default=None,
        metavar="FILE",
        help="the stand-in instead: a settings file laid over V's runs (fsmatrix run --settings), keeping the cell id; "
        "runner/fsmatrix/bench/work-change.yaml is a change of work (7 times the write requests per operation)",
    )
    parser.add_argument("--design", choices=["interleaved", "batches"], default="interleaved")
    parser.add_argument("--matrix", type=Path, default=Path("matrix/pr.yaml"), help="the gate's matrix")
    parser.add_argument("--only", default=DEFAULT_ONLY, help="the one cell of --matrix to run (a glob)")
    parser.add_argument("--backend", choices=list(BACKENDS), default="host")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/fsmatrix"))
    parser.add_argument("--results", type=Path, default=Path("results/bench-gate"))
    parser.add_argument(
        "--full-rounds",
        action="store_true",
        help="run --max-pairs pairs every round, not stopping once the sequential design stopped on every comparison",
    )
    parser.add_argument(
        "--analyse", action="store_true", help="run nothing: judge the rounds already in --results with today's gate"
    )
    parser.add_argument(
        "--pairs",
        default=None,
        metavar="N1,N2",
        help="with --analyse: judge only the first N1 and N2 pairs of each round's two batches",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()  # a timeout's SIGTERM unmounts and detaches as Ctrl-C does
    args = _parser().parse_args(argv)
    try:
        threshold = gate.parse_threshold(args.threshold)
        if args.pairs is not None:
            args.pairs = tuple(int(x) for x in args.pairs.split(","))
            if len(args.pairs) != 2 or min(args.pairs) < 3:
                raise ValueError
            args.repeats, args.confirm_repeats = args.pairs
        slowdowns = [float(x) for x in args.slowdowns.split(",") if x.strip()]
    except ValueError:
        print(
            f"--slowdowns {args.slowdowns!r} / --pairs {args.pairs!r}: expected fractions such as 0.1,0.2 / "
            "two counts of at least 3 such as 5,8",
            file=sys.stderr,
        )
        return 2
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    if min(args.rounds, args.repeats, args.confirm_repeats) < 1 or min(args.repeats, args.confirm_repeats) < 3:
        print("--rounds must be at least 1, --repeats and --confirm-repeats at least 3", file=sys.stderr)
        return 2
    if args.step < 1 or args.load_hog < 0:
        print("--step must be at least 1 and --load-hog at least 0", file=sys.stderr)
        return 2
    args.max_pairs = max(args.max_pairs, args.repeats)
    designs = gate_designs.designs(args.repeats, args.step, args.max_pairs, args.confirm_repeats)
    args.looks = designs[-1].looks  # the sequential design's: the first batch grows look by look
    if args.simulate is not None:
        return simulated(args, designs, slowdowns, threshold)
    tally = Tally(stand_in(args), slowdowns, threshold, args.repeats, designs)
    if args.analyse:
        return analyse(args, tally)
    try:
        cells = setup(args.matrix, args.only, args.variant, args.settings)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench_gate needs root (loop devices, mkfs, mount)", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    backend = BACKENDS[args.backend].make(args.workdir, [])
    started = time.monotonic()
    try:
        for number in range(1, args.rounds + 1):
            rnd = load_round(args.results, number)
            if rnd is None:
                stopped = every_design_stopped(args.results, number, cells.cell_id, designs[-1], tally)
                with cpu_hogs(args.load_hog):
                    run_round(
                        number, args, cells, backend, console, (lambda made: False) if args.full_rounds else stopped
                    )
                rnd = load_round(args.results, number)
            assert rnd is not None
            tally.add(rnd)
            console.print(f"round {number}: {tally.last()} (load {rnd.loads[0]:.2f}..{rnd.loads[1]:.2f})", markup=False)
    finally:
        backend.close()
    print(_table(args, tally, f"{(time.monotonic() - started) / 60:.1f} min"))
    return 0


def stand_in(args: Any) -> str:
    """The stand-in regression in words: ``--settings FILE`` or ``--variant``'s KEY=VALUE."""
    return f"--settings {args.settings}" if args.settings is not None else str(args.variant)


def analyse(args: Any, tally: Tally) -> int:
    """Judge the finished rounds stored under --results with the gate as it is now."""
    number = 1
    while (rnd := load_round(args.results, number, args.pairs)) is not None:
        tally.add(rnd)
        number += 1
    if not tally.rounds:
        print(f"no finished round (gate-r1.json) under {args.results}", file=sys.stderr)
        return 2
    print(_table(args, tally, f"judged from the rounds stored in {args.results}"))
    return 0


# ----------------------------------------------------------------------------------- output


def rate(outcomes: list[bool]) -> str:
    """ "3/20 (15 %, 95 % CI 3-38 %)": hits, share and the Clopper-Pearson interval."""
    hits, n = sum(outcomes), len(outcomes)
    if not n:
        return "-"
    low, high = stats.clopper_pearson(hits, n)
    return f"{hits}/{n} ({hits / n:.0%}, 95 % CI {low:.0%}-{high:.0%})"


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):+.1%} ({min(values):+.1%}..{max(values):+.1%})"


def _load_words(hogs: int) -> str:
    return f"{hogs} CPU hog(s) pinned to CPU 0 during the runs (--load-hog)" if hogs else "no added load"


def design_table(
    kinds: list[str],
    designs: tuple[gate_designs.Design, ...],
    outcomes: dict[tuple[str, str], gate_designs.Outcomes],
) -> list[str]:
    """Per design and comparison: the FAIL, PASS and NOT DECIDED rates and the pairs used. On A/A a
    FAIL is a false alarm; on a real regression beyond the threshold a FAIL is a detection and a PASS
    a false pass."""
    lines = [
        "| design | comparison | FAIL | PASS | NOT DECIDED | pairs used, median (min..max) |",
        "|---|---|---|---|---|---|",
    ]
    for design in designs:
        for kind in kinds:
            o = outcomes[(kind, design.name)]
            rates = " | ".join(rate(o.hits(v)) for v in (outcome.FAIL, outcome.PASS, outcome.NOT_DECIDED))
            lines.append(f"| {design.name} | {kind} | {rates} | {o.pairs_used()} |")
    return lines


def simulated(args: Any, designs: tuple[gate_designs.Design, ...], slowdowns: list[float], threshold: float) -> int:
    """The designs played on drawn pairs (``gate_designs.simulate``) at each of --simulate's spreads."""
    try:
        spreads = [float(x) for x in args.simulate.split(",") if x.strip()]
        if not spreads or min(spreads) <= 0:
            raise ValueError
    except ValueError:
        print(f"--simulate {args.simulate!r}: expected pair spreads above 0 such as 0.064,0.14", file=sys.stderr)
        return 2
    effects = [0.0, threshold, *slowdowns]
    kinds = ["A/A (nothing changed)", f"+{threshold:.0%} (at the threshold)", *(f"+{s:.0%}" for s in slowdowns)]
    lines = [
        f"Gate designs, simulated: {args.rounds} rounds per spread, one gated metric, pairs' log ratios normal; "
        f"--fail-on-regression {threshold:.0%}; {datetime.now(UTC):%Y-%m-%d}",
    ]
    for spread in spreads:
        found = gate_designs.simulate(designs, effects, spread, threshold, args.rounds)
        outcomes = {(kind, d.name): found[(d.name, e)] for kind, e in zip(kinds, effects, strict=True) for d in designs}
        lines += ["", f"Pair spread {spread:.1%}:", "", *design_table(kinds, designs, outcomes)]
    print("\n".join(lines))
    return 0


def _table(args: Any, tally: Tally, how: str) -> str:
    prov = provenance.collect()
    loads = [x for pair in tally.loads for x in pair]
    lines = [
        f"Gate benchmark: {args.only} of {args.matrix}, backend {args.backend}, design {args.design}, "
        f"{args.repeats} pairs + {args.confirm_repeats} to confirm, {tally.rounds} rounds, "
        f"--fail-on-regression {tally.threshold:.0%}; {datetime.now(UTC):%Y-%m-%d}, {prov['cpu_model']} × "
        f"{prov['cpu_count']}, kernel {platform.release()}, git {prov['git']['sha'][:10]}; "
        f"1-min load average before/after each round {min(loads):.2f}..{max(loads):.2f} "
        f"(median {statistics.median(loads):.2f}); {_load_words(args.load_hog)}; {how}",
        "",
        *design_table(tally.kinds, tally.designs, tally.outcomes),
        "",
        "Pairs' spread (A/B pairs of each round's first batch, exp(sd of log ratios) − 1), median (min..max): "
        + ("; ".join(f"{m} {_spread(v)}" for m, v in tally.spreads.items()) or "-"),
        "",
        f"The gate's forms on the first {tally.repeats} pairs (a failure: FAIL, exit status 1):",
        "",
        "| comparison | gated metrics' change (first batch, paired), median (min..max) | "
        + " | ".join(f"gate failed: {f.name}" for f in FORMS)
        + " |",
        "|---|---|" + "---|" * len(FORMS),
    ]
    for kind in tally.kinds:
        spread = "; ".join(f"{metric} {_spread(c)}" for metric, c in tally.changes[kind].items())
        cells = " | ".join(rate(tally.fails[(kind, f.name)]) for f in FORMS)
        lines.append(f"| {kind} | {spread or '-'} | {cells} |")
    effect = "; ".join(
        f"{metric} ×{math.exp(statistics.mean(v)):.3f} (pairs' sd {statistics.stdev(v):.1%}, n {len(v)})"
        for metric, v in tally.stand_in.items()
        if len(v) > 1
    )
    lines += ["", f"Stand-in {stand_in(args)}, its effect over every pair of every round (geometric mean): {effect}"]
    return "\n".join(lines)


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.gate")
