"""Storage preparation: size/cell helpers, per-filesystem geometry parsers on captured tool output,
and the real thing (losetup, mkfs, mount, readback, cleanup) on loop devices."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TEST_DATA, Golden, attached_under, golden_cases, mounted_under
from fsmatrix.agent.storage import (
    FILESYSTEMS,
    Skipped,
    StorageError,
    UnsafeDevice,
    filesystem_availability,
    format_device,
    loop_devices,
    parse_size,
    prepare,
    required_devices,
)
from fsmatrix.agent.storage import filesystems as fsmod
from fsmatrix.agent.storage import loop as loopmod
from fsmatrix.agent.storage.filesystems import _ext, btrfs, f2fs, jfs, nilfs2, reiserfs, xfs
from fsmatrix.agent.storage.prepare import StorageSpec, parse_proc_filesystems, processes_using, unmount

DATA = TEST_DATA / "storage"
IMAGE_SIZE = 512 << 20  # the smallest size every filesystem here accepts (xfs needs 300 MiB)


def usable(name: str) -> bool:
    """Whether this host can mount ``name`` (availability may modprobe it in)."""
    return filesystem_availability(name) is None


needs_root = pytest.mark.root(reason="needs root: losetup, mkfs and mount")


def cell(filesystem: str, **overrides: Any) -> StorageSpec:
    storage = {"layout": "single", "disk_size": "256M", "journal_filesystem": "ext2", "journal_mount_options": ""}
    storage.update(overrides.pop("storage", {}))
    doc = {"filesystem": filesystem, "mkfs_options": "", "mount_options": "", "storage": storage, **overrides}
    return StorageSpec.from_dict(doc)


def capture(tool: str, name: str) -> str:
    return (DATA / tool / name).read_text()


def head_digest(device: str) -> str:
    with open(device, "rb") as f:
        return hashlib.sha256(f.read(1 << 20)).hexdigest()


WORK_DIRS: list[Path] = []


@pytest.fixture(autouse=True)
def work_dir(tmp_path: Path) -> Path:
    WORK_DIRS.append(Path(os.path.realpath(tmp_path)))
    return tmp_path


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """After all tests here: no loop device, mount or image of theirs remains."""
    yield
    for directory in WORK_DIRS:
        assert attached_under(directory) == []
        assert mounted_under(directory) == []
        assert list(directory.rglob("fsmatrix-*.img")) == []


@pytest.fixture
def loops(tmp_path: Path) -> Iterator[list[str]]:
    with loop_devices(2, IMAGE_SIZE, tmp_path) as devices:
        yield devices


# --------------------------------------------------------------------------------------------
# helpers without devices


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), (4096, 4096), ("512M", 512 << 20), ("8G", 8 << 30), ("1T", 1 << 40), ("8g", 8 << 30),
     ("64k", 64 << 10), ("0", 0)],
)  # fmt: skip
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


# One size syntax, the matrix schema's (declare.SIZE_PATTERN): no fractions, spaces or "iB".
@pytest.mark.parametrize("text", ["", "G", "8X", "-1", "8 G B", "1.3", "1.5G", "8GiB", " 64k ", -5, "eight", True])
def test_parse_size_rejects(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_required_devices() -> None:
    assert required_devices(cell("ext4")) == 1
    assert required_devices(cell("tmpfs")) == 0
    assert required_devices(cell("xfs", storage={"layout": "split-journal"})) == 2
    assert required_devices(cell("tmpfs", storage={"layout": "split-journal"})) == 1
    # Striped layouts need storage.stripe_disks disks (more cases in test_layouts.py).
    assert required_devices(cell("ext4", storage={"layout": "md-raid0", "stripe_disks": 3})) == 3
    assert required_devices(cell("raw")) == 1
    with pytest.raises(ValueError, match="raid5"):
        required_devices(cell("ext4", storage={"layout": "raid5"}))


def test_registry_describes_every_filesystem() -> None:
    assert FILESYSTEMS == ("ext2", "ext3", "ext4", "xfs", "btrfs", "jfs", "reiserfs", "nilfs2", "f2fs", "tmpfs", "raw")
    for name in FILESYSTEMS:
        fs = fsmod.get(name)
        assert fs.name == name
        assert fs.device == (name != "tmpfs")
    assert fsmod.get("xfs").mkfs_command("/dev/x", ["-b", "size=1024"]) == [
        "mkfs.xfs",
        "-f",
        "-b",
        "size=1024",
        "/dev/x",
    ]
    with pytest.raises(ValueError, match="unknown filesystem"):
        fsmod.get("vfat")


def test_mke2fs_extended_options_are_merged() -> None:
    # mke2fs keeps only the last -E: a cell's -E must not silently drop the lazy-init defaults.
    merged = _ext.combine_mke2fs_options(_ext.MKE2FS_DEFAULTS, ["-b", "1024", "-E", "stride=16", "-Estripe_width=64"])
    assert merged == ["-F", "-b", "1024", "-E", "lazy_itable_init=0,lazy_journal_init=0,stride=16,stripe_width=64"]
    assert _ext.combine_mke2fs_options(["-F"], ["-j"]) == ["-F", "-j"]


def test_parse_proc_filesystems() -> None:
    kernel = parse_proc_filesystems(capture("proc/filesystems", "host.txt"))
    assert {"ext4", "xfs", "btrfs", "tmpfs", "sysfs"} <= kernel
    assert "jfs" not in kernel


@pytest.mark.parametrize("case", golden_cases("storage/proc/filesystems"))
def test_parse_proc_filesystems_golden(case: Golden) -> None:
    """Every captured /proc/filesystems in tests/data/storage/proc/filesystems/ parses to its expected set."""
    case.check(parse_proc_filesystems)


# --------------------------------------------------------------------------------------------
# geometry parsers on captured output


def test_dumpe2fs_parser() -> None:
    ext4 = _ext.parse_dumpe2fs(capture("dumpe2fs", "ext4-default.txt"))
    assert ext4["block_size"] == 4096 and ext4["block_count"] == 131072 and ext4["size_bytes"] == 512 << 20
    assert ext4["inode_size"] == 256 and ext4["inode_count"] == 32768 and ext4["flex_bg_size"] == 16
    assert {"has_journal", "extent", "metadata_csum"} <= set(ext4["features"]) and ext4["has_journal"]
    assert ext4["journal_blocks"] == 4096 and ext4["journal_size"] == "16M"
    assert ext4["default_mount_options"] == ["user_xattr", "acl"]
    assert ext4["raid_stride"] is None and ext4["raid_stripe_width"] is None
    striped = _ext.parse_dumpe2fs(capture("dumpe2fs", "ext4-raid-stride.txt"))
    assert (striped["raid_stride"], striped["raid_stripe_width"]) == (16, 32)
    small = _ext.parse_dumpe2fs(capture("dumpe2fs", "ext4-b1024.txt"))
    assert small["block_size"] == 1024 and small["block_count"] == 524288
    ext3 = _ext.parse_dumpe2fs(capture("dumpe2fs", "ext3-default.txt"))
    assert ext3["has_journal"] and "extent" not in ext3["features"]
    ext2 = _ext.parse_dumpe2fs(capture("dumpe2fs", "ext2-default.txt"))
    assert not ext2["has_journal"] and ext2["journal_blocks"] is None
    with pytest.raises(ValueError):
        _ext.parse_dumpe2fs("dumpe2fs 1.47.0 (5-Feb-2023)\nBad magic number in super-block\n")


def test_xfs_info_parser() -> None:
    default = xfs.parse_xfs_info(capture("xfs_info", "default.txt"))
    assert default["agcount"] == 4 and default["agsize"] == 32768 and default["block_size"] == 4096
    assert default["isize"] == 512 and default["crc"] == 1 and default["reflink"] == 1
    assert default["size_bytes"] == 512 << 20
    assert default["log"] == {
        "label": "internal log", "bsize": 4096, "blocks": 16384, "version": 2, "sectsz": 512, "sunit": 0,
        "lazy_count": 1,
    }  # fmt: skip
    assert default["naming"]["ftype"] == 1 and default["realtime"]["label"] == "none"
    assert xfs.parse_xfs_info(capture("xfs_info", "default-mounted.txt")) == default
    custom = xfs.parse_xfs_info(capture("xfs_info", "b1024-agcount8-noreflink.txt"))
    assert custom["block_size"] == 1024 and custom["agcount"] == 8 and custom["reflink"] == 0
    # mkfs.xfs prints the same table (followed by "Discarding blocks...Done.")
    assert xfs.parse_xfs_info(capture("xfs_info", "mkfs.xfs-agcount8-stdout.txt"))["agcount"] == 8
    with pytest.raises(ValueError):
        xfs.parse_xfs_info("xfs_info: /dev/loop0 is not a valid XFS filesystem (unexpected SB magic number)\n")


def test_btrfs_dump_super_parser() -> None:
    default = btrfs.parse_dump_super(capture("btrfs-dump-super", "default.txt"))
    assert default["nodesize"] == 16384 and default["sectorsize"] == 4096 and default["block_size"] == 4096
    assert default["csum_type"] == "crc32c" and default["num_devices"] == 1
    assert default["size_bytes"] == 1 << 30
    assert default["incompat_flags"] == ["MIXED_BACKREF", "EXTENDED_IREF", "SKINNY_METADATA", "NO_HOLES"]
    assert default["compat_ro_flags"] == ["FREE_SPACE_TREE", "FREE_SPACE_TREE_VALID"]
    custom = btrfs.parse_dump_super(capture("btrfs-dump-super", "nodesize4096-xxhash.txt"))
    assert custom["nodesize"] == 4096 and custom["csum_type"] == "xxhash64"


def test_jfs_tune_parser() -> None:
    small = jfs.parse_jfs_tune(capture("jfs_tune", "default-512M.txt"))
    assert small["block_size"] == 4096 and small["physical_block_size"] == 512 and small["inline_log"]
    # the aggregate size counts 512-byte device blocks and leaves out the inline log
    assert small["size_bytes"] == 1044040 * 512 < 512 << 20
    assert small["allocation_group_blocks"] == 8192
    big = jfs.parse_jfs_tune(capture("jfs_tune", "default-1G.txt"))
    assert big["aggregate_size_physical_blocks"] == 2088488


def test_debugreiserfs_parser() -> None:
    default = reiserfs.parse_debugreiserfs(capture("debugreiserfs", "default.txt"))
    assert default["block_size"] == 4096 and default["block_count"] == 262144 and default["format"] == "3.6"
    assert default["hash"] == "r5" and default["journal"] == "standard" and default["journal_blocks"] == 8193
    assert default["journal_max_transaction_blocks"] == 1024 and default["journal_first_block"] == 18
    custom = reiserfs.parse_debugreiserfs(capture("debugreiserfs", "tea-journal2049.txt"))
    assert custom["hash"] == "tea" and custom["journal"] == "non-standard" and custom["journal_blocks"] == 2049


def test_nilfs_tune_parser() -> None:
    default = nilfs2.parse_nilfs_tune(capture("nilfs-tune", "default.txt"))
    assert default["block_size"] == 4096 and default["blocks_per_segment"] == 2048
    assert default["size_bytes"] == 1 << 30 and default["reserved_segments_percent"] == 5
    assert nilfs2.parse_nilfs_tune(capture("nilfs-tune", "blocks-per-segment4096.txt"))["blocks_per_segment"] == 4096


def test_dump_f2fs_parser() -> None:
    default = f2fs.parse_dump_f2fs(capture("dump.f2fs", "default-d1.txt"))
    assert default["block_size"] == 4096 and default["sector_size"] == 512
    assert default["size_bytes"] == 1 << 30 and default["blocks_per_segment"] == 512
    assert default["features"] == []
    custom = f2fs.parse_dump_f2fs(capture("dump.f2fs", "overprovision10-checksum-d1.txt"))
    assert custom["features"] == ["extra_attr", "inode_checksum"]
    assert custom["overprovision_segments"] != default["overprovision_segments"]
    with pytest.raises(ValueError, match="-d 1"):
        f2fs.parse_dump_f2fs(capture("dump.f2fs", "default-no-d.txt"))


@pytest.mark.parametrize("case", golden_cases("storage/dumpe2fs"))
def test_parse_dumpe2fs_golden(case: Golden) -> None:
    """`dumpe2fs -h`, as captured in tests/data/storage/dumpe2fs/: the expected geometry, or refused."""
    case.check(_ext.parse_dumpe2fs)


@pytest.mark.parametrize("case", golden_cases("storage/xfs_info"))
def test_parse_xfs_info_golden(case: Golden) -> None:
    """`xfs_info` (or mkfs.xfs), as captured in tests/data/storage/xfs_info/: its geometry, or refused."""
    case.check(xfs.parse_xfs_info)


@pytest.mark.parametrize("case", golden_cases("storage/btrfs-dump-super"))
def test_parse_dump_super_golden(case: Golden) -> None:
    """`btrfs inspect-internal dump-super` captured in tests/data/storage/btrfs-dump-super/: its geometry."""
    case.check(btrfs.parse_dump_super)


@pytest.mark.parametrize("case", golden_cases("storage/jfs_tune"))
def test_parse_jfs_tune_golden(case: Golden) -> None:
    """`jfs_tune -l`, as captured in tests/data/storage/jfs_tune/: the expected geometry, or refused."""
    case.check(jfs.parse_jfs_tune)


@pytest.mark.parametrize("case", golden_cases("storage/debugreiserfs"))
def test_parse_debugreiserfs_golden(case: Golden) -> None:
    """`debugreiserfs`, as captured in tests/data/storage/debugreiserfs/: the expected geometry, or refused."""
    case.check(reiserfs.parse_debugreiserfs)


@pytest.mark.parametrize("case", golden_cases("storage/nilfs-tune"))
def test_parse_nilfs_tune_golden(case: Golden) -> None:
    """`nilfs-tune -l`, as captured in tests/data/storage/nilfs-tune/: the expected geometry, or refused."""
    case.check(nilfs2.parse_nilfs_tune)


@pytest.mark.parametrize("case", golden_cases("storage/dump.f2fs"))
def test_parse_dump_f2fs_golden(case: Golden) -> None:
    """`dump.f2fs`, as captured in tests/data/storage/dump.f2fs/: the expected geometry, or refused."""
    case.check(f2fs.parse_dump_f2fs)


# --------------------------------------------------------------------------------------------
# availability


def test_availability_on_this_host() -> None:
    for name in FILESYSTEMS:
        reason = filesystem_availability(name)
        if name in parse_proc_filesystems(Path("/proc/filesystems").read_text()):
            assert reason is None, reason
        else:
            assert reason is not None and name in reason and "/proc/filesystems" in reason


def test_availability_names_a_missing_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fsmod.get
    broken = dataclasses.replace(real("ext4"), mkfs=("mkfs.fsmatrix-missing", "-F"))
    monkeypatch.setattr(fsmod, "get", lambda name: broken if name == "ext4" else real(name))
    assert filesystem_availability("ext4") == "mkfs.fsmatrix-missing not found (install e2fsprogs)"


# --------------------------------------------------------------------------------------------
# the real thing on loop devices

HOST_DEVICE_FILESYSTEMS = ("ext2", "ext3", "ext4", "xfs", "btrfs")
GEOMETRY_CHECKS: dict[str, dict[str, Any]] = {
    "ext2": {"block_size": 4096, "has_journal": False},
    "ext3": {"block_size": 4096, "has_journal": True},
    "ext4": {"block_size": 4096, "has_journal": True},
    "xfs": {"block_size": 4096, "agcount": 4},
    "btrfs": {"block_size": 4096, "nodesize": 16384},
    "jfs": {"block_size": 4096, "inline_log": True},
    "reiserfs": {"block_size": 4096, "hash": "r5"},
    "nilfs2": {"block_size": 4096, "blocks_per_segment": 2048},
    "f2fs": {"block_size": 4096, "blocks_per_segment": 512},
}


@needs_root
def test_loop_devices_use_direct_io_and_clean_up(tmp_path: Path) -> None:
    with loop_devices(2, IMAGE_SIZE, tmp_path) as devices:
        assert len(devices) == 2 and devices[0] != devices[1]
        images = sorted(tmp_path.glob("fsmatrix-*.img"))
        assert [p.name for p in images] == [f"fsmatrix-{os.getpid()}-0.img", f"fsmatrix-{os.getpid()}-1.img"]
        assert images[0].stat().st_size == IMAGE_SIZE and images[0].stat().st_blocks == 0  # sparse
        for device in devices:
            name = Path(device).name
            assert Path(f"/sys/block/{name}/loop/dio").read_text().strip() == "1"
    assert attached_under(tmp_path) == [] and list(tmp_path.glob("*.img")) == []


@needs_root
def test_loop_devices_not_sparse(tmp_path: Path) -> None:
    with loop_devices(1, 64 << 20, tmp_path, sparse=False):
        image = next(tmp_path.glob("fsmatrix-*.img"))
        assert image.stat().st_blocks * 512 >= 64 << 20


@needs_root
@pytest.mark.parametrize("filesystem", HOST_DEVICE_FILESYSTEMS)
def test_prepare_with_defaults(filesystem: str, loops: list[str], tmp_path: Path) -> None:
    if not usable(filesystem):
        pytest.skip(f"kernel lacks {filesystem}")
    root = tmp_path / "mnt"
    with prepare(cell(filesystem), loops, root) as storage:
        assert storage.data == root / "data" and storage.journal == storage.data
        back = storage.readback["data"]
        assert set(storage.readback) == {"data"}
        assert back["filesystem"] == filesystem and back["device"] == loops[0]
        assert back["mkfs_command"][0] == f"mkfs.{filesystem}" and back["mkfs_command"][-1] == loops[0]
        assert back["mkfs_version"] and back["mount_options_requested"] == ""
        info = back["mountinfo"]
        assert info["fstype"] == filesystem and info["source"] == loops[0]
        assert info["mount_options"][0] == "rw" and "rw" in info["super_options"]
        for key, value in GEOMETRY_CHECKS[filesystem].items():
            assert back["geometry"][key] == value, key
        assert back["geometry"]["size_bytes"] <= IMAGE_SIZE
        assert storage.diskstat_names == [Path(loops[0]).name]
        assert storage.devices[0]["backing_file"].startswith(str(tmp_path)) and storage.devices[0]["direct_io"]
        (storage.data / "probe").write_text("written on " + filesystem)
        assert os.stat(storage.data).st_dev != os.stat(tmp_path).st_dev
    assert mounted_under(tmp_path) == [] and not root.exists()


@needs_root
def test_prepare_custom_options_show_in_readback(loops: list[str], tmp_path: Path) -> None:
    with prepare(cell("ext4", mkfs_options="-b 1024"), loops, tmp_path / "a") as storage:
        back = storage.readback["data"]
        assert back["geometry"]["block_size"] == 1024 and "1024" in back["mkfs_command"]
    with prepare(cell("ext3", mount_options="data=writeback"), loops, tmp_path / "b") as storage:
        back = storage.readback["data"]
        assert back["mount_options_requested"] == "data=writeback"
        assert "data=writeback" in back["mountinfo"]["super_options"]
    if usable("xfs"):
        with prepare(cell("xfs", mount_options="noatime"), loops, tmp_path / "c") as storage:
            assert "noatime" in storage.readback["data"]["mountinfo"]["mount_options"]


@needs_root
def test_prepare_split_journal(loops: list[str], tmp_path: Path) -> None:
    split = cell("ext4", storage={"layout": "split-journal", "journal_mount_options": "noatime"})
    with prepare(split, loops, tmp_path / "mnt") as storage:
        assert storage.journal == tmp_path / "mnt" / "journal" != storage.data
        data_dev, journal_dev = os.stat(storage.data).st_dev, os.stat(storage.journal).st_dev
        assert data_dev != journal_dev
        assert journal_dev == os.stat(loops[1]).st_rdev  # the journal directory is on the second device
        journal = storage.readback["journal"]
        assert journal["filesystem"] == "ext2" and journal["mountinfo"]["fstype"] == "ext2"
        assert journal["device"] == loops[1] and "noatime" in journal["mountinfo"]["mount_options"]
        assert storage.diskstat_names == [Path(d).name for d in loops]
        assert [d["kernel_name"] for d in storage.devices] == storage.diskstat_names
    assert mounted_under(tmp_path) == []


@needs_root
def test_prepare_tmpfs_needs_no_device(tmp_path: Path) -> None:
    with prepare(cell("tmpfs"), [], tmp_path / "mnt") as storage:
        back = storage.readback["data"]
        assert back["mountinfo"]["fstype"] == "tmpfs" and back["device"] is None and back["mkfs_command"] == []
        assert back["mount_options_requested"] == f"size={256 << 20}"
        assert back["geometry"]["size_bytes"] == 256 << 20
        assert storage.devices == [] and storage.diskstat_names == []
    assert mounted_under(tmp_path) == []


@needs_root
@pytest.mark.parametrize("filesystem", ["jfs", "reiserfs", "nilfs2", "f2fs"])
def test_filesystems_the_host_kernel_may_lack(filesystem: str, loops: list[str], tmp_path: Path) -> None:
    """Skipped (before touching anything) where the kernel lacks them; mkfs + geometry still work."""
    root = tmp_path / "mnt"
    if usable(filesystem):
        with prepare(cell(filesystem), loops, root) as storage:
            assert storage.readback["data"]["mountinfo"]["fstype"] == filesystem
    else:
        before = head_digest(loops[0])
        expected = f"{filesystem}: the running kernel .* does not support {filesystem}"
        with pytest.raises(Skipped, match=expected), prepare(cell(filesystem), loops, root):
            pytest.fail("prepare yielded for a filesystem the kernel lacks")
        assert not root.exists() and head_digest(loops[0]) == before
    made = format_device(filesystem, loops[1])
    assert made["mkfs_command"][0] == f"mkfs.{filesystem}" and made["mkfs_version"]
    for key, value in GEOMETRY_CHECKS[filesystem].items():
        assert made["geometry"][key] == value, key
    assert 0.8 * IMAGE_SIZE < made["geometry"]["size_bytes"] <= IMAGE_SIZE


@needs_root
def test_prepare_checks_every_device_before_touching_any(loops: list[str], tmp_path: Path) -> None:
    mounted = tmp_path / "busy"
    mounted.mkdir()
    subprocess.run(["mkfs.ext2", "-qF", loops[1]], check=True)
    subprocess.run(["mount", loops[1], str(mounted)], check=True)
    try:
        before = head_digest(loops[0])
        split = cell("ext4", storage={"layout": "split-journal"})
        expected = f"refusing to format {loops[1]}: it is mounted at {mounted}"
        with pytest.raises(UnsafeDevice, match=expected), prepare(split, loops, tmp_path / "mnt"):
            pytest.fail("prepare yielded with a mounted device")
        assert head_digest(loops[0]) == before and not (tmp_path / "mnt").exists()
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


@needs_root
def test_prepare_rejects_bad_device_lists(loops: list[str], tmp_path: Path) -> None:
    split = cell("ext4", storage={"layout": "split-journal"})
    with pytest.raises(ValueError, match="needs 2"), prepare(split, loops[:1], tmp_path / "mnt"):
        pass
    with pytest.raises(ValueError, match="twice"), prepare(split, [loops[0], loops[0]], tmp_path / "mnt"):
        pass


# --------------------------------------------------------------------------------------------
# cleanup on every path


@needs_root
def test_exception_inside_the_block_cleans_up(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="workload failed"),
        loop_devices(1, IMAGE_SIZE, tmp_path) as devices,
        prepare(cell("ext4"), devices, tmp_path / "mnt"),
    ):
        assert mounted_under(tmp_path)
        raise RuntimeError("workload failed")
    assert mounted_under(tmp_path) == [] and attached_under(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


@needs_root
def test_failed_mount_cleans_up(tmp_path: Path) -> None:
    from fsmatrix.agent.proc import CommandError

    with loop_devices(1, IMAGE_SIZE, tmp_path) as devices:
        with (
            pytest.raises(CommandError, match="mount"),
            prepare(cell("ext4", mount_options="no_such_option"), devices, tmp_path / "mnt"),
        ):
            pass
        assert mounted_under(tmp_path) == [] and not (tmp_path / "mnt").exists()
    assert attached_under(tmp_path) == []


SIGINT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from fsmatrix.agent.storage import StorageSpec, loop_devices, prepare
    work = Path(sys.argv[1])
    cell = StorageSpec.from_dict({"filesystem": "ext4", "mkfs_options": "", "mount_options": "",
                                  "storage": {"layout": "split-journal", "journal_filesystem": "ext2"}})
    with loop_devices(2, 512 << 20, work) as devices, prepare(cell, devices, work / "mnt") as storage:
        (storage.data / "file").write_text("x")
        print("ready", flush=True)
        time.sleep(120)
    """
)


@needs_root
def test_sigint_inside_prepare_cleans_up(tmp_path: Path) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(SIGINT_SCRIPT)
    work = tmp_path / "work"
    work.mkdir()
    child = subprocess.Popen(
        [sys.executable, str(script), str(work)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        assert len(mounted_under(work)) == 2 and len(attached_under(work)) == 2
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0 and "KeyboardInterrupt" in stderr
    assert mounted_under(work) == [] and attached_under(work) == []
    assert list(work.iterdir()) == []


@needs_root
def test_busy_mount_point_names_the_holder(tmp_path: Path) -> None:
    with loop_devices(1, IMAGE_SIZE, tmp_path) as devices:
        holder: subprocess.Popen[bytes] | None = None
        try:
            started = time.monotonic()
            with pytest.raises(StorageError) as raised, prepare(cell("ext4"), devices, tmp_path / "mnt") as storage:
                holder = subprocess.Popen(["sleep", "60"], cwd=storage.data)
            assert holder is not None
            message = str(raised.value)
            assert f"cannot unmount {tmp_path / 'mnt' / 'data'}" in message
            assert f"pid {holder.pid} (sleep)" in message
            assert time.monotonic() - started < 15
            assert processes_using(tmp_path / "mnt" / "data") == [f"pid {holder.pid} (sleep)"]
        finally:
            if holder is not None:
                holder.kill()
                holder.wait()
            unmount(tmp_path / "mnt" / "data")
        for leftover in (tmp_path / "mnt" / "data", tmp_path / "mnt"):
            leftover.rmdir()
    assert mounted_under(tmp_path) == [] and attached_under(tmp_path) == []


@needs_root
def test_detach_never_touches_a_reused_device(tmp_path: Path) -> None:
    # If the device was already detached and reused for another file, detach() must leave it alone.
    with loop_devices(1, IMAGE_SIZE, tmp_path) as (device,):
        loopmod.detach(device, tmp_path / "some-other-file.img")
        assert attached_under(tmp_path) == [Path(device).name]
