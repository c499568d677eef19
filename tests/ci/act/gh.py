"""A stand-in for the GitHub CLI under act (tests/ci/test_act.py puts it first on the jobs' PATH as `gh`).

Every call is recorded in FSMATRIX_ACT_GH_LOG (its arguments one a line, then "--"). `gh api
repos/OWNER/REPO/check-runs -f FIELD=VALUE ...` is answered as GitHub's REST API answers the POST
(`-f` fields make `gh api` a POST; `output[title]` a nested field): a request GitHub refuses exits 1
with gh's message (no token: gh's own; a missing or unknown field value: HTTP 422), else the check
run is stored as JSON in FSMATRIX_ACT_CHECKS/OWNER/REPO/HEAD_SHA/NAME.json and printed. Anything else
(act's own `gh auth token`) prints nothing.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
from pathlib import Path

STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out")


def fields(args: list[str]) -> dict[str, object]:
    """`-f name=value` and `-f output[title]=value` as the JSON body gh sends."""
    body: dict[str, object] = {}
    for flag, value in itertools.pairwise(args):
        if flag not in ("-f", "--raw-field"):
            continue
        key, _, text = value.partition("=")
        nested = re.fullmatch(r"(\w+)\[(\w+)\]", key)
        if nested:
            inner = body.setdefault(nested[1], {})
            assert isinstance(inner, dict)
            inner[nested[2]] = text
        else:
            body[key] = text
    return body


def refusal(body: dict[str, object]) -> str:
    """Why GitHub answers 422 to this check run, or ""."""
    for key in ("name", "head_sha"):
        if not body.get(key):
            return f"{key} is missing"
    status, conclusion = body.get("status", "queued"), body.get("conclusion")
    if status not in STATUSES:
        return f"status {status!r} is not one of {', '.join(STATUSES)}"
    if conclusion is not None and conclusion not in CONCLUSIONS:
        return f"conclusion {conclusion!r} is not one of {', '.join(CONCLUSIONS)}"
    if status == "completed" and conclusion is None:
        return "conclusion is required when status is completed"
    output = body.get("output")
    if output is not None and not (isinstance(output, dict) and output.get("title") and output.get("summary")):
        return "output needs a title and a summary"
    return ""


def main(args: list[str]) -> int:
    with open(os.environ["FSMATRIX_ACT_GH_LOG"], "a") as log:
        log.write("".join(f"{arg}\n" for arg in args) + "--\n")
    if args[:1] != ["api"]:
        return 0
    if not (os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN")):
        print(
            "gh: To use GitHub CLI in a GitHub Actions workflow, set the GH_TOKEN environment variable.",
            file=sys.stderr,
        )
        return 4
    endpoint = re.fullmatch(r"/?repos/([\w.-]+/[\w.-]+)/check-runs", args[1] if len(args) > 1 else "")
    if not endpoint:
        print(f"gh (stand-in): no stand-in for `gh {' '.join(args)}`", file=sys.stderr)
        return 1
    body = fields(args)
    why = refusal(body)
    if why:
        print(f"gh: Validation Failed: {why} (HTTP 422)", file=sys.stderr)
        return 1
    if "conclusion" in body:
        body["status"] = "completed"  # as GitHub does
    store = Path(os.environ["FSMATRIX_ACT_CHECKS"]) / endpoint[1] / str(body["head_sha"])
    store.mkdir(parents=True, exist_ok=True)
    (store / f"{str(body['name']).replace('/', '_')}.json").write_text(json.dumps(body, indent=1))
    print(json.dumps({"id": 1, **body}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
