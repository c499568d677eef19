"""Slurm as a second engine, for real (issue 28): a one-node Slurm started here in a temporary
directory (Debian's slurm-wlm and munge, installed when missing: munged on a private socket and key,
slurmctld and slurmd on localhost, no GRES: there may be no /dev/kvm), a 2-shard matrix run through
sbatch on the host backend, and the merged report's cells equal to a local run's. Every daemon, job
and directory the test starts is gone when it ends, on every exit path (``OneNodeSlurm``)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import pytest

from conftest import FSMATRIX
from fsmatrix import slurm
from fsmatrix.results import store

pytestmark = [pytest.mark.root(reason="needs root: slurmd, munged and the host backend"), pytest.mark.system]

PACKAGES = ("slurm-wlm", "munge")  # also in the Makefile's DEV_PACKAGES
DAEMONS = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd"}
TINY = """\
name: tiny
axes:
  filesystem: [tmpfs]
  workload.threen1.end: [20000, 30000]
defaults:
  workload.threen1: {start: 1, workers: 2, block: 5000}
  gtm.global_buffers: 2000
"""


def _installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False)
    return done.stdout.strip() == "install ok installed"


def install_slurm() -> None:
    """apt-get install what is missing (nothing when all is there). Debian starts a package's
    services on install: a policy-rc.d for the duration says no, so no system daemon is left."""
    missing = [p for p in PACKAGES if not _installed(p)]
    if not missing:
        return
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    if ours:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env, timeout=900
        )
    finally:
        if ours:
            policy.unlink()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ours(conf: Path) -> list[int]:
    """Processes whose environment names this cluster's slurm.conf (the daemons, slurmstepd and the
    jobs they ran) or whose command line names its directory (munged)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"SLURM_CONF={conf}".encode() in environ.split(b"\0") or str(conf.parent).encode() in cmdline:
            found.append(int(entry.name))
    return found


class OneNodeSlurm:
    """munged + slurmctld + slurmd on this machine, everything under one temporary directory; the
    environment (SLURM_CONF) for Slurm's commands in ``env``. Leaving the ``with`` cancels every job,
    stops the daemons, kills what they left and removes the directory, whatever happened inside."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fsmatrix-slurm-"))
        self.conf = self.dir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> OneNodeSlurm:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _start(self) -> None:
        d = self.dir
        d.chmod(0o700)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = d / "munge" / "munge.socket"
        socket_path.parent.mkdir(mode=0o700)
        self._daemon(
            "munged",
            "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}", f"--pid-file={d}/munged.pid",
            f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed",
        )  # fmt: skip
        self._wait(lambda: socket_path.exists(), "munged's socket", d / "munged.log")
        host = socket.gethostname().split(".")[0]
        for sub in ("state", "spool"):
            (d / sub).mkdir()
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=fsmatrix-test",
                    f"SlurmctldHost={host}(127.0.0.1)",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={socket_path}",
                    f"StateSaveLocation={d}/state",
                    f"SlurmdSpoolDir={d}/spool",
                    f"SlurmctldPidFile={d}/slurmctld.pid",
                    f"SlurmdPidFile={d}/slurmd.pid",
                    f"SlurmctldLogFile={d}/slurmctld.log",
                    f"SlurmdLogFile={d}/slurmd.log",
                    f"PlugStackConfig={d}/plugstack.conf",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "SlurmdParameters=config_overrides",
                    "MinJobAge=600",  # finished jobs stay visible to squeue for the whole test
                    f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN",
                    f"PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        (d / "plugstack.conf").write_text("")
        self._daemon("slurmctld", "-D", "-c", "-f", str(self.conf))
        self._daemon("slurmd", "-D", "-N", host, "-f", str(self.conf))
        self._wait(self._idle, "the node to be idle", d / "slurmd.log")

    def _daemon(self, name: str, *args: str) -> None:
        log = open(self.dir / f"{name}.out", "wb")  # noqa: SIM115 - closed with the process
        self.daemons[name] = subprocess.Popen(
            [DAEMONS[name], *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def _idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True, check=False)
        return done.stdout.strip() == "idle"

    def _wait(self, ready: Callable[[], bool], what: str, log: Path, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    raise AssertionError(f"{name} exited ({process.returncode}): {self._tail(name)}")
            if ready():
                return
            time.sleep(0.5)
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        raise AssertionError(f"timed out waiting for {what}: {tail}")

    def _tail(self, name: str) -> str:
        texts = [p.read_text(errors="replace")[-1500:] for p in self.dir.glob(f"{name}*.*") if p.is_file()]
        return " | ".join(texts)

    def stop(self) -> None:
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "--user=root"], env=self.env, capture_output=True, timeout=60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = subprocess.run(
                    ["squeue", "-h", "-t", "PD,R,CG,CF,S"], env=self.env, capture_output=True, text=True, timeout=60
                )
                if done.returncode != 0 or not done.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.daemons.pop(name, None)
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
        for pid in _ours(self.conf):  # slurmstepd and its job, if a daemon left one: ours by their environment
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def one_node_slurm() -> Iterator[OneNodeSlurm]:
    install_slurm()
    with OneNodeSlurm() as cluster:
        yield cluster


def _fsmatrix(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FSMATRIX, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _queued(job_id: str, env: dict[str, str]) -> str:
    """squeue's lines for the job's tasks that have not ended."""
    done = subprocess.run(
        ["squeue", "-h", "-r", f"--jobs={job_id}", "-t", ",".join(slurm.ACTIVE)],
        env=env,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def _report_cells(report: Path) -> set[str]:
    """The cell ids of a report's "Runs and verification" table."""
    section = report.read_text().split("## Runs and verification")[1]
    return {m.group(1) for m in re.finditer(r"^\| ([a-z0-9.-]+-[0-9a-f]{8}) \|", section, re.MULTILINE)}


def test_a_matrix_through_sbatch_equals_a_local_run(tmp_path: Path) -> None:
    matrix_file = tmp_path / "tiny.yaml"
    matrix_file.write_text(TINY)
    workdir = tmp_path / "work"
    local = _fsmatrix(
        "run", str(matrix_file), "--backend", "host", "--results", str(tmp_path / "local"), "--workdir", str(workdir),
        env=dict(os.environ),
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    with one_node_slurm() as cluster:
        shared = cluster.dir / "shared"
        common = ["--backend", "host", "--workdir", str(workdir), "--executor", "slurm", "--shared", str(shared)]
        done = _fsmatrix("run", str(matrix_file), *common, "--results", str(tmp_path / "slurm"), env=cluster.env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "submitted Slurm job" in done.stderr and "2 array tasks" in done.stderr
        sub = slurm.Submission.load(shared / "tiny")
        assert len(sub.shards) == 2 and [slurm.task_exit(sub, i) for i in (0, 1)] == [0, 0]
        report = Path(done.stdout.strip().splitlines()[-1].removeprefix("report: "))
        assert report == (tmp_path / "slurm" / "tiny" / "report.md").resolve()

        # --detach, then status and collect: the same cells again under another run id.
        detached = _fsmatrix(
            "run", str(matrix_file), *common, "--results", str(tmp_path / "detached"), "--run-id", "later", "--detach",
            env=cluster.env,
        )  # fmt: skip
        assert detached.returncode == 0, detached.stderr
        assert detached.stdout.splitlines() == [
            f"fsmatrix slurm status {shared.resolve() / 'later'}",
            f"fsmatrix slurm collect {shared.resolve() / 'later'}",
        ]
        status = _fsmatrix("slurm", "status", str(shared / "later"), env=cluster.env)
        assert status.returncode == 0 and "2 tasks" in status.stdout, status.stderr
        collected = _fsmatrix("slurm", "collect", str(shared / "later"), "--wait", env=cluster.env)
        assert collected.returncode == 0, collected.stderr

        # SIGTERM (as Ctrl-C) while it waits: the job is cancelled, nothing runs on for a command that is gone.
        stopped = ["--results", str(tmp_path / "stopped"), "--run-id", "stopped"]
        waiting = subprocess.Popen(
            [*FSMATRIX, "run", str(matrix_file), *common, *stopped],
            env=cluster.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert waiting.stderr is not None
        line = ""
        while "submitted Slurm job" not in line and waiting.poll() is None:
            line = waiting.stderr.readline()
        job_id = line.split("submitted Slurm job ")[1].split(":")[0]
        waiting.send_signal(signal.SIGTERM)
        assert waiting.wait(timeout=60) == 130
        waiting.stderr.close()
        deadline = time.monotonic() + 60
        while (left := _queued(job_id, cluster.env)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"job {job_id} still queued after the command was stopped: {left}"
        # Cancelled, not run to its end: the second task (waiting for the node) never ran.
        assert slurm.task_exit(slurm.Submission.load(shared / "stopped"), 1) is None
        conf = cluster.conf
    # Nothing of the cluster is left: no daemon, no job, no spool or state directory.
    assert not _ours(conf) and not conf.parent.exists()

    expected = _report_cells(tmp_path / "local" / "tiny" / "report.md")
    assert len(expected) == 2
    assert _report_cells(report) == expected
    assert _report_cells(tmp_path / "detached" / "later" / "report.md") == expected
    merged = store.load_results(tmp_path / "slurm" / "tiny")
    assert {d.cell_id for d in merged} == expected and {d.status for d in merged} == {"passed"}
