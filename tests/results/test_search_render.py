"""A search's answer rendered (results/render/search.py) from hand-built answers: the model held, the
model was wrong, and no answer (a reason); Markdown, the self-contained page and the files written.
The JSON is ``SearchAnswer.to_json`` (the engine's): here through a stand-in answer whose to_json is
its own, to check what the CLI writes around it."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from fsmatrix.results.render import search as render
from fsmatrix.results.verdict.search import Ratio, SearchAnswer, StageRecord
from fsmatrix.results.verdict.space import ASSUMPTION, Contrast, SettingEffect, Space, SpaceSetting

SPACE = Space(
    (
        SpaceSetting("gtm.global_buffers", ("35000", "64")),
        SpaceSetting("gtm.sync_io", ("off", "on")),
        SpaceSetting("mount_options", ("none", "noatime")),
    ),
    tuple((a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)),
    "elapsed_s",
    "lower",
)
EFFECTS = (
    SettingEffect("gtm.global_buffers", "64", "35000", 1.9, 1.8, 2.0, "matters"),
    SettingEffect("gtm.sync_io", "on", "off", 1.3, 1.25, 1.36, "matters"),
    SettingEffect("mount_options", "noatime", "none", 0.99, 0.97, 1.02, "equivalent"),
)
STAGES = (
    StageRecord("screen", "Plackett–Burman, 4 cells", 5, 10),
    StageRecord("refine", "full cross of 2 settings, 4 cells", 4, 8),
    StageRecord("race", "race of 2 candidates", 2, 6),
    StageRecord("confirm", "5 fresh runs of the winner and of the baseline", 2, 10),
)


def held() -> SearchAnswer:
    return SearchAnswer(
        space=SPACE,
        delta=0.05,
        alpha=0.05,
        best=(0, 0, 1),
        observed=Ratio(0.62, 0.58, 0.66),
        predicted=Ratio(0.60, 0.52, 0.70),
        model_held=True,
        effects=EFFECTS,
        fixed=(EFFECTS[2],),
        candidates=(Contrast((0, 0, 1), 1.0, 1.0, 1.0, False), Contrast((0, 0, 0), 1.01, 0.96, 1.06, False)),
        untried=3,
        untried_bound=1.032,
        bound_holds=True,
        assumption=ASSUMPTION,
        runs_used=34,
        full_cross_runs=24,
        stages=STAGES,
    )


def test_the_model_held() -> None:
    text = render.markdown(held(), "s (s)")
    assert (
        "**Best found: mount_options=noatime, better than the baseline — elapsed time 0.62× the baseline [0.58, 0.66] "
        "on 5 fresh runs each; the model predicted 0.60× [0.52, 0.70]: it held.**"
    ) in text
    assert "| gtm.global_buffers | 64 against 35000 | 1.90× [1.80, 2.00] | matters |" in text
    assert "- mount_options fixed at none: noatime gave 0.99× [0.97, 1.02], equivalent" in text
    assert "| mount_options=noatime | 1.00× [1.00, 1.00] | no |" in text
    assert (
        "3 of the space's 8 configurations were never run: the model bounds every one at most 0.97× the elapsed "
        f"time, 3.2 % better, than the one found (at most δ = 5 %: yes), assuming {ASSUMPTION}."
    ) in text
    assert "Runs used: 34, against the full cross's 24 at 3 repeats (142 %)." in text
    assert "| confirm | 5 fresh runs of the winner and of the baseline | 2 | 10 |" in text


def test_the_model_was_wrong() -> None:
    wrong = dataclasses.replace(
        held(), observed=Ratio(0.9, 0.85, 0.95), model_held=False, untried_bound=None, bound_holds=None
    )
    text = render.markdown(wrong, "s")
    assert "the model predicted 0.60× [0.52, 0.70]: it did not hold. The model was wrong there" in text
    assert "rests on the candidates' own runs alone" in text
    assert "3 of the space's 8 configurations were never run: the model did not hold at the confirmation" in text


def test_no_answer_says_why() -> None:
    none = dataclasses.replace(
        held(),
        best=None,
        observed=None,
        predicted=None,
        model_held=None,
        candidates=(),
        untried=8,
        untried_bound=None,
        bound_holds=None,
        stages=STAGES[:1],
        runs_used=10,
        reason="not enough data: every screening run of gtm.global_buffers=64 failed",
    )
    text = render.markdown(none, "s")
    assert "**No answer: not enough data: every screening run of gtm.global_buffers=64 failed.**" in text
    assert "the model gives no bound on them" in text and "Runs used: 10" in text
    assert "Best found" not in render.html_page(none, "s")


def test_the_baseline_found_is_said_so() -> None:
    same = dataclasses.replace(held(), best=SPACE.baseline, observed=Ratio(1.0, 0.97, 1.03))
    assert render.headline(same).startswith("Best found: the baseline itself — elapsed time 1.00×")


def test_the_page_is_self_contained_with_its_pictures() -> None:
    page = render.html_page(held(), "s <x>")
    assert "Content-Security-Policy" in page and "s &lt;x&gt;" in page
    assert page.count("<svg") == 3  # the effects, the candidates, the stages
    assert "Best found: mount_options=noatime" in page and "it held." in page
    urls = set(re.findall(r"(?:src|href)=\"([^\"]+)\"", page))
    assert not urls  # nothing to fetch


class StandIn(SearchAnswer):
    """An answer whose JSON is its own (``SearchAnswer.to_json`` is the engine's)."""

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "best": list(self.best) if self.best else None}


def test_the_files_written(tmp_path: Path) -> None:
    from fsmatrix.matrix import SearchSettings
    from fsmatrix.search import lab

    answer = StandIn(**{f.name: getattr(held(), f.name) for f in dataclasses.fields(SearchAnswer)})
    place = lab.SearchPlace(tmp_path, "run")
    written = render.write_answer(answer, "s", place.directory)
    assert [p.name for p in written] == ["search.md", "search.html"]
    assert written[0].read_text().startswith("# fsmatrix search: s")
    record = lab.write_record(place, SearchSettings(), SPACE, [{"name": "screen"}], answer.to_json())
    stored = json.loads(record.read_text())
    assert stored["answer"] == {"version": 1, "best": [0, 0, 1]} and stored["space"]["configurations"] == 8


def test_the_notes_are_shown() -> None:
    """What the stages noted (a race with no best, a model left unchecked) is in the text and the page."""
    noted = dataclasses.replace(
        held(), notes=("the race found no best (no candidate passed): the predicted best is taken",)
    )
    assert "- Note: the race found no best" in render.markdown(noted, "s")
    assert "<p>Note: the race found no best" in render.html_page(noted, "s")
    assert "Note:" not in render.markdown(held(), "s")


def test_a_best_found_not_separated_from_the_baseline_is_no_winner() -> None:
    # The search's best measured 1.09× the baseline [0.73, 1.63] on fresh runs (a README audit's run):
    # not a winner, and the runs that would settle it are said.
    unsure = dataclasses.replace(held(), observed=Ratio(1.09, 0.73, 1.63), settle_repeats=None)
    assert unsure.shown == "not separated"
    assert render.headline(unsure).startswith(
        "Nothing shown better than the baseline: the search's best, mount_options=noatime, is not separated from it "
        "— elapsed time 1.09× the baseline [0.73, 1.63] on 5 fresh runs each (more than 30 fresh runs each would "
        "settle ±5 %)"
    )
    assert "(12 fresh runs each would settle ±5 %)" in render.headline(dataclasses.replace(unsure, settle_repeats=12))
    assert unsure.to_json()["shown"] == "not separated"


def test_equivalent_and_worse_are_no_winner_either() -> None:
    same = dataclasses.replace(held(), observed=Ratio(1.01, 0.98, 1.03))
    assert render.headline(same).startswith(
        "Nothing better than the baseline: the search's best, mount_options=noatime, is equivalent to it within ±5 %"
    )
    worse = dataclasses.replace(held(), observed=Ratio(1.2, 1.1, 1.3))
    assert render.headline(worse).startswith("Nothing better than the baseline: the search's best, mount_options=")
    assert "was worse on fresh runs" in render.headline(worse)


def test_where_higher_is_better_the_words_turn_around() -> None:
    tps = dataclasses.replace(SPACE, metric="tps", direction="higher")
    faster = dataclasses.replace(held(), space=tps, observed=Ratio(1.3, 1.2, 1.4), untried_bound=1.25)
    assert faster.shown == "better" and render.headline(faster).startswith("Best found: mount_options=noatime, better")
    assert "at most 1.25× the TPS, 25 % better, than the one found" in render.untried_line(faster)
    assert dataclasses.replace(faster, observed=Ratio(0.8, 0.7, 0.9)).shown == "worse"
