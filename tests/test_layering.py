"""The layering is a checked contract: [tool.importlinter] in pyproject.toml, and no module cycle.

`make lint` runs ``lint-imports`` on the tree. Here each contract is shown failing: a copy of the
package with one violation planted must make ``lint-imports`` fail naming that contract, and the
unplanted copy must pass. Cycles between modules are checked with grimp (import-linter's graph
library), counting type-only imports (``if TYPE_CHECKING:``: they never run, but a module that needs
another's types depends on it as much as one that calls it) and that importing ``a.b.c`` runs
``a/b/__init__.py`` first (a package's face is counted as what it is at run time: a module importing
every child it re-exports; no face is exempt, so a face that re-exports a module which names its
importer's types is a cycle too, as ``storage``'s was through ``prepare``); the agent's imports are
checked against ``sys.stdlib_module_names`` (function-level imports too, which
tests/test_guest.py's import of the agent without site-packages does not reach).

Standalone: ``python tests/test_layering.py`` prints the module cycles of the ``fsmatrix`` on the path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "runner" / "fsmatrix"
PYPROJECT = REPO / "pyproject.toml"
# `lint-imports`, run by this interpreter (whichever bin/ it sits in)
LINT_IMPORTS = [
    sys.executable,
    "-c",
    "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
]


def _contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


# ---------------------------------------------------------------------------------------- module cycles


def _ancestors(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts))}


def import_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Who imports whom, inside the graph's packages, as Python runs it: importing ``a.b.c`` from
    outside ``a.b`` also runs ``a/b/__init__.py`` (an edge grimp does not draw)."""
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        if graph.is_module_squashed(module):  # an external package
            continue
        imported = {m for m in graph.find_modules_directly_imported_by(module) if not graph.is_module_squashed(m)}
        for target in list(imported):
            imported |= _ancestors(target) - _ancestors(module) - {module}
        edges[module] = imported
    return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:  # iterative: no recursion limit on a long chain
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def cycle_chain(edges: dict[str, set[str]], component: Iterable[str]) -> list[str]:
    """One cycle through a component's first module, as a module chain (first == last)."""
    members = set(component)
    start = min(members)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(edges[node] & members):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")


def module_cycles(package: str = "fsmatrix") -> list[dict[str, list[str]]]:
    """The cycles between the package's modules, ``if TYPE_CHECKING:`` imports counted."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)
    edges = import_edges(graph)
    return [{"modules": c, "chain": cycle_chain(edges, c)} for c in strongly_connected(edges)]


def _describe(cycles: Iterable[dict[str, list[str]]]) -> str:
    return "\n".join(" -> ".join(c["chain"]) for c in cycles)


def test_no_module_cycle() -> None:
    cycles = module_cycles()
    assert not cycles, "import cycles between modules:\n" + _describe(cycles)


def test_cycle_search_on_small_graphs() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}, "f": {"g"}, "g": {"f"}}
    assert strongly_connected(edges) == [["a", "b", "c"], ["f", "g"]]
    assert cycle_chain(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]


# ------------------------------------------------------------------------------------- the agent's imports


def _externals(graph: grimp.ImportGraph, importers: Iterable[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for module in importers:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.is_module_squashed(imported):
                found.setdefault(imported, set()).add(module)
    return found


def test_agent_imports_only_the_standard_library_even_in_functions() -> None:
    graph = grimp.build_graph("fsmatrix", include_external_packages=True, cache_dir=None)
    agent = [m for m in graph.modules if m == "fsmatrix.agent" or m.startswith("fsmatrix.agent.")]
    outside = {
        name: sorted(importers)
        for name, importers in _externals(graph, agent).items()
        if name not in sys.stdlib_module_names
    }
    assert not outside, f"the agent imports packages outside the standard library: {outside}"


def test_agent_contract_forbids_every_third_party_package_the_host_side_imports() -> None:
    graph = grimp.build_graph("fsmatrix", include_external_packages=True, cache_dir=None)
    ours = [m for m in graph.modules if not graph.is_module_squashed(m)]
    third_party = {name for name in _externals(graph, ours) if name not in sys.stdlib_module_names}
    assert {"click", "yaml", "scipy"} <= third_party  # the graph did see the host side's imports
    forbidden = set(_contracts()["agent-stdlib"]["forbidden_modules"])
    assert third_party <= forbidden, f"add to the agent-stdlib contract: {sorted(third_party - forbidden)}"


# ----------------------------------------------------------------------- each contract can fail (planted)


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "fsmatrix", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _plant(root: Path, module_file: str, line: str) -> None:
    path = root / "fsmatrix" / module_file
    with path.open("a") as f:
        f.write(f"\n{line}\n")


def _env(root: Path) -> dict[str, str]:
    # The copy alone on the path (it shadows the installed fsmatrix); COLUMNS: contract names unwrapped.
    return {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "1000"}


def lint_imports(root: Path) -> tuple[int, dict[str, str]]:
    """``lint-imports`` on the fsmatrix under ``root`` with pyproject's contracts: its exit status
    and each contract's verdict (KEPT or BROKEN) by id."""
    done = subprocess.run(
        [*LINT_IMPORTS, "--no-cache", "--no-logo", str(PYPROJECT)],
        cwd=root,
        env=_env(root),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    verdicts: dict[str, str] = {}
    lines = done.stdout.splitlines()
    for contract_id, contract in _contracts().items():
        for line in lines:
            if line.startswith(f"{contract['name']} KEPT"):
                verdicts[contract_id] = "KEPT"
            elif line.startswith(f"{contract['name']} BROKEN"):
                verdicts[contract_id] = "BROKEN"
    assert set(verdicts) == set(_contracts()), done.stdout + done.stderr
    return done.returncode, verdicts


def test_lint_imports_passes_on_the_unplanted_copy(tmp_path: Path) -> None:
    root = _copy_package(tmp_path)
    status, verdicts = lint_imports(root)
    assert status == 0 and set(verdicts.values()) == {"KEPT"}, verdicts


# (file to append to, the line, the contracts it breaks: exactly these). The forbidden contracts
# count indirect imports: an agent importing a backend also makes the agent reach click, and the
# results (which import the agent) reach a backend; and since the backends and the results import
# the agent, it closes a cycle (not one inside the results: their stages keep their order). The
# results import the matrix (the answer's comparison groups), so the matrix importing a backend makes
# the results reach one too, and importing the results closes a cycle.
EVERY_CONTRACT = {
    "layers",
    "agent-host",
    "agent-stdlib",
    "results-backends",
    "results-stages",
    "render-store-face",
    "verdict-store-readers",
    "render-no-statistics",
    "acyclic",
}
PLANTED = {
    "agent imports a backend": (
        "agent/cell.py",
        "import fsmatrix.backends.host",
        EVERY_CONTRACT - {"results-stages", "render-store-face", "verdict-store-readers", "render-no-statistics"},
    ),
    "agent imports the results": (
        "agent/guest.py",
        "from fsmatrix import results",
        {"agent-host", "layers", "acyclic"},
    ),
    "agent imports click": ("agent/proc.py", "import click", {"agent-stdlib"}),
    "agent imports yaml in a function": ("agent/declare.py", "def _f() -> None:\n    import yaml", {"agent-stdlib"}),
    "results import a backend": (
        "results/verdict/stats.py",
        "from fsmatrix.backends import hostinfo",
        {"results-backends", "layers"},
    ),
    "matrix imports the results (upward)": (
        "matrix/schema.py",
        "from fsmatrix.results.verdict import stats",
        {"layers", "acyclic", "results-stages"},  # the store types documents with the matrix's groups
    ),
    "a verdict imports a renderer (upward)": (
        "results/verdict/stats.py",
        "from fsmatrix.results.render import tables",
        {"results-stages", "acyclic"},
    ),
    "the store imports a verdict (upward)": (
        "results/store/files.py",
        "from fsmatrix.results.verdict import stats",
        {"results-stages", "acyclic"},
    ),
    "a renderer computes a statistic": (
        "results/render/exports.py",
        "import statistics",
        {"render-no-statistics"},
    ),
    "a renderer imports the store's internals": (
        "results/render/tables.py",
        "from fsmatrix.results.store import root_store",
        {"render-store-face"},
    ),
    "a verdict imports a store's reader": (
        "results/verdict/stats.py",
        "from fsmatrix.results.store import otava",
        {"verdict-store-readers"},
    ),
    "errors imports the agent (upward)": ("errors.py", "import fsmatrix.agent.declare", {"layers"}),
    "a new top-level module no layer names": ("newlayer.py", "import fsmatrix.errors", {"layers"}),  # exhaustive
    "a two-module cycle in the agent": ("agent/proc.py", "from fsmatrix.agent import provenance", {"acyclic"}),
    "a cycle between backends and matrix": (
        "matrix/yamlpos.py",
        "import fsmatrix.backends",
        {"acyclic", "layers", "results-backends"},
    ),
}


def test_every_contract_has_a_planted_violation() -> None:
    assert set().union(*(breaks for _, _, breaks in PLANTED.values())) == EVERY_CONTRACT == set(_contracts())


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_lint_imports_fails_on_a_planted_violation(tmp_path: Path, case: str) -> None:
    module_file, line, breaks = PLANTED[case]
    root = _copy_package(tmp_path)
    _plant(root, module_file, line)
    status, verdicts = lint_imports(root)
    assert status == 1
    assert {c for c, verdict in verdicts.items() if verdict == "BROKEN"} == breaks, verdicts


@pytest.mark.parametrize(
    "planted",
    [
        "from fsmatrix.agent import provenance",
        # type-only: lint-imports does not count it (exclude_type_checking_imports), this check does
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from fsmatrix.agent import provenance",
    ],
    ids=["runtime", "type-only"],
)
def test_a_planted_module_cycle_fails_the_cycle_check(tmp_path: Path, planted: str) -> None:
    root = _copy_package(tmp_path)
    _plant(root, "agent/proc.py", planted)  # provenance imports proc
    done = subprocess.run(
        [sys.executable, __file__],
        env=_env(root),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    cycles = json.loads(done.stdout)
    assert [c["chain"] for c in cycles] == [["fsmatrix.agent.proc", "fsmatrix.agent.provenance", "fsmatrix.agent.proc"]]


if __name__ == "__main__":
    print(json.dumps(module_cycles(), indent=1))
