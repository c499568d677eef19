"""Click commands that read results and answer: ``compare`` (and the regression gate), ``calibrate``,
``report``. ``fsmatrix results`` (the stores) is in results.py: it imports no statistics.

``fsmatrix.cli`` wires these into ``main``; they follow its conventions (UserError → exit 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from fsmatrix.backends import BACKENDS
from fsmatrix.cli._common import ONLY_OPTION, RESULTS_OPTION
from fsmatrix.errors import UserError
from fsmatrix.results import store
from fsmatrix.results.render import answer_text, calibration_report, comparison, exports, markdown, page
from fsmatrix.results.store import calibrations, sides
from fsmatrix.results.verdict import calibrate, environment, gate, outcome, report, stats
from fsmatrix.results.verdict.answer import Rule


def _out_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 200)


@click.command("compare")
@click.argument("base")
@click.argument("head")
@RESULTS_OPTION
@click.option(
    "--fail-on-regression",
    "threshold",
    default=None,
    metavar="THRESHOLD",
    help="The gate: FAIL (exit 1) when a gated metric is significantly worse by more than THRESHOLD (e.g. 5%), "
    "PASS (exit 0) when every gated metric is shown not worse than THRESHOLD, NOT DECIDED otherwise (--not-decided).",
)
@click.option(
    "--work-threshold",
    "work_thresholds",
    multiple=True,
    metavar="METRIC=PCT",
    help="A work metric's own threshold in the gate (repeatable; METRIC=off: not gated). Gated by default, where "
    "both sides measured them: "
    + ", ".join(f"{m}={t:.0%}" for m, t in gate.WORK_THRESHOLDS.items())
    + " (docs/statistics-and-gate.md).",
)
@click.option(
    "--not-decided",
    "not_decided",
    type=click.Choice(list(outcome.ON_NOT_DECIDED)),
    default="distinct",
    show_default=True,
    help=f"The exit status of a gate NOT DECIDED: distinct ({outcome.NOT_DECIDED_STATUS}), or fail's (1) or pass' (0).",
)
@click.option(
    "--looks",
    default=None,
    metavar="FIRST:STEP:MOST",
    help="The gate adds pairs until decided, judging after FIRST, FIRST+STEP, ... MOST pairs (or a list: 8,12,16): "
    "every look's tests at Pocock's level for those looks. Judges the pairs there are as one of those looks.",
)
@click.option(
    "--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=stats.ALPHA, show_default=True
)
@click.option("--allow-env-diff", is_flag=True, help="Compare even when the environments differ (always listed).")
@click.option(
    "--calibration",
    default="auto",
    show_default=True,
    help="Noise floors: 'auto' (stored calibrations of HEAD's environment), 'none', or a calibration file.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "md", "json"]), default="table", show_default=True)
@click.option(
    "--paired",
    is_flag=True,
    help="BASE and HEAD ran in pairs (repeat i of each back to back, as pr-gate.sh runs them): paired t-test.",
)
@click.option(
    "--confirm",
    nargs=2,
    default=None,
    metavar="BASE2 HEAD2",
    help="A second, independent batch: a regression fails the gate only when it holds there too.",
)
@click.option(
    "--across",
    "across",
    multiple=True,
    metavar="NAME[=BASE_VALUE,HEAD_VALUE]",
    help="Compare on purpose what differs, named in the output (repeatable): an environment axis, e.g. "
    "--across image (each side on one image) or --across image=debian12,debian13 (both in one run), cells "
    "matched by every other setting; or --across kernel, the same cells under a different vm.kernel file "
    "(by sha256, as a bisect builds), refused otherwise. Only what it brings (the image, its kernel) may differ.",
)
@click.option(
    "--flagged-to",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the cells with a regression (first batch) to this file, comma-separated, for `run --only`.",
)
def compare_cmd(
    base: str,
    head: str,
    results_root: Path,
    threshold: str | None,
    alpha: float,
    allow_env_diff: bool,
    calibration: str,
    fmt: str,
    paired: bool,
    confirm: tuple[str, str] | None,
    across: tuple[str, ...],
    flagged_to: Path | None,
    not_decided: str,
    looks: str | None,
    work_thresholds: tuple[str, ...],
) -> None:
    """Compare BASE with HEAD (result directories or run ids): medians, ratio, CI, verdict per metric.

    Exit status: 0; with --fail-on-regression, 0 on PASS, 1 on FAIL (with --confirm: a regression in
    both batches) and 3 on NOT DECIDED (--not-decided); 2 for bad input.
    """
    limit = gate.parse_threshold(threshold) if threshold is not None else None
    planned = outcome.Looks.parse(looks) if looks is not None else None
    work = gate.parse_work_thresholds(work_thresholds)
    if work_thresholds and limit is None:
        raise UserError("--work-threshold sets a work metric's threshold in the gate: give --fail-on-regression too")
    if planned and limit is None:
        raise UserError("--looks plans the gate's looks: give --fail-on-regression THRESHOLD too")
    crossing = [environment.parse_across(text) for text in across]
    if confirm and limit is None:
        raise UserError("--confirm confirms the gate's regressions: give --fail-on-regression THRESHOLD too")
    b = sides.load_side(base, results_root)
    h = sides.load_side(head, results_root)
    cal_paths = _calibration_paths(calibration, results_root, h)
    floors = calibrate.noise_floors([calibrations.load(p) for p in cal_paths])

    def judge(base_side: sides.Side, head_side: sides.Side) -> gate.CompareResult:
        judging = gate.Judging(limit, alpha, floors, paired, planned, work)
        return gate.compare(base_side, head_side, judging, allow_env_diff=allow_env_diff, across=crossing)

    result = judge(b, h)
    if flagged_to is not None:
        flagged_to.write_text(",".join(gate.flagged_cells(result)) + "\n")  # a small control file
    confirming: gate.Confirmed | None = None
    if confirm and result.flagged:
        # No confirmation batch (never run, or its runs all lost) leaves the regression standing.
        b2, h2 = (_side_or_none(spec, results_root) for spec in confirm)
        rerun = b2 is not None and h2 is not None and bool(set(b2.by_cell()) & set(h2.by_cell()))
        # The confirmation batch is one look of its own: fixed pairs, judged at α.
        again = (
            gate.compare(
                b2,
                h2,
                gate.Judging(limit, alpha, floors, paired, work=work),
                allow_env_diff=allow_env_diff,
                across=crossing,
            )
            if rerun and b2 and h2
            else None
        )
        confirming = gate.Confirmed(result, again)
    elif confirm:
        confirming = gate.Confirmed(result, None)
    _show(fmt, result, confirming, not_decided)
    if cal_paths:
        click.echo(f"noise floors from {', '.join(str(p) for p in cal_paths)}", err=True)
    sys.exit(confirming.exit_status(not_decided) if confirming else result.exit_status(not_decided))


def _show(fmt: str, result: gate.CompareResult, confirming: gate.Confirmed | None, not_decided: str) -> None:
    """``compare``'s output in ``fmt`` (json, md or a table): the comparison, its confirmation batch's, the verdict."""
    second = confirming.second if confirming else None
    if fmt == "json":
        doc = comparison.to_json(result, not_decided)
        if confirming:
            again, not_again, not_rerun = confirming.stopped_again()  # durability stopped: (cell, metric) too
            doc = {
                **doc,
                "confirmation": comparison.to_json(second) if second else None,
                "confirmed": [[r.cell_id, r.metric] for r, _ in confirming.confirmed]
                + [[s.cell_id, s.metric] for s in again],
                "not_confirmed": [[r.cell_id, r.metric] for r, _ in confirming.not_confirmed]
                + [[s.cell_id, s.metric] for s in not_again],
                "not_rerun": [[r.cell_id, r.metric] for r in confirming.not_rerun]
                + [[s.cell_id, s.metric] for s in not_rerun],
                "verdict": confirming.verdict,
                "exit_status": confirming.exit_status(not_decided),
            }
        click.echo(json.dumps(doc, indent=1))
    elif fmt == "md":
        click.echo(comparison.markdown(result), nl=False)
        if second:
            click.echo("\n### Confirmation batch\n\n" + comparison.markdown(second), nl=False)
        if confirming:
            click.echo("\n" + "".join(f"- {line}\n" for line in comparison.confirmation_lines(confirming)), nl=False)
    else:
        out = _out_console()
        for which in (result, second):
            if which:
                out.print(comparison.rich_table(which))
                for line in comparison.summary_lines(which):
                    out.print(line, markup=False, highlight=False)
        for line in comparison.confirmation_lines(confirming) if confirming else []:
            out.print(line, markup=False, highlight=False)


def _calibration_paths(calibration: str, results_root: Path, head: sides.Side) -> list[Path]:
    """The stored calibrations ``--calibration`` names: none, those of HEAD's environment (auto), or a file."""
    if calibration == "none":
        return []
    if calibration == "auto":
        return calibrations.find(results_root, environment.env_hash(head.docs))
    return [Path(calibration)]


def _side_or_none(spec: str, results_root: Path) -> sides.Side | None:
    try:
        return sides.load_side(spec, results_root)
    except UserError:
        return None


@click.command("calibrate")
@click.argument("matrix_file", metavar="MATRIX", type=click.Path(path_type=Path))
@click.option("--runs", type=click.IntRange(3), default=5, show_default=True, help="Runs per batch (N of N-vs-N).")
@click.option(
    "--batches",
    type=click.IntRange(2, len(calibrate.BATCH_LABELS)),
    default=calibrate.DEFAULT_BATCHES,
    show_default=True,
    help="Separate batches of RUNS repeats, one after the other: their medians' drift is the noise floor.",
)
@RESULTS_OPTION
@ONLY_OPTION
@click.option(
    "--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=stats.ALPHA, show_default=True
)
@click.option("--threshold", default="0%", show_default=True, help="The gate threshold to calibrate for.")
@click.option("--resume", is_flag=True, help="Keep completed batches' runs from an earlier calibration.")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("/var/tmp/fsmatrix"), show_default=True)
@click.option(
    "--backend",
    type=click.Choice(list(BACKENDS)),
    default="host",
    show_default=True,
    help="Calibrate the backend the gate will use: a VM backend's noise is not the host's.",
)
def calibrate_cmd(
    matrix_file: Path,
    runs: int,
    batches: int,
    results_root: Path,
    only: tuple[str, ...],
    alpha: float,
    threshold: str,
    resume: bool,
    workdir: Path,
    backend: str,
) -> None:
    """Run MATRIX's cells in BATCHES separate batches of RUNS repeats and store this runner's noise:
    how far batch medians drift apart, the gate's false alarms on real pairs of batches, and the
    smallest slowdown it can catch."""
    from fsmatrix import matrix, racing
    from fsmatrix import runs as runs_mod

    limit = gate.parse_threshold(threshold)
    m = matrix.load(matrix_file)
    cells = m.select(list(only))
    if not cells:
        raise UserError(f"--only {' '.join(only)} matches none of the {len(m.cells)} cells", file=str(matrix_file))
    console = Console(stderr=True)
    prefix = f"calibrate-{m.name}-{backend}" if backend != "host" else f"calibrate-{m.name}"
    run_ids = [f"{prefix}-{calibrate.batch_label(k)}" for k in range(batches)]
    docs = []
    ok = True
    # Separate batches, one after the other, each a full run of the cells: the drift between them
    # is what a gate comparing a BASE run with a HEAD run faces, not the spread inside one run.
    chosen = BACKENDS[backend].make(workdir, [])
    try:
        for run_id in run_ids:
            options = runs_mod.RunOptions(results_root, run_id, racing.RunPlan.fixed(runs), force=not resume)
            summary = runs_mod.run_matrix(m, cells, chosen, options, console)
            ok = ok and summary.ok
            docs.append([d for ds in summary.docs.values() for d in ds])
    finally:
        chosen.close()
    cal = calibrate.calibrate_batches(
        docs, matrix_name=m.name, runs=runs, run_ids=run_ids, alpha=alpha, threshold=limit
    )
    path = calibrations.save(cal, results_root)
    click.echo(calibration_report.markdown(cal), nl=False)
    click.echo(f"calibration: {path.resolve()}")
    if not ok:
        click.echo("some runs did not pass: their cells have fewer values", err=True)
    sys.exit(0 if ok else 1)


def _percentage(option: str, text: str) -> float:
    """A minimum effect given as a percentage (5%), as a fraction; a clear error otherwise."""
    value = gate.parse_threshold(text)
    if not 0 < value < 1:
        raise UserError(f"{option} {text}: expected a percentage above 0 and below 100, such as 5%")
    return value


@click.command("report")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "json", "csv", "otava", "otava-config"]),
    default="md",
    show_default=True,
    help="md: the answer, then Markdown tables (terminals, $GITHUB_STEP_SUMMARY); json: the answer for machines "
    "(docs/answer.schema.json); csv: one row per run; otava: Apache Otava's CSV; otava-config: an Otava test "
    "definition for that CSV (file fsmatrix.csv).",
)
@click.option(
    "--html",
    "html_dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="OUT/",
    help="Also write OUT/report.html: one self-contained page with tables and charts.",
)
@click.option("--title", default=None, help="Report title (default: DIRECTORY).")
@click.option(
    "--delta",
    default="5%",
    show_default=True,
    help="The answer's minimum effect: a configuration is 'equivalent within ±DELTA' when its interval lies "
    "inside ±DELTA; one not separated gets the runs per configuration that would settle ±DELTA.",
)
@click.option(
    "--work-delta",
    default=None,
    help="The work answer's practical margin (default: --delta): a configuration does 'more work' only when "
    "its interval lies wholly beyond 1+WORK_DELTA, and is 'equivalent' when it lies inside ±WORK_DELTA.",
)
def report_cmd(
    directory: Path, fmt: str, html_dir: Path | None, title: str | None, delta: str, work_delta: str | None
) -> None:
    """Print the answer and the tables for the results under DIRECTORY (a run directory or a results root)."""
    min_effect = _percentage("--delta", delta)
    work_effect = _percentage("--work-delta", work_delta) if work_delta is not None else None
    name = title or str(directory)
    if html_dir is None and fmt not in ("md", "json"):  # the exports need no answer
        docs = store.load_results(directory)
    else:
        found = report.of_run(store.load_run_records(directory), Rule(delta=min_effect, work_delta=work_effect))
        docs = list(found.stored)
    if html_dir is not None:
        path = page.write_html(found, name, html_dir)
        click.echo(f"html report: {path.resolve()}", err=True)
    if fmt == "json":
        click.echo(
            json.dumps({"title": name, "answer": answer_text.to_json(found.answer)}, indent=1, ensure_ascii=False)
        )
    elif fmt == "csv":
        click.echo(exports.runs_csv(docs), nl=False)
    elif fmt == "otava":
        click.echo(exports.otava_csv(docs), nl=False)
    elif fmt == "otava-config":
        click.echo(exports.otava_config(docs, "fsmatrix.csv"), nl=False)
    else:
        click.echo(markdown.markdown(found, name), nl=False)
