"""Guest images as data: the named definitions in packer/images/NAME.yaml that a cell's ``image`` picks.

A definition says what differs between images and nothing else: its name, the Debian suite
debootstrap installs, the kernel package, where the workloads find their tools (PostgreSQL's bin
directory, GT.M's ``$gtm_dist``: declared with the package that puts each there, never searched
for) and the packages it adds to the list every image shares (packer/packages.txt). The image
build (backends/image.py) turns one into a qcow2, and writes its tools into the image's manifest,
where the guest agent reads them (``fsmatrix.agent.provenance.image_tool``).

A kernel of the user's own is not part of a definition: it is a setting of the cell (``vm.kernel``)
booted on top of an image's root filesystem, so one built image serves every kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fsmatrix.agent import workloads
from fsmatrix.agent.cell import DEFAULT_IMAGE
from fsmatrix.errors import UserError

REPO = Path(__file__).resolve().parents[2]
DEFINITIONS = Path("packer") / "images"
COMMON_PACKAGES = Path("packer") / "packages.txt"
DEFAULT = DEFAULT_IMAGE
KEYS = ("name", "description", "suite", "kernel", "tools", "packages")
NAME = re.compile(r"[a-z][a-z0-9.-]{0,31}")
PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")  # Debian policy 5.6.1
SUITE = re.compile(r"[a-z][a-z0-9-]*")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


@dataclass(frozen=True)
class Tool:
    """Where a workload's tool is in an image, the Debian package that puts it there, and the
    environment its processes need in this image (what differs between releases, e.g. a glibc tunable)."""

    package: str
    path: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Definition:
    """One guest image, as its packer/images/NAME.yaml declares it."""

    name: str
    description: str
    suite: str
    kernel: str  # the kernel package the image boots
    tools: dict[str, Tool]
    packages: tuple[str, ...]  # what it adds to the shared list
    file: Path

    def package_list(self, common: list[str]) -> list[str]:
        """Every package debootstrap installs: the shared list, the kernel, the tools', the image's own."""
        tools = [t.package for t in self.tools.values()]
        return list(dict.fromkeys([*common, self.kernel, *tools, *self.packages]))

    def manifest_fields(self) -> dict[str, Any]:
        """What the image's manifest records of its definition (the guest reads ``tools`` from it)."""
        return {
            "image": self.name,
            "description": self.description,
            "suite": self.suite,
            "tools": {name: tool.path for name, tool in sorted(self.tools.items())},
            "tool_env": {name: dict(tool.env) for name, tool in sorted(self.tools.items()) if tool.env},
        }


def read_package_list(path: Path) -> list[str]:
    """A package list file: one package per line, ``#`` comments and blank lines ignored."""
    names = [line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [name for name in names if name]


def common_packages(repo: Path = REPO) -> list[str]:
    return read_package_list(repo / COMMON_PACKAGES)


def needed_tools() -> dict[str, list[str]]:
    """Tool name -> the registered workloads that find it through the image's declaration."""
    found: dict[str, list[str]] = {}
    for workload in workloads.all_workloads():
        for tool in workload.guest_tools:
            found.setdefault(tool, []).append(workload.name)
    return found


def load(path: Path) -> Definition:
    """Read and check one definition; UserError naming the file and the key at fault."""

    def fail(message: str) -> UserError:
        return UserError(message, file=str(path))

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read the image definition: {exc}") from exc
    except yaml.YAMLError as exc:
        raise fail(f"not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise fail(f"an image definition is a mapping of {', '.join(KEYS)}")
    unknown = sorted(str(k) for k in doc if k not in KEYS)
    if unknown:
        raise fail(f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in doc and k != "packages"]
    if missing:
        raise fail(f"missing key(s) {', '.join(missing)}")
    name, suite, kernel = doc["name"], doc["suite"], doc["kernel"]
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise fail(f"name {name!r} must be lower-case letters, digits, '.' or '-' (at most 32)")
    if name != path.stem:
        raise fail(f"name {name!r} must be the file's name ({path.stem!r})")
    if not isinstance(suite, str) or not SUITE.fullmatch(suite):
        raise fail(f"suite {suite!r} must be a Debian suite name such as bookworm or trixie")
    if not isinstance(doc["description"], str) or not doc["description"].strip():
        raise fail("description must be a line of text")
    packages = doc.get("packages") or []
    if not isinstance(packages, list):
        raise fail("packages must be a list of Debian package names")
    for package in [kernel, *packages]:
        if not isinstance(package, str) or not PACKAGE.fullmatch(package):
            raise fail(f"{package!r} is not a Debian package name")
    tools = _tools(doc["tools"], fail)
    lacking = {tool: users for tool, users in needed_tools().items() if tool not in tools}
    if lacking:
        named = "; ".join(f"{tool} (for {', '.join(users)})" for tool, users in sorted(lacking.items()))
        raise fail(f"tools lacks {named}: every image declares every tool a workload finds through it")
    return Definition(name, doc["description"].strip(), suite, kernel, tools, tuple(packages), path)


def _tools(value: Any, fail: Any) -> dict[str, Tool]:
    shape = (
        "tools must map a tool's name to {package: PACKAGE, path: /ABSOLUTE/PATH} (and optionally env: {NAME: VALUE})"
    )
    if not isinstance(value, dict):
        raise fail(shape)
    tools = {}
    for name, entry in value.items():
        if not isinstance(entry, dict) or not {"package", "path"} <= set(entry) <= {"package", "path", "env"}:
            raise fail(f"{shape}; {name!r} is {entry!r}")
        package, where = entry["package"], entry["path"]
        if not isinstance(package, str) or not PACKAGE.fullmatch(package):
            raise fail(f"tools.{name}.package {package!r} is not a Debian package name")
        if not isinstance(where, str) or not where.startswith("/") or any(ch.isspace() for ch in where):
            raise fail(f"tools.{name}.path {where!r} must be an absolute path without white space")
        env = entry.get("env") or {}
        bad = (
            [k for k, v in env.items() if not ENV_NAME.fullmatch(str(k)) or not isinstance(v, str)]
            if isinstance(env, dict)
            else [env]
        )
        if bad:
            raise fail(f"tools.{name}.env must map variable names (A-Z, 0-9, _) to strings; not {bad[0]!r}")
        tools[str(name)] = Tool(package, where, {str(k): v for k, v in env.items()})
    return tools


def definitions(repo: Path = REPO) -> dict[str, Definition]:
    """Every image definition, by name (sorted)."""
    found = {d.name: d for d in (load(p) for p in sorted((repo / DEFINITIONS).glob("*.yaml")))}
    if DEFAULT not in found:
        raise UserError(f"no definition of the default image {DEFAULT!r} in {repo / DEFINITIONS}")
    return found


def names(repo: Path = REPO) -> list[str]:
    """The names of the images a cell may pick, without checking their definitions (the matrix
    schema's list; a definition is checked when its image is built or listed). fsmatrix running
    without its source tree beside it (a copy of runner/ only) knows the default image alone: a
    matrix that names none still loads, and runs on the host backend."""
    return sorted(p.stem for p in (repo / DEFINITIONS).glob("*.yaml")) or [DEFAULT]


def defined(name: str, repo: Path = REPO) -> bool:
    """Whether image ``name`` has a definition here (fsmatrix running without its source tree has none)."""
    return bool(NAME.fullmatch(name)) and (repo / DEFINITIONS / f"{name}.yaml").is_file()


def get(name: str, repo: Path = REPO) -> Definition:
    """The definition of image ``name``; UserError naming the known images when there is none."""
    if not (repo / DEFINITIONS).is_dir():
        raise UserError(f"no image definitions in {repo / DEFINITIONS}: images are built from fsmatrix's source tree")
    if not defined(name, repo):
        raise UserError(f"unknown image {name!r}; the images known: {', '.join(names(repo))} ({repo / DEFINITIONS})")
    return load(repo / DEFINITIONS / f"{name}.yaml")
