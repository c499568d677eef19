"""The docs are a promise: the README stays a short manual whose links resolve, and the architecture
page and the adding-a-* checklists name modules, registries and fields that exist."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import tomllib
from pathlib import Path

import pytest

from fsmatrix.agent import contract
from fsmatrix.agent.crash.mode import CrashMode, CrashRun
from fsmatrix.agent.storage import filesystems
from fsmatrix.backends.qemu.crash_host import HostCrashMode

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "runner" / "fsmatrix"
DOCS = sorted((REPO / "docs").glob("*.md"))
GUIDES = [REPO / "docs" / name for name in ("architecture.md", "adding-a-workload.md", "adding-a-filesystem.md",
                                           "adding-a-crash-mode.md")]  # fmt: skip
TOP = ("agent", "backends", "matrix", "results", "cli", "bench")
# A path inside the package, as the guides write it: `agent/crash/mode.py`, `backends/qemu/`.
PACKAGE_PATH = re.compile(r"`(?:runner/fsmatrix/)?((?:" + "|".join(TOP) + r")/[\w/.]*)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def package_paths(text: str) -> set[str]:
    return {
        m.group(1) for m in PACKAGE_PATH.finditer(text) if not m.group(1).endswith(".md")
    }  # matrix/README.md: the repo


def test_the_readme_is_a_short_manual() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 400
    first_screen = "\n".join(lines[:40])
    for page in ("docs/architecture.md", "docs/measurements.md"):
        assert f"({page})" in first_screen, f"{page} is not linked from the README's first screen"


@pytest.mark.parametrize("page", [REPO / "README.md", REPO / "results" / "README.md", *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = [
        target
        for target in LINK.findall(page.read_text())
        if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()
    ]
    assert broken == [], f"{page.name}: links to missing files: {broken}"


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_the_guides_name_modules_that_exist(guide: Path) -> None:
    named = package_paths(guide.read_text())
    assert named, f"{guide.name} names no module"
    missing = sorted(p for p in named if "NAME" not in p and not (PACKAGE / p.rstrip("/")).exists())
    assert missing == [], f"{guide.name} names modules that do not exist: {missing}"


def test_the_path_check_sees_a_missing_module() -> None:
    assert package_paths("see `agent/crash/mode.py` and `runner/fsmatrix/backends/qemu/`") == {
        "agent/crash/mode.py",
        "backends/qemu/",
    }
    assert not (PACKAGE / "agent/crashes.py").exists()  # what the check would report


def test_the_checklists_name_the_registries_and_fields_there_are() -> None:
    workload = (REPO / "docs" / "adding-a-workload.md").read_text()
    assert "`WORKLOADS` in `agent/workloads/__init__.py`" in workload
    for field in ("recover=", "acknowledged_on_console=", "reference=", "operations="):
        assert field in workload and field.rstrip("=") in contract.Workload.__dataclass_fields__
    filesystem = (REPO / "docs" / "adding-a-filesystem.md").read_text()
    assert "`FILESYSTEMS` in `agent/storage/filesystems/__init__.py`" in filesystem
    assert all(f"{name}=" in filesystem for name in ("mkfs_getopt", "kernel_module", "device", "mounts"))
    assert {"mkfs_getopt", "kernel_module", "device", "mounts"} <= set(filesystems.Filesystem.__dataclass_fields__)
    mode = (REPO / "docs" / "adding-a-crash-mode.md").read_text()
    assert "`MODES` in `agent/crash/settings.py`" in mode
    assert "`MODULES` in `backends/qemu/host_sides.py`" in mode  # a host side's registry line
    for hook in ("extra_disks", "timeouts", "job_environment", "before_run"):
        assert f"`{hook}(" in mode and hasattr(HostCrashMode, hook)
    for field in ("needs_vm", "refuses", "start"):
        assert f"{field}=" in mode and field in CrashMode.__dataclass_fields__
    for hook in ("wrap_data", "measured", "run", "after"):
        assert f"`{hook}" in mode and hasattr(CrashRun, hook)


# ------------------------------------------------------------------ architecture.md names what there is

ARCHITECTURE = REPO / "docs" / "architecture.md"
SPAN = re.compile(r"`([^`\n]+)`")
CALL = re.compile(r"^([\w.]+)\(.*\)$")  # `store.load_results(DIR)`: the callee
IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
RELATIVE = re.compile(r"^\.[A-Za-z_]\w*$")  # `.gate` in the bench row: a module of the row's package
DATA_FILE = (".json", ".toml", ".yaml", ".yml", ".md", ".txt", ".log")


def _modules() -> list[str]:
    names = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


def _path(token: str, bases: list[Path]) -> Path | None:
    """Where a written path is: below one of ``bases``, the package or the repository."""
    for base in [*bases, PACKAGE, REPO]:
        if (base / token.rstrip("/")).exists():
            return base / token.rstrip("/")
    return None


def _defined(path: Path) -> set[str]:
    """The names a module defines, imports or spells as a string (a command's, a key's), and its
    classes' members."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name | ast.arg):
            names.add(node.id if isinstance(node, ast.Name) else node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def _under(bases: list[Path]) -> list[Path]:
    return sorted({p for b in bases for p in ([b] if b.is_file() else b.rglob("*.py"))})


def _bare(name: str, bases: list[Path]) -> bool:
    """A bare name in a table row: a module or package under the row's folders, or a name one of
    their modules defines or spells."""
    files = _under(bases)
    if any(p.stem == name or p.parent.name == name for p in files):
        return True
    return any(name in _defined(p) for p in files)


def _dotted(name: str) -> bool:
    """``a.b.c``: a module of the package whose dotted name ends in the first parts and has the rest
    as attributes (``race.race_step``, ``store.Result.read``), a standard module's attribute
    (``dataclasses.replace``), or a matrix setting's path (``vm.kernel``)."""
    from fsmatrix.matrix import schema

    if name in schema.setting_paths():
        return True
    parts = name.split(".")
    modules = _modules()
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        candidates = [m for m in modules if m == f"fsmatrix.{prefix}" or m == prefix or m.endswith(f".{prefix}")]
        if not candidates and k == 1 and prefix in sys.stdlib_module_names:
            candidates = [prefix]
        for module in candidates:
            value: object = importlib.import_module(module)
            try:
                for attr in parts[k:]:
                    value = getattr(value, attr)
            except AttributeError:
                continue
            return True
    return False


def _rows(text: str) -> list[tuple[str, list[str]]]:
    """(section, cells) for every table row and every prose paragraph (one cell, its lines joined:
    a backticked name may wrap), outside code blocks."""
    found: list[tuple[str, list[str]]] = []
    section, fenced = "", False
    paragraph: list[str] = []
    for line in [*text.splitlines(), ""]:
        prose = not fenced and line.strip() and not line.startswith(("```", "#", "|"))
        if not prose and paragraph:
            found.append((section, [" ".join(paragraph)]))
            paragraph = []
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            continue
        elif line.startswith("#"):
            section = line.lstrip("#").strip()
        elif line.startswith("|"):
            found.append((section, [c.strip() for c in line.strip().strip("|").split("|")]))
        elif prose:
            paragraph.append(line.strip())
    return found


def _tokens(cell: str) -> list[str]:
    out = []
    for token in SPAN.findall(cell):
        call = CALL.match(token.strip())
        out.append(call.group(1) if call else token.strip())
    return out


def _is_path(token: str) -> bool:
    return "/" in token or token.endswith(".py")


def unresolved(text: str) -> list[str]:
    """The names in an architecture page that name nothing in the tree, as ``section: name``.

    A path (``store/root_store.py``, ``agent/crash/``, ``runs.py``) must exist below a folder named before
    it in the same table row, or in the same section's prose (``runner/fsmatrix/results/``, then
    ``store/root_store.py``; a row's package column, then its modules), or the package, or the
    repository. A dotted name (``results.verdict.race.race_look``, ``crash_host.HostCrashMode``,
    ``store.load_results(DIR)``) must be importable: see ``_dotted``. In a table row, a bare name
    (``yamlpos``, ``WORKLOADS``, the qemu row's ``cmdline``) and ``.gate`` must be a module under the
    row's folders and files or a name one of them defines or spells. Commands (with a space),
    options, placeholders (``NAME``, ``<root>``) and file names of a run (``race.json``) are words,
    not names."""
    missing: list[str] = []
    prose: dict[str, list[Path]] = {}  # a section's prose: the folders and files it named so far
    for section, cells in _rows(text):
        row = len(cells) > 1
        named = [] if row else prose.setdefault(section, [])
        for token in (t for c in cells for t in _tokens(c)):
            if any(c.isspace() for c in token) or any(c in token for c in "<>:=\"'-*") or "NAME" in token:
                continue
            if token.endswith(DATA_FILE) and "/" not in token:
                continue  # a file a run writes, pyproject.toml: not the package's
            folders = [p for p in reversed(named) if p.is_dir()]  # the latest first
            if _is_path(token):
                found = _path(token, folders)
                ok = found is not None
                if found is not None and found != REPO:
                    named.append(found)
            elif RELATIVE.match(token):
                ok = row and any((f / token[1:]).with_suffix(".py").exists() for f in folders)
            elif DOTTED.match(token):
                ok = _dotted(token)
            elif IDENTIFIER.match(token) and row:
                ok = _bare(token, [p for p in named if p != PACKAGE] or [PACKAGE])
            else:
                continue
            if not ok:
                missing.append(f"{section}: {token}")
    return missing


def test_the_architecture_page_names_what_there_is() -> None:
    missing = unresolved(ARCHITECTURE.read_text())
    assert missing == [], "docs/architecture.md names what the tree does not have:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "made_up",
    [
        "`store/ledger.py`",  # a path
        "`verdict/`: the gate (`gate.py`), the shortcut (`shortcut.py`)",  # a file next to a real one
        "`results.verdict.race.race_guess`",  # a dotted name's attribute
        "`fsmatrix.results.ledger`",  # a dotted name's module
        "| `matrix/` | reading (`read`), guessing (`guess`) |",  # a bare module name in a row
        "| `bench/` | `.gate`, `.guess` |",  # a relative module
    ],
)
def test_the_architecture_check_sees_a_made_up_name(made_up: str) -> None:
    text = "## The results room\n\nIn `runner/fsmatrix/results/`:\n\n" + made_up + "\n"
    assert len(unresolved(text)) == 1, unresolved(text)


def _layers_written(text: str) -> list[str]:
    """Every ``cli > ... > errors`` chain a page writes (wrapped lines joined), as written."""
    flat = " ".join(text.split())
    return re.findall(r"\bcli +> +[\w, |>]*?> +errors\b", flat)


def test_the_pages_write_the_layers_the_contract_checks() -> None:
    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["name"].removeprefix("layers: ") for c in contract if c["id"] == "layers"]
    for page in ("architecture.md", "development.md"):
        written = _layers_written((REPO / "docs" / page).read_text())
        assert written and set(written) == {layers}, f"{page}: {written}, the contract: {layers}"


def test_the_layers_check_sees_a_stale_chain() -> None:
    assert _layers_written("checked: cli > bench >\nruns > agent > errors; and") == [
        "cli > bench > runs > agent > errors"
    ]


# ------------------------------------------------------------------ every module is named somewhere

PAGES = (ARCHITECTURE, REPO / "docs" / "development.md")


def _as_path(token: str) -> str:
    """A written module as a path below the package: ``runner/fsmatrix/results/store/files.py``,
    ``fsmatrix.bench.results``, ``python -m fsmatrix.bench.race_sim`` -> ``bench/race_sim``."""
    token = token.split()[-1] if token.startswith("python -m ") else token
    token = token.removeprefix("runner/").removeprefix("fsmatrix/").removeprefix("fsmatrix.")
    if "/" not in token and not token.endswith(".py") and not token.startswith("."):
        token = token.replace(".", "/")
    return token.removesuffix(".py")


def unnamed_modules(texts: list[str], package: Path = PACKAGE) -> list[str]:
    """The package's modules no page names, as paths below the package. A module is named by its path
    (or the end of it from its folder on: ``verdict/work.py``, ``fsmatrix.bench.results``), or by its
    name (``yamlpos``, ``.gate``, ``work.py``) beside its folder (``matrix/``, ``threen1/``) in one table
    row or paragraph; a folder's modules all at once by "one module per" beside the folder; a
    package's ``__init__`` by the folder."""
    units = [" | ".join(cells) for text in texts for _, cells in _rows(text)]
    spans = [[_as_path(t.strip()) for t in SPAN.findall(u)] for u in units]
    missing = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        folder, stem = "/".join(parts[:-1]), parts[-1]
        if stem == "__init__":
            written = [s.rstrip("/") for ss in spans for s in ss]
            named = not folder or any(
                w == folder or folder.endswith("/" + w) or w.startswith(folder + "/") for w in written
            )
        else:
            full = f"{folder}/{stem}" if folder else stem
            named = False
            for unit, ss in zip(units, spans, strict=True):
                if any(
                    s.rstrip("/") == full or (folder and full.endswith("/" + s.rstrip("/")) and "/" in s) for s in ss
                ):
                    named = True
                beside = folder and any(
                    (s.endswith("/") and (folder + "/").endswith("/" + s)) or s == folder + "/" for s in ss
                )
                if beside and (
                    re.search(rf"(?<![\w/-]){re.escape(stem)}(?![\w/-])", unit)
                    or ("one module per" in unit and not stem.startswith("_"))
                ):
                    named = True
        if not named:
            missing.append(str(path.relative_to(package)))
    return missing


def test_the_pages_name_every_module() -> None:
    missing = unnamed_modules([p.read_text() for p in PAGES])
    assert missing == [], "architecture.md and development.md name none of:\n" + "\n".join(missing)


def test_the_module_check_sees_an_unnamed_module(tmp_path: Path) -> None:
    package = tmp_path / "fsmatrix"
    for name in ("__init__.py", "top.py", "results/__init__.py", "results/store/files.py", "results/store/sides.py",
                 "bench/__init__.py", "bench/race_sim.py", "bench/gate.py", "agent/fs/ext4.py", "agent/fs/_ext.py",
                 "agent/fs/__init__.py", "agent/fs/xfs.py", "agent/__init__.py"):  # fmt: skip
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    text = (
        "| `results/` | `store/files.py` |\n| `bench/` | `.gate` |\n\nSee `python -m fsmatrix.bench.race_sim`.\n\n"
        "| `agent/fs/` | one module per filesystem |\n"
    )
    assert unnamed_modules([text], package) == [
        "agent/fs/_ext.py", "results/store/sides.py", "top.py"
    ]  # fmt: skip


# ------------------------------------------------------------------ the glossary: a term, its one owner

GLOSSARY_TERMS = ("cell", "configuration", "group", "run", "repeat", "round", "race", "plan", "design", "effect",
                  "answer", "store", "series", "history")  # fmt: skip


def glossary(text: str) -> dict[str, str]:
    """The glossary's rows: term -> its owner column."""
    rows = [cells for section, cells in _rows(text) if section == "Glossary" and len(cells) == 3]
    return {cells[0].strip("*` "): cells[2] for cells in rows if cells[0] not in ("term", "---")}


def _top_level(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def glossary_problems(text: str) -> list[str]:
    """Each term once, each owned by one module that exists and defines what the row names."""
    found = glossary(text)
    problems = [f"{t}: not in the glossary" for t in GLOSSARY_TERMS if t not in found]
    problems += [f"{t}: not a term of the glossary" for t in found if t not in GLOSSARY_TERMS]
    for term, owner in found.items():
        tokens = [t.strip() for t in SPAN.findall(owner)]
        paths = [t for t in tokens if _is_path(t)]
        if len(paths) != 1 or not (PACKAGE / paths[0]).is_file():
            problems.append(f"{term}: owned by {paths}, not one module of the package")
            continue
        defined = _top_level(PACKAGE / paths[0])
        problems += [f"{term}: {paths[0]} defines no {t}" for t in tokens if t not in paths and t not in defined]
    return problems


def test_the_glossary_defines_each_term_once_with_its_owner() -> None:
    text = ARCHITECTURE.read_text()
    assert glossary_problems(text) == []
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert len(rows) == len(GLOSSARY_TERMS) + 1  # the header: each term once


def test_the_glossary_check_sees_a_wrong_owner() -> None:
    header = "## Glossary\n\n| term | what it is | owner |\n|---|---|---|\n"
    good = {t: "`results/verdict/answer.py`: `Answer`" for t in GLOSSARY_TERMS}
    table = lambda rows: header + "".join(f"| {t} | x | {o} |\n" for t, o in rows.items())  # noqa: E731
    assert glossary_problems(table(good)) == []
    assert glossary_problems(table(good | {"cell": "`agent/cell.py`: `Celll`"})) == [
        "cell: agent/cell.py defines no Celll"
    ]
    assert glossary_problems(table(good | {"store": "`results/store/ledger.py`: `Store`"})) == [
        "store: owned by ['results/store/ledger.py'], not one module of the package"
    ]
    assert glossary_problems(table(good | {"cell": "not yet built"})) == [
        "cell: owned by [], not one module of the package"
    ]
    assert glossary_problems(table({t: o for t, o in good.items() if t != "round"})) == ["round: not in the glossary"]
