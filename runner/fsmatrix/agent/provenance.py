"""Where a number came from: software versions, kernel, CPU, memory, and the fsmatrix source itself."""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

from fsmatrix import __version__
from fsmatrix.agent import proc

IMAGE_MANIFEST = Path("/etc/fsmatrix/image.json")  # written into the guest image at build time


def _first(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        pass
    return "unknown"


def os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return "unknown"


def git_source() -> dict[str, Any]:
    """The commit the running fsmatrix code came from, and whether the tree had local changes."""
    here = Path(__file__).resolve().parent
    if not proc.have("git"):  # the guest image has no git: its build's commit comes from the environment
        return {"sha": os.environ.get("FSMATRIX_GIT_SHA", "unknown"), "dirty": None}
    result = proc.run(["git", "-C", str(here), "rev-parse", "HEAD"], check=False, timeout=10)
    if result.returncode != 0:
        return {"sha": os.environ.get("FSMATRIX_GIT_SHA", "unknown"), "dirty": None}
    status = proc.run(
        ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], check=False, timeout=10
    )
    return {"sha": result.stdout.strip(), "dirty": bool(status.stdout.strip())}


def image_manifest() -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(IMAGE_MANIFEST.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return None


def image_summary(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The manifest as a result's ``provenance.image`` holds it: without the kernel's module list
    (thousands of names, the same for every run of an image; the image's manifest keeps it)."""
    return None if manifest is None else {k: v for k, v in manifest.items() if k != "modules"}


def image_tool_env(name: str) -> dict[str, str]:
    """The environment this guest image declares for tool ``name``'s processes (its manifest's
    ``tool_env``); empty outside a guest image or when it declares none."""
    declared = (image_manifest() or {}).get("tool_env")
    env = declared.get(name) if isinstance(declared, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def image_tool(name: str) -> Path | None:
    """Where this guest image declares tool ``name`` (its manifest's ``tools``, written from
    packer/images/NAME.yaml at build time); None outside a guest image, or in one built before
    images declared their tools."""
    tools = (image_manifest() or {}).get("tools")
    path = tools.get(name) if isinstance(tools, dict) else None
    return Path(path) if isinstance(path, str) and path else None


# How cpu_busy_s, the perf counters and the device totals are measured: changed when the method
# changes, so that the history attributes the shift in those series to it and the gate does not
# gate work across it (docs/history.md, "work measurement"). Since issue 51's second change the
# window starts and ends with a syncfs of the filesystems under test (job.py).
WORK_MEASUREMENT = "cgroup: the workload's processes only; window synced at both ends"


def collect() -> dict[str, Any]:
    """Everything about this machine and this fsmatrix that can change a number."""
    uname = platform.uname()
    memory = _first("/proc/meminfo", "MemTotal")
    return {
        "fsmatrix_version": __version__,
        "git": git_source(),
        "work_measurement": WORK_MEASUREMENT,
        "hostname": socket.gethostname(),
        "kernel": uname.release,
        "kernel_build": uname.version,
        "os": os_release(),
        "arch": uname.machine,
        "cpu_model": _first("/proc/cpuinfo", "model name"),
        "cpu_count": os.cpu_count(),
        "memory_kib": int(memory.split()[0]) if memory != "unknown" else None,
        "python": platform.python_version(),
        "image": image_summary(image_manifest()),
    }
