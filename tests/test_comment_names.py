"""A comment or docstring that names code names code that exists: no pointer to a function renamed or
removed long ago.

Read in every comment and docstring of the package: a backticked name (``name``, ``a.b``,
``name(...)``), a call-like one (``name(`` in prose), and a snake_case or private name in parentheses
(``(load_results)``, ``(_helper)``). Each must be one the package knows: a module or package, a
function or class, a name it assigns, an argument or keyword, an import, an identifier it spells in a
string (a setting's, a field's, a command's), a builtin, a keyword, a standard module or a ``math``
function (formulas: ``exp(x)``); a dotted name of a standard or third-party module (``time.monotonic``,
``scipy.stats.ttest_ind``) must resolve there. Names from outside Python that the prose quotes are in
``WORDS``, each with what it is.

Standalone: ``python tests/test_comment_names.py [ROOT]`` prints the unknown names, one
``file:line name`` a line.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import keyword
import math
import re
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "runner" / "fsmatrix"

WORDS = {
    "archive_command": "a PostgreSQL setting",
    "createXML": "libvirt's call",
    "sdb": "a device name",
    "PGPASSFILE": "libpq's environment",
    "PGPASSWORD": "libpq's environment",
    "fracfact_by_res": "pyDOE's fraction of a resolution",
    "fracfact_opt": "pyDOE's minimum-aberration fraction",
}
NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
BACKTICKED = re.compile(rf"(?<!`)``?({NAME})(?:\([^`]*\))?``?(?!`)")
CALL_LIKE = re.compile(rf"(?<![\w.`'\"/$-])({NAME})\((?!s\))")  # not "run(s)", not M's $ZGETJPI(
IN_PARENTHESES = re.compile(r"\((_[a-z]\w*|[a-z][a-z0-9]+(?:_[a-z0-9]{2,})+)\)")  # (load_results), (_helper)
OUTSIDE = ("numpy", "np", "scipy", "click", "yaml", "jsonschema", "matplotlib", "psycopg", "libvirt", "rich")


def _docstrings(tree: ast.AST) -> list[ast.Constant]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.append(first.value)
    return found


def _known_in(tree: ast.AST, docstrings: set[int]) -> set[str]:
    """The names one module defines, binds, takes or spells (its docstrings' words not counted)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.update((node.asname or node.name).split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return names


def _texts(source: str, tree: ast.AST, docstrings: list[ast.Constant]) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring."""
    found = [(d.lineno, str(d.value)) for d in docstrings]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def _resolves_outside(name: str) -> bool:
    """``time.monotonic``, ``np.percentile``: an attribute of a standard or third-party module."""
    parts = name.split(".")
    root = {"np": "numpy"}.get(parts[0], parts[0])
    if root not in sys.stdlib_module_names and root not in OUTSIDE:
        return False
    for k in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join([root, *parts[1:k]]))
        except ImportError:
            continue
        try:
            for attr in parts[k:]:
                value = getattr(value, attr)
        except AttributeError:
            return False
        return True
    return False


def unknown_names(root: Path = PACKAGE) -> list[str]:
    """Every name a comment or docstring under ``root`` names that the package does not know, as
    ``file:line name``."""
    known = set(dir(builtins)) | set(keyword.kwlist) | set(sys.stdlib_module_names) | set(dir(math)) | set(WORDS)
    texts: list[tuple[str, int, str]] = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
        docstrings = _docstrings(tree)
        known |= _known_in(tree, {id(d) for d in docstrings}) | {path.stem, path.parent.name}
        shown = str(path.relative_to(root.parent))
        texts += [(shown, line, text) for line, text in _texts(source, tree, docstrings)]
    found = []
    for shown, line, text in texts:
        for pattern in (BACKTICKED, CALL_LIKE, IN_PARENTHESES):
            for match in pattern.finditer(text):
                name = match.group(1).removesuffix(".py")  # ``kept.py``: the module kept
                if name.split(".")[-1] not in known and not _resolves_outside(name):
                    found.append(f"{shown}:{line} {name}")
    return sorted(set(found))


def test_comments_and_docstrings_name_what_there_is() -> None:
    found = unknown_names()
    assert found == [], "comments and docstrings name what the package does not have:\n" + "\n".join(found)


def test_the_check_sees_a_stale_name_in_each_form(tmp_path: Path) -> None:
    root = tmp_path / "fsmatrix"
    root.mkdir()
    (root / "kept.py").write_text(
        '"""Reads with ``load_results`` and ``time.monotonic``; see ``kept.py``, exp(x) and `helper(x)`."""\n\n'
        "import time\n\n\ndef load_results() -> float:\n"
        "    return time.monotonic()  # (load_results) and (_helper) stay in this module\n\n\n"
        "def _helper() -> None: ...\n"
    )
    assert unknown_names(root) == ["fsmatrix/kept.py:1 helper"]
    (root / "stale.py").write_text(
        '"""Typed by ``load_matrix_json``, timed by ``time.monotone``."""\n\n'
        "# checked by read_matrix(path) first\n"
        "X = 1  # its backing file is checked on its own (_loop_reasons)\n"
    )
    assert unknown_names(root) == [
        "fsmatrix/kept.py:1 helper",
        "fsmatrix/stale.py:1 load_matrix_json",
        "fsmatrix/stale.py:1 time.monotone",
        "fsmatrix/stale.py:3 read_matrix",
        "fsmatrix/stale.py:4 _loop_reasons",
    ]


if __name__ == "__main__":
    print("\n".join(unknown_names(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)))
