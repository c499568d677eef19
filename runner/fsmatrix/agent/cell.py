"""A cell: frozen, typed data, parsed once (``fsmatrix.agent.parsing.parse_cell``).

The matrix layer parses a ``Cell`` when it expands a matrix file, and the guest when it reads its
job; nothing after that re-applies a default. ``to_dict`` gives back the complete JSON form (every
default filled) that cell ids hash and result documents store.

Pure data: a cell carries the declarations its names stand for (``declaration``: its workload's,
``fs``: its filesystem's), bound by the parser, which sits above the registries; this module imports
none of them (the workload contract only for a type hint), so nothing it imports imports it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from fsmatrix.agent import declare
from fsmatrix.agent.crash.settings import CrashSettings
from fsmatrix.agent.declare import Invalid, setting
from fsmatrix.agent.storage.filesystems import FILESYSTEMS, Filesystem
from fsmatrix.agent.storage.settings import Storage, required_devices

if TYPE_CHECKING:
    from fsmatrix.agent.contract import Workload

T = TypeVar("T")

# What a data disk behaves like (VM backends): QEMU block throttling per disk; see backends/qemu/profiles.py.
NATIVE = "native"
DEVICE_PROFILES = (NATIVE, "ssd", "hdd")
DEFAULT_BUS = "virtio-blk"
DEVICE_BUSES = (DEFAULT_BUS, "virtio-scsi", "nvme")
# The guest image a cell runs on when it names none: the one every cell ran on before images were
# a setting. Left out of the cell's JSON form (and so of its id) when it is this one.
DEFAULT_IMAGE = "debian12"
CELL_KEYS = (
    "filesystem",
    "mkfs_options",
    "mount_options",
    "image",
    "storage",
    "device",
    "vm",
    "workload",
    "timeout",
    "crash",
)


@dataclass(frozen=True)
class Device:
    """How the VM backends attach each data disk (the host backend runs only the 'native' profile)."""

    profile: str = setting(NATIVE, choices=DEVICE_PROFILES, help="QEMU throttling like an SSD / HDD (VM backends)")
    bus: str = setting(DEFAULT_BUS, choices=DEVICE_BUSES, help="how the VM attaches each data disk")
    cache: str = setting(
        "none", choices=("none", "writeback", "writethrough", "directsync", "unsafe"), help="QEMU cache mode"
    )
    aio: str = setting("io_uring", choices=("io_uring", "native", "threads"), help="QEMU aio")
    iothread: bool = setting(True, help="an iothread per data disk")
    logical_block_size: int = setting(512, choices=(512, 4096), help="as the guest sees the disk")
    physical_block_size: int = setting(512, choices=(512, 4096), help="as the guest sees the disk")

    def __post_init__(self) -> None:
        if self.physical_block_size < self.logical_block_size:
            raise Invalid(
                "device.physical_block_size",
                f"device.physical_block_size {self.physical_block_size} is below logical_block_size "
                f"{self.logical_block_size}; the physical block size must be >= the logical one",
            )


@dataclass(frozen=True)
class Vm:
    """The guest's size under the VM backends (the host backend ignores it)."""

    cpus: int = setting(2, minimum=1, maximum=256, help="guest CPUs")
    memory: str = setting("2G", size=True, help="guest memory")
    # Your own kernel (qemu backend; docs/backends.md): a path on the host, as written (relative to
    # where `fsmatrix run` runs). Absent from the cell's JSON form while unset: other ids stay.
    kernel: str = setting(
        "",
        omit_default=True,
        help="boot this kernel instead of the image's: a Debian linux-image-*.deb or a bzImage (qemu backend)",
    )
    modules: str = setting(
        "", omit_default=True, help="a bzImage's modules: a directory or tarball holding lib/modules/RELEASE"
    )

    def __post_init__(self) -> None:
        if self.modules and not self.kernel:
            raise Invalid("vm.modules", "vm.modules are a vm.kernel bzImage's modules: set vm.kernel too")

    @property
    def memory_mib(self) -> int:
        return declare.parse_size(self.memory) >> 20


@dataclass(frozen=True)
class Options:
    """The cell's top-level scalar settings."""

    filesystem: str = setting(choices=FILESYSTEMS, help="the filesystem under test")
    mkfs_options: str = setting("", help="added to the filesystem's mkfs defaults")
    mount_options: str = setting("", help="added to the filesystem's mount defaults")
    timeout: int = setting(3600, minimum=1, help="seconds one run may take")
    # The names a matrix may give are the definitions in packer/images/ (the matrix schema lists them).
    image: str = setting(DEFAULT_IMAGE, help="the guest image (VM backends): packer/images/NAME.yaml")


BLOCKS: dict[str, type] = {"storage": Storage, "device": Device, "vm": Vm}
# ``timeout: auto``: derived from the cell's history on this host (matrix/README.md); any other
# value is the Options.timeout integer.
TIMEOUT_AUTO = "auto"


@dataclass(frozen=True)
class Cell:
    """One combination of settings, complete and checked."""

    filesystem: str
    workload: str  # the registry name of the workload
    params: Any  # an instance of the workload's ``params`` dataclass
    # The declarations the names stand for, bound when the cell is parsed (fsmatrix.agent.parsing):
    # the cell carries them, so it needs no registry (which sits above it).
    declaration: Workload[Any, Cell] = field(compare=False, repr=False)
    fs: Filesystem = field(compare=False, repr=False)
    mkfs_options: str = ""
    mount_options: str = ""
    image: str = DEFAULT_IMAGE  # the guest image (VM backends); the host backend skips any other
    storage: Storage = field(default_factory=Storage)
    device: Device = field(default_factory=Device)
    vm: Vm = field(default_factory=Vm)
    timeout: int = 3600
    settings: Mapping[str, Any] = field(default_factory=dict)  # block name -> its settings instance
    # Crash the run on purpose and recover (fsmatrix.agent.crash); None, the default, never crashes.
    crash: CrashSettings | None = None
    # ``timeout: auto``: the limit comes from the cell's stored runs (the host side sets ``timeout``
    # before the run, results/verdict/estimate.py); the cell's JSON form (and so its id) says "auto".
    timeout_auto: bool = False
    timeout_source: str | None = None  # why ``timeout`` is what it is (the result's timeout_source)

    def typed_params(self, cls: type[T]) -> T:
        """``params`` as the workload's own dataclass (a TypeError if the cell is for another)."""
        if not isinstance(self.params, cls):
            raise TypeError(f"cell for workload {self.workload} has no {cls.__name__} parameters")
        return self.params

    def settings_of(self, cls: type[T]) -> T:
        """The settings block of type ``cls`` this cell carries."""
        for value in self.settings.values():
            if isinstance(value, cls):
                return value
        raise TypeError(f"cell for workload {self.workload} has no {cls.__name__} settings")

    @property
    def required_devices(self) -> int:
        return required_devices(self.filesystem, self.storage)

    def to_dict(self) -> dict[str, Any]:
        """The complete JSON form: what cell ids hash and result documents store as ``params``."""
        doc: dict[str, Any] = {
            "filesystem": self.filesystem,
            "mkfs_options": self.mkfs_options,
            "mount_options": self.mount_options,
            "storage": declare.to_dict(self.storage),
            "device": declare.to_dict(self.device),
            "vm": declare.to_dict(self.vm),
        }
        for name, value in self.settings.items():
            doc[name] = declare.to_dict(value)
        doc["workload"] = {self.workload: declare.to_dict(self.params)}
        doc["timeout"] = TIMEOUT_AUTO if self.timeout_auto else self.timeout
        if self.crash is not None:  # absent, not null: a cell without a crash keeps its id
            doc["crash"] = declare.to_dict(self.crash)
        if self.image != DEFAULT_IMAGE:  # absent when the default: a cell that names no image keeps its id
            doc["image"] = self.image
        return doc


LVM_EXTENT_BYTES = 4 << 20  # vgcreate's default physical extent size
