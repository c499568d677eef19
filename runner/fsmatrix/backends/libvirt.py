"""The libvirt backend (placeholder until it is written): same runs as the qemu backend, through libvirt."""

from __future__ import annotations

from fsmatrix.backends.qemu import QemuBackend


class LibvirtBackend(QemuBackend):
    name = "libvirt"
