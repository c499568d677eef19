"""The built guest image booted under QEMU and checked over SSH with testinfra, and a whole
job-mode run. Without an image: tests/backends/test_image.py.

These tests build the image first when it is not in the cache (minutes under TCG, once),
then boot it (1-2 min each under TCG).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import IMAGE_TEST_TIMEOUT
from fsmatrix import __version__, image_definitions
from fsmatrix.agent import workloads
from fsmatrix.agent.storage import filesystems
from fsmatrix.backends import image, jobdisk
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import cmdline
from fsmatrix.matrix import expand_document

BOOT_TIMEOUT = 420  # TCG boots take 35-100 s here; leave room for a busy machine
JOB_TIMEOUT = 420
NINE = ("ext2", "ext3", "ext4", "xfs", "btrfs", "jfs", "reiserfs", "nilfs2", "f2fs")
# --------------------------------------------------------------------------------------------
# the built image


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _qemu_pids(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if args and args[0].endswith(b"qemu-system-x86_64") and name.encode() in args:
                pids.append(int(entry.name))
    return pids


def _stop(vm: subprocess.Popen[bytes], name: str, grace: float = 60) -> None:
    try:
        vm.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        vm.send_signal(signal.SIGTERM)
        try:
            vm.wait(timeout=20)
        except subprocess.TimeoutExpired:
            vm.kill()
            vm.wait()
    assert _qemu_pids(name) == [], f"QEMU {name} left running"


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no console output)"


@pytest.fixture(scope="session")
def built() -> image.ImagePaths:
    started = time.monotonic()
    paths = image.build(echo=print)
    print(f"image ready in {time.monotonic() - started:.0f} s: {paths.qcow2}")
    return paths


@pytest.fixture(scope="session")
def accel(built: image.ImagePaths) -> str:
    assert image.newest_base_kernel() is not None  # the build made one: the probe below boots it
    return image.host_accel()


@pytest.fixture(scope="module")
def guest_host(built: image.ImagePaths, accel: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The image booted with a restricted NIC (as in job mode) and SSH on a free loopback port."""
    import testinfra

    work = tmp_path_factory.mktemp("boot")
    name = f"fsmatrix-test-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    serial = work / "serial.log"
    cmd = cmdline.qemu_command(cmdline.QemuVm(built.qcow2, accel=accel, name=name, serial_log=serial, ssh_port=port))
    vm = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    key = image.ssh_key()
    host = testinfra.get_host(
        f"ssh://root@127.0.0.1:{port}",
        ssh_identity_file=str(key),
        ssh_extra_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
        "-o ConnectTimeout=10 -o ControlMaster=no -o ControlPath=none",
    )
    started = time.monotonic()
    try:
        while True:
            if vm.poll() is not None:
                stderr = vm.stderr.read().decode(errors="replace") if vm.stderr else ""
                pytest.fail(f"QEMU exited ({vm.returncode}): {stderr}\nconsole:\n{_tail(serial)}")
            if time.monotonic() - started > BOOT_TIMEOUT:
                pytest.fail(f"no SSH after {BOOT_TIMEOUT} s; console:\n{_tail(serial)}")
            try:
                if host.run("true").rc == 0:
                    break
            except Exception:
                pass
            time.sleep(3)
        print(f"SSH up after {time.monotonic() - started:.0f} s ({accel})")
        yield host
    finally:
        with contextlib.suppress(Exception):  # the guest may be gone already
            host.run("systemctl --no-block poweroff")
        _stop(vm, name)
        print("guest console:", serial)


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_nine_filesystems_load_and_their_tools_exist(guest_host: Any) -> None:
    # The agent's own check: the kernel has the filesystem (after modprobe) and its mkfs tools exist.
    code = (
        "import json; from fsmatrix.agent.storage.prepare import filesystem_availability as why_not; "
        f"print(json.dumps({{n: why_not(n) for n in {list(NINE)!r}}}))"
    )
    out = guest_host.check_output("python3 -c %s", code)
    assert json.loads(out) == dict.fromkeys(NINE)
    registered = guest_host.file("/proc/filesystems").content_string
    assert all(f"\t{name}\n" in registered for name in NINE)
    for tool in ("mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "mkfs.jfs", "mkfs.reiserfs", "mkfs.nilfs2", "mkfs.f2fs"):
        assert guest_host.exists(tool), tool


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_gtm_runs_a_journaled_threen1(guest_host: Any) -> None:
    dist = guest_host.check_output("ls -d /usr/lib/x86_64-linux-gnu/fis-gtm/V*")
    zversion = guest_host.check_output(
        f"gtm_dist={dist} gtmroutines='{dist}/libgtmutil.so' {dist}/mumps -run %XCMD 'write $zversion,!'"
    )
    assert zversion.startswith("GT.M V")
    # A whole agent run on tmpfs: journaled database (before-image), 3n+1, verification.
    job = {
        "axes": {
            "filesystem": ["tmpfs"],
            "workload": [{"threen1": {"start": 1, "end": 2000, "workers": 2, "block": 500}}],
        }
    }
    cell = expand_document(job, "t").cells[0]
    code = (
        "import json, sys; from pathlib import Path; from fsmatrix.agent.parsing import parse_cell; "
        "from fsmatrix.agent.job import CellRepeat, Job, run_job; cell = parse_cell(json.load(sys.stdin)); "
        "r = run_job(Job(CellRepeat(cell, 't', 1), devices=[], workdir=Path('/var/tmp/fsmatrix-t'), environment={})); "
        "print(json.dumps({k: r[k] for k in ('status', 'reason', 'verification', 'metrics', 'provenance')}))"
    )
    out = guest_host.check_output("echo %s | python3 -c %s", json.dumps(cell.params), code)
    result = json.loads(out)
    assert result["status"] == "passed", result["reason"]
    assert result["verification"]["status"] == "passed"
    assert result["provenance"]["tools"]["gtm"].startswith("GT.M V")


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_sysbench_fio_and_the_agent_run(guest_host: Any) -> None:
    assert guest_host.check_output("sysbench --version").startswith("sysbench ")
    assert "events per second" in guest_host.check_output("sysbench cpu --time=1 run")
    fio = guest_host.check_output(
        "fio --name=t --filename=/var/tmp/fio.t --size=4M --rw=write --bs=64k --output-format=json"
    )
    assert json.loads(fio)["jobs"][0]["write"]["io_bytes"] == 4 << 20
    guest_host.run("rm -f /var/tmp/fio.t")
    assert guest_host.check_output("python3 -m fsmatrix.agent --version") == f"fsmatrix {__version__}"


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_manifest_matches_the_installed_packages(guest_host: Any, built: image.ImagePaths) -> None:
    manifest = json.loads(guest_host.file("/etc/fsmatrix/image.json").content_string)
    assert manifest == json.loads(built.manifest.read_text())
    assert manifest["name"] == built.name and manifest["fsmatrix_version"] == __version__
    assert manifest["kernel"] == guest_host.check_output("uname -r")
    wanted = image_definitions.get(image_definitions.DEFAULT).package_list(image_definitions.common_packages())
    assert set(wanted) <= set(manifest["packages"])
    for name, version in manifest["packages"].items():
        assert guest_host.package(name).version == version, name
    assert any(name.startswith("fis-gtm-") for name in manifest["packages"])


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_every_registry_member_is_installed_in_the_image(guest_host: Any, built: image.ImagePaths) -> None:
    """Conformance: what the built image holds (its manifest, and the guest itself), not the package
    list it was built from, has every workload's and filesystem's packages and tools."""
    installed = set(json.loads(built.manifest.read_text())["packages"])
    for workload in workloads.all_workloads():
        assert set(workload.guest_packages) <= installed, workload.name
    mounting = []
    for fs in filesystems.all_filesystems():
        assert set(fs.packages) <= installed, fs.name
        for tool in fs.tools:
            assert guest_host.exists(tool), f"{fs.name}: {tool}"
        if fs.mounts:
            mounting.append(fs.name)
    code = (
        "import json; from fsmatrix.agent.storage.prepare import filesystem_availability as why_not; "
        f"print(json.dumps({{n: why_not(n) for n in {mounting!r}}}))"
    )
    assert json.loads(guest_host.check_output("python3 -c %s", code)) == dict.fromkeys(mounting)


@pytest.mark.parametrize("name", image_definitions.names())
def test_every_built_images_manifest_conforms(built: image.ImagePaths, name: str) -> None:
    """Conformance of each image built for the current sources, from its manifest alone (debian12 is
    built by the fixture; another image only when it is in the cache: `fsmatrix image build --image`):
    its definition's name and tools, every package of its list, and a kernel that has what every
    registered filesystem needs (its module list, which `matrix expand` reads before a run)."""
    paths = image.image_paths(image=name)
    if not paths.complete():
        pytest.skip(f"image {name} is not built (fsmatrix image build --image {name})")
    manifest = json.loads(paths.manifest.read_text())
    definition = image_definitions.get(name)
    assert manifest["image"] == name and manifest["suite"] == definition.suite
    assert manifest["tools"] == {tool: t.path for tool, t in definition.tools.items()}
    assert set(definition.package_list(image_definitions.common_packages())) <= set(manifest["packages"])
    assert len(manifest["modules"]) > 1000 and "ext4" in manifest["filesystems"]
    # What kernel.lacking_in_manifest reads: a type the kernel registers, or the module that registers it.
    has = {
        fs.name: fs.name in manifest["filesystems"] or fs.kernel_module in manifest["modules"]
        for fs in filesystems.all_filesystems()
        if fs.kernel_module
    }
    print(f"{name}: kernel {manifest['kernel']}, lacking {[fs for fs, there in has.items() if not there]}")
    assert all(has[fs] for fs in NINE[:6]), has  # ext2..jfs: in every kernel fsmatrix images use
    assert {"dm_log_writes", "raid0", "dm_mod"} <= set(manifest["modules"])


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_guest_has_no_route_outside(guest_host: Any) -> None:
    assert "default" not in guest_host.check_output("ip route show")
    assert "default" not in guest_host.check_output("ip -6 route show")
    # 192.0.2.1 is a documentation address: with no route the kernel refuses before sending anything.
    code = (
        "import socket, time; t = time.monotonic(); s = socket.socket(); s.settimeout(5)\n"
        "try:\n    s.connect(('192.0.2.1', 80)); print('connected')\n"
        "except OSError as e:\n    print(type(e).__name__, e.errno, round(time.monotonic() - t, 2))"
    )
    out = guest_host.check_output("python3 -c %s", code)
    assert out.startswith("OSError 101"), out  # ENETUNREACH, at once
    assert float(out.split()[-1]) < 1
    route = guest_host.file("/proc/net/route").content_string
    ipv6 = guest_host.file("/proc/net/ipv6_route").content_string
    from fsmatrix.agent.guest import parse_ipv6_route_table, parse_route_table

    assert not [r for r in parse_route_table(route) if r["destination"] == "0.0.0.0"]
    assert not [r for r in parse_ipv6_route_table(ipv6) if r["destination"].endswith("/0") and r["iface"] != "lo"]


def _job_cell(filesystem: str) -> tuple[str, dict[str, Any]]:
    doc = {
        "axes": {
            "filesystem": [filesystem],
            "workload": [{"threen1": {"start": 1, "end": 3000, "workers": 2, "block": 500}}],
        },
        "defaults": {"storage.disk_size": "1G"},
    }
    cell = expand_document(doc, "job").cells[0]
    return cell.id, cell.params


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
@pytest.mark.parametrize("filesystem", ["ext4", pytest.param("jfs", marks=pytest.mark.slow)])
def test_job_mode_runs_the_cell_and_powers_off(
    built: image.ImagePaths, accel: str, tmp_path: Path, filesystem: str
) -> None:
    cell_id, cell = _job_cell(filesystem)
    job = {
        "cell": cell,
        "cell_id": cell_id,
        "repeat": 1,
        "data_serials": ["fsm-data0"],
        "environment": {"backend": "vm", "accel": accel},
    }
    job_img = jobdisk.make_job_disk(tmp_path / "job.img", job)
    data = tmp_path / "data0.img"
    with data.open("wb") as fh:
        fh.truncate(1 << 30)
    name = f"fsmatrix-job-test-{uuid.uuid4().hex[:8]}"
    serial = tmp_path / "serial.log"
    cmd = cmdline.qemu_command(
        cmdline.QemuVm(
            built.qcow2,
            accel=accel,
            name=name,
            serial_log=serial,
            drives=[Disk(job_img, jobdisk.SERIAL, aio="threads"), Disk(data, "fsm-data0", aio="threads")],
        )
    )
    started = time.monotonic()
    vm = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        vm.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop(vm, name, grace=0)
        pytest.fail(f"the guest did not power off within {JOB_TIMEOUT} s; console:\n{_tail(serial)}")
    _stop(vm, name, grace=0)
    print(f"job mode ({filesystem}, {accel}): powered off after {time.monotonic() - started:.0f} s")
    result = jobdisk.read_result(job_img)
    assert result is not None, f"no result.json; console:\n{_tail(serial)}\nlog:\n{jobdisk.read_log(job_img)}"
    assert result["status"] == "passed", f"{result['reason']}\nlog:\n{jobdisk.read_log(job_img)}"
    assert result["verification"]["status"] == "passed"
    assert result["storage"]["readback"]["data"]["filesystem"] == filesystem
    provenance = result["provenance"]
    assert provenance["backend"] == "vm" and provenance["image"]["name"] == built.name
    assert provenance["guest"]["data_disks"] == {"fsm-data0": "/dev/vdc"}
    assert provenance["guest"]["network"] == {"interfaces": [], "default_route": False}
    assert provenance["git"]["sha"] == provenance["image"]["git_sha"]
    assert "result: passed" in (jobdisk.read_log(job_img) or "")
