"""Device profiles: what a VM's data disks behave like, as QEMU block throttling per disk.

A profile caps each data disk of a cell with QEMU's throttling (``-drive throttling.*``):
``iops-total`` and ``bps-total`` for the device's random-IO and streaming limits, and
``iops-size`` so that a request counts as ``size / iops-size`` operations once it is larger.
``iops-size`` is ``bps-total / iops-total``: a request of that size costs one operation and one
full slice of bandwidth, so both limits agree for large requests (a 1 MiB read on ``hdd`` is 1.26
operations) and a guest cannot slip past the IOPS cap with huge requests. No ``*-max`` burst keys
are set: QEMU's bucket then holds a tenth of a second's worth, so the limits hold from the first
second of a measurement.

Throttling shapes rates only: at queue depth 1 a throttled disk's latency is 1 / IOPS, at higher
depths the requests queue behind the cap (as on a real disk), but seek-free sequential 4k IO is
capped like random IO, which a real hard disk would serve faster.

The host backend cannot shape a device: it skips cells whose profile is not ``native``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

NATIVE = "native"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    iops: int = 0  # 0: no limit
    bps: int = 0  # bytes per second, 0: no limit

    @property
    def throttle(self) -> dict[str, int]:
        """QEMU ``throttling.<key>`` settings for one disk (empty: no throttling at all)."""
        settings: dict[str, int] = {}
        if self.iops:
            settings["iops-total"] = self.iops
        if self.bps:
            settings["bps-total"] = self.bps
        if self.iops and self.bps:
            settings["iops-size"] = self.bps // self.iops
        return settings


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        NATIVE: Profile(NATIVE, "no limits: whatever the backing file or device gives through QEMU"),
        "ssd": Profile("ssd", "SATA SSD: 50000 IOPS, 500 MB/s", iops=50_000, bps=500_000_000),
        "hdd": Profile(
            "hdd", "7200 rpm disk: 180 IOPS (5.5 ms per random request), 150 MB/s", iops=180, bps=150_000_000
        ),
    }
)


def profile(name: str) -> Profile:
    """The profile called ``name``; ValueError naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown device profile {name!r}: one of {', '.join(PROFILES)}") from None


def throttle(name: str) -> dict[str, int]:
    """QEMU throttling settings of profile ``name`` (see ``Profile.throttle``)."""
    return profile(name).throttle
