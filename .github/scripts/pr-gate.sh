#!/usr/bin/env bash
# pr-gate.yml: run the PR matrix on the base and head checkouts on this one runner, interleaved
# repeat by repeat (base r1, head r1, base r2, ...) so that drift on the machine hits both alike,
# then compare them and fail on a significant regression.
# Usage: pr-gate.sh BASE_DIR HEAD_DIR MATRIX REPEATS THRESHOLD RESULTS (MATRIX: the base's matrix/pr.yaml)
# With FSMATRIX_IN_CONTAINER=1, each side runs in its own checkout's container image (container.sh:
# BASE_DIR/.fsmatrix-image and HEAD_DIR/.fsmatrix-image), and the comparison in the base's: the
# judge is not the judged.
set -euo pipefail
# fsmatrix runs losetup, mkfs and mount: become root (GitHub-hosted runners have sudo; a root runner need not).
if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=GITHUB_STEP_SUMMARY,FSMATRIX_IN_CONTAINER,FSMATRIX_ENGINE bash "$0" "$@"
fi
base=$(realpath "$1") head=$(realpath "$2") matrix=$(realpath "$3")
repeats=$4 threshold=$5
mkdir -p "$6"
results=$(realpath "$6")
# shellcheck source=.github/scripts/container.sh
. "$(dirname "$0")/container.sh"
FSMATRIX_MOUNTS="$base:$head:$(dirname "$matrix"):$results"
export FSMATRIX_MOUNTS
failed=""
for ((r = 1; r <= repeats; r++)); do
  for side in base head; do
    dir=$base
    [ "$side" = head ] && dir=$head
    echo "== $side, repeat $r of $repeats"
    # --repeat r with resume: each pass adds one repeat per cell; a failed run is retried on the next pass.
    if ! (cd "$dir" && fsmatrix_in . run "$matrix" --results "$results" --run-id "$side" --repeat "$r"); then
      failed="$failed $side"
    fi
  done
done
# The runner's own noise, measured once with
#   fsmatrix calibrate matrix/pr.yaml --runs 5 --results /var/cache/fsmatrix
# becomes the gate's noise floor (compare --calibration auto looks in <results>/calibration).
calibration=${FSMATRIX_CALIBRATION_DIR:-/var/cache/fsmatrix/calibration}
if [ -d "$calibration" ]; then
  mkdir -p "$results/calibration"
  cp -r "$calibration/." "$results/calibration/"
fi
status=0
# The base's fsmatrix compares: the statistics and the verdict are not the PR's to change.
fsmatrix_in "$base" compare "$results/base" "$results/head" --fail-on-regression "$threshold" \
  --format md > "$results/comparison.md" || status=$?
cat "$results/comparison.md"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$results/comparison.md" >> "$GITHUB_STEP_SUMMARY"
fi
case "$failed" in
  *head*) echo "the PR head has failed runs (see the logs above): the gate fails" >&2; status=1 ;;
  *base*) echo "warning: the base commit has failed runs; fewer samples to compare" >&2 ;;
esac
exit "$status"
