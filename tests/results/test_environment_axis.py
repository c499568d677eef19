"""The guest image as an environment axis of the results: a report puts the images side by side as
columns (with each one's ratio to the first, as the answer computes it) instead of warning about mixed
environments; `compare --across image` compares one image's cells with another's on purpose, and
any other difference, or images compared without --across, is still refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import typed
from fsmatrix.results import store
from fsmatrix.results.render import markdown
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import answering, environment, report
from test_compare import invoke, make_doc, samples

KERNELS = {"debian12": "6.1.0-40-amd64", "debian13": "6.12.57+deb13-amd64"}


def _docs(
    image: str, filesystem: str, values: list[float], run_id: str = "upgrade", **prov: Any
) -> list[dict[str, Any]]:
    """A 3n+1 cell's runs on ``image`` (the default leaves it out of the cell's JSON form)."""
    suffix = "" if image == "debian12" else f"-{image}"
    docs = []
    for i, value in enumerate(values, 1):
        manifest = {"image": image, "name": f"fsmatrix-{image}"}
        doc = make_doc(run_id, i, value, cell=f"{filesystem}{suffix}-threen1-1-1000-w4-0000000{len(suffix)}",
                       **{"kernel": KERNELS[image], "image": manifest, **prov})  # fmt: skip
        doc["params"] = {**doc["params"], "filesystem": filesystem, "workload": {"threen1": {"start": 1, "end": 1000}}}
        if image != "debian12":
            doc["params"]["image"] = image
        docs.append(doc)
    return docs


def _upgrade_docs() -> list[dict[str, Any]]:
    return [
        *_docs("debian12", "ext4", samples(10.0, seed=1)),
        *_docs("debian13", "ext4", samples(12.0, seed=2)),
        *_docs("debian12", "xfs", samples(11.0, seed=3)),
        *_docs("debian13", "xfs", samples(11.0, seed=4)),
    ]


def test_a_report_puts_the_images_side_by_side() -> None:
    text = markdown.markdown(report.of_results(typed(_upgrade_docs())), "upgrade")
    assert "WARNING" not in text  # the kernels differ because the images do: no mixing
    assert "- image: debian12, debian13 (a setting of the cells: side by side in the tables)" in text
    assert f"- kernel: {KERNELS['debian12']} (debian12), {KERNELS['debian13']} (debian13)" in text
    # One table, each filesystem's two images next to each other.
    assert "| input | ext4 · debian12 | ext4 · debian13 | xfs · debian12 | xfs · debian13 |" in text
    assert "### " not in text.split("## threen1")[1]  # not split into a table per image
    # Each image's ratio to the first, as the answer computes it: ext4 slower by ~20 %, xfs the same.
    by_image = text.split("by image (lower is better;")[1].split("\n\n")[1].splitlines()
    assert by_image[0] == "| input | storage | debian12 | debian13 | debian13 / debian12 |"
    ext4 = next(line for line in by_image if "| ext4 |" in line)
    xfs = next(line for line in by_image if "| xfs |" in line)
    assert "1.19" in ext4 and ext4.endswith("worse |") and xfs.endswith("equivalent |")
    # The answer's ratio of ext4 on Debian 13 to the baseline, ext4 on Debian 12 (as matrix.json marks it).
    ids = dict.fromkeys(d["cell_id"] for d in _upgrade_docs())
    matrix_json = {"baseline_rule": "defaults", "cells": [{"id": i, "baseline": "debian13" not in i} for i in ids]}
    matrix_json["cells"][2]["baseline"] = False  # xfs on Debian 12: one baseline per group
    found = answering.build(typed(_upgrade_docs()), store.RunMatrix.read(matrix_json))
    assert found.groups[0].group.baseline_name == "ext4, image=debian12"
    ratio = next(c.to_baseline for c in found.groups[0].configurations if c.name == "ext4, image=debian13")
    assert ratio is not None and ratio.family == 6  # the answer's group: 4 configurations, 6 pairs
    # The table compares each stack's two images alone: a family of one, so a narrower interval, same ratio.
    assert f"{ratio.ratio:.2f}× [" in ext4
    assert ratio.ci_low < float(ext4.split("[")[1].split(",")[0])


def test_a_report_still_warns_about_a_difference_no_axis_explains() -> None:
    docs = _docs("debian12", "ext4", samples(10.0, seed=1)) + _docs("debian12", "xfs", samples(10.0), kernel="6.9")
    assert "WARNING: these results come from different environments (kernel)" in markdown.markdown(
        report.of_results(typed(docs)), "t"
    )
    # An image axis explains its own kernel only: a second kernel on one image is still a mix.
    mixed = _upgrade_docs() + _docs("debian13", "btrfs", samples(10.0), kernel="6.13-own")
    assert "different environments (kernel)" in markdown.markdown(report.of_results(typed(mixed)), "t")


def _write(root: Path, run_id: str, docs: list[dict[str, Any]]) -> Path:
    for doc in docs:
        path = root / run_id / doc["cell_id"] / f"r{doc['repeat']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**doc, "run_id": run_id}))
    return root / run_id


def test_compare_across_image_on_purpose(tmp_path: Path) -> None:
    old = _write(tmp_path, "on12", _docs("debian12", "ext4", samples(10.0, seed=1)))
    new = _write(tmp_path, "on13", _docs("debian13", "ext4", samples(12.0, seed=2)))
    refused = invoke("compare", str(old), str(new))
    assert refused.exit_code == 2
    assert "refusing to compare results from different environments" in refused.output
    assert "to compare one image's cells with another's on purpose: --across image" in refused.output
    done = invoke("compare", str(old), str(new), "--across", "image", "--format", "json")
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["across"] == [{"name": "image", "base": ["debian12"], "head": ["debian13"]}]
    assert {d["key"] for d in doc["env_diffs"]} == {"image", "kernel"}
    elapsed = next(r for r in doc["rows"] if r["metric"] == "elapsed_s")
    assert elapsed["cell_id"] == "ext4-threen1-1-1000-w4-00000000" and elapsed["verdict"] == "slower"
    text = invoke("compare", str(old), str(new), "--across", "image")
    assert "compared across images (--across image): base debian12 | head debian13;" in text.output
    assert "differing on purpose: kernel, image" in text.output  # ENV_KEYS order
    # Both images in one run: name which is which.
    both = _write(tmp_path, "both", _docs("debian12", "ext4", samples(10.0)) + _docs("debian13", "ext4", samples(12.0)))
    ambiguous = invoke("compare", str(both), str(both), "--across", "image")
    assert ambiguous.exit_code == 2 and "--across image=BASE_VALUE,HEAD_VALUE" in ambiguous.output
    named = invoke("compare", str(both), str(both), "--across", "image=debian12,debian13", "--format", "json")
    assert named.exit_code == 0 and json.loads(named.output)["rows"][0]["n_base"] == 5


def test_compare_across_still_refuses_any_other_difference(tmp_path: Path) -> None:
    old = _write(tmp_path, "a", _docs("debian12", "ext4", samples(10.0)))
    elsewhere = _write(tmp_path, "b", _docs("debian13", "ext4", samples(10.0), cpu_model="Another CPU"))
    done = invoke("compare", str(old), str(elsewhere), "--across", "image")
    assert done.exit_code == 2
    assert "cpu_model: base Test CPU | head Another CPU" in done.output and "  kernel:" not in done.output
    for bad, message in (
        ("filesystem", "compare across one of image"),
        ("image=debian12", "name two values, BASE's then HEAD's"),
        ("image=debian12,debian12", "both sides are image debian12"),
        ("image=debian12,debian14", "HEAD"),
        ("kernel=a,b", "name none: --across kernel"),
    ):
        refused = invoke("compare", str(old), str(old if "14" not in bad else elsewhere), "--across", bad)
        assert refused.exit_code == 2 and message in refused.output, (bad, refused.output)
    twice = invoke("compare", str(old), str(elsewhere), "--across", "image", "--across", "image")
    assert twice.exit_code == 2 and "--across: each name once (image, image)" in twice.output


def test_axis_values_fill_the_default() -> None:
    plain, other = _docs("debian12", "ext4", [1.0])[0], _docs("debian13", "ext4", [1.0])[0]
    typed_plain, typed_other = Result.read(plain), Result.read(other)
    assert environment.axis_value(typed_plain, "image") == "debian12"
    assert environment.axis_value(typed_other, "image") == "debian13"
    assert environment.without_axis(plain["params"], "image") == environment.without_axis(other["params"], "image")


def test_compare_across_image_and_kernel_together(tmp_path: Path) -> None:
    """One --across for both kinds: a cell setting (image) and a vm.kernel file at one path (kernel)."""
    own = {"path": "bzImage", "format": "bzImage", "sha256": "c" * 64, "release": "6.13-own"}
    old = _write(tmp_path, "on12", _docs("debian12", "ext4", samples(10.0, seed=1)))
    new = _write(tmp_path, "own13", _docs("debian13", "ext4", samples(10.0, seed=2), kernel_source=own))
    only_image = invoke("compare", str(old), str(new), "--across", "image")
    assert only_image.exit_code == 2 and "different kernels under test" in only_image.output
    done = invoke("compare", str(old), str(new), "--across", "image", "--across", "kernel", "--format", "json")
    assert done.exit_code == 0, done.output
    assert [c["name"] for c in json.loads(done.output)["across"]] == ["image", "kernel"]
