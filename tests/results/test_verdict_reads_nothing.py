"""verdict/ decides, store/ reads: a verdict module imports from ``fsmatrix.results.store`` only the typed
records and documents named in ``ALLOWED`` (and the pure functions of a document there), never a loader
nor a store module as a whole, and calls no file, process or database: no ``open(...)``, no
``Path`` method that touches the disk (``PATH_CALLS``), nothing of ``IO_MODULES`` (``subprocess``,
``os``, ``sqlite3``, ``psycopg``, ...), which it does not import either.

Counted on the AST of every module under ``runner/fsmatrix/results/verdict``. Standalone:
``python tests/results/test_verdict_reads_nothing.py [FOLDER]`` prints the offences, one
``file:line what`` a line.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERDICT = REPO / "runner" / "fsmatrix" / "results" / "verdict"
STORE = "fsmatrix.results.store"

# What a verdict may take from the store, by module: the typed records and documents it decides on.
ALLOWED: dict[str, frozenset[str]] = {
    STORE: frozenset(
        {"Result", "Race", "RunMatrix", "RunRecords", "MatrixEntry", "UNKNOWN_HOST", "DIRECTIONS"}
        | {"comparison_group", "dotted", "hardware_class"}  # pure functions of a document's fields
    ),
    f"{STORE}.document": frozenset({"Result", "UNKNOWN_HOST", "DIRECTIONS", "dotted", "hardware_class"}),
    f"{STORE}.records": frozenset({"Race", "RunMatrix", "MatrixEntry", "Left", "Stopped"}),
    f"{STORE}.run_records": frozenset({"RunRecords"}),
    f"{STORE}.sides": frozenset({"Side"}),
    f"{STORE}.history": frozenset({"Point", "Series"}),
    f"{STORE}.past_runs": frozenset({"StoredRun", "sibling_key"}),  # sibling_key: of a cell's params
    f"{STORE}.published": frozenset({"Claim", "Table"}),
    f"{STORE}.calibrations": frozenset({"FORMAT_VERSION"}),
}
# Modules whose every call reaches a file, a process, a database or the network.
IO_MODULES = frozenset(
    {"subprocess", "os", "shutil", "tempfile", "glob", "io", "socket", "sqlite3", "psycopg", "urllib", "http"}
    | {"fsmatrix.agent.jsonfile", "fsmatrix.agent.proc"}
)
BUILTIN_CALLS = frozenset({"open", "__import__"})
# Methods of pathlib.Path that read, write or look at the disk.
PATH_CALLS = frozenset(
    {"read_text", "read_bytes", "write_text", "write_bytes", "open", "touch", "unlink", "mkdir", "rmdir"}
    | {"iterdir", "glob", "rglob", "exists", "is_file", "is_dir", "stat", "rename", "symlink_to"}
)
JSON_FILE_CALLS = frozenset({"load", "dump"})  # json.load(f), json.dump(x, f): a file object


def _io_module(name: str) -> bool:
    return any(name == m or name.startswith(f"{m}.") for m in IO_MODULES)


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def offences_in(source: str, shown: str) -> list[str]:
    """What one verdict module reads or imports that it should not, as ``shown:line what``."""
    found: list[str] = []
    tree = ast.parse(source)
    io_names: set[str] = set()  # names bound to an IO module in this module
    for node in ast.walk(tree):
        where = f"{shown}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == STORE or alias.name.startswith(f"{STORE}."):
                    found.append(f"{where} imports the store module {alias.name}")
                if _io_module(alias.name):
                    found.append(f"{where} imports {alias.name}")
                    io_names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if node.module == STORE or node.module.startswith(f"{STORE}."):
                    if alias.name not in ALLOWED.get(node.module, frozenset()):
                        found.append(f"{where} imports {full} from the store")
                elif node.module == "fsmatrix.results" and alias.name == "store":
                    found.append(f"{where} imports the store module {full}")
                if _io_module(node.module) or _io_module(full):
                    found.append(f"{where} imports {full}")
                    io_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in BUILTIN_CALLS | io_names:
                found.append(f"{where} calls {func.id}()")
            elif isinstance(func, ast.Attribute):
                root = _root(func)
                if root in io_names or (root is not None and _io_module(root)):
                    found.append(f"{where} calls {root}...{func.attr}()")
                elif func.attr in PATH_CALLS:
                    found.append(f"{where} calls .{func.attr}()")
                elif root == "json" and func.attr in JSON_FILE_CALLS:
                    found.append(f"{where} calls json.{func.attr}()")
    return sorted(set(found), key=lambda o: (o.split(" ")[0].rsplit(":", 1)[0], int(o.split(" ")[0].rsplit(":", 1)[1])))


def offences(folder: Path = VERDICT) -> list[str]:
    return [
        o for path in sorted(folder.rglob("*.py")) for o in offences_in(path.read_text(), str(path.relative_to(folder)))
    ]


def test_verdict_imports_only_typed_records_from_the_store_and_reads_nothing() -> None:
    found = offences()
    assert found == [], "verdict/ reads or imports what the store should read for it:\n" + "\n".join(found)


def test_the_allowed_names_exist() -> None:
    import importlib

    missing = [
        f"{m}.{n}" for m, names in ALLOWED.items() for n in sorted(names) if not hasattr(importlib.import_module(m), n)
    ]
    assert missing == []


PLANTED = [
    ("from fsmatrix.results.store import load_results\n", "imports fsmatrix.results.store.load_results from the store"),
    ("from fsmatrix.results import store\n", "imports the store module fsmatrix.results.store"),
    ("import fsmatrix.results.store.files\n", "imports the store module fsmatrix.results.store.files"),
    ("from fsmatrix.results.store import sides\n", "imports fsmatrix.results.store.sides from the store"),
    ("from fsmatrix.results.store.history import load_series\n", "from the store"),
    ("def f(p):\n    return open(p).read()\n", "calls open()"),
    ("def f(p):\n    return p.read_text()\n", "calls .read_text()"),
    ("def f(p, t):\n    p.write_bytes(t)\n", "calls .write_bytes()"),
    ("def f(p):\n    return p.with_suffix('.x').open()\n", "calls .open()"),
    ("import subprocess\n\ndef f():\n    subprocess.run(['true'])\n", "calls subprocess...run()"),
    ("import os\n\ndef f():\n    os.system('true')\n", "calls os...system()"),
    ("from os import system\n\ndef f():\n    system('true')\n", "calls system()"),
    ("import sqlite3 as db\n\ndef f():\n    db.connect(':memory:')\n", "calls db...connect()"),
    ("import psycopg\n\ndef f(u):\n    psycopg.connect(u)\n", "calls psycopg...connect()"),
    ("import json\n\ndef f(fh):\n    return json.load(fh)\n", "calls json.load()"),
    ("from fsmatrix.agent import jsonfile\n\ndef f(p):\n    return jsonfile.read(p)\n", "calls jsonfile...read()"),
]


def test_the_check_sees_each_planted_violation(tmp_path: Path) -> None:
    for text, said in PLANTED:
        (tmp_path / "planted.py").write_text("from fsmatrix.results.store import Result\n" + text)
        found = offences(tmp_path)
        assert found and all(o.startswith("planted.py:") for o in found), (text, found)
        assert any(said in o for o in found), (text, found)


def test_the_check_passes_pure_code(tmp_path: Path) -> None:
    text = (
        "import json\nfrom pathlib import Path\nfrom fsmatrix.results.store.sides import Side\n\n"
        "def f(side: Side, p: Path) -> str:\n"
        "    return json.dumps({'n': len(side.docs), 'p': str(p.with_suffix('.x'))})\n"
    )
    (tmp_path / "pure.py").write_text(text)
    assert offences(tmp_path) == []


if __name__ == "__main__":
    print("\n".join(offences(Path(sys.argv[1]) if len(sys.argv) > 1 else VERDICT)))
