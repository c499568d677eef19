"""Guest images as data (packer/images/NAME.yaml, fsmatrix.image_definitions): every definition loads and
declares every tool a workload finds through it; a bad definition is refused naming its file; each
image has its own inputs hash; `image build --image`, `image list` and `image prune` know every
image. Nothing is built or booted here (tests/vm/ boots them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO
from fsmatrix import image_definitions
from fsmatrix.agent import workloads
from fsmatrix.agent.storage import filesystems
from fsmatrix.backends import image
from fsmatrix.cli import main
from fsmatrix.errors import UserError

DEBIAN12 = (REPO / "packer" / "images" / "debian12.yaml").read_text()


def test_every_definition_loads_and_the_default_is_debian12() -> None:
    found = image_definitions.definitions()
    assert image_definitions.DEFAULT == "debian12" and list(found) == image_definitions.names() == [
        "debian12",
        "debian13",
    ]
    assert (found["debian12"].suite, found["debian13"].suite) == ("bookworm", "trixie")
    assert found["debian12"].tools["postgres_bin"].path == "/usr/lib/postgresql/15/bin"
    assert found["debian13"].tools["postgres_bin"].path == "/usr/lib/postgresql/17/bin"


@pytest.mark.parametrize("name", image_definitions.names())
def test_each_image_holds_what_the_registries_need(name: str) -> None:
    definition = image_definitions.get(name)
    packages = definition.package_list(image_definitions.common_packages())
    assert len(packages) == len(set(packages))
    wanted = {p for w in workloads.all_workloads() for p in w.guest_packages}
    wanted |= {p for fs in filesystems.all_filesystems() for p in fs.packages}
    assert wanted <= set(packages), f"{name} lacks {sorted(wanted - set(packages))}"
    tools = {t for w in workloads.all_workloads() for t in w.guest_tools}
    assert tools == {"postgres_bin", "gtm_dist"} and tools <= set(definition.tools)
    assert definition.tools["postgres_bin"].package in packages and definition.kernel in packages
    # What the guest reads: the definition's name and the tools' paths, in the manifest.
    fields = definition.manifest_fields()
    assert fields["image"] == name and fields["tools"]["gtm_dist"].startswith("/usr/lib/x86_64-linux-gnu/fis-gtm/V")
    # Debian 13's glibc 2.41 loads libgtmutil.so (an executable stack) only with this tunable.
    wanted_env = {"gtm_dist": {"GLIBC_TUNABLES": "glibc.rtld.execstack=2"}} if name == "debian13" else {}
    assert fields["tool_env"] == wanted_env


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "packer" / "images" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: {**d, "colour": "blue"}, "unknown key(s) colour"),
        (lambda d: {**d, "name": "debian99"}, "must be the file's name"),
        (lambda d: {k: v for k, v in d.items() if k != "suite"}, "missing key(s) suite"),
        (lambda d: {**d, "suite": "Bookworm Backports"}, "suite 'Bookworm Backports'"),
        (lambda d: {**d, "packages": ["ok", "Not_A_Package"]}, "'Not_A_Package' is not a Debian package name"),
        (lambda d: {**d, "tools": {"gtm_dist": d["tools"]["gtm_dist"]}}, "tools lacks postgres_bin (for pgbench)"),
        (
            lambda d: {**d, "tools": {**d["tools"], "gtm_dist": {"package": "fis-gtm", "path": "relative/dir"}}},
            "tools.gtm_dist.path 'relative/dir' must be an absolute path",
        ),
        (lambda d: {**d, "tools": {**d["tools"], "gtm_dist": "/usr/lib"}}, "tools must map a tool's name"),
        (
            lambda d: {**d, "tools": {**d["tools"], "gtm_dist": {**d["tools"]["gtm_dist"], "env": {"a b": "1"}}}},
            "tools.gtm_dist.env must map variable names (A-Z, 0-9, _) to strings; not 'a b'",
        ),
    ],
)
def test_a_bad_definition_is_refused_naming_its_file(tmp_path: Path, change: object, message: str) -> None:
    doc = change(yaml.safe_load(DEBIAN12))  # type: ignore[operator]
    path = _write(tmp_path, "debian12", yaml.safe_dump(doc))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        image_definitions.load(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_an_unknown_image_is_refused_with_the_images_known(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown image 'debian14'; the images known: debian12, debian13"):
        image_definitions.get("debian14")
    with pytest.raises(UserError, match="unknown image '../debian12'"):
        image_definitions.get("../debian12")
    _write(tmp_path, "other", DEBIAN12.replace("name: debian12", "name: other"))
    with pytest.raises(UserError, match="no definition of the default image 'debian12'"):
        image_definitions.definitions(tmp_path)


def _copy_inputs(dest: Path) -> None:
    shutil.copytree(REPO / "packer", dest / "packer")
    shutil.copytree(REPO / "runner" / "fsmatrix" / "agent", dest / "runner" / "fsmatrix" / "agent")
    shutil.copy(REPO / "runner" / "fsmatrix" / "__init__.py", dest / "runner" / "fsmatrix" / "__init__.py")


def test_each_image_has_its_own_inputs(tmp_path: Path) -> None:
    _copy_inputs(tmp_path)
    key = b"ssh-ed25519 AAAA test"
    first = {name: image.inputs_hash(tmp_path, name) for name in ("debian12", "debian13")}
    base = {name: image.base_hash(key, tmp_path, name) for name in ("debian12", "debian13")}
    assert len(set(first.values())) == 2 and len(set(base.values())) == 2
    # Another image's definition is not an input: debian13's tools moving leaves debian12 alone, and
    # a tool's path is the Packer stage's business, not debootstrap's.
    other = tmp_path / "packer" / "images" / "debian13.yaml"
    other.write_text(other.read_text().replace("V7.1-006_x86_64", "V7.1-007_x86_64"))
    assert image.inputs_hash(tmp_path, "debian12") == first["debian12"]
    assert image.inputs_hash(tmp_path, "debian13") != first["debian13"]
    assert image.base_hash(key, tmp_path, "debian13") == base["debian13"]
    # Its suite and its packages are the base stage's.
    other.write_text(other.read_text().replace("packages: []", "packages: [strace]"))
    assert image.base_hash(key, tmp_path, "debian13") != base["debian13"]
    assert image.base_hash(key, tmp_path, "debian12") == base["debian12"]
    with pytest.raises(UserError, match="unknown image 'nope'"):
        image.inputs_hash(tmp_path, "nope")


def _fake_built(cache: Path, paths: image.ImagePaths, definition: str | None) -> None:
    cache.joinpath("images").mkdir(parents=True, exist_ok=True)
    for path in paths.files:
        path.write_text("x")
    paths.manifest.write_text(json.dumps({"image": definition} if definition else {}))


def test_prune_keeps_the_current_image_of_every_definition(tmp_path: Path) -> None:
    current = image.current_images(tmp_path)
    old = [image.image_paths(f"{n:016x}", cache=tmp_path) for n in range(3)]
    for paths in old:
        _fake_built(tmp_path, paths, "debian12")
    for name, paths in current.items():
        _fake_built(tmp_path, paths, name)
    assert [image.definition_of(p) for p in old] == ["debian12"] * 3
    deleted = image.prune(keep=0, cache=tmp_path)
    assert sorted(p.name for p in deleted) == sorted(p.name for p in old)
    assert all(p.complete() for p in current.values())  # debian13 is not "an older image" of debian12


def test_image_commands_know_every_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(image.CACHE_ENV, str(tmp_path))
    _fake_built(tmp_path, image.image_paths(image="debian13", cache=tmp_path), "debian13")
    runner = CliRunner()
    listed = runner.invoke(main, ["image", "list"])
    assert listed.exit_code == 0, listed.output
    assert "debian12: Debian 12 (bookworm)" in listed.output and "not built, the default)" in listed.output
    assert "debian13: Debian 13 (trixie)" in listed.output and ": built)" in listed.output
    assert "  debian13  " in listed.output.split("in the cache:")[1]
    path = runner.invoke(main, ["image", "path", "--image", "debian13"])
    assert path.exit_code == 0 and path.output.strip() == str(image.image_paths(image="debian13").qcow2)
    bad = runner.invoke(main, ["image", "build", "--image", "debian14"])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines() == [
        "fsmatrix: error: unknown image 'debian14'; the images known: debian12, debian13 "
        f"({REPO / 'packer' / 'images'})"
    ]


def test_the_manifest_names_every_module_of_the_kernel(tmp_path: Path) -> None:
    """packer/scripts/manifest.py's module list, on index files shaped like Debian 12's (plain .ko)
    and Debian 13's (.ko.xz) kernels: names as modprobe takes them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fsmatrix_manifest", REPO / "packer" / "scripts" / "manifest.py")
    assert spec is not None and spec.loader is not None
    manifest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manifest)
    kernel = tmp_path / "6.12.0-test-amd64"
    kernel.mkdir()
    (kernel / "modules.dep").write_text(
        "kernel/fs/xfs/xfs.ko.xz: kernel/lib/libcrc32c.ko.xz\n"
        "kernel/drivers/md/dm-log-writes.ko.xz:\n"
        "kernel/fs/reiserfs/reiserfs.ko:\n"
        "kernel/fs/f2fs/f2fs.ko.zst: kernel/lib/lz4_compress.ko.zst\n"
    )
    (kernel / "modules.builtin").write_text("kernel/fs/ext4/ext4.ko\nkernel/drivers/block/virtio_blk.ko\n")
    assert manifest.module_names(kernel.name, tmp_path) == [
        "dm_log_writes", "ext4", "f2fs", "reiserfs", "virtio_blk", "xfs",
    ]  # fmt: skip


def test_without_the_source_tree_only_the_default_image_is_known(tmp_path: Path) -> None:
    """A copy of runner/ alone (the workflow tests' regressed head, an installed package): matrices
    that name no image still load; the schema allows the default image only."""
    assert image_definitions.names(tmp_path) == ["debian12"]
    # ... and building one says why it cannot, not "unknown image 'debian12'; the images known: debian12".
    with pytest.raises(UserError, match=r"no image definitions in .*packer/images: images are built from"):
        image_definitions.get("debian12", tmp_path)
    assert not image_definitions.defined("debian12", tmp_path)
