"""Golden outputs of the commands over stored results: ``fsmatrix report`` (Markdown, JSON, CSV, Otava's CSV
and test definition, the HTML page's answer section and the page without its charts), the report
``fsmatrix run`` writes, and ``fsmatrix compare`` (plain, ``--paired``, the gate with ``--confirm``,
``--across image``), each regenerated from result documents stored under tests/data/goldens/ and
compared byte for byte with the output stored beside them (``<case>/expected/``).

The documents are real runs on the host backend (the matrix files under tests/data/goldens/matrices/)
and the synthetic fixtures of test_seedreport.py and test_environment_axis.py, written out once by
tests/data/goldens/make_synthetic.py. The goldens were made from the code at the time: they pin what
users see, so that a refactor of the results code cannot change it unnoticed. A change on purpose
regenerates them:

    FSMATRIX_UPDATE_GOLDENS=1 .venv/bin/pytest tests/results/test_goldens.py

(each output is rewritten and its test skipped, saying so); then read ``git diff tests/data/goldens``
before committing: the goldens are the claim, not the code's opinion.

Every command runs from the repository's root with relative paths (the outputs name the directories
they were given, and a seed matrix's matrix.json names its matrix file relative to it) and a fixed
``--title``; the HTML page's SVG charts, whose element ids matplotlib salts anew on every call, are
cut out. Everything goes through the CLI (``fsmatrix.cli.main``) but the report ``fsmatrix run`` writes,
which only a real run reaches: it comes from ``write_report`` (one call, ``_run_report``).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsmatrix.cli import main

REPO = Path(__file__).resolve().parents[2]
GOLDENS = Path("tests/data/goldens")  # relative to REPO, the cwd of every command here
UPDATE = os.environ.get("FSMATRIX_UPDATE_GOLDENS") == "1"
DIFF_LINES = 60
# Rich's terminal detection reads these; the outputs must not depend on the caller's environment.
CLEAN_ENV: dict[str, str | None] = dict.fromkeys(
    ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES", "TERM")
)


@dataclass(frozen=True)
class Report:
    """A run directory of a case: ``fsmatrix report``'s outputs, and the report ``fsmatrix run`` wrote."""

    run_dir: str  # under GOLDENS
    run_title: str  # the title ``fsmatrix run`` gave its report: "<matrix name> (<run id>)"


REPORTS = {
    "threen1": Report("threen1/threen1", "golden-threen1 (threen1)"),
    "pgbench": Report("pgbench/pgbench", "golden-pgbench (pgbench)"),
    "crash": Report("crash/crash", "golden-crash (crash)"),
    "race": Report("race/race", "golden-race (race)"),
    "runners": Report("runners/runners", "golden-runners (runners)"),
    "seedreport": Report("seedreport/run", "x (run)"),
    "upgrade": Report("upgrade/upgrade", "upgrade (upgrade)"),
}
REPORT_OUTPUTS = {
    "report.md": [],
    "report.json": ["--format", "json"],
    "report.csv": ["--format", "csv"],
    "report.otava.csv": ["--format", "otava"],
    "report.otava-config.yaml": ["--format", "otava-config"],
}
HTML_OUTPUTS = ("report.answer.html", "report.page-without-charts.html")

_C = str(GOLDENS / "compare")
_A = str(GOLDENS / "across")
_GATE = ["--fail-on-regression", "5%", "--confirm", f"{_C}/base2", f"{_C}/head2"]
# case -> output -> (arguments of `fsmatrix compare`, exit status)
COMPARES: dict[str, dict[str, tuple[list[str], int]]] = {
    "compare": {
        "compare.json": ([f"{_C}/base", f"{_C}/head", "--results", _C, "--format", "json"], 0),
        "compare.md": ([f"{_C}/base", f"{_C}/head", "--results", _C, "--format", "md"], 0),
        "compare.txt": ([f"{_C}/base", f"{_C}/head", "--results", _C], 0),
        "compare-paired.json": ([f"{_C}/base", f"{_C}/head", "--results", _C, "--paired", "--format", "json"], 0),
        "compare-gate.json": (
            [f"{_C}/base", f"{_C}/head", "--results", _C, "--format", "json", *_GATE],
            1,
        ),
        "compare-gate.md": (
            [f"{_C}/base", f"{_C}/head", "--results", _C, "--format", "md", *_GATE],
            1,
        ),
    },
    "across": {
        "compare-across.json": (
            [f"{_A}/on12", f"{_A}/on13", "--results", _A, "--across", "image", "--format", "json"],
            0,
        ),
        "compare-across.md": ([f"{_A}/on12", f"{_A}/on13", "--results", _A, "--across", "image", "--format", "md"], 0),
        "compare-across.txt": ([f"{_A}/on12", f"{_A}/on13", "--results", _A, "--across", "image"], 0),
    },
}

ANSWER_START = '<section class="answer" id="answer">'
SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)


@pytest.fixture(autouse=True, scope="module")
def _in_repo() -> Iterator[None]:
    """Every command from the repository's root (module scope: the HTML page is made once per case)."""
    before = Path.cwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(before)


def fsmatrix(*args: str, status: int = 0) -> str:
    """What ``fsmatrix ARGS`` prints on stdout; it must exit with ``status``."""
    result = CliRunner(env=CLEAN_ENV).invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == status, f"fsmatrix {' '.join(args)}: exit {result.exit_code}\n{result.output}"
    return result.stdout_bytes.decode("utf-8")  # not .stdout, which turns CRLF into LF


_html_pages: dict[str, str] = {}


def _html_page(case: str, tmp_dir: Path) -> str:
    if case not in _html_pages:
        out = tmp_dir / f"html-{case}"
        fsmatrix("report", str(GOLDENS / REPORTS[case].run_dir), "--title", f"golden {case}", "--html", str(out))
        _html_pages[case] = (out / "report.html").read_bytes().decode("utf-8")
    return _html_pages[case]


def _answer_section(page: str) -> str:
    start = page.index(ANSWER_START)
    return page[start : page.index("</section>", start) + len("</section>")] + "\n"


def _without_charts(page: str) -> str:
    return SVG.sub("<svg><!-- chart cut out: its ids change on every call --></svg>", page)


def _run_report(case: str, tmp_dir: Path) -> str:
    """The report ``fsmatrix run`` writes at its end (``markdown.write_report``), made again in a copy of
    the stored run directory (the cwd stays the repository's root: a seed matrix's file is found)."""
    from fsmatrix.results.render import markdown  # the one import of the results code: the layout may change

    copy = tmp_dir / f"run-{case}"
    shutil.copytree(GOLDENS / REPORTS[case].run_dir, copy)
    path, _ = markdown.write_report(copy, REPORTS[case].run_title)
    text = path.read_bytes().decode("utf-8")
    assert str(tmp_dir) not in text, "the report names the directory it was made in"
    return text


def _makers() -> dict[tuple[str, str], Callable[[Path], str]]:
    makers: dict[tuple[str, str], Callable[[Path], str]] = {}
    for case, rep in REPORTS.items():
        directory = str(GOLDENS / rep.run_dir)
        for name, extra in REPORT_OUTPUTS.items():
            makers[(case, name)] = lambda _t, d=directory, c=case, e=extra: fsmatrix(
                "report", d, "--title", f"golden {c}", *e
            )
        makers[(case, "report.answer.html")] = lambda t, c=case: _answer_section(_html_page(c, t))
        makers[(case, "report.page-without-charts.html")] = lambda t, c=case: _without_charts(_html_page(c, t))
        makers[(case, "run-report.md")] = lambda t, c=case: _run_report(c, t)
    for case, outputs in COMPARES.items():
        for name, (args, status) in outputs.items():
            makers[(case, name)] = lambda _t, a=args, s=status: fsmatrix("compare", *a, status=s)
    return makers


MAKERS = _makers()


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("goldens")


@pytest.mark.parametrize(("case", "output"), sorted(MAKERS), ids=[f"{c}/{o}" for c, o in sorted(MAKERS)])
def test_output_is_the_golden(case: str, output: str, tmp_dir: Path) -> None:
    got = MAKERS[(case, output)](tmp_dir)
    golden = REPO / GOLDENS / case / "expected" / output
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(got.encode("utf-8"))
        pytest.skip(f"FSMATRIX_UPDATE_GOLDENS=1: wrote {golden.relative_to(REPO)}")
    assert golden.is_file(), f"no golden {golden.relative_to(REPO)}: make it with FSMATRIX_UPDATE_GOLDENS=1"
    want = golden.read_bytes().decode("utf-8")  # byte for byte: no newline translation
    if got != want:
        diff = list(
            difflib.unified_diff(
                want.splitlines(keepends=True), got.splitlines(keepends=True), f"golden {output}", f"now {output}"
            )
        )
        shown = "".join(diff[:DIFF_LINES]) + (
            f"... ({len(diff) - DIFF_LINES} more diff lines)\n" if diff[DIFF_LINES:] else ""
        )
        pytest.fail(
            f"{case}/{output} differs from its golden {golden.relative_to(REPO)} "
            f"(a change on purpose: FSMATRIX_UPDATE_GOLDENS=1, then read the diff):\n{shown}",
            pytrace=False,
        )


def test_every_golden_is_made() -> None:
    """No stale golden file: each one under <case>/expected/ is an output this test makes."""
    stored = {(p.parent.parent.name, p.name) for p in (REPO / GOLDENS).glob("*/expected/*")}
    assert stored <= set(MAKERS), sorted(stored - set(MAKERS))
