"""Fault injection for the wrong-disk checks (issue 15): each way a device can be in use without
showing in sysfs holders or the mount table, made real on loop devices, then an attempt to format
it through ``format_device`` (the path mkfs really takes). Each test checks the refusal and that the
data underneath is byte-for-byte what it was."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import attached_under, mounted_under, needs_root
from fsmatrix.agent.storage import UnsafeDevice, check_safe_to_format, format_device, loop_devices
from fsmatrix.agent.storage import devices as devmod
from fsmatrix.agent.storage.devices import parse_mountinfo, read_mounts

SIZE = 64 << 20
LVM_ENV = dict(os.environ, LVM_SUPPRESS_FD_WARNINGS="1")

pytestmark = needs_root


def sh(*command: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout


def digest(path: str | Path) -> str:
    """sha256 of a whole device or image file, after flushing what the kernel still holds."""
    os.sync()
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@pytest.fixture
def loops(tmp_path: Path) -> Iterator[list[str]]:
    """Two loop devices over image files in tmp_path; each image starts with a recognisable pattern."""
    with loop_devices(2, SIZE, tmp_path) as devices:
        for index, device in enumerate(devices):
            with open(device, "r+b") as f:
                f.write(os.urandom(1 << 20) + f"fsmatrix test data {index}".encode())
        yield devices
    directory = Path(os.path.realpath(tmp_path))
    assert attached_under(directory) == [] and mounted_under(directory) == []


def backing_image(device: str) -> Path:
    return Path((Path("/sys/block") / Path(device).name / "loop" / "backing_file").read_text().strip())


def refuse_format(device: str, *protected: str | Path) -> str:
    """format_device must refuse ``device`` and leave every path in ``protected`` (and the device)
    byte-for-byte unchanged; returns the refusal."""
    paths = [device, *protected]
    before = [digest(p) for p in paths]
    with pytest.raises(UnsafeDevice) as raised:
        format_device("ext4", device)
    assert [digest(p) for p in paths] == before
    return str(raised.value)


@pytest.fixture
def attach() -> Iterator[list[str]]:
    """losetup for a test's own extra loop devices; detached afterwards whatever happens."""
    attached: list[str] = []
    yield attached
    for device in reversed(attached):
        subprocess.run(["losetup", "-d", device], check=False)


def losetup(attach: list[str], backing: str | Path, *options: str) -> str:
    device = sh("losetup", "--find", "--show", *options, str(backing)).strip()
    attach.append(device)
    return device


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[Path]:
    point = tmp_path / "mnt"
    point.mkdir()
    yield point
    if any(m.mount_point == str(point) for m in read_mounts()):
        sh("umount", str(point))


# --------------------------------------------------------------------------------------------
# loop devices: invisible in holders/, no exclusive claim


def test_loop_backed_by_a_mounted_loop(loops: list[str], attach: list[str], mount_point: Path) -> None:
    """A mounted /dev/loopA, and /dev/loopB attached to loopA: formatting loopB would write
    through to loopA's live filesystem; formatting loopA would destroy it under loopB too."""
    lower = loops[0]
    sh("mkfs.ext2", "-qF", lower)
    sh("mount", lower, str(mount_point))
    (mount_point / "precious").write_text("data")
    # Read-only from here: a mounted ext2 rewrites its superblock's write time on every sync.
    sh("mount", "-o", "remount,ro", str(mount_point))
    upper = losetup(attach, lower)
    lower_name, upper_name = Path(lower).name, Path(upper).name
    message = refuse_format(upper, backing_image(lower))
    assert f"its backing device {lower_name}: it is mounted at {mount_point} (ext2)" in message
    message = refuse_format(lower, backing_image(lower))
    assert f"the loop device {upper_name} is backed by it" in message
    assert (mount_point / "precious").read_text() == "data"


def test_loop_over_a_device_mounted_in_another_namespace(loops: list[str], attach: list[str], tmp_path: Path) -> None:
    """loopB over loopA, and loopA mounted only inside another mount namespace: invisible in any
    mount table we can read, but the kernel refuses an exclusive open of loopA."""
    lower = loops[0]
    sh("mkfs.ext2", "-qF", lower)
    point = tmp_path / "elsewhere"
    point.mkdir()
    holder = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"mount -o ro {lower} {point} && echo up && exec sleep 60",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        upper = losetup(attach, lower)
        message = refuse_format(upper, backing_image(lower))
        assert f"its backing device {Path(lower).name}: the kernel reports it busy" in message
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()


def test_device_under_a_mounted_loop(loops: list[str], attach: list[str], mount_point: Path) -> None:
    """/dev/loopA unmounted but backing /dev/loopB, which is mounted: loopA is in use."""
    lower = loops[0]
    upper = losetup(attach, lower)
    sh("mkfs.ext2", "-qF", upper)
    sh("mount", "-o", "ro", upper, str(mount_point))
    message = refuse_format(lower, backing_image(lower))
    upper_name = Path(upper).name
    assert f"the loop device {upper_name} is backed by it" in message
    assert f"the loop device {upper_name} is mounted at {mount_point} (ext2)" in message


def test_device_holding_a_loop_backing_file(loops: list[str], mount_point: Path, attach: list[str]) -> None:
    """A filesystem on loopA, mounted, holds the image of loopB: loopA is refused for both."""
    lower = loops[0]
    sh("mkfs.ext2", "-qF", lower)
    sh("mount", lower, str(mount_point))
    image = mount_point / "inner.img"
    with image.open("wb") as f:
        f.truncate(8 << 20)
    sh("mount", "-o", "remount,ro", str(mount_point))
    inner = losetup(attach, image, "--read-only")
    message = refuse_format(lower, backing_image(lower))
    assert f"the loop device {Path(inner).name} is backed by {image}, a file on it" in message


def test_loop_sharing_its_backing_file(loops: list[str], attach: list[str], mount_point: Path) -> None:
    """Two loop devices over one image file, the other one mounted: formatting ours destroys it."""
    ours = loops[0]
    twin = losetup(attach, backing_image(ours))
    sh("mkfs.ext2", "-qF", twin)
    sh("mount", "-o", "ro", twin, str(mount_point))
    message = refuse_format(ours, backing_image(ours))
    assert f"its backing file {backing_image(ours)} also backs the loop device {Path(twin).name}" in message


def test_loop_whose_backing_file_is_open(loops: list[str], tmp_path: Path) -> None:
    """The image behind the loop device is open in another process (a VM using it as its disk)."""
    device = loops[0]
    holder = subprocess.Popen(["sh", "-c", f'exec sleep 60 3<"{backing_image(device)}"'])
    try:
        wait_for_fd(holder.pid, backing_image(device))
        message = refuse_format(device)
        assert f"its backing file {backing_image(device)} is open by pid {holder.pid} (sleep)" in message
    finally:
        holder.kill()
        holder.wait()
    check_safe_to_format(device)


def test_loop_over_the_root_disk(loops: list[str], attach: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop device whose backing device holds the root filesystem. The real root disk is never
    used here: loopA plays the root disk (``_root_devices`` is pointed at it, the only fabricated
    part), loopB is a real loop device attached to loopA."""
    lower = loops[0]
    upper = losetup(attach, lower)
    monkeypatch.setattr(devmod, "_root_devices", lambda: {Path(lower).name})
    message = refuse_format(upper, backing_image(lower))
    assert f"its backing device {Path(lower).name}: it holds the root filesystem" in message


# --------------------------------------------------------------------------------------------
# other processes


def wait_for_fd(pid: int, target: str | Path) -> None:
    """Until process ``pid`` has ``target`` open (a shell redirect takes a moment)."""
    for _ in range(200):
        try:
            wanted = os.stat(target)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                st = os.stat(Path(f"/proc/{pid}/fd") / fd)
                if (st.st_dev, st.st_ino) == (wanted.st_dev, wanted.st_ino) or (
                    st.st_rdev and st.st_rdev == wanted.st_rdev
                ):
                    return
        except OSError:
            pass
        subprocess.run(["sleep", "0.01"], check=False)
    raise AssertionError(f"pid {pid} never opened {target}")


def test_device_open_by_another_process(loops: list[str], tmp_path: Path) -> None:
    """``sleep`` holding the device open through a shell redirect (what a VM, nbd-server or an
    iSCSI target does: an open without an exclusive claim), also through a second device node."""
    device = loops[0]
    node = tmp_path / "node"
    os.mknod(node, 0o600 | 0o060000, os.stat(device).st_rdev)
    holder = subprocess.Popen(["sh", "-c", f'exec sleep 60 3<>"{node}"'])
    try:
        wait_for_fd(holder.pid, device)
        message = refuse_format(device)
        assert f"it is open by pid {holder.pid} (sleep)" in message
    finally:
        holder.kill()
        holder.wait()
    check_safe_to_format(device)


def test_device_locked_by_another_fsmatrix(loops: list[str]) -> None:
    """Another run (here: a second open file description) holds the BSD lock on the device."""
    device = loops[0]
    fd = os.open(device, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert "another process holds a lock on it" in refuse_format(device)
    finally:
        os.close(fd)
    check_safe_to_format(device)


def test_path_repointed_after_the_check(loops: list[str], tmp_path: Path) -> None:
    """The name is checked, then made to point elsewhere: mkfs must not follow the new target."""
    first, second = loops
    alias = tmp_path / "alias"
    alias.symlink_to(first)
    checked = check_safe_to_format(str(alias))
    alias.unlink()
    alias.symlink_to(second)
    before = digest(second)
    with pytest.raises(UnsafeDevice, match="it named when"):
        format_device("ext4", str(alias), expected=checked)
    assert digest(second) == before


def test_exclusive_open_just_before_mkfs(loops: list[str], mount_point: Path) -> None:
    """Mounted after the checks: the O_EXCL open right before mkfs notices."""
    device = loops[0]
    checked = check_safe_to_format(device)
    sh("mkfs.ext2", "-qF", device)
    sh("mount", device, str(mount_point))
    with pytest.raises(UnsafeDevice, match="exclusive open just before mkfs failed"):
        devmod.verify_exclusive(checked)


def test_held_exclusive_keeps_mounts_out_and_lets_qemu_open(loops: list[str], mount_point: Path) -> None:
    """A passthrough device held with O_EXCL: mount fails, QEMU's own open (no O_EXCL) works, and
    the re-check before each run still passes for the holder itself."""
    device = loops[0]
    sh("mkfs.ext2", "-qF", device)
    checked = check_safe_to_format(device)
    with devmod.held_exclusive(checked):
        done = subprocess.run(["mount", device, str(mount_point)], capture_output=True, text=True)
        assert done.returncode != 0, "mount succeeded on a device held with O_EXCL"
        assert check_safe_to_format(device, checked) == checked
        if shutil.which("qemu-system-x86_64"):
            qemu = subprocess.run(
                ["qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none", "-qmp", "stdio",
                 "-drive", f"file={device},if=none,id=d,format=raw,cache=none"],
                input='{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n',
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert qemu.returncode == 0, qemu.stderr
    sh("mount", device, str(mount_point))


# --------------------------------------------------------------------------------------------
# on-disk signatures of storage stacks


def md_v12_superblock(size_bytes: int) -> bytes:
    """The md v1.2 superblock of a member of a 2-disk RAID 0 (the kernel's ``struct mdp_superblock_1``
    with its checksum), as ``mdadm --create`` writes it 4 KiB into each member. This kernel has no
    md, so mdadm cannot create an array here; the bytes are what a stopped array leaves behind."""
    sectors = size_bytes // 512
    sb = bytearray(1024)
    struct.pack_into("<III", sb, 0, 0xA92B4EFC, 1, 0)  # magic, major_version, feature_map
    sb[16:32] = os.urandom(16)  # set_uuid
    sb[32:64] = b"elsewhere:0".ljust(32, b"\0")  # set_name
    struct.pack_into("<QII", sb, 64, 0, 0, 0)  # ctime, level 0, layout
    struct.pack_into("<QII", sb, 80, sectors - 2048, 128, 2)  # size, chunksize, raid_disks
    struct.pack_into("<QQQ", sb, 128, 2048, sectors - 2048, 8)  # data_offset, data_size, super_offset
    sb[168:184] = os.urandom(16)  # device_uuid
    struct.pack_into("<QQ", sb, 192, 0, 1)  # utime, events
    struct.pack_into("<I", sb, 220, 2)  # max_dev
    struct.pack_into("<HH", sb, 256, 0, 1)  # dev_roles
    total = sum(struct.unpack_from("<I", sb, i)[0] for i in range(0, 256 + 2 * 2, 4))
    struct.pack_into("<I", sb, 216, ((total & 0xFFFFFFFF) + (total >> 32)) & 0xFFFFFFFF)  # sb_csum
    return bytes(sb)


def test_stopped_md_member(loops: list[str]) -> None:
    device = loops[0]
    with open(device, "r+b") as f:
        f.seek(4096)
        f.write(md_v12_superblock(SIZE))
    assert "TYPE=linux_raid_member" in sh("blkid", "-p", "-o", "export", device)
    message = refuse_format(device, backing_image(device))
    assert "it carries the signature of an md RAID member (md superblock)" in message


def test_lvm_physical_volume_without_a_volume_group(loops: list[str]) -> None:
    """A PV label alone (pvcreate works here; vgchange needs device-mapper, which this kernel lacks)."""
    if not shutil.which("pvcreate"):
        pytest.skip("lvm2 not installed")
    device = loops[0]
    sh("pvcreate", "-qq", "-y", device, env=LVM_ENV)
    try:
        message = refuse_format(device, backing_image(device))
        assert "it carries the signature of an LVM physical volume (LVM2 label)" in message
    finally:
        sh("pvremove", "-qq", device, env=LVM_ENV)
    check_safe_to_format(device)


def test_missing_blkid_refuses(loops: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the signature tool the md/LVM check cannot run: refuse, never skip. (The tool's name
    is pointed at one that does not exist: removing blkid from this machine is not an option.)"""
    monkeypatch.setattr(devmod, "SIGNATURE_TOOL", "blkid-not-installed")
    message = refuse_format(loops[0])
    assert "blkid-not-installed not found, so md/LVM signatures on it cannot be ruled out" in message


# --------------------------------------------------------------------------------------------
# roots that are not a block device: overlay (containers)


def overlay_root(upper: Path) -> list[devmod.MountEntry]:
    """The real mount table with "/" replaced by an overlay whose upper/work dirs are ``upper``
    (fabricated: this machine's own root cannot be re-mounted as an overlay)."""
    line = f"1 0 0:99 / / rw - overlay overlay rw,lowerdir=/usr,upperdir={upper}/u,workdir={upper}/w"
    return [m for m in read_mounts() if m.mount_point != "/"] + parse_mountinfo(line)


def test_overlay_root_on_the_device(loops: list[str], mount_point: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    device = loops[0]
    sh("mkfs.ext2", "-qF", device)
    sh("mount", device, str(mount_point))
    for sub in ("u", "w"):
        (mount_point / sub).mkdir()
    # Read-only from here: a writable ext2 writes its metadata back when it likes, which would change
    # the device's digest between refuse_format's two reads without fsmatrix touching it.
    sh("mount", "-o", "remount,ro", str(mount_point))
    entries = overlay_root(mount_point)
    monkeypatch.setattr(devmod, "read_mounts", lambda pid="self": entries)
    assert "it holds the root filesystem" in refuse_format(device)
    # Without the overlay root the same device is refused only for the mount.
    monkeypatch.undo()
    assert "root filesystem" not in refuse_format(device)


def test_overlay_root_that_cannot_be_traced(loops: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An overlay root whose directories are not visible (a container without the host's view):
    no disk can be called safe. A loop device on a file (what fsmatrix makes itself) still can: a
    filesystem on it, the root's included, would keep it mounted, which the other checks see."""
    entries = overlay_root(Path("/nonexistent-fsmatrix-upper"))
    entries = [e for e in entries if e.mount_point != "/usr"]
    line = "1 0 0:99 / / rw - overlay overlay rw,upperdir=/nonexistent-u,workdir=/nonexistent-w"
    entries = [m for m in entries if m.mount_point != "/"] + parse_mountinfo(line)
    monkeypatch.setattr(devmod, "read_mounts", lambda pid="self": entries)
    assert devmod.check_safe_to_format(loops[0]).name == Path(loops[0]).name
    # Any other block device is refused (fabricated: this machine has no spare disk, so a loop device
    # is made to look like one).
    monkeypatch.setattr(devmod, "is_loop", lambda name: False)
    assert "the root filesystem is an overlay whose directories" in refuse_format(loops[0])


def test_host_view() -> None:
    """This machine runs fsmatrix in the host's pid namespace: nothing is hidden."""
    assert devmod.host_view_problems() == []
