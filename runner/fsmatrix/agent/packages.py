"""The Debian packages the registries declare: ``python3 -m fsmatrix.agent.packages guest|host``.

The Makefile's package list reads this (standard library only, so it runs before the venv exists);
tests/agent/test_registry.py checks that the guest image's packer/packages.txt holds every guest package.
"""

from __future__ import annotations

import sys

from fsmatrix.agent.storage import filesystems
from fsmatrix.agent.workloads import all_workloads


def packages(side: str) -> list[str]:
    """Packages of every workload (its ``guest_packages`` or ``host_packages``) and filesystem."""
    wanted: dict[str, None] = {}
    for w in all_workloads():
        wanted.update(dict.fromkeys(w.guest_packages if side == "guest" else w.host_packages))
    for fs in filesystems.all_filesystems():
        wanted.update(dict.fromkeys(fs.packages))
    return list(wanted)


if __name__ == "__main__":
    if sys.argv[1:] not in (["guest"], ["host"]):
        sys.exit("usage: python3 -m fsmatrix.agent.packages guest|host")
    print(" ".join(packages(sys.argv[1])))
