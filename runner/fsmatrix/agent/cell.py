"""A cell, parsed once: frozen, typed dataclasses built from the registries' declarations.

The matrix layer builds a ``Cell`` when it expands a matrix file, and the guest when it reads its
job; nothing after that re-applies a default. ``to_dict`` gives back the complete JSON form (every
default filled) that cell ids hash and result documents store.

Rules that span several settings (tmpfs has no device to split, raw has no filesystem, a layout a
workload does not support) are checked here too, from the fields of ``Filesystem`` and
``Workload``, and raise ``declare.Invalid`` naming the setting at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fsmatrix.agent import crash as crashes
from fsmatrix.agent import declare
from fsmatrix.agent import options as option_rules
from fsmatrix.agent.contract import Workload
from fsmatrix.agent.declare import Invalid, setting
from fsmatrix.agent.storage import filesystems, stripe
from fsmatrix.agent.storage.settings import SINGLE, SPLIT_JOURNAL, Storage, required_devices
from fsmatrix.agent.workloads import WORKLOADS, all_workloads, get, settings_blocks

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

    filesystem: str = setting(choices=filesystems.FILESYSTEMS, help="the filesystem under test")
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
    mkfs_options: str = ""
    mount_options: str = ""
    image: str = DEFAULT_IMAGE  # the guest image (VM backends); the host backend skips any other
    storage: Storage = field(default_factory=Storage)
    device: Device = field(default_factory=Device)
    vm: Vm = field(default_factory=Vm)
    timeout: int = 3600
    settings: Mapping[str, Any] = field(default_factory=dict)  # block name -> its settings instance
    # Crash the run on purpose and recover (fsmatrix.agent.crash); None, the default, never crashes.
    crash: crashes.Settings | None = None
    # ``timeout: auto``: the limit comes from the cell's stored runs (the host side sets ``timeout``
    # before the run, results/verdict/estimate.py); the cell's JSON form (and so its id) says "auto".
    timeout_auto: bool = False
    timeout_source: str | None = None  # why ``timeout`` is what it is (the result's timeout_source)

    @property
    def declaration(self) -> Workload[Any]:
        return get(self.workload)

    @property
    def fs(self) -> filesystems.Filesystem:
        return filesystems.get(self.filesystem)

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

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Cell:
        """Parse a cell's JSON form (defaults filled here); Invalid names the setting at fault."""
        unknown = sorted(set(doc) - set(CELL_KEYS) - set(settings_blocks()))
        if unknown:
            raise Invalid(unknown[0], f"unknown setting(s) {', '.join(unknown)}")
        scalars = {k: doc[k] for k in ("filesystem", "mkfs_options", "mount_options", "timeout", "image") if k in doc}
        auto = scalars.get("timeout") == TIMEOUT_AUTO
        if auto:
            del scalars["timeout"]  # the default until the host side derives the limit
        options = declare.parse(Options, scalars, "cell")
        workload_doc = doc.get("workload")
        if not isinstance(workload_doc, Mapping) or len(workload_doc) != 1:
            raise Invalid("workload", f"workload must name exactly one of {', '.join(WORKLOADS)}, got {workload_doc!r}")
        ((name, values),) = workload_doc.items()
        if name not in WORKLOADS:
            raise Invalid("workload", f"workload: unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
        workload = get(name)
        cell = cls(
            filesystem=options.filesystem,
            workload=name,
            params=workload.parse_params(values),
            mkfs_options=options.mkfs_options,
            mount_options=options.mount_options,
            image=options.image,
            storage=declare.parse(Storage, doc.get("storage"), "storage"),
            device=declare.parse(Device, doc.get("device"), "device"),
            vm=declare.parse(Vm, doc.get("vm"), "vm"),
            timeout=options.timeout,
            timeout_auto=auto,
            # A block the workload does not own means nothing to it and is dropped (GT.M settings
            # in a matrix that also runs fio); one it owns is filled with its defaults.
            settings={b.name: declare.parse(b.settings, doc.get(b.name), b.name) for b in workload.settings},
            crash=None if doc.get("crash") is None else declare.parse(crashes.Settings, doc["crash"], "crash"),
        )
        cell.check()
        return cell

    @classmethod
    def standalone(cls, workload: str, params: Mapping[str, Any], **blocks: Mapping[str, Any] | None) -> Cell:
        """A cell for running a workload outside a matrix (``fsmatrix workload NAME``, tests)."""
        doc: dict[str, Any] = {"filesystem": filesystems.FILESYSTEMS[0], "workload": {workload: dict(params)}}
        doc.update({k: v for k, v in blocks.items() if v is not None})
        return cls.from_dict(doc)

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

    def check(self) -> None:
        """Contradictions between settings that no single field can express."""
        fs, workload, layout = self.fs, self.declaration, self.storage.layout
        if not fs.mounts:
            if workload.needs_filesystem:
                runs_raw = ", ".join(w.name for w in all_workloads() if not w.needs_filesystem) or "none"
                raise Invalid(
                    "filesystem",
                    f"filesystem {fs.name!r} runs {runs_raw} on the block device itself; "
                    f"{workload.name} needs a filesystem",
                )
            for key in ("mkfs_options", "mount_options"):
                if getattr(self, key):
                    raise Invalid(key, f"{key}: filesystem {fs.name!r} has no filesystem; remove them")
            if layout == SPLIT_JOURNAL:
                raise Invalid("storage.layout", f"storage.layout 'split-journal' needs a filesystem, not {fs.name!r}")
        elif not fs.mkfs and self.mkfs_options:
            raise Invalid("mkfs_options", f"mkfs_options: {fs.name} has no mkfs; remove them")
        # Options only: a path or a positional argument here would reach mkfs / mount past every device check.
        if fs.mkfs:
            try:
                option_rules.check_mkfs_options(fs.mkfs[0], fs.mkfs_getopt, self.mkfs_options)
            except ValueError as exc:
                message = f"mkfs_options {self.mkfs_options!r}: {exc}; allowed: {option_rules.MKFS_ALLOWED}"
                raise Invalid("mkfs_options", message) from exc
        for key, text in (
            ("mount_options", self.mount_options),
            ("storage.journal_mount_options", self.storage.journal_mount_options),
        ):
            try:
                option_rules.check_mount_options(text)
            except ValueError as exc:
                raise Invalid(key, f"{key} {text!r}: {exc}; allowed: {option_rules.MOUNT_ALLOWED}") from exc
        self._check_sizes()
        if not fs.device:
            if layout != SINGLE:
                message = f"storage.layout: {fs.name} has no device to split; use layout 'single'"
                raise Invalid("storage.layout", message)
            if self.device.profile != NATIVE:
                raise Invalid("device.profile", f"device.profile: {fs.name} has no device to shape; use 'native'")
        if layout == SPLIT_JOURNAL and workload.journal is None:
            with_journal = ", ".join(w.name for w in all_workloads() if w.journal) or "none"
            raise Invalid(
                "storage.layout",
                f"storage.layout 'split-journal' puts a database journal on its own device: "
                f"{workload.name} has none (workloads with one: {with_journal})",
            )
        if self.crash is not None:
            self._check_crash(self.crash)

    def _check_crash(self, crash: crashes.Settings) -> None:
        workload = self.declaration
        if workload.recover is None:
            recoverable = ", ".join(w.name for w in all_workloads() if w.recover) or "none"
            raise Invalid(
                "crash",
                f"crash: {workload.name} cannot recover from a crash yet (workloads that can: {recoverable}); "
                "remove the crash setting",
            )
        mode = crashes.get(crash.mode)
        refused = mode.refuses(self) if mode.refuses is not None else None
        if refused is not None:
            raise Invalid(*refused)

    def _check_sizes(self) -> None:
        """Sizes the kernel or the tools would refuse mid-run, refused up front instead."""
        size = declare.parse_size(self.storage.disk_size)
        if size <= 0:
            raise Invalid("storage.disk_size", f"storage.disk_size {self.storage.disk_size!r}: must be more than 0")
        striped = self.storage.striped
        data_bytes = size * self.storage.stripe_disks if striped else size
        for role, name, available in (
            ("data", self.filesystem, data_bytes),
            ("journal", self.storage.journal_on_own_filesystem, size),
        ):
            least = filesystems.get(name).min_device_bytes if name else 0
            if least and available < least:
                raise Invalid(
                    "storage.disk_size",
                    f"storage.disk_size {self.storage.disk_size!r}: mkfs of {name} ({role}) needs at least "
                    f"{least >> 20} MiB",
                )
        if not striped:
            return
        chunk = declare.parse_size(self.storage.stripe_size)
        try:
            stripe.stripe_bytes(chunk)
        except ValueError as exc:
            raise Invalid("storage.stripe_size", f"{exc} (md and LVM refuse anything else)") from exc
        if chunk > size:
            raise Invalid(
                "storage.stripe_size", f"storage.stripe_size {self.storage.stripe_size!r} exceeds storage.disk_size"
            )
        if self.storage.layout == "lvm-stripe" and chunk > LVM_EXTENT_BYTES:
            raise Invalid(
                "storage.stripe_size",
                f"storage.stripe_size {self.storage.stripe_size!r}: LVM stripes at most one extent "
                f"({LVM_EXTENT_BYTES >> 20} MiB; lvcreate would quietly use that instead)",
            )


LVM_EXTENT_BYTES = 4 << 20  # vgcreate's default physical extent size
