"""`fsmatrix compare` and vm.kernel: runs of one cell id that booted different kernels (a different
sha256 at the same vm.kernel path, as a bisect builds) are a different thing under test: refused
unless asked for with --across kernel, and then named in the output."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from fsmatrix.cli import main
from fsmatrix.results.render import comparison
from fsmatrix.results.store import sides
from fsmatrix.results.verdict import environment, gate
from test_compare import samples, write_run


def kernel(sha: str, release: str) -> dict[str, object]:
    return {"path": "bzImage", "format": "bzImage", "sha256": sha * 64, "release": release}


def test_a_different_kernel_at_the_same_path_is_refused_unless_asked(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1), kernel_source=kernel("a", "6.12.0"), kernel="6.12.0")
    head = write_run(tmp_path, "head", samples(10.0, seed=2), kernel_source=kernel("b", "6.12.0"), kernel="6.12.0")
    refused = CliRunner().invoke(main, ["compare", str(base), str(head)])
    assert refused.exit_code == 2
    assert "different kernels under test" in refused.output and "--across kernel" in refused.output
    assert "sha256 aaaaaaaaaaaa" in refused.output and "sha256 bbbbbbbbbbbb" in refused.output
    # --allow-env-diff is not the way: the kernel is what is under test, not the environment.
    assert CliRunner().invoke(main, ["compare", str(base), str(head), "--allow-env-diff"]).exit_code == 2
    allowed = CliRunner().invoke(main, ["compare", str(base), str(head), "--across", "kernel"])
    assert allowed.exit_code == 0, allowed.output
    assert "compared across kernels (--across kernel): base 6.12.0 (sha256 aaaaaaaaaaaa)" in allowed.output
    as_json = CliRunner().invoke(main, ["compare", str(base), str(head), "--across", "kernel", "--format", "json"])
    assert json.loads(as_json.output)["across"][0]["name"] == "kernel"


def test_another_release_is_no_environment_difference_across_kernels(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1), kernel_source=kernel("a", "6.12.0"), kernel="6.12.0")
    head = write_run(tmp_path, "head", samples(10.0, seed=2), kernel_source=kernel("b", "6.13.0"), kernel="6.13.0")
    result = gate.compare(
        sides.load_side(str(base), tmp_path),
        sides.load_side(str(head), tmp_path),
        across=(environment.Across("kernel"),),
    )
    # the guest's release moved with the kernel: listed, explained, not refused
    assert [key for key, _, _ in result.env_diffs] == ["kernel"] and result.explained == {"kernel"}
    assert result.across == [("kernel", ["6.12.0 (sha256 aaaaaaaaaaaa)"], ["6.13.0 (sha256 bbbbbbbbbbbb)"])]
    text = "\n".join(comparison.summary_lines(result))
    assert "differing on purpose: kernel" in text and "environments differ" not in text


def test_the_same_kernel_compares_as_before(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1), kernel_source=kernel("a", "6.12.0"))
    head = write_run(tmp_path, "head", samples(10.0, seed=2), kernel_source=kernel("a", "6.12.0"))
    result = CliRunner().invoke(main, ["compare", str(base), str(head)])
    assert result.exit_code == 0 and "across" not in result.output
