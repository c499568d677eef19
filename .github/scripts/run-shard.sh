#!/usr/bin/env bash
# One fan-out job of matrix.yml: run one shard's cells and keep its results for the merge job.
# Usage: run-shard.sh MATRIX BACKEND CELLS RESULTS [REPEATS]
# DESIGN: the shard's design record (`matrix expand --format github` gives each shard the matrix's
# design: its JSON), so that every shard runs the cells of the one design chosen there; empty for a cross.
# With FSMATRIX_IN_CONTAINER=1, fsmatrix runs in this checkout's container image (container.sh).
set -euo pipefail
# fsmatrix runs losetup, mkfs and mount: become root (GitHub-hosted runners have sudo; a root runner need not).
if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=GITHUB_STEP_SUMMARY,FSMATRIX_IN_CONTAINER,FSMATRIX_ENGINE,DESIGN bash "$0" "$@"
fi
matrix=$1 backend=$2 cells=$3 results=$4 repeats=${5:-}
# --no-race: a shard is one job's part of the matrix and the merge keeps no race, so fixed repeats
# (the matrix's repeat, or REPEATS), as `fsmatrix run --executor slurm` runs its tasks.
args=(run "$matrix" --backend "$backend" --only "$cells" --results "$results" --run-id matrix --no-race)
if [ -n "$repeats" ]; then
  args+=(--repeat "$repeats")
fi
if [ -n "${DESIGN:-}" ]; then
  # In the checkout: the container sees it at the same path (container.sh mounts $PWD).
  printf '%s\n' "$DESIGN" > .fsmatrix-shard-design.json
  args+=(--design-from .fsmatrix-shard-design.json)
fi
# shellcheck source=.github/scripts/container.sh
. "$(dirname "$0")/container.sh"
fsmatrix_in . "${args[@]}"
