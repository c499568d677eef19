"""``fsmatrix run --executor slurm`` without a cluster: the bad input it refuses (one line, exit 2),
and what it would submit (the sbatch command line, the GRES for /dev/kvm, the batch script). The
job array itself runs on a real one-node Slurm in test_slurm_cluster.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsmatrix import matrix, slurm
from fsmatrix.agent import jsonfile
from fsmatrix.cli import main
from fsmatrix.errors import UserError
from fsmatrix.results import store
from test_bad_input import OK_CELL, refused

TWO = f"name: two\naxes:\n  filesystem: [tmpfs]\n  workload.threen1.end: [100, 200]\n{OK_CELL}"


@pytest.fixture
def two(tmp_path: Path) -> Path:
    path = tmp_path / "two.yaml"
    path.write_text(TWO)
    return path


@pytest.fixture
def fake_slurm(tmp_path: Path) -> dict[str, str]:
    """A PATH with stand-ins for Slurm's client commands that fail if called: the checks below must
    refuse before anything is submitted."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in slurm.COMMANDS:
        (bin_dir / name).write_text("#!/bin/sh\necho called >&2\nexit 3\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_without_slurm_says_what_is_missing(two: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}
    line = refused("run", str(two), "--executor", "slurm", "--shared", str(tmp_path / "s"), env=env)
    assert "--executor slurm: sbatch, squeue, scancel not found on PATH" in line
    assert "slurm-client" in line


def refused_here(*args: str, env: dict[str, str]) -> str:
    """``refused`` in this process (click's runner: no interpreter start-up): exit 2, one line."""
    done = CliRunner().invoke(main, list(args), env=env)
    lines = done.output.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1 and lines[0].startswith("fsmatrix: error: "), done.output
    return lines[0]


def test_a_shared_directory_that_is_not_writable(two: Path, tmp_path: Path, fake_slurm: dict[str, str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = refused_here("run", str(two), "--executor", "slurm", "--shared", str(blocker / "s"), env=fake_slurm)
    assert f"--shared {blocker / 's'}: not a writable directory (Not a directory)" in line
    line = refused_here("run", str(two), "--executor", "slurm", "--shared", "/proc/fsmatrix", env=fake_slurm)
    assert "--shared /proc/fsmatrix: not a writable directory" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--executor", "slurm"], "--executor slurm needs --shared DIR"),
        (["--executor", "slurm", "--shared", "{tmp}/s", "--race"], "--race decides between rounds"),
        (["--executor", "slurm", "--shared", "{tmp}/s", "--device", "/dev/null"], "--device names this machine's"),
        (["--shared", "{tmp}/s", "--detach"], "--shared, --detach: for --executor slurm only"),
    ],
)
def test_options_slurm_refuses(
    two: Path, tmp_path: Path, fake_slurm: dict[str, str], args: list[str], needle: str
) -> None:
    line = refused_here("run", str(two), *(a.replace("{tmp}", str(tmp_path)) for a in args), env=fake_slurm)
    assert needle in line


def _submission(tmp_path: Path, two: Path, backend: str) -> slurm.Submission:
    m = matrix.load(two)
    return slurm.prepare(slurm.SlurmRequest(
        matrix=m, cells=m.cells, shared=tmp_path / "shared", run_id="two", backend=backend, repeat=1,
        results_root=tmp_path / "results", shard_size=None, task_args=["--backend", backend], force=False,
    ))  # fmt: skip


def test_the_array_one_task_per_shard_whole_nodes_and_kvm_only_for_guests(tmp_path: Path, two: Path) -> None:
    sub = _submission(tmp_path, two, "host")
    assert len(sub.shards) == 2 and sub.total_runs == 2
    command = slurm.sbatch_command(sub, slurm.gres_for("host", "kvm"), ["--partition=bench"])
    assert command[:2] == ["sbatch", "--parsable"] and "--array=0-1" in command and "--exclusive" in command
    assert not any(a.startswith("--gres") for a in command)
    assert command[-2:] == ["--partition=bench", str(sub.directory / "job.sh")]
    assert slurm.gres_for("qemu", "kvm") == "kvm" and slurm.gres_for("libvirt", "kvm:1") == "kvm:1"
    assert slurm.gres_for("qemu", "none") is None
    assert "--gres=kvm" in slurm.sbatch_command(sub, slurm.gres_for("qemu", "kvm"), [])


def test_the_batch_script_runs_each_tasks_shard(tmp_path: Path, two: Path) -> None:
    """job.sh as an array task runs it, with a stand-in Python that records its arguments."""
    sub = _submission(tmp_path, two, "host")
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/args-$SLURM_ARRAY_TASK_ID"\nexit 1\n')
    python.chmod(0o755)
    (sub.directory / "job.sh").write_text(slurm.batch_script(sub, ["--backend", "host"], python=str(python)))
    for task in (0, 1):
        env = {**os.environ, "SLURM_ARRAY_TASK_ID": str(task)}
        done = subprocess.run(["bash", str(sub.directory / "job.sh")], env=env, check=False, timeout=30)
        assert done.returncode == 1
        args = (tmp_path / f"args-{task}").read_text().split("\n")
        assert args[args.index("--only") + 1] == sub.shards[task][0]
        assert args[args.index("--results") + 1] == str(sub.shard_dir(task))
        assert slurm.task_exit(sub, task) == 1  # what collect reads
    assert "fsmatrix" in (sub.directory / "job.sh").read_text()


def test_a_settings_file_is_copied_beside_the_matrix_and_given_to_every_task(tmp_path: Path, two: Path) -> None:
    """``run --settings`` with --executor slurm: the tasks load the same settings the cells were
    expanded with (a copy in the shared directory: the file given may be on this machine only)."""
    given = tmp_path / "build.yaml"
    given.write_text("gtm.global_buffers: 2000\n")
    m = matrix.load(two, None, matrix.read_settings(given))
    sub = slurm.prepare(slurm.SlurmRequest(
        matrix=m, cells=m.cells, shared=tmp_path / "shared", run_id="two", backend="host", repeat=1,
        results_root=tmp_path / "results", shard_size=None, task_args=["--backend", "host"], force=False,
        settings_file=given,
    ))  # fmt: skip
    copy = sub.directory / "settings.yaml"
    assert copy.read_text() == given.read_text()
    assert f"--settings {copy}" in (sub.directory / "job.sh").read_text()
    tasks = matrix.load(sub.directory / "matrix.yaml", None, matrix.read_settings(copy))
    assert [c.id for c in tasks.cells] == [c.id for c in m.cells]
    assert all(c.params["gtm"]["global_buffers"] == 2000 for c in tasks.cells)
    # without --settings, no copy and no option
    assert "--settings" not in slurm.batch_script(_submission(tmp_path / "plain", two, "host"), ["--backend", "host"])


def test_task_ids_as_squeue_prints_them() -> None:
    assert slurm._task_ids("3") == [3]
    assert slurm._task_ids("[0-2%1]") == [0, 1, 2]
    assert slurm._task_ids("1,4") == [1, 4]
    assert slurm._task_ids("N/A") == []


def test_sbatch_refusing_the_array_is_one_line_with_a_hint_for_the_gres(
    tmp_path: Path, two: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = _submission(tmp_path, two, "qemu")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    message = "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification"
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    with pytest.raises(UserError) as refused:
        slurm.submit(sub, slurm.gres_for("qemu", "kvm"), [])
    assert str(refused.value) == f"sbatch refused the job array: {message} (no such GRES on this cluster? " + (
        "--kvm-gres none asks for none)"
    )
    assert sub.job_id is None and not (sub.directory / slurm.SUBMISSION).exists()


def test_a_run_id_whose_results_were_made_elsewhere_needs_force(tmp_path: Path, two: Path) -> None:
    """A local run's results under the same run id would clash with the array's at the merge: refused
    before anything is submitted; --force replaces them when the array's are collected."""
    m = matrix.load(two)
    (tmp_path / "results" / "two" / m.cells[0].id).mkdir(parents=True)
    (tmp_path / "results" / "two" / m.cells[0].id / "r1.json").write_text("{}")
    with pytest.raises(UserError, match="already holds runs of 1 of these cells .* --force to replace them"):
        _submission(tmp_path, two, "host")
    m = matrix.load(two)
    sub = slurm.prepare(slurm.SlurmRequest(
        matrix=m, cells=m.cells, shared=tmp_path / "shared", run_id="two", backend="host", repeat=1,
        results_root=tmp_path / "results", shard_size=None, task_args=[], force=True,
    ))  # fmt: skip
    assert sub.replace


def test_collect_merges_the_shards_names_a_task_that_did_not_end_and_replaces_with_force(
    tmp_path: Path, two: Path
) -> None:
    """collect without a cluster: the tasks' results roots written here as a task writes them."""
    from test_hardware_classes import HOST_A, shard

    m = matrix.load(two)
    sub = _submission(tmp_path, two, "host")
    shard(sub.shard_dir(0), [m.cells[0]], HOST_A, run_id="two")
    (sub.shard_dir(0) / slurm.EXIT_STATUS).write_text("0\n")
    shard(sub.shard_dir(1), [m.cells[1]], HOST_A, run_id="two")  # its task was killed: no exit status
    done = slurm.collect(sub, echo=lambda line: None)
    assert not done.ok and len(done.failed) == 1 and done.failed[0].startswith("shard 1 (")
    assert "ended without an exit status" in done.failed[0]
    assert {d.cell_id for d in store.load_results(done.run_dir)} == {c.id for c in m.cells}
    assert (done.run_dir / "report.md").exists()
    # Other runs of the same cells arrive: refused at the merge, unless the submission replaces.
    doc = jsonfile.read(store.result_path(sub.shard_dir(0) / "two", m.cells[0].id, 1))
    jsonfile.write_atomic(
        store.result_path(sub.shard_dir(0) / "two", m.cells[0].id, 1), {**doc, "repeat": 1, "duration_s": 9}
    )
    with pytest.raises(UserError, match="already holds a different result"):
        slurm.collect(sub, echo=lambda line: None)
    sub.replace = True
    assert slurm.collect(sub, echo=lambda line: None).run_dir == done.run_dir


def test_every_task_runs_the_design_chosen_at_submission(tmp_path: Path, two: Path) -> None:
    """A matrix with a design: every task's ``fsmatrix run`` takes it from the submission's matrix.json
    (``--design-from``), so no node builds one of its own; a cross's tasks get no such option."""
    from fsmatrix import runs

    path = tmp_path / "half.yaml"
    path.write_text(
        "name: half\ndesign: {kind: fractional, runs: 4}\naxes:\n  filesystem: [tmpfs]\n"
        "  gtm.journal: [before, nobefore]\n  gtm.sync_io: [false, true]\n  gtm.full_block_writes: [false, true]\n"
        + OK_CELL
    )
    m = matrix.load(path)
    assert m.design is not None and len(m.cells) == 4
    sub = slurm.prepare(slurm.SlurmRequest(
        matrix=m, cells=m.cells, shared=tmp_path / "shared", run_id="half", backend="host", repeat=1,
        results_root=tmp_path / "results", shard_size=None, task_args=["--backend", "host"], force=False,
    ))  # fmt: skip
    assert f"--design-from {sub.directory / 'matrix.json'}" in (sub.directory / "job.sh").read_text()
    record = runs.design_from(sub.directory / "matrix.json")
    assert record == m.design.record()
    task = matrix.load(sub.directory / "matrix.yaml", stored_design=lambda name: record)
    assert [c.id for c in task.cells] == [c.id for c in m.cells]
    assert "--design-from" not in (_submission(tmp_path / "plain", two, "host").directory / "job.sh").read_text()
