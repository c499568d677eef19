"""A benchmark stopped by SIGTERM (a timeout, a cancelled job) cleans up as Ctrl-C does.

Session 11's bisect benchmark, killed by ``timeout``, left a mounted loop device behind: Python's default
SIGTERM ends the process without running a single ``finally``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsmatrix import matrix
from fsmatrix.bench import bisect, gate, micro, results, threen1_side_by_side, vm
from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm

RUNNER = Path(__file__).resolve().parents[2] / "runner"

# Holds "a mount" (a file it removes on the way out), says so, and waits to be stopped.
HOLDER = """
import sys, time
from pathlib import Path
from fsmatrix.errors import exit_with, interrupt_on_sigterm
if sys.argv[2] == "handled":
    interrupt_on_sigterm()
held = Path(sys.argv[1])


def main() -> int:
    held.write_text("mounted")
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        held.unlink()
    return 0


exit_with(main, "holder")
"""


def stopped_holder(tmp_path: Path, mode: str) -> tuple[int, bool, str]:
    held = tmp_path / "held"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(held), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(RUNNER)},
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, held.exists(), err


def test_sigterm_runs_the_cleanup_on_the_way_out_and_says_so_in_one_line(tmp_path: Path) -> None:
    status, left, err = stopped_holder(tmp_path, "handled")
    assert not left
    assert status == 130
    assert err == "holder: interrupted; cleaned up\n"  # no traceback


def test_without_it_sigterm_leaves_what_was_held(tmp_path: Path) -> None:
    # The failure the handler exists for: the default action skips every finally.
    status, left, _ = stopped_holder(tmp_path, "default")
    assert left
    assert status == -signal.SIGTERM


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def installed() -> bool:
    # The handler interrupt_on_sigterm() installs, compared by identity.
    previous = signal.getsignal(signal.SIGTERM)
    interrupt_on_sigterm()
    ours = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, previous)
    return previous is ours


@pytest.mark.usefixtures("sigterm_restored")
@pytest.mark.parametrize("bench", [bisect, gate, vm, threen1_side_by_side, results], ids=lambda m: m.__name__)
def test_every_benchmark_that_runs_cells_installs_it(bench: object) -> None:
    assert not installed()
    with pytest.raises(SystemExit):
        bench.main(["--help"])  # type: ignore[attr-defined]
    assert installed()


@pytest.mark.usefixtures("sigterm_restored")
def test_the_micro_benchmark_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(path: Path) -> None:
        raise RuntimeError("stopped before running")

    monkeypatch.setattr(matrix, "load", stop)
    with pytest.raises(RuntimeError):
        micro.main()
    assert installed()


@pytest.mark.parametrize("module", sorted((RUNNER / "fsmatrix" / "bench").glob("*.py")), ids=lambda p: p.stem)
def test_every_benchmark_run_as_a_module_ends_through_exit_with(module: Path) -> None:
    # So Ctrl-C or a timeout's SIGTERM ends it with one line, not a KeyboardInterrupt traceback.
    source = module.read_text()
    if module.stem == "__main__" or 'if __name__ == "__main__":' in source:
        assert "exit_with(main, " in source


def test_a_user_error_a_benchmark_let_through_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    def bad() -> int:
        raise UserError("--rounds 0: must be at least 1")

    with pytest.raises(SystemExit) as ended:
        exit_with(bad, "fsmatrix.bench.x")
    assert ended.value.code == 2
    assert capsys.readouterr().err == "fsmatrix.bench.x: error: --rounds 0: must be at least 1\n"
