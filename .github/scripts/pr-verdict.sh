#!/usr/bin/env bash
# pr-verdict.yml: the gate's verdict from pr-gate's uploaded results, computed by the default
# branch's fsmatrix, and posted as the commit status "fsmatrix/pr-verdict" on the PR head.
# A results directory without both sides, or a head side with failed runs, fails the verdict.
# Usage: pr-verdict.sh RESULTS THRESHOLD   (env: HEAD_SHA, REPO, GH_TOKEN, RUN_URL to post the status)
set -euo pipefail
results=$1 threshold=$2
status=0
description=""
if [ ! -d "$results/base" ] || [ ! -d "$results/head" ]; then
  status=1 description="pr-gate uploaded no results for both sides"
elif grep -rlE '"status": *"(error|failed|timeout)"' "$results/head" --include='r*.json' > /dev/null; then
  status=1 description="the PR head has failed runs"
else
  # The gate as pr-gate.sh applies it: paired runs, and a regression counts only when the
  # confirmation batch (base-confirm, head-confirm) shows it again; one without it fails.
  .venv/bin/fsmatrix compare "$results/base" "$results/head" --paired --calibration none \
    --fail-on-regression "$threshold" --confirm "$results/base-confirm" "$results/head-confirm" \
    --format md > verdict.md || status=$?
  cat verdict.md
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    cat verdict.md >> "$GITHUB_STEP_SUMMARY"
  fi
  case $status in
    0) description="passed: nothing significantly worse with an estimate above $threshold" ;;
    1) description="failed: significantly worse with an estimate above $threshold" ;;
    *) description="the comparison failed (exit status $status)" ;;
  esac
fi
echo "verdict: $description"
if [ -n "${HEAD_SHA:-}" ] && [ -n "${REPO:-}" ]; then
  state=success
  [ "$status" -ne 0 ] && state=failure
  gh api "repos/$REPO/statuses/$HEAD_SHA" -f state="$state" -f context=fsmatrix/pr-verdict \
    -f description="$description" -f target_url="${RUN_URL:-}" > /dev/null
fi
exit "$status"
