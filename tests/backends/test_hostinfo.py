"""provenance.host: the machine under a run, and compare refusing results from two machines."""

from __future__ import annotations

import os
from pathlib import Path

from fsmatrix.backends import hostinfo
from fsmatrix.backends.host import HostBackend


def test_describe_this_machine(tmp_path: Path) -> None:
    host = hostinfo.describe(tmp_path / "not-made-yet", qemu_version="QEMU emulator version 7.2.0")
    assert host["kernel"] == os.uname().release and host["cpu_count"] == os.cpu_count()
    assert host["cpu_model"] and host["memory_kib"] > 0
    assert host["qemu_version"] == "QEMU emulator version 7.2.0"
    # The work directory's filesystem is the one it will be made on (its parent's).
    assert host["workdir"]["fstype"] == _fstype_of(tmp_path)
    # A hash of the machine identity, never the identity itself.
    raw = {Path(p).read_text().strip() for p in (host["machine_id_source"],)}
    assert (
        len(host["machine_id"]) == 16
        and host["machine_id"] not in raw
        and not any(host["machine_id"] in r for r in raw)
    )


def _fstype_of(path: Path) -> str:
    best = ("", "")
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mount_point, fstype, *_ = line.split()
        if str(path).startswith(mount_point) and len(mount_point) >= len(best[0]):
            best = (mount_point, fstype)
    return best[1]


def test_machine_id_prefers_the_first_readable_source(tmp_path: Path) -> None:
    first, second = tmp_path / "uuid", tmp_path / "machine-id"
    second.write_text("abc\n")
    ident, source = hostinfo.machine_id((first, second))  # first unreadable: skipped
    assert source == str(second) and ident and ident != "abc"
    first.write_text("hardware\n")
    assert hostinfo.machine_id((first, second))[1] == str(first)
    assert hostinfo.machine_id((tmp_path / "none",)) == (None, None)


def test_mountinfo_and_scheduler_parsing() -> None:
    text = (
        "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "30 22 0:27 / /tmp rw shared:2 - tmpfs tmpfs rw,size=1024k\n"
    )
    assert hostinfo._mount_of(os.makedev(254, 0), text) == ("ext4", "/dev/vda")
    assert hostinfo._mount_of(os.makedev(0, 27), text) == ("tmpfs", "tmpfs")
    assert hostinfo._mount_of(os.makedev(8, 1), text) is None
    assert hostinfo._scheduler("[mq-deadline] kyber none") == "mq-deadline"
    assert hostinfo._scheduler("none") == "none"


def test_block_device_of_a_disk_and_of_no_disk(tmp_path: Path) -> None:
    st_dev = Path("/").stat().st_dev
    disk = hostinfo.block_device(st_dev)
    if disk is not None:  # a root on a block device: its queue is readable
        assert disk["name"] and disk["rotational"] in (True, False)
    assert hostinfo.block_device(os.makedev(0, 999_999)) is None  # anonymous (tmpfs, overlay)


def test_host_backend_records_the_host(tmp_path: Path) -> None:
    env = HostBackend(workdir=tmp_path).environment()
    assert env["host"]["kernel"] == os.uname().release and "qemu_version" not in env["host"]
