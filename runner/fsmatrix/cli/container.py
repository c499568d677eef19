"""``fsmatrix container``: build, name and prune the runner's container image."""

from __future__ import annotations

import sys

import click

from fsmatrix import container
from fsmatrix.agent import proc
from fsmatrix.cli._common import echo_err


@click.group("container")
def container_group() -> None:
    """The runner as a container image (fsmatrix:<version>-<inputs hash>), built offline."""


@container_group.command("build")
@click.option("--force", is_flag=True, help="Rebuild even when an image for these inputs exists.")
@click.option("--engine", "tool_name", type=click.Choice(["podman", "docker"]), help="Default: podman, else docker.")
def build_command(force: bool, tool_name: str | None) -> None:
    """Build the image (debootstrap base, wheelhouse, then the Containerfile), or reuse it; print its name."""
    try:
        name = container.build(force=force, echo=echo_err, tool_name=tool_name)
    except proc.CommandError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(name)


@container_group.command("tag")
@click.option("--engine", "tool_name", type=click.Choice(["podman", "docker"]), help="Default: podman, else docker.")
def tag_command(tool_name: str | None) -> None:
    """Print the image name for the current sources; exit status 1 when it is not built yet."""
    tool = container.engine(tool_name)
    name = container.current_name()
    click.echo(name)
    if not container.image_exists(tool, name):
        echo_err("not built yet: run `make container`")
        sys.exit(1)


@container_group.command("prune")
@click.option("--engine", "tool_name", type=click.Choice(["podman", "docker"]), help="Default: podman, else docker.")
def prune_command(tool_name: str | None) -> None:
    """Remove fsmatrix's container images except the current sources' one and its base."""
    tool = container.engine(tool_name)
    package_names = container.packages()
    keep = {
        container.image_name(container.inputs_hash(package_names)),
        container.base_name(container.base_hash(package_names)),
    }
    removed, in_use = container.prune(tool, keep)
    for name in removed:
        click.echo(f"removed {name}")
    for name in in_use:
        echo_err(f"kept {name}: in use")
    if not removed and not in_use:
        echo_err("nothing to remove")
