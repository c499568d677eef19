"""``fsmatrix image``: build, find, list and prune the guest images; probe the accelerator."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from fsmatrix import image_definitions
from fsmatrix.agent import proc
from fsmatrix.backends import image
from fsmatrix.backends.qemu import kernel_boot, snapshot
from fsmatrix.cli._common import echo_err


def _image_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--image", "name", default=image_definitions.DEFAULT, show_default=True, metavar="NAME", help=help
    )


@click.group("image")
def image_group() -> None:
    """The guest images (packer/images/NAME.yaml: Debian + GT.M, PostgreSQL, sysbench, fio, filesystem
    tools, the fsmatrix agent)."""


@image_group.command("build")
@_image_option("The image to build: a definition in packer/images/ (`fsmatrix image list`).")
@click.option("--force", is_flag=True, help="Rebuild even when an image for these inputs exists.")
def build_command(name: str, force: bool) -> None:
    """Build an image (debootstrap base, then Packer), or reuse it; print the qcow2's path."""
    try:  # an unknown name: image.build refuses it first (one line, exit status 2)
        paths = image.build(force=force, echo=echo_err, image=name)
    except proc.CommandError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(str(paths.qcow2))


@image_group.command("path")
@_image_option("The image whose path to print.")
def path_command(name: str) -> None:
    """Print an image's path for the current inputs; exit status 1 when it is not built yet."""
    paths = image.image_paths(image=name)
    click.echo(str(paths.qcow2))
    if not paths.complete():
        echo_err(f"not built yet: run `fsmatrix image build --image {name}`")
        sys.exit(1)


@image_group.command("list")
def list_command() -> None:
    """The images a cell may name (their definitions), then the built ones in the cache, newest
    first; * marks each definition's image for the current sources."""
    current = image.current_images()
    for name, definition in image_definitions.definitions().items():
        state = "built" if current[name].complete() else "not built"
        default = ", the default" if name == image_definitions.DEFAULT else ""
        click.echo(f"{name}: {definition.description} ({current[name].name}: {state}{default})")
    names = {paths.name: name for name, paths in current.items()}
    built = image.built_images()
    if built:
        click.echo("in the cache:")
    for paths in built:
        size = sum(p.stat().st_size for p in paths.files if p.is_file())
        state = "" if paths.complete() else " (incomplete)"
        mark = "*" if paths.name in names else " "
        click.echo(f"{mark} {paths.name}  {image.definition_of(paths) or '?'}  {size / 2**30:.2f} GiB{state}")


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
    """Delete old images from the cache: all but each definition's image for the current sources and
    the --keep newest others; and prepared vm.kernels unused for --kernel-days. Their saved guests go
    with them."""
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
