"""The qemu backend: one guest per run under QEMU (KVM or TCG), data disks attached by serial.

``backend`` runs a cell (``QemuBackend``); ``snapshot`` saves and restores booted guests;
``profiles`` makes the device profiles (QEMU throttling); ``cmdline`` builds QEMU's command line.
"""
