#!/usr/bin/env bash
# pr-gate.yml: run the PR matrix on the base and head checkouts on this one runner, interleaved
# repeat by repeat (base r1, head r1, base r2, ...) so that drift on the machine hits both alike,
# then compare the pairs and fail on a significant regression that a second batch confirms.
# A regression found is confirmed before the gate fails: the flagged cells run again, interleaved,
# CONFIRM_REPEATS pairs, and only a regression that holds in both batches fails (docs/statistics-and-gate.md).
# Usage: pr-gate.sh BASE_DIR HEAD_DIR MATRIX REPEATS THRESHOLD RESULTS [CONFIRM_REPEATS]
# (MATRIX: the base's matrix/pr.yaml; CONFIRM_REPEATS defaults to REPEATS)
# FSMATRIX_GATE_BACKEND: where the runs are measured, host (default here), qemu or libvirt: a VM
# backend boots each side's own guest image, so a PR that changes the image is measured as it will run.
# With FSMATRIX_IN_CONTAINER=1, each side runs in its own checkout's container image (container.sh:
# BASE_DIR/.fsmatrix-image and HEAD_DIR/.fsmatrix-image), and the comparison in the base's: the
# judge is not the judged.
# BASE_SETTINGS, HEAD_SETTINGS (optional): settings files of the build under test on each side
# (`fsmatrix run --settings`; gate.yml writes them from its prepare command), the cells keeping their
# ids; BASE_DIR and HEAD_DIR may then be one checkout of fsmatrix. FSMATRIX_MOUNTS (optional):
# more paths the container needs (colon-separated), e.g. what the prepare command built.
set -euo pipefail
# fsmatrix runs losetup, mkfs and mount: become root (GitHub-hosted runners have sudo; a root runner need not).
if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=GITHUB_STEP_SUMMARY,FSMATRIX_IN_CONTAINER,FSMATRIX_ENGINE,FSMATRIX_GATE_BACKEND,FSMATRIX_MOUNTS,BASE_SETTINGS,HEAD_SETTINGS \
    bash "$0" "$@"
fi
backend=${FSMATRIX_GATE_BACKEND:-host}
case "$backend" in
  host | qemu | libvirt) ;;
  *) echo "FSMATRIX_GATE_BACKEND=$backend: use host, qemu or libvirt" >&2; exit 2 ;;
esac
base=$(realpath "$1") head=$(realpath "$2") matrix=$(realpath "$3")
repeats=$4 threshold=$5 confirm_repeats=${7:-$4}
mkdir -p "$6"
results=$(realpath "$6")
# shellcheck source=.github/scripts/container.sh
. "$(dirname "$0")/container.sh"
declare -A settings=()
for side in base head; do
  file=BASE_SETTINGS
  [ "$side" = head ] && file=HEAD_SETTINGS
  if [ -n "${!file:-}" ]; then
    settings[$side]=$(realpath "${!file}")
  fi
done
FSMATRIX_MOUNTS="$base:$head:$(dirname "$matrix"):$results${FSMATRIX_MOUNTS:+:$FSMATRIX_MOUNTS}"
for file in "${settings[@]}"; do
  FSMATRIX_MOUNTS="$FSMATRIX_MOUNTS:$(dirname "$file")"
done
export FSMATRIX_MOUNTS
failed=""
# interleave RUN_SUFFIX REPEATS [ONLY]: base and head in pairs (base r1, head r1, base r2, ...).
interleave() {
  local suffix=$1 count=$2 only=${3:-} r side dir
  for ((r = 1; r <= count; r++)); do
    for side in base head; do
      dir=$base
      [ "$side" = head ] && dir=$head
      echo "== $side$suffix, repeat $r of $count on the $backend backend${only:+ (cells $only)}"
      # --repeat r with resume: each pass adds one repeat per cell; a failed run is retried on the next pass.
      if ! (cd "$dir" && fsmatrix_in . run "$matrix" --backend "$backend" --results "$results" --run-id "$side$suffix" --repeat "$r" \
        ${only:+--only "$only"} ${settings[$side]:+--settings "${settings[$side]}"}); then
        failed="$failed $side"
      fi
    done
  done
}
interleave "" "$repeats"
status=0
# The base's fsmatrix compares: the statistics and the verdict are not the PR's to change. The runs
# were made in pairs, so the test is paired; a regression it finds is run again (only the flagged
# cells, CONFIRM_REPEATS pairs) and fails the gate only if it holds there too. No noise floor: a
# calibration measures the drift between separate batches, which pairing cancels.
fsmatrix_in "$base" compare "$results/base" "$results/head" --paired --calibration none \
  --fail-on-regression "$threshold" --flagged-to "$results/flagged.txt" --format md > "$results/first-batch.md" || status=$?
if [ "$status" -eq 1 ]; then
  flagged=$(cat "$results/flagged.txt")
  echo "== regression in $flagged: confirming with $confirm_repeats more pairs of runs of those cells"
  interleave -confirm "$confirm_repeats" "$flagged"
  status=0
  fsmatrix_in "$base" compare "$results/base" "$results/head" --paired --calibration none \
    --fail-on-regression "$threshold" --confirm "$results/base-confirm" "$results/head-confirm" --format md > "$results/comparison.md" || status=$?
else
  cp "$results/first-batch.md" "$results/comparison.md"
fi
cat "$results/comparison.md"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$results/comparison.md" >> "$GITHUB_STEP_SUMMARY"
fi
case "$failed" in
  *head*) echo "the PR head has failed runs (see the logs above): the gate fails" >&2; status=1 ;;
  *base*) echo "warning: the base commit has failed runs; fewer samples to compare" >&2 ;;
esac
exit "$status"
