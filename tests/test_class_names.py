"""One name, one thing: a class name is defined in one place of the package, outside ``bench/`` (its
benchmarks keep their own small row types). The registry's pattern is the exception: each workload's
``Params`` and each database's ``Settings`` (``REGISTRY_NAMES``), each in its own module, read through
the registry.

Standalone: ``python tests/test_class_names.py [ROOT]`` prints each name defined more than once.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "runner" / "fsmatrix"
REGISTRY_NAMES = {
    "Params": "agent/workloads/",  # each workload's parameters (the registry's pattern)
    "Settings": "agent/databases/",  # each database's settings block
}


def repeated(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Class names defined in more than one place under ``root`` (``bench/`` left out), with where."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        shown = path.relative_to(root).as_posix()
        if shown.startswith("bench/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(shown)
    return {
        name: places
        for name, places in where.items()
        if len(places) > 1 and not all(p.startswith(REGISTRY_NAMES.get(name, "\0")) for p in places)
    }


def test_each_class_name_is_defined_once() -> None:
    assert repeated() == {}


def test_a_second_definition_is_seen(tmp_path: Path) -> None:
    (tmp_path / "agent" / "workloads").mkdir(parents=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "a.py").write_text("class Cell:\n    pass\n")
    (tmp_path / "b.py").write_text("class Cell:\n    pass\n\n\nclass Params:\n    pass\n")
    (tmp_path / "agent" / "workloads" / "w1.py").write_text("class Params:\n    pass\n")
    (tmp_path / "bench" / "x.py").write_text("class Row:\n    pass\n")
    (tmp_path / "c.py").write_text("class Row:\n    pass\n")
    # Cell twice; Params outside the workloads is not the registry's; a bench's Row does not count
    assert repeated(tmp_path) == {"Cell": ["a.py", "b.py"], "Params": ["agent/workloads/w1.py", "b.py"]}


if __name__ == "__main__":
    for name, places in repeated(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE).items():
        print(name, " ".join(places))
