"""Block devices: /proc parsers, describe_device, and every refusal of check_safe_to_format, each
made real on loop devices where this kernel allows it (and undone afterwards)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import TEST_DATA, Golden, attached_under, golden_cases, mounted_under
from fsmatrix.agent.storage import UnsafeDevice, check_safe_to_format, describe_device, kernel_name, loop_devices
from fsmatrix.agent.storage import devices as devmod
from fsmatrix.agent.storage.devices import parse_mountinfo, parse_swaps, read_mounts

DATA = TEST_DATA / "storage" / "proc"
IMAGE_SIZE = 256 << 20
needs_root = pytest.mark.root(reason="needs root: losetup, mkfs and mount")
LVM_ENV = dict(os.environ, LVM_SUPPRESS_FD_WARNINGS="1")


def sh(*command: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(command, check=True, capture_output=True, env=env)


WORK_DIRS: list[Path] = []


@pytest.fixture(autouse=True)
def work_dir(tmp_path: Path) -> Path:
    WORK_DIRS.append(Path(os.path.realpath(tmp_path)))
    return tmp_path


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """After all tests here: no loop device, mount or volume group of theirs remains."""
    yield
    for directory in WORK_DIRS:
        assert attached_under(directory) == []
        assert mounted_under(directory) == []
    groups = subprocess.run(["vgs", "-o", "vg_name"], capture_output=True, text=True, env=LVM_ENV).stdout
    assert f"fsmatrixtest{os.getpid()}" not in groups


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[str]:
    with loop_devices(1, IMAGE_SIZE, tmp_path) as (device,):
        yield device


def active_swap() -> list[tuple[str, ...]]:
    """/proc/swaps without its Used column: the kernel may swap into a test's swap area at any time."""
    rows = [line.split() for line in Path("/proc/swaps").read_text().splitlines()[1:]]
    return [(row[0], row[1], row[2], row[4]) for row in rows if len(row) == 5]


def snapshot(device: str) -> tuple[str | None, list[tuple[str, str]], list[tuple[str, ...]]]:
    """What a refusal must leave unchanged: the device's first MiB, the mount table, active swap."""
    swap = active_swap()
    # An active swap area's pages change whenever the kernel swaps: only its header page is stable.
    length = 4096 if any(os.path.realpath(row[0]) == os.path.realpath(device) for row in swap) else 1 << 20
    try:
        with open(device, "rb") as f:
            head: str | None = hashlib.sha256(f.read(length)).hexdigest()
    except PermissionError:  # some sandboxes forbid reading the root disk even to root
        head = None
    # Only the device's own mounts: other tests on this shared machine mount and unmount meanwhile.
    number = os.stat(device).st_rdev
    own = f"{os.major(number)}:{os.minor(number)}"
    mounts = [(m.mount_point, m.major_minor) for m in read_mounts() if m.major_minor == own or m.source == device]
    return head, mounts, swap


def refused(device: str) -> str:
    """check_safe_to_format's refusal message; fails the test if it does not refuse or changes anything."""
    before = snapshot(device) if os.path.exists(device) and stat.S_ISBLK(os.stat(device).st_mode) else None
    with pytest.raises(UnsafeDevice) as raised:
        check_safe_to_format(device)
    if before is not None:
        assert snapshot(device) == before
    message = str(raised.value)
    assert message.startswith(f"refusing to format {device}")
    return message


def write_mbr(device: str) -> None:
    """Two primary partitions: 1..~98 MiB (Linux) and ~100..~198 MiB (swap)."""
    table = bytearray(512)
    for slot, (kind, start, sectors) in enumerate([(0x83, 2048, 200000), (0x82, 204800, 200000)]):
        offset = 446 + 16 * slot
        table[offset : offset + 16] = struct.pack("<B3sB3sII", 0, b"\0" * 3, kind, b"\0" * 3, start, sectors)
    table[510:512] = b"\x55\xaa"
    with open(device, "r+b") as f:
        f.write(table)


# --------------------------------------------------------------------------------------------
# parsers


def test_parse_mountinfo_unescapes_and_splits() -> None:
    entries = parse_mountinfo((DATA / "mountinfo" / "escaped.txt").read_text())
    assert [e.mount_point for e in entries] == ["/work/scratch/storage/exp/m x"] * 2
    xfs, tmpfs = entries
    assert xfs.major_minor == "7:0" and xfs.fstype == "xfs" and xfs.source == "/dev/loop0"
    assert xfs.super_options == ["rw", "inode64", "logbufs=8", "logbsize=32k", "noquota"]
    assert tmpfs.source == "fsmatrix tmp" and tmpfs.parent_id == xfs.mount_id
    ext3, btrfs = parse_mountinfo((DATA / "mountinfo" / "ext3-btrfs.txt").read_text())
    assert ext3.mount_options == ["rw", "noatime"] and ext3.super_options == ["rw", "data=writeback"]
    assert btrfs.major_minor == "0:39" and btrfs.source == "/dev/loop0"  # btrfs: anonymous device number


def test_parse_mountinfo_optional_fields() -> None:
    line = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue"
    (entry,) = parse_mountinfo(line)
    assert entry.optional_fields == ["master:1", "shared:7"] and entry.fstype == "ext3"
    assert entry.root == "/mnt1" and entry.super_options == ["rw", "errors=continue"]


def test_parse_swaps() -> None:
    assert parse_swaps((DATA / "swaps" / "loop0.txt").read_text()) == ["/dev/loop0"]
    assert parse_swaps("Filename\tType\tSize\tUsed\tPriority\n") == []
    assert parse_swaps("Filename Type\n/swap\\040file file 10 0 -2\n") == ["/swap file"]


@pytest.mark.parametrize("case", golden_cases("storage/proc/mountinfo"))
def test_parse_mountinfo_golden(case: Golden) -> None:
    """Every captured /proc/self/mountinfo in tests/data/storage/proc/mountinfo/ parses to its expected entries."""
    case.check(parse_mountinfo)


@pytest.mark.parametrize("case", golden_cases("storage/proc/swaps"))
def test_parse_swaps_golden(case: Golden) -> None:
    """Every captured /proc/swaps in tests/data/storage/proc/swaps/ parses to its expected swap devices."""
    case.check(parse_swaps)


# --------------------------------------------------------------------------------------------
# describe_device


@needs_root
def test_describe_loop_device(loop: str, tmp_path: Path) -> None:
    info = describe_device(loop)
    assert info["kernel_name"] == Path(loop).name == kernel_name(loop)
    assert info["size_bytes"] == IMAGE_SIZE and info["direct_io"] is True
    assert info["backing_file"] == f"{os.path.realpath(tmp_path)}/fsmatrix-{os.getpid()}-0.img"
    assert info["logical_block_size"] in (512, 4096) and info["physical_block_size"] >= info["logical_block_size"]
    assert isinstance(info["rotational"], bool) and info["scheduler"]
    assert info["major_minor"] == f"{os.major(os.stat(loop).st_rdev)}:{os.minor(os.stat(loop).st_rdev)}"
    alias = tmp_path / "by-id-alias"
    alias.symlink_to(loop)
    assert describe_device(str(alias))["kernel_name"] == info["kernel_name"]


def test_describe_root_disk() -> None:
    source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True, text=True).stdout.strip()
    if not (source.startswith("/dev/") and stat.S_ISBLK(os.stat(source).st_mode)):
        pytest.skip(f"root filesystem is not on a block device here ({source})")
    info = describe_device(source)
    assert info["size_bytes"] > 0 and info["direct_io"] is None and info["backing_file"] is None
    assert info["scheduler"] and "[" not in info["scheduler"]


# --------------------------------------------------------------------------------------------
# refusals


def test_refuses_missing_and_non_block(tmp_path: Path) -> None:
    assert "does not exist" in refused(str(tmp_path / "nope"))
    image = tmp_path / "fsmatrix-file.img"
    image.write_bytes(b"\0" * 4096)
    assert "not a block device" in refused(str(image))
    assert image.read_bytes() == b"\0" * 4096
    assert "not a block device" in refused("/dev/null")  # a character device


def test_refuses_the_root_filesystem_device() -> None:
    source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True, text=True).stdout.strip()
    if not (source.startswith("/dev/") and stat.S_ISBLK(os.stat(source).st_mode)):
        pytest.skip(f"root filesystem is not on a block device here ({source})")
    message = refused(source)
    assert "root filesystem" in message and "mounted at / " in message


@needs_root
def test_a_fresh_loop_device_is_safe(loop: str) -> None:
    check_safe_to_format(loop)


@needs_root
def test_refuses_mounted_device_by_any_path(loop: str, tmp_path: Path) -> None:
    point = tmp_path / "mounted"
    point.mkdir()
    sh("mkfs.ext2", "-qF", loop)
    # Read-only: a mounted ext2 rewrites its superblock's write time whenever anyone syncs, which the
    # before/after comparison of the device's first MiB would blame on the check.
    sh("mount", "-o", "ro", loop, str(point))
    try:
        assert f"it is mounted at {point} (ext2)" in refused(loop)
        # Compared by major:minor, not by name: a symlink and a second device node are caught too.
        alias = tmp_path / "alias"
        alias.symlink_to(loop)
        assert f"mounted at {point}" in refused(str(alias))
        node = tmp_path / "node"
        os.mknod(node, 0o600 | stat.S_IFBLK, os.stat(loop).st_rdev)
        assert f"mounted at {point}" in refused(str(node))
    finally:
        sh("umount", str(point))
    check_safe_to_format(loop)


@needs_root
def test_refuses_mounted_btrfs_with_anonymous_device_number(loop: str, tmp_path: Path) -> None:
    if "btrfs" not in Path("/proc/filesystems").read_text():
        pytest.skip("kernel lacks btrfs")
    point = tmp_path / "btrfs"
    point.mkdir()
    sh("mkfs.btrfs", "-qf", loop)
    sh("mount", "-o", "ro", loop, str(point))
    try:
        assert f"it is mounted at {point} (btrfs)" in refused(loop)
    finally:
        sh("umount", str(point))


@needs_root
def test_refuses_device_mounted_only_in_another_mount_namespace(loop: str, tmp_path: Path) -> None:
    point = tmp_path / "elsewhere"
    point.mkdir()
    sh("mkfs.ext2", "-qF", loop)
    # The mount exists only inside the new namespace: invisible to our mountinfo and PID 1's.
    # Read-only, so that no delayed superblock write changes the device during the before/after digest.
    script = f"mount -o ro {loop} {point} && echo up && exec sleep 60"
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so the whole group, and with it the namespace, can be killed
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        assert not any(m.mount_point == str(point) for m in read_mounts())
        message = refused(loop)
        assert message.endswith(
            "the kernel reports it busy (exclusive open failed): in use by a mount in another "
            "mount namespace, swap, md, device-mapper or another mkfs"
        )
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    check_safe_to_format(loop)


@needs_root
def test_refuses_active_swap(loop: str) -> None:
    sh("mkswap", loop)
    sh("swapon", loop)
    try:
        assert f"it is active swap ({loop})" in refused(loop)
    finally:
        sh("swapoff", loop)
    check_safe_to_format(loop)


@needs_root
def test_refuses_disk_with_mounted_or_swap_partition(loop: str, tmp_path: Path) -> None:
    name = Path(loop).name
    write_mbr(loop)
    sh("partx", "--add", loop)  # this kernel parses no partition tables itself
    try:
        first, second = f"/dev/{name}p1", f"/dev/{name}p2"
        assert devmod.partitions(name) == [f"{name}p1", f"{name}p2"]
        assert devmod.parent_disk(f"{name}p1") == name
        assert describe_device(first)["parent"] == name
        check_safe_to_format(loop)
        point = tmp_path / "part"
        point.mkdir()
        sh("mkfs.ext2", "-qF", first)
        sh("mount", "-o", "ro", first, str(point))
        try:
            assert f"its partition {name}p1 is mounted at {point}" in refused(loop)
            assert f"it is mounted at {point}" in refused(first)
            check_safe_to_format(second)  # a sibling partition is fine
        finally:
            sh("umount", str(point))
        sh("mkswap", second)
        sh("swapon", second)
        try:
            assert f"its partition {name}p2 is active swap ({second})" in refused(loop)
        finally:
            sh("swapoff", second)
        check_safe_to_format(loop)
    finally:
        sh("partx", "--delete", loop)


@needs_root
def test_refuses_lvm_physical_volume(loop: str) -> None:
    if not shutil.which("vgcreate"):
        pytest.skip("lvm2 not installed")
    group = f"fsmatrixtest{os.getpid()}"
    sh("pvcreate", "-qq", "-y", loop, env=LVM_ENV)
    try:
        sh("vgcreate", "-qq", group, loop, env=LVM_ENV)
        try:
            sh("vgchange", "-qq", "-ay", group, env=LVM_ENV)
            assert f"it is an LVM physical volume of volume group {group}" in refused(loop)
        finally:
            sh("vgremove", "-qq", "-f", group, env=LVM_ENV)
    finally:
        sh("pvremove", "-qq", loop, env=LVM_ENV)
    check_safe_to_format(loop)


# --------------------------------------------------------------------------------------------
# md and device-mapper holders. This kernel has neither md nor dm, so the sysfs they would create
# is fabricated around a real loop device (its major:minor), and devices.SYS_ROOT points at it.


def fake_sysfs(root: Path, majmin: str, disk: str, tree: dict[str, dict[str, str]]) -> None:
    """Build root/{dev/block, class/block, devices/...}: ``tree`` maps a device path below
    devices/virtual/block (e.g. "fakedisk/fakedisk1") to its attribute files."""
    devices_dir = root / "devices" / "virtual" / "block"
    (root / "class" / "block").mkdir(parents=True)
    (root / "dev" / "block").mkdir(parents=True)
    for path, files in tree.items():
        directory = devices_dir / path
        directory.mkdir(parents=True, exist_ok=True)
        for file, content in files.items():
            (directory / file).parent.mkdir(parents=True, exist_ok=True)
            if content.startswith("->"):
                (directory / file).mkdir()
            else:
                (directory / file).write_text(content + "\n")
        name = Path(path).name
        (root / "class" / "block" / name).symlink_to(directory)
        (root / "dev" / "block" / files["dev"]).symlink_to(directory)
    assert (root / "dev" / "block" / majmin).resolve().name == disk


def real_majmin(device: str) -> str:
    rdev = os.stat(device).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


@needs_root
@pytest.mark.parametrize(
    ("holder", "attributes", "expected"),
    [
        ("md0", {}, "it is used by the md array md0"),
        ("dm-0", {"dm/name": "vg0-data", "dm/uuid": "LVM-abc"}, "it is used by the LVM logical volume vg0-data (dm-0)"),
        ("dm-1", {"dm/name": "secret", "dm/uuid": "CRYPT-LUKS2-x"}, "it is used by the dm-crypt mapping secret (dm-1)"),
    ],
)
def test_refuses_md_and_dm_members(
    holder: str, attributes: dict[str, str], expected: str, loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    majmin = real_majmin(loop)
    sysfs = tmp_path / "sys"
    fake_sysfs(
        sysfs,
        majmin,
        "fakedisk",
        {
            "fakedisk": {"dev": majmin, f"holders/{holder}": "->dir"},
            holder: {"dev": "9:0" if holder.startswith("md") else "253:0", "slaves/fakedisk": "->dir", **attributes},
        },
    )
    monkeypatch.setattr(devmod, "SYS_ROOT", sysfs)
    assert expected in refused(loop)


@needs_root
def test_refuses_the_disk_under_the_root_filesystem(loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root on a partition of the disk, and root on an md array built from the disk's partition."""
    root_majmin = next(m.major_minor for m in reversed(read_mounts()) if m.mount_point == "/")
    if root_majmin.startswith("0:"):
        pytest.skip("root filesystem has no device number here")
    majmin = real_majmin(loop)
    sysfs = tmp_path / "partition-root"
    fake_sysfs(
        sysfs,
        majmin,
        "fakedisk",
        {"fakedisk": {"dev": majmin}, "fakedisk/fakedisk1": {"dev": root_majmin, "partition": "1"}},
    )
    monkeypatch.setattr(devmod, "SYS_ROOT", sysfs)
    message = refused(loop)
    assert "its partition fakedisk1 holds the root filesystem" in message

    sysfs = tmp_path / "md-root"
    fake_sysfs(
        sysfs,
        majmin,
        "fakedisk",
        {
            "fakedisk": {"dev": majmin},
            "fakedisk/fakedisk1": {"dev": "259:77", "partition": "1", "holders/md9": "->dir"},
            "md9": {"dev": root_majmin, "slaves/fakedisk1": "->dir"},
        },
    )
    monkeypatch.setattr(devmod, "SYS_ROOT", sysfs)
    message = refused(loop)
    assert "its holder md9 holds the root filesystem" in message
    assert "its partition fakedisk1 is used by the md array md9" in message
