"""fsmatrix's functions stay small enough to read: none in the package (``bench/`` included) over
MAX_LINES lines (its ``def`` line to its last, decorators not counted, its docstring counted) nor over
MAX_PARAMETERS parameters (``self`` and ``cls`` not counted; keyword-only ones, ``*args`` and
``**kwargs`` counted). Nested functions and methods are functions too. A click command (a function
decorated with ``@click.command``, ``@click.group`` or ``@<group>.command``) takes one parameter per
option, so it is exempt from the parameter count, never from the length.

Standalone: ``python tests/test_function_size.py [FOLDER]`` prints the offenders in FOLDER (default:
``runner/fsmatrix``), one ``file:line name: what`` a line.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "runner" / "fsmatrix"
MAX_LINES = 80
MAX_PARAMETERS = 6
CLICK_DECORATORS = ("command", "group")  # click.command, click.group, some_group.command


@dataclass(frozen=True, order=True)
class Oversized:
    path: str  # relative to the folder's parent: fsmatrix/results/verdict/speed.py
    line: int
    name: str  # qualified: Class.method, outer.inner
    what: str  # "93 lines", "8 parameters"

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}: {self.what}"


Function = ast.FunctionDef | ast.AsyncFunctionDef


def parameter_count(node: Function) -> int:
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    if positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    return len(positional) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def is_click_command(node: Function) -> bool:
    """Decorated with ``@click.command(...)``, ``@click.group(...)``, ``@<group>.command(...)`` (called
    or not), or an imported ``@command``."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        if name in CLICK_DECORATORS:
            return True
    return False


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, Function]]:
    found: list[tuple[str, Function]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((prefix + node.name, node))
            found += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, f"{prefix}{node.name}.")
        else:
            found += _functions(node, prefix)
    return found


def oversized(folder: Path = PACKAGE) -> list[Oversized]:
    """Every function in ``folder``'s modules over MAX_LINES lines or (a click command excepted) over
    MAX_PARAMETERS parameters, sorted."""
    found: list[Oversized] = []
    for path in sorted(folder.rglob("*.py")):
        shown = str(path.relative_to(folder.parent))
        for name, node in _functions(ast.parse(path.read_text(), filename=str(path))):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES:
                found.append(Oversized(shown, node.lineno, name, f"{lines} lines"))
            parameters = parameter_count(node)
            if parameters > MAX_PARAMETERS and not is_click_command(node):
                found.append(Oversized(shown, node.lineno, name, f"{parameters} parameters"))
    return sorted(found)


def _listing(found: list[Oversized]) -> str:
    return "\n".join(map(str, found))


def test_no_function_is_too_long_or_takes_too_many_parameters() -> None:
    found = oversized()
    assert found == [], f"{len(found)} functions over {MAX_LINES} lines or {MAX_PARAMETERS} parameters:\n" + _listing(
        found
    )


def test_the_check_sees_a_planted_long_function_and_a_wide_one(tmp_path: Path) -> None:
    folder = tmp_path / "fsmatrix"
    (folder / "store").mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))  # with the def line: MAX_LINES
    text = (
        f"def fits():\n{body}\n\n"
        f"def too_long():\n{body}    return 1\n\n\n"
        "class Store:\n"
        "    def fits(self, a, b, c, d, e, f): ...\n"
        "    @classmethod\n"
        "    def wide(cls, a, b, c, d, *e, f, **g): ...\n\n\n"
        "def outer(a, /, b, c, d, e, f, g):\n"
        "    def inner(*args, **kwargs): ...\n"
    )
    (folder / "store" / "planted.py").write_text(text)
    lines = text.splitlines()

    def line(start: str) -> int:
        return next(n for n, x in enumerate(lines, 1) if x.lstrip().startswith(start))

    assert [str(o) for o in oversized(folder)] == [
        f"fsmatrix/store/planted.py:{line('def too_long')} too_long: {MAX_LINES + 1} lines",
        f"fsmatrix/store/planted.py:{line('def wide')} Store.wide: 7 parameters",
        f"fsmatrix/store/planted.py:{line('def outer')} outer: 7 parameters",
    ]


def test_a_click_command_is_exempt_from_the_parameter_count_only(tmp_path: Path) -> None:
    folder = tmp_path / "fsmatrix"
    (folder / "cli").mkdir(parents=True)
    options = "".join(f'@click.option("--o{i}")\n' for i in range(7))
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))  # with the def line: MAX_LINES + 1
    text = (
        "import click\n\n\n"
        f'@click.command("wide")\n{options}def wide(o0, o1, o2, o3, o4, o5, o6):\n    pass\n\n\n'
        f"@click.group()\ndef group(a, b, c, d, e, f, g):\n    pass\n\n\n"
        f'@group.command("long")\ndef long_command():\n{body}\n\n'
        f"@click.pass_context\ndef not_a_command(a, b, c, d, e, f, g):\n    pass\n"
    )
    (folder / "cli" / "planted.py").write_text(text)
    lines = text.splitlines()

    def line(start: str) -> int:
        return next(n for n, x in enumerate(lines, 1) if x.startswith(start))

    assert [str(o) for o in oversized(folder)] == [
        f"fsmatrix/cli/planted.py:{line('def long_command')} long_command: {MAX_LINES + 1} lines",
        f"fsmatrix/cli/planted.py:{line('def not_a_command')} not_a_command: 7 parameters",
    ]


if __name__ == "__main__":
    print(_listing(oversized(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)))
