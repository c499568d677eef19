"""A leading underscore means "this module's own": no module of the package reaches into another's.

Counted, by the AST of every module under ``runner/fsmatrix``: ``from X import _name`` where ``X``
is a module of the package (a package's ``__init__`` included, also from a module inside that
package), and ``M._name`` where ``M`` is a name bound to a module of the package (``import
fsmatrix.a.b as M``, ``from fsmatrix.a import b``, or the chain ``fsmatrix.a.b._name``). Dunder
names (``__version__``) are public. A private module (``cli/_common.py``) is private to its
package: its siblings may import it and what it defines; nothing outside that package may.

Standalone: ``python tests/test_private_names.py [ROOT]`` prints the offences in ROOT (default: the
package under ``runner/``), one ``file:line name`` a line.
"""

from __future__ import annotations

import ast
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "runner" / "fsmatrix"


@dataclass(frozen=True, order=True)
class Offence:
    path: str  # relative to the package's parent folder: fsmatrix/container.py
    line: int
    name: str  # as written: _digest, libvirtd._our_pids

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _Modules:
    """The dotted names of the modules and packages in the tree rooted at ``package``."""

    def __init__(self, package: Path) -> None:
        self.root = package.parent
        self.names: dict[str, Path] = {}
        for path in package.rglob("*.py"):
            parts = path.relative_to(self.root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            self.names[".".join(parts)] = path

    def of(self, path: Path) -> str:
        parts = path.relative_to(self.root).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def is_package(self, module: str) -> bool:
        return module in self.names and self.names[module].name == "__init__.py"


def _owner(module: str) -> str:
    """The package whose privates a private module's name shares: fsmatrix.cli for fsmatrix.cli._common."""
    return module.rpartition(".")[0]


def _inside(importer: str, package: str) -> bool:
    return importer == package or importer.startswith(package + ".")


def _allowed_module(importer: str, module: str) -> bool:
    """Whether ``importer`` may import ``module`` (a private module only from its own package)."""
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        if _private(parts[n - 1]) and not _inside(importer, ".".join(parts[: n - 1])):
            return False
    return True


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None if it does not start with a plain name."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def module_offences(modules: _Modules, path: Path) -> list[Offence]:
    importer = modules.of(path)
    shown = str(path.relative_to(modules.root))
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Offence] = []
    bound: dict[str, str] = {}  # a local name -> the package module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(importer, path.name == "__init__.py", node)
            if source not in modules.names:
                continue
            for alias in node.names:
                child = f"{source}.{alias.name}"
                if child in modules.names:  # a submodule
                    if not _allowed_module(importer, child):
                        found.append(Offence(shown, node.lineno, alias.name))
                    bound[alias.asname or alias.name] = child
                elif _private(alias.name) and not (
                    _private(source.rpartition(".")[2]) and _inside(importer, _owner(source))
                ):
                    found.append(Offence(shown, node.lineno, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules.names:
                    if not _allowed_module(importer, alias.name):
                        found.append(Offence(shown, node.lineno, alias.name))
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        bound[top] = top
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        chain = _chain(node)
        if chain is None or chain[0] not in bound:
            continue
        module = ".".join([bound[chain[0]], *chain[1:-1]])
        if module not in modules.names or module == importer:
            continue  # an attribute of an object, or the module's own
        if _private(module.rpartition(".")[2]) and _inside(importer, _owner(module)):
            continue  # a private module's names, used inside its package
        found.append(Offence(shown, node.lineno, ".".join(chain[-2:])))
    return found


def private_imports(package: Path = PACKAGE) -> list[Offence]:
    """Every private name a module of ``package`` takes from another, sorted."""
    modules = _Modules(package)
    return sorted({o for path in sorted(package.rglob("*.py")) for o in module_offences(modules, path)})


def _listing(offences: list[Offence]) -> str:
    return "\n".join(map(str, offences))


def test_no_module_imports_another_modules_private_names() -> None:
    offences = private_imports()
    assert offences == [], f"{len(offences)} private names taken across modules:\n" + _listing(offences)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "fsmatrix"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_the_check_sees_every_kind_of_private_import(tmp_path: Path) -> None:
    package = _tree(
        tmp_path,
        {
            "__init__.py": "__version__ = '1'\n_secret = 1\n",
            "a/__init__.py": "_shared = 2\n",
            "a/one.py": "_left = 1\nright = 2\n\n\ndef _helper() -> None: ...\n",
            "a/_common.py": "_inner = 1\n",
            "a/two.py": (
                "from fsmatrix.a.one import _left, right\n"  # 1: a private name
                "from fsmatrix.a import one, _shared\n"  # 2: the package's __init__ private
                "from . import one as again\n"
                "import fsmatrix.a.one as o\n"
                "import fsmatrix.a.one\n"
                "from fsmatrix.a._common import _inner\n"  # a sibling private module: allowed
                "from fsmatrix import __version__\n"  # dunder: allowed
                "one._helper()\n"  # 6
                "o._left\n"  # 7
                "again._helper\n"  # 8
                "fsmatrix.a.one._left\n"  # 9
                "right._x\n"  # an attribute of an object, not of a module
            ),
            "b.py": (
                "from fsmatrix import _secret\n"  # 1
                "from fsmatrix.a import _common\n"  # 2: a private module from outside its package
                "from .a.one import _left as left\n"  # 3: relative
            ),
            "a/one_own.py": "_mine = 1\nprint(_mine)\n",
        },
    )
    assert [str(o) for o in private_imports(package)] == [
        "fsmatrix/a/two.py:1 _left",
        "fsmatrix/a/two.py:2 _shared",
        "fsmatrix/a/two.py:8 one._helper",
        "fsmatrix/a/two.py:9 o._left",
        "fsmatrix/a/two.py:10 again._helper",
        "fsmatrix/a/two.py:11 one._left",
        "fsmatrix/b.py:1 _secret",
        "fsmatrix/b.py:2 _common",
        "fsmatrix/b.py:3 _left",
    ]


def test_one_planted_import_fails_the_check(tmp_path: Path) -> None:
    """A copy of the package with one private name taken across modules has one more offence."""
    package = tmp_path / "fsmatrix"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    before = private_imports(package)
    with (package / "errors.py").open("a") as f:
        f.write("\nfrom fsmatrix.backends.libvirtd import _alive_as  # planted\n")
    (planted,) = set(private_imports(package)) - set(before)
    assert planted.path == "fsmatrix/errors.py" and planted.name == "_alive_as"


if __name__ == "__main__":
    print(_listing(private_imports(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)))
