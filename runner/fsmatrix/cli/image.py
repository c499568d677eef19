"""``fsmatrix image``: build, find, list and prune the guest image; probe the accelerator."""

from __future__ import annotations

import sys

import click

from fsmatrix.agent import proc
from fsmatrix.backends import image
from fsmatrix.backends.qemu import kernel_boot, snapshot
from fsmatrix.cli._common import echo_err
from fsmatrix.errors import UserError


@click.group("image")
def image_group() -> None:
    """The guest image (Debian 12 + GT.M, sysbench, fio, filesystem tools, the fsmatrix agent)."""


@image_group.command("build")
@click.option("--force", is_flag=True, help="Rebuild even when an image for these inputs exists.")
def build_command(force: bool) -> None:
    """Build the image (debootstrap base, then Packer), or reuse it; print the qcow2's path."""
    try:
        paths = image.build(force=force, echo=echo_err)
    except (proc.CommandError, UserError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(str(paths.qcow2))


@image_group.command("path")
def path_command() -> None:
    """Print the image path for the current inputs; exit status 1 when it is not built yet."""
    paths = image.image_paths()
    click.echo(str(paths.qcow2))
    if not paths.complete():
        echo_err("not built yet: run `make image`")
        sys.exit(1)


@image_group.command("list")
def list_command() -> None:
    """List the images in the cache, newest first; * marks the current sources' image."""
    current = image.image_paths().name
    for paths in image.built_images():
        size = sum(p.stat().st_size for p in paths.files if p.is_file())
        state = "" if paths.complete() else " (incomplete)"
        mark = "*" if paths.name == current else " "
        click.echo(f"{mark} {paths.name}  {size / 2**30:.2f} GiB{state}")


@image_group.command("prune")
@click.option("--keep", type=click.IntRange(0), default=1, show_default=True, help="Older images to keep.")
@click.option(
    "--kernel-days",
    type=click.FloatRange(0),
    default=14,
    show_default=True,
    help="Delete the vm.kernels prepared for direct boot that no run used for this many days.",
)
def prune_command(keep: int, kernel_days: float) -> None:
    """Delete old images from the cache: all but the current sources' one and the --keep newest
    others; and prepared vm.kernels unused for --kernel-days. Their saved guests go with them."""
    deleted = image.prune(keep)
    for paths in deleted:
        click.echo(f"deleted {paths.name}")
    kernels = kernel_boot.prune(image.cache_root(), kernel_days)
    for directory in kernels:
        click.echo(f"deleted the prepared vm.kernel {directory} (unused for {kernel_days:g} days)")
    templates = snapshot.prune_orphans(image.cache_root())
    for directory in templates:
        click.echo(f"deleted the saved guest {directory} (its image or vm.kernel is gone)")
    if not deleted and not templates and not kernels:
        echo_err("nothing to delete")


@image_group.command("probe-accel")
@click.option("--refresh", is_flag=True, help="Probe again instead of using this boot's cached answer.")
def probe_command(refresh: bool) -> None:
    """Print kvm when a KVM guest really runs here, else tcg (boots a tiny guest with a timeout)."""
    kernel = image.newest_base_kernel()
    if kernel is None:
        raise click.ClickException("no guest kernel to probe with yet: run `make image` first")
    click.echo(image.probe_accel(kernel, refresh=refresh))
