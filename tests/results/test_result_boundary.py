"""The results room by stage, counted: documents enter as raw JSON in the store and nowhere else.

A parameter *takes raw result documents* when its annotation holds a sequence of ``dict[str, Any]``
(or ``Mapping[str, Any]``), or when it is such a mapping and its name says it is a document (``doc``,
``result``, ``run``, ...). After the store's reading boundary everything takes the typed
``fsmatrix.results.store.Result``: at most ``MAX_RAW`` such parameters in results/ (each listed in
``BOUNDARY`` with why), none in runs, bench or bisect. Also counted: results/ has its three stages,
no file in it is over ``MAX_LINES`` lines, and the old multi-concept modules are gone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "runner" / "fsmatrix"
RAW = re.compile(r"\b(?:dict|Mapping)\[str, Any\]")
SEQUENCE_OF_RAW = re.compile(r"\b(?:list|Sequence|Iterable|Collection|tuple)\[(?:dict|Mapping)\[str, Any\]")
DOCUMENT_NAMES = {"d", "ds", "doc", "docs", "document", "documents", "result", "results", "run", "runs"}
MAX_RAW = 6
MAX_LINES = 450
# (module under results/, function, parameter): why it still takes raw JSON
BOUNDARY = {
    ("store/document.py", "document_problem", "doc"): "the schema check of a document being read",
    ("store/document.py", "read", "doc"): "the typing itself: raw JSON in, Result out",
    ("store/root_store.py", "add", "doc"): "the index row of a document `fsmatrix run` just wrote",
    ("store/database.py", "canonical", "document"): "the text a store keeps of a document, and hashes",
    ("verdict/calibrate.py", "noise_floors", "calibrations"): "stored calibrations, not result documents",
    ("verdict/claims.py", "view", "stand_in"): "a matrix file's stand-in entries, not result documents",
}


def raw_parameters(source: str, where: str = "") -> list[tuple[str, str, str]]:
    """(where, function, parameter) of each parameter of ``source`` that takes raw result documents."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            if arg.annotation is None:
                continue
            annotation = ast.unparse(arg.annotation)
            if SEQUENCE_OF_RAW.search(annotation) or (RAW.search(annotation) and arg.arg in DOCUMENT_NAMES):
                found.append((where, node.name, arg.arg))
    return found


def raw_parameters_under(folder: Path) -> list[tuple[str, str, str]]:
    files = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder]
    return [p for f in files for p in raw_parameters(f.read_text(), str(f.relative_to(folder.parent)))]


def test_the_counter_sees_both_kinds_of_raw_parameter() -> None:
    planted = (
        "def a(docs: list[dict[str, Any]]) -> None: ...\n"
        "def b(doc: Mapping[str, Any], params: dict[str, Any]) -> None: ...\n"
        "def c(results: Sequence[Result]) -> None: ...\n"
        "def d(by_cell: dict[str, Sequence[Mapping[str, Any]]]) -> None: ...\n"
    )
    assert raw_parameters(planted) == [("", "a", "docs"), ("", "b", "doc"), ("", "d", "by_cell")]


def test_only_the_store_boundary_takes_raw_documents_in_results() -> None:
    found = {
        (where.removeprefix("results/"), function, name)
        for where, function, name in raw_parameters_under(PACKAGE / "results")
    }
    assert found <= set(BOUNDARY), f"raw result documents past the store: {sorted(found - set(BOUNDARY))}"
    assert len(found) <= MAX_RAW


@pytest.mark.parametrize("where", ["runs.py", "bench", "bisect"])
def test_runs_bench_and_bisect_take_typed_results(where: str) -> None:
    assert raw_parameters_under(PACKAGE / where) == []


def test_results_by_stage_in_files_of_one_concept() -> None:
    results = PACKAGE / "results"
    stages = sorted(p.name for p in results.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert stages == ["render", "store", "verdict"]
    assert sorted(p.name for p in results.glob("*.py")) == ["__init__.py"], "every module of results/ is in a stage"
    long = {
        str(p.relative_to(results)): n
        for p in results.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"
    assert not list(results.rglob("compare.py")) and not (results / "answer.py").exists()
