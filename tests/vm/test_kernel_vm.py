"""vm.kernel booted for real: Debian's bookworm-backports 6.12 kernel package (not the image's 6.1)
runs an xfs cell (xfs is a module: it comes from the kernel's own modules disk); the same kernel as a
bzImage with a modules directory unpacked from the package; two kernels at one path get a saved guest
each; and the kernel's initramfs, with no root disk, says so in one line instead of timing out.
Without a boot: tests/backends/test_kernel_boot.py.

The packages are fetched through an apt configuration of the test's own (sources list, state and
cache under $FSMATRIX_CACHE/test-kernels; the system's apt is neither read nor changed) and kept
there for the next run. Guests run under TCG here: each test boots a guest or two (minutes)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FSMATRIX, IMAGE_TEST_TIMEOUT, run_on_qemu, vms_under
from fsmatrix.backends import image
from fsmatrix.backends.qemu import kernel_boot, snapshot

# Out of `make test` (marker slow: `make test-slow`) until the 6.12 kernel boots reliably under TCG
# here: in the full suite of 2026-11-26 (398cf32 + 1 commit) it panicked in an early initcall
# ("Fatal exception in interrupt", update_rq_clock) in one of five boots, and an IO-APIC timer panic
# was seen once before (no_timer_check since). The package is the mirror's current bookworm-backports
# 6.12 (6.12.95 that day), not a pinned version.
# Cause, as far as found on 2026-11-27 (docs/measurements.md, "A 6.12 kernel's boots under
# multi-threaded TCG"): "Oops: int3" at sched_clock_cpu+0x9 as a late initcall enables a static key,
# patching code the other vCPU runs; not seen with `-accel tcg,thread=single`. Candidate fixes, not
# made yet: boot with maxcpus=1 and bring the other vCPUs online from the initramfs, or boot the
# saved guest's template single-threaded.
pytestmark = pytest.mark.slow

MIRROR = os.environ.get("FSMATRIX_MIRROR", "http://deb.debian.org/debian")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def apt_dir() -> Path:
    return image.cache_root() / "test-kernels"


def apt(*args: str) -> subprocess.CompletedProcess[str]:
    """apt-get with a configuration of our own: nothing of the system's apt is read or written (its
    trusted keys aside)."""
    root = apt_dir()
    for sub in (
        "state/lists/partial",
        "cache/archives/partial",
        "etc/apt.conf.d",
        "etc/preferences.d",
        "etc/sources.list.d",
        "debs",
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "state/status").touch()
    (root / "etc/sources.list").write_text(
        f"deb [signed-by={KEYRING}] {MIRROR} bookworm main\n"
        f"deb [signed-by={KEYRING}] {MIRROR} bookworm-backports main\n"
    )
    config = root / "etc/apt.conf"
    config.write_text(
        f'Dir::Etc "{root}/etc";\n'
        'Dir::Etc::SourceList "sources.list";\nDir::Etc::SourceParts "sources.list.d";\n'
        'Dir::Etc::Parts "apt.conf.d";\nDir::Etc::PreferencesParts "preferences.d";\n'
        f'Dir::Etc::TrustedParts "/etc/apt/trusted.gpg.d";\n'
        f'Dir::State "{root}/state";\nDir::State::status "{root}/state/status";\n'
        f'Dir::Cache "{root}/cache";\nAPT::Sandbox::User "root";\nDebug::NoLocking "true";\n'
    )
    done = subprocess.run(
        ["apt-get", "-q", *args],
        env={**os.environ, "APT_CONFIG": str(config)},
        cwd=root / "debs",
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, f"apt-get {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def kernel_package(suite: str, major: str) -> Path:
    """The linux-image-MAJOR.* package that ``suite``'s linux-image-amd64 depends on (cached)."""
    debs = apt_dir() / "debs"
    cached = sorted(debs.glob(f"linux-image-{major}.*_amd64.deb")) if debs.is_dir() else []
    if cached:
        return cached[-1]
    started = time.monotonic()
    if not (apt_dir() / "state/lists").is_dir() or not any((apt_dir() / "state/lists").glob("*Packages*")):
        apt("update")
    apt("download", f"linux-image-amd64/{suite}")
    meta = sorted(debs.glob("linux-image-amd64_*.deb"))
    depends = subprocess.run(
        ["dpkg-deb", "-f", str(meta[-1]), "Depends"], capture_output=True, text=True, check=True
    ).stdout
    package = next(d.split()[0] for d in depends.split(",") if d.strip().startswith(f"linux-image-{major}."))
    for old in meta:
        old.unlink()
    apt("download", f"{package}/{suite}")
    print(f"fetched {package} from {suite}: {time.monotonic() - started:.0f} s")
    return sorted(debs.glob(f"{package}_*.deb"))[-1]


def release_of(deb: Path) -> str:
    name = subprocess.run(["dpkg-deb", "-f", str(deb), "Package"], capture_output=True, text=True, check=True).stdout
    return name.strip().removeprefix("linux-image-")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built() -> image.ImagePaths:
    return image.build()


@pytest.fixture(scope="module")
def backports() -> Path:
    """Debian 12's bookworm-backports 6.12 kernel package: not the image's kernel."""
    return kernel_package("bookworm-backports", "6.12")


@pytest.fixture
def unpacked(backports: Path, tmp_path: Path) -> Iterator[Path]:
    """The package unpacked (boot/vmlinuz-RELEASE, lib/modules/RELEASE: ~400 MB), deleted after."""
    directory = tmp_path / "unpacked"
    subprocess.run(["dpkg-deb", "-x", str(backports), str(directory)], check=True)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def xfs_matrix(path: Path, kernel: Path, modules: Path | None = None) -> Path:
    """One small xfs cell (xfs is a module of Debian's kernels) on ``kernel``."""
    vm = {"kernel": str(kernel), "memory": "1G", **({"modules": str(modules)} if modules else {})}
    path.write_text(
        "name: kernel\n"
        "axes: {filesystem: [xfs]}\n"
        "defaults:\n"
        "  storage.disk_size: 512M\n"
        "  workload: {fio: {pattern: randread, record_size: 4K, file_size: 4M, runtime: 2}}\n"
        f"  vm: {json.dumps(vm)}\n"
        "repeat: 1\n"
    )
    return path


def run_one(matrix: Path, results: Path, workdir: Path) -> dict[str, object]:
    """`fsmatrix run --backend qemu` of the one-cell ``matrix``: its result document."""
    started = time.monotonic()
    done = run_on_qemu(matrix, results, workdir)
    print(f"{matrix.name} on qemu: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = results.glob("kernel/*/r1.json")
    doc: dict[str, object] = json.loads(path.read_text())
    assert doc["status"] == "passed", doc.get("reason")
    assert not vms_under(workdir)
    return doc


@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_a_kernel_package_runs_an_xfs_cell(
    built: image.ImagePaths, backports: Path, tmp_path: Path, workdir: Path
) -> None:
    release = release_of(backports)
    assert release.startswith("6.12") and release not in json.loads(built.manifest.read_text())["kernel"]
    doc = run_one(xfs_matrix(tmp_path / "kernel.yaml", backports), tmp_path / "results", workdir)
    prov = doc["provenance"]
    assert isinstance(prov, dict)
    assert prov["kernel"] == release  # the guest's uname -r
    source = prov["kernel_source"]
    assert source["release"] == release and source["sha256"] == sha256(backports) and source["format"] == "deb"
    assert source["path"] == str(backports) and source["package"] == f"linux-image-{release}"
    assert doc["storage"]["readback"]["data"]["filesystem"] == "xfs"  # type: ignore[index]
    assert prov["vm"]["start"] == "restore"


@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_a_bzimage_with_a_modules_directory(
    built: image.ImagePaths, backports: Path, unpacked: Path, tmp_path: Path, workdir: Path
) -> None:
    release = release_of(backports)
    bzimage = unpacked / "boot" / f"vmlinuz-{release}"
    doc = run_one(xfs_matrix(tmp_path / "kernel.yaml", bzimage, unpacked), tmp_path / "results", workdir)
    prov = doc["provenance"]
    assert isinstance(prov, dict)
    assert prov["kernel"] == release
    source = prov["kernel_source"]
    assert source["format"] == "bzImage" and source["release"] == release and source["sha256"] == sha256(bzimage)
    assert source["modules"]["path"] == str(unpacked) and len(source["modules"]["sha256"]) == 64


@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_two_kernels_at_one_path_get_a_saved_guest_each(
    built: image.ImagePaths, backports: Path, tmp_path: Path, workdir: Path
) -> None:
    image_kernel = kernel_package("bookworm", "6.1")  # the image's own kernel, booted directly
    kernel = tmp_path / "kernel.deb"  # one path, as a bisect rebuilds it
    matrix = xfs_matrix(tmp_path / "kernel.yaml", kernel)
    seen = {}
    for deb, name in ((image_kernel, "old"), (backports, "new")):
        shutil.copyfile(deb, kernel)
        doc = run_one(matrix, tmp_path / name, workdir)
        prov = doc["provenance"]
        assert isinstance(prov, dict)
        assert prov["kernel"] == release_of(deb) and prov["kernel_source"]["sha256"] == sha256(deb)
        prepared = kernel_boot.prepare(str(kernel), "", image.cache_root())
        saved = [
            done.parent
            for done in (image.cache_root() / snapshot.SNAPSHOT_DIR).glob("*/template.json")
            if json.loads(done.read_text()).get("kernel") == str(prepared.directory)
        ]
        assert len(saved) == 1, saved
        seen[name] = (doc["cell_id"], saved[0])
    assert seen["old"][0] == seen["new"][0]  # the same cell ...
    assert seen["old"][1] != seen["new"][1]  # ... restored from a guest of its own kernel each
    # compare: the same cell, two kernels: refused unless asked, and named.
    done = subprocess.run(
        [*FSMATRIX, "compare", str(tmp_path / "old"), str(tmp_path / "new"), "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "different kernels under test" in done.stderr, done.stdout + done.stderr
    assert release_of(image_kernel) in done.stderr and release_of(backports) in done.stderr
    kernel.unlink()  # a copy of a 100 MB package


@pytest.mark.timeout(600)
def test_without_a_root_disk_the_guest_says_so(backports: Path, tmp_path: Path) -> None:
    """The kernel's own initramfs, booted with no disk at all: one line and a power-off, no timeout."""
    prepared = kernel_boot.prepare(str(backports), "", image.cache_root())
    console = tmp_path / "console.log"
    cmd = [
        "qemu-system-x86_64", "-name", "fsmatrix-kernel-test", "-accel", "tcg", "-cpu", "max", "-m", "512",
        "-nodefaults", "-display", "none", "-monitor", "none", "-no-reboot", "-serial", f"file:{console}",
        "-kernel", str(prepared.directory / "vmlinuz"), "-initrd", str(prepared.directory / "initrd.img"),
        "-append", f"{kernel_boot.APPEND} fsmatrix.wait=5",
    ]  # fmt: skip
    started = time.monotonic()
    subprocess.run(cmd, timeout=540, check=True, capture_output=True)  # powers off by itself
    print(f"initramfs without a root disk: {time.monotonic() - started:.0f} s")
    said = kernel_boot.guest_error(console.read_text(errors="replace"))
    assert said == (
        f"{kernel_boot.ERROR_MARK} no disk labelled fsmatrix-root after 5 s: "
        "the kernel lacks virtio-blk, msdos partitions or ext4"
    ), console.read_text(errors="replace")[-3000:]
    assert f"fsmatrix-initramfs: kernel {prepared.release}" in console.read_text(errors="replace")


@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_a_kernel_that_cannot_reach_its_root_disk_fails_the_run_in_one_line(
    built: image.ImagePaths, backports: Path, unpacked: Path, tmp_path: Path, workdir: Path
) -> None:
    """A bzImage given without its modules (Debian's has virtio-blk as a module): the run is an error
    whose reason is the guest's own line, within seconds of the wait, not a timeout."""
    release = release_of(backports)
    matrix = xfs_matrix(tmp_path / "kernel.yaml", unpacked / "boot" / f"vmlinuz-{release}")
    results = tmp_path / "results"
    started = time.monotonic()
    done = run_on_qemu(matrix, results, workdir, env={kernel_boot.WAIT_ENV: "5"})
    print(f"a kernel without its root disk, on qemu: {time.monotonic() - started:.0f} s")
    (path,) = results.glob("kernel/*/r1.json")
    doc = json.loads(path.read_text())
    line = f"{kernel_boot.ERROR_MARK} no disk labelled fsmatrix-root after 5 s"
    assert doc["status"] == "error" and line in doc["reason"], doc["reason"]
    assert doc["reason"].startswith("the guest did not start with vm.kernel ")
    # The saved guest could not be made either, and the warning says why in the same words.
    assert "cannot save a booted guest" in done.stderr and line in done.stderr, done.stderr
    assert not vms_under(workdir)
