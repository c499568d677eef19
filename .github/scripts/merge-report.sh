#!/usr/bin/env bash
# The final job of matrix.yml: merge the shards' results, write the HTML report and the summary.
# Usage: merge-report.sh SHARDS_DIR RESULTS REPORT_DIR
set -euo pipefail
shards=$1 results=$2 report=$3
mapfile -t sources < <(find "$shards" -mindepth 1 -maxdepth 1 -type d | sort)
if [ "${#sources[@]}" -eq 0 ]; then
  echo "no shard results under $shards" >&2
  exit 1
fi
.venv/bin/fsmatrix results merge "${sources[@]}" --into "$results"
.venv/bin/fsmatrix report "$results/matrix" --html "$report"
.venv/bin/fsmatrix report "$results/matrix" --format md > "$report/summary.md"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$report/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
