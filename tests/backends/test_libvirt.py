"""The libvirt backend without a boot: its domain XML (validated by libvirt's own schema), and
fsmatrix's libvirt daemons (started in their network namespace and stopped again). Real runs
through libvirt: tests/vm/test_libvirt_vm.py.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fsmatrix.agent import proc
from fsmatrix.backends import libvirtd
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.libvirt import QEMU_LOG_DIR, Domain, check_buses, domain_name, domain_xml, iotune
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell, expand_document


def _cell(defaults: dict[str, object] | None = None, end: int = 100000) -> MatrixCell:
    doc = {
        "axes": {"filesystem": ["ext4"], "workload": [{"threen1": {"start": 1, "end": end, "workers": 2}}]},
        "defaults": {"storage.disk_size": "2G", **(defaults or {})},
    }
    return expand_document(doc, "t").cells[0]


def _links() -> set[str]:
    """The host's network interfaces (names), as `ip -o link` lists them."""
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def _qemus_on(workdir: Path) -> list[int]:
    """QEMU processes whose command line names a file under ``workdir``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "qemu-system" in cmdline.split("\0")[0] and str(workdir) in cmdline:
            found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for PID 1 to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _domains(prefix: str) -> list[str]:
    """Domains (running or defined) whose name starts with ``prefix``, as `virsh list --all` shows them."""
    out = subprocess.run(
        ["virsh", "-c", libvirtd.URI, "list", "--all", "--name"], capture_output=True, text=True, check=True
    ).stdout
    return [name for name in out.split() if name.startswith(prefix)]


# --------------------------------------------------------------------------------------------
# the domain XML, without libvirt running


def _xml(tmp_path: Path, accel: str = "tcg") -> ET.Element:
    disks = [
        Disk(tmp_path / "job.img", "fsm-job", aio="io_uring", iothread=False),
        Disk(tmp_path / "data0.img", "fsm-data0", throttle={"iops-total": 500, "bps-read": 1 << 20}),
        Disk(tmp_path / "data1.img", "fsm-data1", cache="writeback", aio="threads", iothread=False),
        Disk(tmp_path / "data2.img", "fsm-data2", bus="virtio-scsi", logical_block_size=4096, physical_block_size=4096),
    ]
    text = domain_xml(
        Domain(
            name="fsmatrix-x-r1-42",
            accel=accel,
            cpus=3,
            memory_mib=512,
            overlay=tmp_path / "root.qcow2",
            disks=disks,
            console=tmp_path / "console.log",
        )
    )
    (tmp_path / "domain.xml").write_text(text)
    return ET.fromstring(text)


def test_domain_xml_disks_serials_iotune_and_no_network(tmp_path: Path) -> None:
    dom = _xml(tmp_path)
    assert dom.get("type") == "qemu"  # TCG
    assert dom.findtext("name") == "fsmatrix-x-r1-42"
    assert dom.findtext("vcpu") == "3" and dom.find("memory") is not None
    assert dom.findtext("memory") == "512" and dom.find("memory").get("unit") == "MiB"  # type: ignore[union-attr]
    assert dom.find("cpu").get("mode") == "maximum"  # type: ignore[union-attr]
    assert dom.find("features/acpi") is not None
    assert dom.findtext("on_poweroff") == "destroy" and dom.findtext("on_reboot") == "destroy"
    assert dom.findtext("devices/emulator") == "/usr/bin/qemu-system-x86_64"
    # No NIC of any kind.
    assert dom.find("devices/interface") is None
    # The console goes to the run's file, where the shared code reads its tail.
    serial = dom.find("devices/serial")
    assert serial is not None and serial.get("type") == "file"
    assert serial.find("source").get("path") == str(tmp_path / "console.log")  # type: ignore[union-attr]

    disks = dom.findall("devices/disk")
    root, job, data0, data1, data2 = disks
    assert root.find("source").get("file") == str(tmp_path / "root.qcow2")  # type: ignore[union-attr]
    assert root.find("driver").get("type") == "qcow2" and root.find("boot").get("order") == "1"  # type: ignore[union-attr]
    assert [d.find("boot") for d in disks[1:]] == [None] * 4  # only the root disk boots
    assert [d.findtext("serial") for d in disks] == [None, "fsm-job", "fsm-data0", "fsm-data1", "fsm-data2"]
    targets = [(d.find("target").get("dev"), d.find("target").get("bus")) for d in disks]  # type: ignore[union-attr]
    assert targets == [("vda", "virtio"), ("vdb", "virtio"), ("vdc", "virtio"), ("vdd", "virtio"), ("sda", "scsi")]
    drivers = [d.find("driver").attrib for d in disks[1:]]  # type: ignore[union-attr]
    assert drivers[0] == {"name": "qemu", "type": "raw", "cache": "none", "io": "io_uring"}
    assert drivers[1] == {"name": "qemu", "type": "raw", "cache": "none", "io": "io_uring", "iothread": "1"}
    assert drivers[2]["cache"] == "writeback" and drivers[2]["io"] == "threads" and "iothread" not in drivers[2]
    # virtio-scsi: the disk's own controller holds its iothread.
    assert "iothread" not in drivers[3]
    controller = dom.find("devices/controller[@type='scsi']")
    assert controller is not None and controller.get("model") == "virtio-scsi"
    assert controller.find("driver").get("iothread") == "2"  # type: ignore[union-attr]
    assert dom.findtext("iothreads") == "2"
    assert data2.find("blockio").attrib == {"logical_block_size": "4096", "physical_block_size": "4096"}  # type: ignore[union-attr]
    assert data1.find("blockio").attrib == {"logical_block_size": "512", "physical_block_size": "512"}  # type: ignore[union-attr]
    tune = data0.find("iotune")
    assert tune is not None and {e.tag: e.text for e in tune} == {"total_iops_sec": "500", "read_bytes_sec": "1048576"}
    assert job.find("iotune") is None and data1.find("iotune") is None


def test_domain_xml_is_valid_for_libvirt(tmp_path: Path) -> None:
    # libvirt's own RelaxNG schema (libvirt-clients), so a typo in an element or attribute fails here.
    _xml(tmp_path)
    done = subprocess.run(
        ["virt-xml-validate", str(tmp_path / "domain.xml"), "domain"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_domain_xml_kvm_and_names(tmp_path: Path) -> None:
    dom = _xml(tmp_path, accel="kvm")
    assert dom.get("type") == "kvm" and dom.find("cpu").get("mode") == "host-passthrough"  # type: ignore[union-attr]
    cell = _cell()
    assert domain_name(cell, 3, pid=1234) == f"fsmatrix-{cell.id}-r3-1234"
    long = _cell({"mount_options": "noatime," * 60})
    assert len(domain_name(long, 1, pid=99)) <= 200 and domain_name(long, 1, pid=99).endswith("-r1-99")


def test_unknown_throttling_and_bus_are_refused(tmp_path: Path) -> None:
    assert iotune({"iops-total-max-length": 5}) == {"total_iops_sec_max_length": 5}
    with pytest.raises(UserError, match="throttling iops-bogus"):
        iotune({"iops-bogus": 1})
    with pytest.raises(UserError, match="no disk bus 'ide'"):
        domain_xml(
            Domain(
                name="n",
                accel="tcg",
                cpus=1,
                memory_mib=256,
                overlay=tmp_path / "r",
                disks=[Disk(tmp_path / "d", "s", bus="ide")],
                console=tmp_path / "c",
            )
        )


def test_buses_libvirt_lacks_are_refused_before_running() -> None:
    # libvirt 9.0's domain capabilities list no nvme disk bus.
    buses = {"ide", "fdc", "scsi", "virtio", "usb", "sata"}
    check_buses([_cell(), _cell({"device.bus": "virtio-scsi"})], buses, "9.0.0")
    nvme = _cell({"device.bus": "nvme"})
    with pytest.raises(UserError, match=f"libvirt 9.0.0 cannot attach nvme disks .*cells {nvme.id} use"):
        check_buses([_cell(), nvme], buses, "9.0.0")
    check_buses([nvme], buses | {"nvme"}, "11.0.0")


# --------------------------------------------------------------------------------------------
# fsmatrix's libvirt daemons


def test_missing_libvirtd_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "have", lambda tool: tool != "libvirtd")
    with pytest.raises(UserError, match="libvirtd not found.*apt-get install libvirt-daemon-system"):
        libvirtd._check_installed()


def test_daemons_start_in_their_namespace_and_stop() -> None:
    if libvirtd.reachable():
        pytest.skip("a libvirtd already answers: running() would use it and start nothing")
    links = _links()
    with libvirtd.running() as daemons:
        assert daemons.started and daemons.netns == libvirtd.NETNS and daemons.uri == "qemu:///system"
        state = libvirtd.status()
        assert state["reachable"] and state["managed_by_fsmatrix"] and state["netns_exists"]
        pids = state["daemons"]
        assert all(pids.values()), pids
        # Each daemon runs in fsmatrix's network namespace, not the host's.
        host_ns = os.readlink("/proc/self/ns/net")
        assert all(os.readlink(f"/proc/{pid}/ns/net") != host_ns for pid in pids.values())
        # A second user joins the running daemons and does not own them.
        again = libvirtd.start()
        assert again.netns == libvirtd.NETNS and not again.started
        assert _links() == links
    state = libvirtd.status()
    assert not state["reachable"] and not any(state["daemons"].values()) and not state["netns_exists"]
    assert not any(_running(pid) for pid in pids.values())
    assert _links() == links


def test_libvirt_starts_the_domain_as_written(workdir: Path) -> None:
    # A real QEMU under libvirt, on blank disks (SeaBIOS finds nothing to boot, which is enough):
    # libvirt accepts the XML and applies what fsmatrix asked for, throttling included.
    libvirt = libvirtd.libvirt_module()
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(workdir / "root.qcow2"), "64M"], check=True)
    disks = [
        Disk(workdir / "data0.img", "fsm-data0", throttle={"iops-total": 500, "bps-total": 10_000_000}),
        Disk(workdir / "data1.img", "fsm-data1", bus="virtio-scsi", physical_block_size=4096),
    ]
    for disk in disks:
        disk.path.write_bytes(b"")
        os.truncate(disk.path, 64 << 20)
    name = f"fsmatrix-xmltest-{os.getpid()}"
    text = domain_xml(
        Domain(
            name=name,
            accel="tcg",
            cpus=1,
            memory_mib=256,
            overlay=workdir / "root.qcow2",
            disks=disks,
            console=workdir / "console.log",
        )
    )
    with libvirtd.running() as daemons:
        conn = libvirt.open(daemons.uri)
        try:
            dom = conn.createXML(text, 0)
            try:
                live = ET.fromstring(dom.XMLDesc(0))
                assert dom.blockIoTune("vdb", 0)["total_iops_sec"] == 500
                assert dom.blockIoTune("vdb", 0)["total_bytes_sec"] == 10_000_000
                assert live.find("devices/interface") is None
                assert [d.findtext("serial") for d in live.findall("devices/disk")] == [None, "fsm-data0", "fsm-data1"]
                assert (workdir / "console.log").exists()
            finally:
                dom.destroy()
                (QEMU_LOG_DIR / f"{name}.log").unlink(missing_ok=True)
            assert not _domains(name)  # transient: gone once destroyed
        finally:
            conn.close()
    assert not _qemus_on(workdir)
