"""The docs are a promise: the README stays a short manual whose links resolve, and the architecture
page and the adding-a-* checklists name modules, registries and fields that exist."""

from __future__ import annotations

import re
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
