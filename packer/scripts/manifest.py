"""Write the image manifest (/etc/fsmatrix/image.json) inside the guest at build time.

usage: python3 manifest.py PACKAGES_FILE DEFINITION_JSON OUT_JSON (with FSMATRIX_* in the environment)
Records the installed version of every package in the package list (and of the real kernel and
GT.M packages behind Debian's metapackages): everything that can change a number; the image's
definition (its name, suite and the tools' paths, each checked here); and what its kernel can run:
the filesystem types it registers and every module it has, loadable or built in (``matrix expand``
and the VM backends say before a run which cells it cannot run).
"""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path


def installed_versions() -> dict[str, str]:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    versions = {}
    for line in out.splitlines():
        name, version, status = line.split("\t")
        if status.startswith("ii"):
            versions[name] = version
    return versions


def module_names(kernel: str, root: Path = Path("/lib/modules")) -> list[str]:
    """The kernel's modules, loadable (modules.dep) and built in (modules.builtin), as modprobe and
    /proc/modules name them: the file's name up to ".ko" (compressed or not), "-" as "_"."""
    names = set()
    where = root / kernel
    for index in ("modules.dep", "modules.builtin"):
        for line in (where / index).read_text().splitlines():
            path = line.split(":", 1)[0].strip()
            if path:
                names.add(Path(path).name.split(".ko")[0].replace("-", "_"))
    return sorted(names)


def filesystem_types() -> list[str]:
    """The filesystem types the running kernel registers now (modules not yet loaded are in ``modules``)."""
    return sorted({line.split()[-1] for line in Path("/proc/filesystems").read_text().splitlines() if line.strip()})


def main() -> None:
    packages_file, definition_file, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    definition = json.loads(definition_file.read_text())
    absent = [f"{name} {path}" for name, path in definition["tools"].items() if not Path(path).is_dir()]
    if absent:
        sys.exit(f"the image definition declares tools that are not there: {', '.join(absent)}")
    wanted = [line.split("#")[0].strip() for line in packages_file.read_text().splitlines()]
    wanted = [name for name in wanted if name]
    installed = installed_versions()
    missing = [name for name in wanted if name not in installed]
    if missing:
        sys.exit(f"packages of the list not installed: {', '.join(missing)}")
    # The metapackages name the real kernel and GT.M packages, whose versions are what counts.
    real = [n for n in installed if n.startswith(("linux-image-6", "fis-gtm-", "libc6", "python3.1"))]
    packages = {name: installed[name] for name in sorted({*wanted, *real})}
    kernel = sorted(p.name.removeprefix("vmlinuz-") for p in Path("/boot").glob("vmlinuz-*"))[-1]
    if platform.release() != kernel:  # /proc/filesystems would describe another kernel
        sys.exit(f"the build guest runs kernel {platform.release()}, not the image's {kernel}")
    manifest = {
        **definition,
        "name": os.environ["FSMATRIX_IMAGE_NAME"],
        "fsmatrix_version": os.environ["FSMATRIX_VERSION"],
        "git_sha": os.environ["FSMATRIX_GIT_SHA"],
        "build_time": os.environ["FSMATRIX_BUILD_TIME"],
        "os": platform.freedesktop_os_release().get("PRETTY_NAME", "unknown"),
        "kernel": kernel,
        "python": platform.python_version(),
        "packages": packages,
        "filesystems": filesystem_types(),
        "modules": module_names(kernel),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
