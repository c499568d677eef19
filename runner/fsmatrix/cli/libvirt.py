"""``fsmatrix libvirt``: start, stop and show the libvirt daemons fsmatrix uses."""

from __future__ import annotations

import json
import os

import click

from fsmatrix.backends import libvirtd


@click.group("libvirt")
def libvirt_group() -> None:
    """The libvirt daemons the libvirt backend (and Vagrant's libvirt provider) use."""


@libvirt_group.command("start")
def start_command() -> None:
    """Start fsmatrix's libvirt daemons (in network namespace "fsmatrix") unless a libvirtd answers
    already; they stay until `fsmatrix libvirt stop`. Prints the URI to use (LIBVIRT_DEFAULT_URI)."""
    daemons = libvirtd.start()
    if daemons.netns is not None:
        (libvirtd.STATE_DIR / "keep").touch()
        how = "started" if daemons.started else "already running"
        click.echo(f"fsmatrix's libvirtd {how} in network namespace {daemons.netns}", err=True)
    else:
        click.echo("a system libvirtd answers: using it, nothing started", err=True)
    click.echo(daemons.uri)


@libvirt_group.command("stop")
def stop_command() -> None:
    """Stop the libvirt daemons fsmatrix started (a system libvirtd is left alone)."""
    users = [pid for pid in libvirtd.live_leases() if pid != os.getpid()] if libvirtd.STATE_DIR.exists() else []
    if users:
        click.echo(f"warning: fsmatrix processes still use them: {users}", err=True)
    if not libvirtd.our_pids():
        click.echo("no libvirt daemon of fsmatrix's runs", err=True)
    libvirtd.stop()


@libvirt_group.command("status")
def status_command() -> None:
    """Print what runs, as JSON."""
    click.echo(json.dumps(libvirtd.status(), indent=1))
