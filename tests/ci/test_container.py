"""The runner as a container image (fsmatrix/container.py), with the real podman (runc, see
`make deps`): build it (offline: `podman build --network=none`), build it again (a no-op), and run
fsmatrix inside it: `matrix expand`, a host-backend 3n+1 cell (privileged: loop devices and mounts).
Results must carry the image's identity; nothing may be left running or mounted. A qemu-backend
cell inside it: tests/vm/test_container_vm.py.

The first build on a machine debootstraps the base (its .debs are cached with the guest image's)
and makes the wheelhouse; later builds after a source change redo only the last stage.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FSMATRIX, REPO, attached_under, mounted_under, needs_root
from fsmatrix import container
from fsmatrix.backends import hostinfo
from fsmatrix.results.store import iter_result_files, load_document

pytestmark = [
    needs_root,
    pytest.mark.system,
    pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman (make deps installs it)"),
]

LABEL = "io.fsmatrix.test=test_container"
SMALL = """\
name: ctr
axes:
  filesystem: [ext4]
  workload:
    - threen1: {start: 1, end: 20000, workers: 2, block: 5000}
defaults:
  storage.disk_size: 1G
  gtm.global_buffers: 4000
  vm: {cpus: 2, memory: 1G}
  timeout: 900
repeat: 1
"""


def _containers() -> list[str]:
    """This module's containers (running or not): none may outlive a test."""
    done = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.ID}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def podman_run(
    tag: str, *args: str, volumes: dict[Path, str] | None = None, privileged: bool = False, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    cmd = ["podman", "run", "--rm", "--network=none", "--label", LABEL, "-v", "/etc/machine-id:/etc/machine-id:ro"]
    if privileged:
        cmd.append("--privileged")
    for host, inside in (volumes or {}).items():
        cmd += ["-v", f"{host}:{inside}"]
    return subprocess.run([*cmd, tag, *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def tag() -> str:
    started = time.monotonic()
    done = subprocess.run([*FSMATRIX, "container", "build"], capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"container ready in {time.monotonic() - started:.0f} s:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def _nothing_left(workdir: Path) -> None:
    assert _containers() == []
    assert attached_under(workdir) == []
    assert mounted_under(workdir) == []


# --------------------------------------------------------------------------------------------
# without the image


def test_names_follow_the_inputs(tmp_path: Path) -> None:
    packages = container.packages()
    assert {"fis-gtm", "qemu-system-x86", "packer", "debootstrap", "postgresql-15", "python3-venv"} <= set(packages)
    assert len(packages) == len(set(packages))
    digest = container.inputs_hash(packages)
    assert container.image_name(digest).startswith("fsmatrix:") and digest in container.image_name(digest)
    assert container.base_hash([*packages, "extra"]) != container.base_hash(packages)
    assert container.inputs_hash([*packages, "extra"]) != digest
    files = container.source_files()
    assert Path("packer/container/Containerfile") in files and Path("matrix/quick.yaml") in files
    assert not [f for f in files if "__pycache__" in f.parts or f.suffix == ".pyc"]


def test_missing_engine_is_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*FSMATRIX, "container", "build"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "fsmatrix: error: podman (or docker) not found: run `make deps` (it installs podman and runc)"
    ]


def test_container_identity_is_read_from_the_baked_file(tmp_path: Path) -> None:
    ident = tmp_path / "container.json"
    assert hostinfo.container_image(ident) is None
    ident.write_text(json.dumps({"name": "fsmatrix:1-abc", "inputs_hash": "abc", "git_sha": "f00", "other": 1}))
    assert hostinfo.container_image(ident) == {"name": "fsmatrix:1-abc", "inputs_hash": "abc", "git_sha": "f00"}
    ident.write_text("not json")
    assert hostinfo.container_image(ident) is None


# --------------------------------------------------------------------------------------------
# with the image


def test_second_build_is_a_no_op(tag: str) -> None:
    started = time.monotonic()
    done = subprocess.run([*FSMATRIX, "container", "build"], capture_output=True, text=True, timeout=300, check=True)
    elapsed = time.monotonic() - started
    assert done.stdout.strip() == tag
    assert f"container: reusing {tag}" in done.stderr
    assert elapsed < 30, f"an unchanged rebuild took {elapsed:.0f} s"
    listed = subprocess.run([*FSMATRIX, "container", "tag"], capture_output=True, text=True, check=False)
    assert listed.returncode == 0 and listed.stdout.strip() == tag


def test_image_labels_and_identity(tag: str) -> None:
    inspect = subprocess.run(["podman", "image", "inspect", tag], capture_output=True, text=True, check=True)
    labels = json.loads(inspect.stdout)[0]["Labels"]
    digest = tag.rsplit("-", 1)[1]
    assert labels["io.fsmatrix.inputs-hash"] == digest
    assert labels["org.opencontainers.image.version"] == tag.split(":")[1].rsplit("-", 1)[0]
    assert labels["org.opencontainers.image.source"]
    assert labels["org.opencontainers.image.revision"] not in ("", "unknown")
    done = podman_run(tag, "--version")
    assert done.returncode == 0 and "fsmatrix" in done.stdout, done.stderr
    assert _containers() == []


def test_matrix_expand_inside(tag: str) -> None:
    done = podman_run(tag, "matrix", "expand", "matrix/quick.yaml", "--format", "json")
    assert done.returncode == 0, done.stderr
    cells = json.loads(done.stdout)
    assert len(cells) == 5
    assert _containers() == []


def _check_results(results: Path, tag: str, backend: str) -> dict[str, object]:
    paths = list(iter_result_files(results))
    assert len(paths) == 1, paths
    doc = load_document(paths[0]).document  # as stored: checked key by key below
    assert doc["status"] == "passed", json.dumps(doc, indent=1)[:3000]
    host = doc["provenance"]["host"]
    assert host["container"] == "podman"
    # The host's machine id (mounted), not one baked into the image that every host would share.
    assert (host["machine_id"], host["machine_id_source"]) == hostinfo.machine_id()
    assert host["container_image"]["name"] == tag
    assert host["container_image"]["inputs_hash"] == tag.rsplit("-", 1)[1]
    if backend == "host":  # the run's code is the image's (a VM's is its guest image's)
        assert doc["provenance"]["git"]["sha"] == host["container_image"]["git_sha"] != "unknown"
    return doc


def test_host_backend_cell_inside(tag: str, tmp_path: Path, workdir: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "ctr.yaml").write_text(SMALL)
    volumes = {
        workdir: "/var/tmp/fsmatrix",
        tmp_path / "results": "/work/results",
        tmp_path / "ctr.yaml": "/work/matrix/ctr.yaml",
    }
    started = time.monotonic()
    done = podman_run(tag, "run", "matrix/ctr.yaml", "--backend", "host", volumes=volumes, privileged=True)
    print(f"host cell in the container: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    _check_results(tmp_path / "results", tag, "host")
    _nothing_left(workdir)


def test_ci_workflow_builds_and_smoke_tests_the_image(tag: str, tmp_path: Path) -> None:
    """ci.yml's job "container", replayed: its `run:` steps that build the image and smoke-test it."""
    from test_workflows import bash, step, workflow

    wf = workflow("ci.yml")
    env = {"RUNNER_TEMP": str(tmp_path)}
    bash(step(wf, "container", "Build the container image"), REPO, env)
    assert (REPO / ".fsmatrix-image").read_text().strip() == tag
    done = bash(step(wf, "container", "Smoke test"), REPO, env)
    assert f"smoke test passed in {tag}" in done.stdout
    assert _containers() == []


def test_workflow_scripts_run_fsmatrix_in_the_image(tag: str, tmp_path: Path) -> None:
    """matrix.yml's shard step and pr-gate.yml's gate step with FSMATRIX_IN_CONTAINER=1 (as the
    workflows set it): every fsmatrix command runs in the checkout's image (.fsmatrix-image)."""
    from test_workflows import SMALL, bash, step, workflow

    base, head = tmp_path / "ws" / "base", tmp_path / "ws" / "head"
    for checkout in (base, head):
        (checkout / "matrix").mkdir(parents=True)
        (checkout / ".github").symlink_to(REPO / ".github")
        (checkout / ".fsmatrix-image").write_text(tag + "\n")
    small = SMALL.replace("[tmpfs, ext4]", "[tmpfs]").replace("end: 50000", "end: 20000")
    (base / "matrix" / "pr.yaml").write_text(small)  # the gate runs the base's matrix, not the PR's
    (base / "matrix" / "shard.yaml").write_text(small)
    env = {"FSMATRIX_IN_CONTAINER": "1", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}

    shard_env = {**env, "MATRIX_FILE": "matrix/shard.yaml", "BACKEND": "host", "CELLS": "*", "REPEATS": "1"}
    bash(step(workflow("matrix.yml"), "run", "Run shard"), base, shard_env)
    docs = [load_document(p).document for p in iter_result_files(base / "results")]
    assert [d["provenance"]["host"]["container_image"]["name"] for d in docs] == [tag]

    gate = workflow("pr-gate.yml")
    # two pairs decide nothing: NOT DECIDED, which pr-gate.yml marks neutral (exit 0) as here
    gate_env = {**env, "REPEATS": "2", "THRESHOLD": "0.5", "NOT_DECIDED": "neutral"}
    bash(step(gate, "gate", "Run base and head"), tmp_path / "ws", gate_env)
    for side in ("base", "head"):
        docs = [load_document(p).document for p in iter_result_files(tmp_path / "ws" / "gate-results" / side)]
        assert len(docs) == 2 and {d["provenance"]["host"]["container_image"]["name"] for d in docs} == {tag}
    assert (tmp_path / "summary.md").read_text().strip()
    assert _containers() == []
