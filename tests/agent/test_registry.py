"""The registries own their members: workloads, filesystems and backends are declared once.

- outside the package that holds its module and its registry, a workload's or filesystem's name
  appears (as an identifier or a string, docstrings and comments aside) in at most one file under
  runner/fsmatrix (fsmatrix's own benchmarks under bench/ may use workloads by name);
- every declaration is complete: metrics with titles and directions, a primary metric among them,
  every parameter with a default (or required) and a bound, each in `fsmatrix matrix settings`;
- the Debian package lists (Makefile, packer/packages.txt) hold every package a declaration needs.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from fsmatrix.agent import declare, workloads
from fsmatrix.agent.storage import filesystems
from fsmatrix.backends import BACKENDS
from fsmatrix.matrix import schema

PACKAGE = REPO / "runner" / "fsmatrix"
# fsmatrix's own benchmarks run particular cells on purpose.
EXEMPT = ("bench/",)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def names_used(path: Path) -> set[str]:
    """Identifiers and the words of string literals in a Python file (docstrings and comments left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = _docstrings(tree)
    used: set[str] = set()
    # Identifiers count where they reach a module or a member (imports, attributes, keywords); a
    # local variable cannot reach a workload without one of those.
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.update(node.name.split("."))
            if node.asname:
                used.add(node.asname)
        elif isinstance(node, ast.keyword) and node.arg:
            used.add(node.arg)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            # A string that is a name or a dotted setting path ("fio", "workload.fio.pattern",
            # f"...{x}.threen1"); words in messages are prose ("a raw image").
            and re.fullmatch(r"[A-Za-z0-9_.-]*", node.value)
        ):
            used.update(p for p in node.value.split(".") if p)
    return used


# The same word meaning something else, in a file that does not deal with the member of that name.
HOMONYMS = {
    ("raw", "backends/disks.py"): "QEMU's raw disk image format",
    ("raw", "agent/workloads/fio.py"): 'details["raw"]: the tool\'s raw numbers (a result-document key)',
    ("raw", "agent/workloads/sysbench.py"): 'details["raw"]: the tool\'s raw numbers (a result-document key)',
}


def files_naming(name: str, owner: Path) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if path.is_relative_to(owner) or rel.startswith(EXEMPT) or (name, rel) in HOMONYMS:
            continue
        if name in names_used(path):
            found.append(str(path.relative_to(PACKAGE)))
    return found


@pytest.mark.parametrize("name", workloads.WORKLOADS)
def test_a_workload_is_named_in_at_most_one_file_outside_its_package(name: str) -> None:
    found = files_naming(name, PACKAGE / "agent" / "workloads")
    assert len(found) <= 1, f"workload {name} is named in {found}"


@pytest.mark.parametrize("name", filesystems.FILESYSTEMS)
def test_a_filesystem_is_named_in_at_most_one_file_outside_its_package(name: str) -> None:
    found = files_naming(name, PACKAGE / "agent" / "storage" / "filesystems")
    assert len(found) <= 1, f"filesystem {name} is named in {found}"


def test_the_name_check_sees_identifiers_and_strings_not_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""About xfs."""\n# btrfs\nx = {"threen1": 1}\ny = a.fio\nz = f"{w}.nilfs2"\nm = "a raw disk"\n')
    used = names_used(sample)
    assert {"threen1", "fio", "nilfs2"} <= used and not {"xfs", "btrfs", "raw"} & used


@pytest.mark.parametrize("name", workloads.WORKLOADS)
def test_workload_declarations_are_complete(name: str) -> None:
    w = workloads.get(name)
    assert w.metrics and w.primary in {m.name for m in w.metrics}
    for m in w.metrics:
        assert m.title and m.unit and m.better in ("lower", "higher"), m
    assert w.operation and w.help
    fields = declare.fields(w.params)
    assert fields and any(f.spec.cli for f in fields), "the standalone command needs an argument"
    for block in [w.params, *(b.settings for b in w.settings)]:
        for f in declare.fields(block):
            bounded = f.spec.choices or f.spec.size or f.kind in (bool, str) or f.spec.minimum is not None
            assert bounded, f"{block.__name__}.{f.name} has no bound"
            assert f.spec.help or block is not w.params, f"{name}.{f.name} has no help text"
    assert set(w.row_keys) <= {f.name for f in fields}
    assert w.journal is None or isinstance(w.journal, str)


def test_every_declared_setting_is_in_matrix_settings() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fsmatrix", "matrix", "settings"], capture_output=True, text=True, check=True
    ).stdout
    for w in workloads.all_workloads():
        for f in declare.fields(w.params):
            assert f"workload.{w.name}.{f.name}" in out
        for b in w.settings:
            for f in declare.fields(b.settings):
                assert (f"{b.name}.{f.name}" in out) == f.spec.matrix
    assert schema.CELL["properties"]["filesystem"]["enum"] == list(filesystems.FILESYSTEMS)


def test_filesystem_declarations() -> None:
    for fs in filesystems.all_filesystems():
        assert fs.mounts or fs.device, f"{fs.name}: neither a device nor a filesystem"
        assert bool(fs.mkfs) == bool(fs.package) or not fs.mkfs, fs.name


def test_backends_registry() -> None:
    assert set(BACKENDS) == {"host", "qemu", "libvirt"}
    for entry in BACKENDS.values():
        assert entry.help


def _makefile_packages() -> set[str]:
    out = subprocess.run(
        ["make", "-s", "-C", str(REPO), "print-deb-packages"], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def _image_packages() -> set[str]:
    """What every guest image holds: the shared list's packages and each definition's own."""
    from fsmatrix import image_definitions

    lists = [set(d.package_list(image_definitions.common_packages())) for d in image_definitions.definitions().values()]
    return set.intersection(*lists)


def test_package_lists_hold_what_the_registries_need() -> None:
    guest = {p for w in workloads.all_workloads() for p in w.guest_packages}
    guest |= {p for fs in filesystems.all_filesystems() for p in fs.packages}
    host = {p for w in workloads.all_workloads() for p in w.host_packages}
    host |= {p for fs in filesystems.all_filesystems() for p in fs.packages}
    assert guest <= _image_packages(), f"a guest image (packer/) lacks {sorted(guest - _image_packages())}"
    assert host <= _makefile_packages(), f"the Makefile's DEB_PACKAGES lacks {sorted(host - _makefile_packages())}"


def test_quick_matrix_ids_are_those_of_before_the_registries() -> None:
    """Cell ids hash the complete JSON form, which the declarations now produce: unchanged."""
    from fsmatrix import matrix

    assert [c.id for c in matrix.load(REPO / "matrix" / "quick.yaml").cells] == [
        "ext4-threen1-1-100000-w2-3231c2f5",
        "xfs-threen1-1-100000-w2-9cde4740",
        "jfs-threen1-1-100000-w2-0c518e3e",
        "ext4-fio-randread-j1-fa80aa67",
        "ext4-hdd-fio-randread-j1-4f993387",
    ]


def _blocks() -> list[tuple[str, type]]:
    from fsmatrix.agent import cell

    blocks = [(f"workload.{w.name}", w.params) for w in workloads.all_workloads()]
    blocks += [(name, b.settings) for name, b in workloads.settings_blocks().items()]
    return blocks + list(cell.BLOCKS.items())


@pytest.mark.parametrize(("where", "block"), _blocks(), ids=[w for w, _ in _blocks()])
def test_guest_checks_and_matrix_schema_agree_on_every_bound(where: str, block: type) -> None:
    """Each bound is declared once: the guest's parse and the matrix's JSON Schema refuse the same."""
    import jsonschema

    base = {f.name: f.default for f in declare.fields(block) if f.spec.matrix}
    required = {f.name: _valid(f) for f in declare.fields(block) if f.required}
    spec = schema.spec_at(where)
    assert spec is not None
    for f in declare.fields(block):
        if not f.spec.matrix:
            continue
        for bad in _invalid(f):
            values = {**base, **required, f.name: bad}
            with pytest.raises(declare.Invalid):
                declare.parse(block, values, where)
            assert list(jsonschema.Draft202012Validator(spec).iter_errors(values)), (f.name, bad)


def _valid(f: declare.Field) -> object:
    if f.spec.choices:
        return f.spec.choices[0]
    return {int: int(f.spec.minimum or 0) + 1}.get(f.kind, "1")


def _invalid(f: declare.Field) -> list[object]:
    bad: list[object] = [None]
    if f.spec.choices:
        bad.append("no-such-choice")
    if f.spec.size:
        bad += ["8 gigs", "1.5G"]
    if f.kind is int and f.spec.minimum is not None:
        bad.append(int(f.spec.minimum) - 1)
    if f.kind is int and f.spec.maximum is not None:
        bad.append(int(f.spec.maximum) + 1)
    if f.kind is int:
        bad.append(True)
    return bad


# The only places on the host side that may spell a registered workload's or filesystem's name, and why.
HOST_SIDE_EXEMPTIONS = {
    ("backends/jobdisk.py", "ext2"): "JOB_DISK_FILESYSTEM: the job disk's own filesystem, not one under test",
    ("backends/disks.py", "raw"): "QEMU's raw disk image format (a homonym)",
    ("backends/qemu/kernel_boot.py", "ext4"): "ROOT_FILESYSTEM: the image's root disk's and the modules disk's own",
}
HOST_SIDE = ("backends", "results", "runs.py", "workdirs.py", "matrix", "cli")


def host_side_names(package: Path) -> dict[tuple[str, str], list[str]]:
    """{(file, name): ...} for every registered name a backend, result or report module spells in code."""
    names = set(workloads.WORKLOADS) | set(filesystems.FILESYSTEMS)
    found = {}
    for part in HOST_SIDE:
        base = package / part
        for path in [base] if base.is_file() else sorted(base.rglob("*.py")):
            rel = str(path.relative_to(package))
            for name in sorted(names_used(path) & names):
                found[(rel, name)] = [rel]
    return found


def test_no_backend_result_or_report_module_names_a_workload_or_filesystem() -> None:
    found = host_side_names(PACKAGE)
    unexpected = sorted(key for key in found if key not in HOST_SIDE_EXEMPTIONS)
    assert unexpected == [], f"name a workload or filesystem outside the registries: {unexpected}"
    stale = sorted(key for key in HOST_SIDE_EXEMPTIONS if key not in found)
    assert stale == [], f"exemptions no longer needed: {stale}"


def test_the_host_side_name_check_sees_a_planted_name(tmp_path: Path) -> None:
    package = tmp_path / "fsmatrix"
    shutil.copytree(PACKAGE / "backends", package / "backends", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "results").mkdir()
    (package / "results" / "planted.py").write_text('def f(cell):\n    return cell.workload == "pgbench"\n')
    with (package / "backends" / "host.py").open("a") as fh:
        fh.write('\nFAST = "xfs"\n')
    assert {("results/planted.py", "pgbench"), ("backends/host.py", "xfs")} <= set(host_side_names(package))
