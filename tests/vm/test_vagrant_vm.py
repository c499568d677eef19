"""One real ``vagrant up`` of one cell under TCG through vagrant-libvirt: validate, up, the cell's
run in the guest, destroy leaving nothing. The session mode and the Vagrantfile's spec without
a VM: tests/backends/test_vagrant.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import REPO, needs_root
from fsmatrix.agent import proc, storage
from fsmatrix.backends import image, libvirtd
from fsmatrix.backends.qemu.process import running_vms
from test_vagrant import SCRATCH, one_cell

# ------------------------------------------------------------------------------------ one real vagrant up

VAGRANT_DIR = REPO / "vagrant"
UP_TIMEOUT_S = 1200.0


def _have_vagrant_libvirt() -> bool:
    if not proc.have("vagrant"):
        return False
    plugins = proc.run(["vagrant", "plugin", "list"], timeout=120, check=False, env={**os.environ, **_QUIET})
    return "vagrant-libvirt" in plugins.stdout


_QUIET = {"VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_NO_COLOR": "1"}


def _virsh(*args: str, check: bool = True) -> str:
    return proc.run(["virsh", "-q", "-c", libvirtd.URI, *args], timeout=120, check=check).stdout


@needs_root
def test_vagrant_up_runs_a_cell_and_destroy_leaves_nothing(tmp_path: Path) -> None:
    if not _have_vagrant_libvirt():  # checked here, not at collection: `vagrant plugin list` takes seconds
        pytest.skip("needs vagrant and vagrant-libvirt (apt-get install vagrant-libvirt)")
    cell = one_cell(tmp_path)
    paths = image.build(echo=lambda _line: None)  # reuses the image of the current sources when built
    name = f"fsmatrix-vagrant-test-{os.getpid()}"
    work = Path(os.path.realpath(SCRATCH)) / name
    pool_dir = work / "pool"
    env = {
        **os.environ,
        **_QUIET,
        "VAGRANT_HOME": str(work / "vagrant-home"),  # the box is added here, not to the user's boxes
        "VAGRANT_DOTFILE_PATH": str(work / "dot"),
        "VAGRANT_DEFAULT_PROVIDER": "libvirt",
        "VAGRANT_CWD": str(VAGRANT_DIR),
        "FSMATRIX_BIN": f"{sys.executable} -m fsmatrix",
        "FSMATRIX_IMAGE": paths.name,
        "FSMATRIX_MATRIX": str(tmp_path / "m.yaml"),
        "FSMATRIX_CELL": cell.id,
        "FSMATRIX_VAGRANT_NETWORK": "loopback",
        "FSMATRIX_LIBVIRT_POOL": name,
        "FSMATRIX_LIBVIRT_PREFIX": f"{name}-",
    }
    env.pop("FSMATRIX_LIBVIRT_DRIVER", None)  # the probe decides: tcg here
    with libvirtd.running() as daemons:
        # With fsmatrix's own libvirtd in a network namespace, QEMU's forwarded SSH port is in there too.
        netns = ["ip", "netns", "exec", daemons.netns] if daemons.netns else []

        def vagrant_cmd(*args: str, timeout: float = 300, check: bool = True) -> str:
            return proc.run([*netns, "vagrant", *args], env=env, timeout=timeout, check=check).stdout

        pool_dir.mkdir(parents=True)
        _virsh("pool-create-as", name, "dir", "--target", str(pool_dir))  # transient: gone once destroyed
        networks_before = set(_virsh("net-list", "--all", "--name").split())
        try:
            assert "validated successfully" in vagrant_cmd("validate")
            vagrant_cmd("up", timeout=UP_TIMEOUT_S)
            assert vagrant_cmd("ssh", "-c", "findmnt -n -o FSTYPE /mnt/fsmatrix/data").strip() == "ext4"
            size = vagrant_cmd("ssh", "-c", "blockdev --getsize64 /dev/disk/by-id/virtio-fsm-data0")
            assert int(size) == storage.parse_size(cell.params["storage"]["disk_size"])
            ran = vagrant_cmd("ssh", "-c", "fsmatrix-session run", timeout=cell.params["timeout"] + 120, check=False)
            doc = json.loads(vagrant_cmd("ssh", "-c", "cat /var/lib/fsmatrix/session/result.json"))
            assert doc["status"] == "passed", (doc.get("reason"), ran)
            assert doc["cell_id"] == cell.id and doc["params"] == cell.params
            assert doc["metrics"]["iops"] > 0 and doc["storage"]["devices"]
            prov = doc["provenance"]
            assert (prov["backend"], prov["accel"], prov["image_name"]) == ("vagrant", "tcg", paths.name)
            assert prov["guest"]["data_disks"] == {"fsm-data0": "/dev/vdb"}
            assert prov["vagrant"]["device_deviations"] == ["device.iothread=true: no iothread per disk"]
        finally:
            vagrant_cmd("destroy", "-f", timeout=300, check=False)
            domains = [d for d in _virsh("list", "--all", "--name").split() if d.startswith(name)]
            volumes = _virsh("vol-list", name, check=False).split()
            for volume in _virsh("vol-list", name, "--details", check=False).splitlines():
                _virsh("vol-delete", "--pool", name, volume.split()[0], check=False)  # the uploaded box
            _virsh("pool-destroy", name, check=False)
            networks_after = set(_virsh("net-list", "--all", "--name").split())
            shutil.rmtree(work, ignore_errors=True)
    assert domains == []
    assert [v for v in volumes if "default" in v] == []  # the VM's own disks went with `vagrant destroy`
    assert networks_after == networks_before
    assert name not in " ".join(n for _pid, n in running_vms(prefix=name))
