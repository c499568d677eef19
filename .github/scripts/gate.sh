#!/usr/bin/env bash
# gate.yml (the gate other repositories call): build what is under test in the caller's base and
# head checkouts with PREPARE, then pr-gate.sh with fsmatrix's checkout on both sides, each side's
# runs with the settings its build printed (`fsmatrix run --settings`; the cells keep their ids).
# Writes verdict=pass|fail|not-decided to GITHUB_OUTPUT; exits as pr-gate.sh does (1: a confirmed
# regression or failed head runs; NOT DECIDED as NOT_DECIDED says; a prepare command that fails fails the gate).
# Usage: gate.sh FSMATRIX_DIR BASE_DIR HEAD_DIR RESULTS
# (env: MATRIX_FILE, a path in BASE_DIR; PREPARE, may be empty; REPEATS, CONFIRM_REPEATS, THRESHOLD; and what
# pr-gate.sh reads: MAX_PAIRS, PAIRS_STEP, TIME_BUDGET, NOT_DECIDED, FSMATRIX_GATE_BACKEND)
set -euo pipefail
fsmatrix=$(realpath "$1") base=$(realpath "$2") head=$(realpath "$3")
mkdir -p "$4"
results=$(realpath "$4")
verdict() {
  echo "verdict=$1" >> "${GITHUB_OUTPUT:-/dev/null}"
  echo "verdict: $1"
}
matrix=$base/$MATRIX_FILE
if [ ! -f "$matrix" ]; then
  echo "gate: the base checkout has no matrix file $MATRIX_FILE (input 'matrix': a path in the caller's repository)" >&2
  exit 2
fi
if [ -n "${PREPARE:-}" ]; then
  mkdir -p "$results/settings"
  for side in base head; do
    dir=$base
    [ "$side" = head ] && dir=$head
    echo "== prepare the $side: $PREPARE"
    if ! (cd "$dir" && bash -euo pipefail -c "$PREPARE") > "$results/settings/$side.yaml"; then
      echo "gate: the prepare command failed in the $side checkout" >&2
      verdict fail
      exit 1
    fi
    echo "settings of the $side:"
    cat "$results/settings/$side.yaml"
  done
  export BASE_SETTINGS=$results/settings/base.yaml HEAD_SETTINGS=$results/settings/head.yaml
fi
# What the builds left in the checkouts is seen at the same paths in the container.
export FSMATRIX_MOUNTS="$base:$head"
status=0
bash "$fsmatrix/.github/scripts/pr-gate.sh" "$fsmatrix" "$fsmatrix" "$matrix" "$REPEATS" "$THRESHOLD" "$results" \
  "$CONFIRM_REPEATS" || status=$?
case "$(cat "$results/verdict.txt" 2> /dev/null)" in
  PASS) verdict pass ;;
  "NOT DECIDED") verdict not-decided ;;
  *) verdict fail ;;
esac
exit "$status"
