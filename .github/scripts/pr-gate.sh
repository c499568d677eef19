#!/usr/bin/env bash
# pr-gate.yml: run the PR matrix on the base and head checkouts on this one runner, interleaved
# repeat by repeat (base r1, head r1, base r2, ...) so that drift on the machine hits both alike,
# then compare the pairs: PASS, FAIL or NOT DECIDED (docs/statistics-and-gate.md). NOT DECIDED adds
# pairs in rounds (PAIRS_STEP more, judged at Pocock's level for the planned looks: `compare --looks`)
# until PASS or FAIL, MAX_PAIRS or TIME_BUDGET. A regression found is confirmed before the gate fails:
# the flagged cells run again, interleaved, CONFIRM_REPEATS pairs, and only a regression that holds in
# both batches fails; one that does not hold is NOT DECIDED.
# Usage: pr-gate.sh BASE_DIR HEAD_DIR MATRIX REPEATS THRESHOLD RESULTS [CONFIRM_REPEATS]
# (MATRIX: the base's matrix/pr.yaml; REPEATS: the pairs of the first look; CONFIRM_REPEATS defaults to REPEATS)
# MAX_PAIRS (default REPEATS: one look), PAIRS_STEP (default 4): the looks REPEATS:PAIRS_STEP:MAX_PAIRS.
# TIME_BUDGET (minutes, default 0: none): no pairs are added once the gate has run that long.
# NOT_DECIDED: what a NOT DECIDED gate exits with: distinct (3, the default), neutral (0, with a notice
# and the sentence in the step summary: the PR workflow's), fail (1) or pass (0).
# Writes RESULTS/verdict.txt (PASS, FAIL or NOT DECIDED) and RESULTS/pairs.txt (the first batch's pairs).
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
  exec sudo --preserve-env=GITHUB_STEP_SUMMARY,FSMATRIX_IN_CONTAINER,FSMATRIX_ENGINE,FSMATRIX_GATE_BACKEND,FSMATRIX_MOUNTS,BASE_SETTINGS,HEAD_SETTINGS,MAX_PAIRS,PAIRS_STEP,TIME_BUDGET,NOT_DECIDED \
    bash "$0" "$@"
fi
backend=${FSMATRIX_GATE_BACKEND:-host}
case "$backend" in
  host | qemu | libvirt) ;;
  *) echo "FSMATRIX_GATE_BACKEND=$backend: use host, qemu or libvirt" >&2; exit 2 ;;
esac
base=$(realpath "$1") head=$(realpath "$2") matrix=$(realpath "$3")
repeats=$4 threshold=$5 confirm_repeats=${7:-$4}
max_pairs=${MAX_PAIRS:-$repeats} step=${PAIRS_STEP:-4} budget=${TIME_BUDGET:-0} not_decided=${NOT_DECIDED:-distinct}
case "$not_decided" in
  distinct | neutral | fail | pass) ;;
  *) echo "NOT_DECIDED=$not_decided: use distinct, neutral, fail or pass" >&2; exit 2 ;;
esac
for value in "$repeats" "$max_pairs" "$step" "$budget"; do
  case "$value" in
    '' | *[!0-9]*) echo "REPEATS, MAX_PAIRS, PAIRS_STEP and TIME_BUDGET are whole numbers (got '$value')" >&2; exit 2 ;;
  esac
done
[ "$max_pairs" -ge "$repeats" ] || max_pairs=$repeats
[ "$step" -ge 1 ] || step=1
looks=()
if [ "$max_pairs" -gt "$repeats" ]; then
  # compare --looks judges no look of fewer than 3 pairs: refused before any run, not after all of them
  if [ "$repeats" -lt 3 ]; then
    echo "REPEATS=$repeats with MAX_PAIRS=$max_pairs: a gate that adds pairs starts with at least 3" >&2
    exit 2
  fi
  looks=(--looks "$repeats:$step:$max_pairs")
fi
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
# interleave RUN_SUFFIX FROM TO [ONLY]: base and head in pairs (base rFROM, head rFROM, base rFROM+1, ...).
interleave() {
  local suffix=$1 from=$2 count=$3 only=${4:-} r side dir
  for ((r = from; r <= count; r++)); do
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
pairs=$repeats
interleave "" 1 "$pairs"
# The base's fsmatrix compares: the statistics and the verdict are not the PR's to change. The runs
# were made in pairs, so the test is paired. NOT DECIDED (exit 3) adds PAIRS_STEP pairs and looks
# again, each look at the level the planned looks allow; a regression it finds is run again (only
# the flagged cells, CONFIRM_REPEATS pairs) and fails the gate only if it holds there too. No noise
# floor: a calibration measures the drift between separate batches, which pairing cancels.
while :; do
  status=0
  fsmatrix_in "$base" compare "$results/base" "$results/head" --paired --calibration none ${looks[@]+"${looks[@]}"} \
    --fail-on-regression "$threshold" --flagged-to "$results/flagged.txt" --format md > "$results/first-batch.md" || status=$?
  [ "$status" -eq 3 ] || break
  if [ "$pairs" -ge "$max_pairs" ]; then
    echo "== not decided after $pairs pairs, the most the gate runs (MAX_PAIRS)"
    break
  fi
  if [ "$budget" -gt 0 ] && [ "$SECONDS" -ge $((budget * 60)) ]; then
    echo "== not decided after $pairs pairs, and the time budget of $budget minutes is spent (TIME_BUDGET)"
    break
  fi
  next=$((pairs + step))
  [ "$next" -le "$max_pairs" ] || next=$max_pairs
  echo "== not decided after $pairs pairs: $((next - pairs)) more pairs"
  interleave "" $((pairs + 1)) "$next"
  pairs=$next
done
echo "$pairs" > "$results/pairs.txt"
if [ "$status" -eq 1 ]; then
  flagged=$(cat "$results/flagged.txt")
  echo "== regression in $flagged: confirming with $confirm_repeats more pairs of runs of those cells"
  interleave -confirm 1 "$confirm_repeats" "$flagged"
  status=0
  fsmatrix_in "$base" compare "$results/base" "$results/head" --paired --calibration none ${looks[@]+"${looks[@]}"} \
    --fail-on-regression "$threshold" --confirm "$results/base-confirm" "$results/head-confirm" --format md > "$results/comparison.md" || status=$?
else
  cp "$results/first-batch.md" "$results/comparison.md"
fi
case "$status" in
  0) verdict=PASS ;;
  1) verdict=FAIL ;;
  3) verdict="NOT DECIDED" ;;
  *) echo "the comparison failed (exit status $status)" >&2; exit "$status" ;;
esac
case "$failed" in
  *head*) echo "the PR head has failed runs (see the logs above): the gate fails" >&2; verdict=FAIL status=1 ;;
  *base*) echo "warning: the base commit has failed runs; fewer samples to compare" >&2 ;;
esac
echo "$verdict" > "$results/verdict.txt"
# The gate's sentence: why it passed, failed or could not decide (the comparison's own line).
# The last such line: after a confirmation, the verdict of both batches.
sentence=$(grep -E '^- (GATE FAILED|gate PASSED|gate NOT DECIDED)' "$results/comparison.md" | tail -n 1 | sed 's/^- //' || true)
{
  echo "**fsmatrix gate: $verdict** after $pairs pairs${sentence:+: $sentence}"
  echo
  cat "$results/comparison.md"
} > "$results/summary.md"
cat "$results/summary.md"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$results/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
if [ "$verdict" = "NOT DECIDED" ]; then
  case "$not_decided" in
    neutral) echo "::notice title=fsmatrix gate NOT DECIDED::${sentence:-not decided}"; status=0 ;;
    fail) status=1 ;;
    pass) status=0 ;;
  esac
fi
exit "$status"
