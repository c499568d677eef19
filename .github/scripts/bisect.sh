#!/usr/bin/env bash
# bisect.yml: `fsmatrix bisect` with the workflow's inputs (from the environment: REPO GOOD BAD
# MATRIX_FILE CELL PREPARE SETTINGS_FILE THRESHOLD BACKEND RESULTS, optionally WORKDIR, and FSMATRIX:
# the fsmatrix to run), then its summary (bisect.md, whose first line is the finding) to the job's step summary.
# Exit status: fsmatrix bisect's (0: a culprit named and confirmed; 1: none; 2: bad input).
set -euo pipefail
# fsmatrix runs losetup, mkfs and mount: become root (GitHub-hosted runners have sudo; a root runner need not).
if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=GITHUB_STEP_SUMMARY,REPO,GOOD,BAD,MATRIX_FILE,CELL,PREPARE,SETTINGS_FILE,THRESHOLD,BACKEND,RESULTS,WORKDIR,FSMATRIX \
    bash "$0" "$@"
fi
# The checkout belongs to the runner's user: git would refuse to read it as root ("dubious ownership").
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
args=(bisect --repo "$REPO" --good "$GOOD" --bad "$BAD" --matrix "$MATRIX_FILE" --only "$CELL"
  --threshold "${THRESHOLD:-5%}" --backend "${BACKEND:-qemu}" --results "$RESULTS"
  --workdir "${WORKDIR:-/var/tmp/fsmatrix}")
if [ -n "${PREPARE:-}" ]; then
  args+=(--prepare "$PREPARE")
fi
if [ -n "${SETTINGS_FILE:-}" ]; then
  args+=(--settings-file "$SETTINGS_FILE")
fi
status=0
"$FSMATRIX" "${args[@]}" || status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$RESULTS/bisect.md" ]; then
  cat "$RESULTS/bisect.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
