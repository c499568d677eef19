"""The qemu backend: one guest per run under QEMU (KVM or TCG), data disks attached by serial.

``backend`` runs a cell (``QemuBackend``), composing one module per concern: ``guest_boot`` (the image
and vm.kernel a run boots), ``run_disks``, ``launch`` (a VM made ready, its command line),
``restore`` (a guest restored from a saved one), ``process`` (the QEMU process), ``crash_run`` (the
crash mode's host side) and ``run_results`` (the result documents). ``snapshot`` saves and restores
booted guests; ``profiles`` makes the device profiles (QEMU throttling); ``cmdline`` builds QEMU's
command line.
"""
