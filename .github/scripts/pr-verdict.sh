#!/usr/bin/env bash
# pr-verdict.yml: the gate's verdict from pr-gate's uploaded results, computed by the default
# branch's fsmatrix, and posted as the check "fsmatrix/pr-verdict" on the PR head: success on PASS,
# failure on FAIL, neutral on NOT DECIDED (the sentence says what the pairs rule out).
# A results directory without both sides, or a head side with failed runs, fails the verdict.
# Usage: pr-verdict.sh RESULTS THRESHOLD [LOOKS]   (LOOKS: pr-gate's FIRST:STEP:MOST, `compare --looks`;
# env: HEAD_SHA, REPO, GH_TOKEN, RUN_URL to post the check)
set -euo pipefail
results=$1 threshold=$2 looks=${3:-}
status=0
description=""
if [ ! -d "$results/base" ] || [ ! -d "$results/head" ]; then
  status=1 description="pr-gate uploaded no results for both sides"
elif grep -rlE '"status": *"(error|failed|timeout)"' "$results/head" --include='r*.json' > /dev/null; then
  status=1 description="the PR head has failed runs"
else
  # The gate as pr-gate.sh applies it: paired runs, judged at the level of its planned looks, and a
  # regression counts only when the confirmation batch (base-confirm, head-confirm) shows it again;
  # one without it fails.
  .venv/bin/fsmatrix compare "$results/base" "$results/head" --paired --calibration none ${looks:+--looks "$looks"} \
    --fail-on-regression "$threshold" --confirm "$results/base-confirm" "$results/head-confirm" \
    --format md > verdict.md || status=$?
  cat verdict.md
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    cat verdict.md >> "$GITHUB_STEP_SUMMARY"
  fi
  sentence=$(grep -E '^- (GATE FAILED|gate PASSED|gate NOT DECIDED)' verdict.md | tail -n 1 | sed 's/^- //' || true)
  case $status in
    0) description="PASS: $sentence" ;;
    1) description="FAIL: $sentence" ;;
    3) description="NOT DECIDED: $sentence" ;;
    *) description="the comparison failed (exit status $status)" ;;
  esac
fi
echo "verdict: $description"
if [ -n "${HEAD_SHA:-}" ] && [ -n "${REPO:-}" ]; then
  case $status in
    0) conclusion=success ;;
    3) conclusion=neutral ;;
    *) conclusion=failure ;;
  esac
  gh api "repos/$REPO/check-runs" -f name=fsmatrix/pr-verdict -f head_sha="$HEAD_SHA" -f status=completed \
    -f conclusion="$conclusion" -f details_url="${RUN_URL:-}" -f "output[title]=${description:0:200}" \
    -f "output[summary]=$description" > /dev/null
fi
# NOT DECIDED is not a failure of this job: the check it posts says neutral.
[ "$status" -eq 3 ] && status=0
exit "$status"
