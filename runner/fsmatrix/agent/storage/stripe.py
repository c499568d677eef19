"""Striped layouts over a cell's disks: md RAID 0 (mdadm) and LVM striping (seed 004's ``lvcreate -i 4 -I 64``).

``assemble`` builds the array or logical volume and registers its teardown on the caller's
ExitStack *before* each step that creates something, so an interruption or a later failure (mkfs
on the array, say) still stops the array / removes the volume group and wipes every component.
The names are fsmatrix's own (md array ``fsmatrix-<pid>``, volume group ``fsmatrix<pid>``); an
existing array or volume group of that name is never touched. ``mdadm --detail`` and ``lvs`` are
parsed here and nowhere else.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.agent.storage import devices as _devices

log = logging.getLogger("fsmatrix.storage")

LAYOUTS = ("md-raid0", "lvm-stripe")
# The kernel module each layout needs (md's raid0 personality; device-mapper for LVM).
KERNEL_MODULES = {"md-raid0": "raid0", "lvm-stripe": "dm_mod"}
LV_NAME = "data"
NODE_WAIT_S = 20.0
MIN_STRIPE_BYTES = 4096  # md and LVM both want at least a page
# lvm prints warnings about inherited descriptors (the agent's log file) unless told not to.
LVM_ENV = {"LVM_SUPPRESS_FD_WARNINGS": "1"}


class StripeError(RuntimeError):
    """An array or volume group could not be assembled or torn down; str() says what is left."""


@dataclass
class Stripe:
    """An assembled striped device."""

    layout: str
    device: str  # the path to mkfs / mount / run fio on (/dev/md/..., /dev/<vg>/data)
    kernel_name: str  # "md127", "dm-0": what /proc/diskstats calls it
    components: list[str]
    readback: dict[str, Any]


# --------------------------------------------------------------------------------------------
# names and sizes


def md_name(pid: int | None = None) -> str:
    return f"fsmatrix-{os.getpid() if pid is None else pid}"


def vg_name(pid: int | None = None) -> str:
    # No dash: device-mapper doubles dashes in /dev/mapper names.
    return f"fsmatrix{os.getpid() if pid is None else pid}"


def stripe_bytes(size: int) -> int:
    """Check a stripe (chunk) size in bytes: a power of two of at least 4 KiB."""
    if size < MIN_STRIPE_BYTES or size & (size - 1):
        raise ValueError(f"storage.stripe_size must be a power of two of at least 4K, got {size} bytes")
    return size


# --------------------------------------------------------------------------------------------
# parsers: one per tool

_MD_MEMBER = re.compile(r"^\s*(\d+|-)\s+(\d+)\s+(\d+)\s+(\d+|-)\s+(.*?)\s+(/dev/\S+)\s*$")
_MD_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _md_size(text: str | None) -> int | None:
    match = re.match(r"^(\d+)([KMG])?$", (text or "").strip())
    if not match:
        return None
    return int(match.group(1)) * _MD_SIZE_UNITS.get(match.group(2) or "", 1)


def parse_mdadm_detail(text: str) -> dict[str, Any]:
    """Geometry of an array from ``mdadm --detail <device>``.

    ``Key : value`` lines (the key right-aligned), then the member table
    ``Number Major Minor RaidDevice State ... /dev/x``. Returns level, raid_devices, chunk_size
    (as printed, e.g. "64K") and chunk_size_bytes, array_size_bytes (mdadm counts KiB), metadata
    version, name, uuid, state and members (device paths in RaidDevice order).
    """
    fields: dict[str, str] = {}
    members: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        member = _MD_MEMBER.match(line)
        if member:
            role = int(member.group(4)) if member.group(4).isdigit() else 1 << 30
            members.append((role, member.group(6), member.group(5).strip()))
            continue
        key, sep, value = line.partition(" : ")
        if sep and key.strip():
            fields[key.strip()] = value.strip()
    if "Raid Level" not in fields:
        raise ValueError("mdadm --detail output has no 'Raid Level'")
    array_kib = re.match(r"^(\d+)", fields.get("Array Size", ""))
    raid_devices = fields.get("Raid Devices", "")
    return {
        "level": fields["Raid Level"],
        "raid_devices": int(raid_devices) if raid_devices.isdigit() else None,
        "chunk_size": fields.get("Chunk Size"),
        "chunk_size_bytes": _md_size(fields.get("Chunk Size")),
        "array_size_bytes": int(array_kib.group(1)) * 1024 if array_kib else None,
        "metadata_version": fields.get("Version"),
        "name": fields.get("Name", "").split(" ")[0] or None,
        "uuid": fields.get("UUID"),
        "state": fields.get("State"),
        "members": [path for _, path, _ in sorted(members)],
        "member_states": [state for _, _, state in sorted(members)],
    }


LVS_FIELDS = ("lv_name", "vg_name", "lv_path", "lv_dm_path", "lv_size", "segtype", "stripes", "stripe_size", "devices")


def parse_lvs_json(text: str) -> list[dict[str, Any]]:
    """Segments from ``lvs --reportformat json --units b --nosuffix -o <LVS_FIELDS>``.

    One entry per LV segment: lv_name, vg_name, lv_path, lv_dm_path, segtype, lv_size_bytes,
    stripes, stripe_size_bytes and devices (the physical volumes, without lvs's "(extent)" suffix).
    """
    try:
        report = json.loads(text)
        rows = [row for part in report["report"] for row in part.get("lv", [])]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"lvs output is not an lvs JSON report: {exc!r}") from exc

    def number(value: Any) -> int | None:
        return int(value) if isinstance(value, str) and value.isdigit() else None

    segments = []
    for row in rows:
        segments.append(
            {
                "lv_name": row.get("lv_name"),
                "vg_name": row.get("vg_name"),
                "lv_path": row.get("lv_path") or None,
                "lv_dm_path": row.get("lv_dm_path") or None,
                "segtype": row.get("segtype"),
                "lv_size_bytes": number(row.get("lv_size")),
                "stripes": number(row.get("stripes")),
                "stripe_size_bytes": number(row.get("stripe_size")),
                "devices": [re.sub(r"\(\d+\)$", "", d) for d in str(row.get("devices") or "").split(",") if d],
            }
        )
    return segments


# --------------------------------------------------------------------------------------------
# what the kernel and the tools offer


def _modprobe(module: str) -> None:
    if proc.have("modprobe"):
        proc.run(["modprobe", "-q", module], timeout=60, check=False)


def _md_personalities() -> str | None:
    try:
        return (_devices.PROC_ROOT / "mdstat").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def _device_mapper_loaded() -> bool:
    # /dev/mapper/control may exist (a static node) without the driver behind it: ask the kernel.
    try:
        text = (_devices.PROC_ROOT / "misc").read_text()
    except OSError:
        return False
    return any(line.split()[-1:] == ["device-mapper"] for line in text.splitlines())


def availability(layout: str) -> str | None:
    """None when ``layout`` can be assembled here, else the reason it cannot (kernel or tools missing)."""
    if layout == "md-raid0":
        if not proc.have("mdadm"):
            return "mdadm not found (install mdadm)"
        if "raid0" not in (_md_personalities() or ""):
            _modprobe("raid0")  # pulls in md_mod; the kernel registers the personality on load
        if _md_personalities() is None:
            return f"the running kernel ({os.uname().release}) has no md support (no /proc/mdstat after modprobe raid0)"
        return None
    if layout == "lvm-stripe":
        missing = [
            t
            for t in ("pvcreate", "vgcreate", "lvcreate", "lvs", "lvremove", "vgremove", "pvremove")
            if not proc.have(t)
        ]
        if missing:
            return f"{', '.join(missing)} not found (install lvm2)"
        if not _device_mapper_loaded():
            _modprobe("dm_mod")
        if not _device_mapper_loaded():
            return (
                f"the running kernel ({os.uname().release}) has no device-mapper "
                "(not in /proc/misc after modprobe dm_mod)"
            )
        return None
    raise ValueError(f"not a striped layout: {layout!r}")


def _settle() -> None:
    if proc.have("udevadm"):
        proc.run(["udevadm", "settle", "--timeout=60"], timeout=90, check=False)


def _wait_for_block_device(paths: Sequence[str]) -> str:
    """The first of ``paths`` that is (or becomes, within NODE_WAIT_S) a block device."""
    deadline = time.monotonic() + NODE_WAIT_S
    while True:
        _settle()
        for path in paths:
            try:
                _devices.kernel_name(path)
                return path
            except ValueError:
                continue
        if time.monotonic() > deadline:
            raise StripeError(f"no device node appeared at {' or '.join(paths)} within {NODE_WAIT_S:.0f} s")
        time.sleep(0.5)


def _tool_version(cmd: Sequence[str], env: dict[str, str] | None = None) -> str | None:
    done = proc.run(cmd, timeout=60, check=False, env=env)
    text = (done.stdout + "\n" + done.stderr).strip()
    return text.splitlines()[0].strip() if text else None


# --------------------------------------------------------------------------------------------
# md RAID 0


def _md_holders(component: str) -> list[str]:
    try:
        name = _devices.kernel_name(component)
    except ValueError:
        return []
    return [h for h in _devices.holders(name) if h.startswith("md")]


def _stop_md(device: str, components: Sequence[str]) -> None:
    """Stop the array (and any array udev re-assembled from the components), then wipe them."""
    if os.path.exists(device):
        proc.run(["mdadm", "--stop", device], timeout=120, check=False)
    problems: list[str] = []
    for attempt in range(3):
        _settle()
        # mdadm's udev rules may assemble the components again as soon as the array stops.
        for holder in sorted({h for c in components for h in _md_holders(c)}):
            proc.run(["mdadm", "--stop", f"/dev/{holder}"], timeout=120, check=False)
        problems = []
        for component in components:
            done = proc.run(["mdadm", "--zero-superblock", component], timeout=120, check=False)
            said = (done.stdout + done.stderr).strip()
            # No superblock (--create failed before writing one, or it is already zeroed) is fine.
            if done.returncode != 0 and "Unrecognised md component device" not in said:
                problems.append(f"mdadm --zero-superblock {component}: {said}")
        if not problems:
            break
        time.sleep(0.5 * (attempt + 1))
    for component in components:
        # Only the md signature: a --create that failed (a component busy after all) must not
        # erase what else is on it. A component with an md superblock before we started was refused.
        proc.run(["wipefs", "-a", "-t", "linux_raid_member", component], timeout=120, check=False)
    left = sorted({h for c in components for h in _md_holders(c)})
    if left or problems:
        raise StripeError(
            f"md teardown incomplete: arrays {left or 'none'} still hold the disks; {'; '.join(problems)}"
        )
    log.info("md array %s stopped, superblocks zeroed on %s", device, ", ".join(components))


def read_md(device: str) -> dict[str, Any]:
    """``mdadm --detail`` of ``device``, logged verbatim and parsed."""
    text = proc.output(["mdadm", "--detail", device], timeout=60)
    log.info("mdadm --detail %s:\n%s", device, text.rstrip())
    return parse_mdadm_detail(text)


def _assemble_md(components: list[str], chunk: int, stack: ExitStack) -> Stripe:
    name = md_name()
    device = f"/dev/md/{name}"
    if os.path.lexists(device):
        raise StripeError(f"an md array named {name} already exists ({device}); refusing to touch it")
    command = [
        "mdadm",
        "--create",
        device,
        "--run",  # no "continue creating array?" question
        "--level=0",
        f"--raid-devices={len(components)}",
        f"--chunk={chunk // 1024}K",
        "--metadata=1.2",
        *components,
    ]
    # Registered before creating: an interrupted or failed --create may still have written superblocks.
    stack.callback(_stop_md, device, list(components))
    log.info("md: %s", " ".join(command))
    proc.run(command, timeout=300, input="")
    _settle()
    holders = sorted({h for c in components for h in _md_holders(c)})
    path = _wait_for_block_device([device, *(f"/dev/{h}" for h in holders)])
    detail = read_md(path)
    kernel = _devices.kernel_name(path)
    readback = {
        "layout": "md-raid0",
        "device": path,
        "kernel_name": kernel,
        "components": list(components),
        "requested": {"disks": len(components), "stripe_size_bytes": chunk},
        "command": command,
        "tool_version": _tool_version(["mdadm", "--version"]),
        "level": detail["level"],
        "stripes": detail["raid_devices"],
        "stripe_size_bytes": detail["chunk_size_bytes"],
        "size_bytes": detail["array_size_bytes"],
        "mdadm": detail,
    }
    return Stripe("md-raid0", path, kernel, list(components), readback)


# --------------------------------------------------------------------------------------------
# LVM striping


def _lvm(cmd: Sequence[str], *, check: bool = True, timeout: float = 300) -> Any:
    return proc.run(cmd, timeout=timeout, env={**os.environ, **LVM_ENV}, check=check, input="")


def _volume_groups() -> list[str]:
    done = _lvm(["vgs", "--readonly", "--noheadings", "-o", "vg_name"], check=False, timeout=60)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _remove_vg(vg: str) -> None:
    if vg in _volume_groups():
        _lvm(["lvremove", "-f", "-y", vg], check=False)
        _lvm(["vgremove", "-f", "-y", vg], check=False)
    if vg in _volume_groups():
        raise StripeError(f"volume group {vg} is still there after lvremove/vgremove")
    log.info("volume group %s removed", vg)


def _remove_pvs(components: Sequence[str]) -> None:
    for component in components:
        _lvm(["pvremove", "-ff", "-y", component], check=False)
        # Only the LVM label (see _stop_md): a PV label present before we started was refused.
        proc.run(["wipefs", "-a", "-t", "LVM2_member", component], timeout=120, check=False)


def read_lv(vg: str) -> list[dict[str, Any]]:
    """``lvs`` of the volume group's segments, logged verbatim and parsed."""
    cmd = ["lvs", "--readonly", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", ",".join(LVS_FIELDS), vg]
    text = _lvm(cmd, timeout=60).stdout
    log.info("%s:\n%s", " ".join(cmd), text.rstrip())
    return parse_lvs_json(text)


def _assemble_lvm(components: list[str], stripe: int, stack: ExitStack) -> Stripe:
    vg = vg_name()
    if vg in _volume_groups():
        raise StripeError(f"a volume group named {vg} already exists; refusing to touch it")
    # LIFO: the volume group goes first, then the physical volume labels and signatures.
    stack.callback(_remove_pvs, list(components))
    commands = [
        ["pvcreate", "-y", *components],
        ["vgcreate", "-y", vg, *components],
        [
            "lvcreate",
            "-y",
            "-Wy",  # wipe stale signatures on the new LV without asking
            "-Zy",
            f"--stripes={len(components)}",
            f"--stripesize={stripe // 1024}k",
            "-l",
            "100%FREE",
            "-n",
            LV_NAME,
            vg,
        ],
    ]
    for command in commands:
        if command[0] == "vgcreate":
            stack.callback(_remove_vg, vg)
        log.info("lvm: %s", " ".join(command))
        _lvm(command)
    segments = read_lv(vg)
    if len(segments) != 1:
        raise StripeError(f"expected one segment in {vg}/{LV_NAME}, lvs shows {len(segments)}")
    segment = segments[0]
    candidates = [p for p in (segment["lv_path"], segment["lv_dm_path"]) if p] or [f"/dev/{vg}/{LV_NAME}"]
    path = _wait_for_block_device(candidates)
    kernel = _devices.kernel_name(path)
    readback = {
        "layout": "lvm-stripe",
        "device": path,
        "kernel_name": kernel,
        "components": list(components),
        "requested": {"disks": len(components), "stripe_size_bytes": stripe},
        "command": commands[-1],
        "commands": commands,
        "tool_version": _tool_version(["lvm", "version"], env={**os.environ, **LVM_ENV}),
        "segtype": segment["segtype"],
        "stripes": segment["stripes"],
        "stripe_size_bytes": segment["stripe_size_bytes"],
        "size_bytes": segment["lv_size_bytes"],
        "lvs": segment,
    }
    return Stripe("lvm-stripe", path, kernel, list(components), readback)


def assemble(layout: str, components: Sequence[str], stripe_size: int, stack: ExitStack) -> Stripe:
    """Build ``layout`` over ``components`` (already checked safe by the caller); teardown goes on ``stack``."""
    chunk = stripe_bytes(stripe_size)
    if len(components) < 2:
        raise ValueError(f"{layout} needs at least 2 disks, got {len(components)}")
    if layout == "md-raid0":
        return _assemble_md(list(components), chunk, stack)
    if layout == "lvm-stripe":
        return _assemble_lvm(list(components), chunk, stack)
    raise ValueError(f"not a striped layout: {layout!r}")
