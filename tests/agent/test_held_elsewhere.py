"""The tests' leak check (conftest.attached_under) tells a loop device this process leaked from one a mount
in another mount namespace still holds: a CI-like run failed when a test beside it (podman, act) made a
namespace while the device was mounted, and the detach became autoclear. Real loop device, real unshare."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from conftest import attached_under, needs_root

pytestmark = needs_root


def test_a_device_only_another_mount_namespace_holds_is_not_a_leak() -> None:
    with tempfile.TemporaryDirectory(prefix="fsmatrix-held-", dir="/var/tmp") as d:
        base = Path(d)
        image, point = base / "disk.img", base / "mnt"
        point.mkdir()
        subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
        device = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True)
        dev = device.stdout.strip()
        holder = None
        try:
            subprocess.run(["mkfs.ext4", "-qF", dev], check=True, capture_output=True)
            subprocess.run(["mount", dev, str(point)], check=True)
            assert attached_under(base) == [Path(dev).name]  # attached, mounted here: a leak if left
            # A namespace made while it is mounted keeps a copy of the mount (unshare -m: a private copy).
            holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "60"])
            time.sleep(0.5)
            subprocess.run(["umount", str(point)], check=True)
            subprocess.run(["losetup", "-d", dev], check=True)
            assert (Path("/sys/block") / Path(dev).name / "loop" / "backing_file").exists()  # still attached
            assert attached_under(base) == []  # held only elsewhere: the kernel detaches it when that ends
        finally:
            if holder is not None:
                holder.kill()
                holder.wait()
            subprocess.run(["umount", str(point)], check=False, capture_output=True)
            subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)
        deadline = time.monotonic() + 60
        while (Path("/sys/block") / Path(dev).name / "loop" / "backing_file").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # the holder gone, autoclear detaches it
