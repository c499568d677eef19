#!/usr/bin/env bash
# actions/download-artifact stand-in (action.yml).
set -euo pipefail
store=${FSMATRIX_ACT_ARTIFACTS:?FSMATRIX_ACT_ARTIFACTS names no artifact directory}/$RUN_ID
cd "$GITHUB_WORKSPACE"
mkdir -p "$WHERE"
if [ -n "$NAME" ]; then
  if [ ! -d "$store/$NAME" ]; then
    echo "download-artifact: no artifact named $NAME in run $RUN_ID" >&2
    exit 1
  fi
  cp -a "$store/$NAME/." "$WHERE/"
  echo "downloaded artifact $NAME into $WHERE"
  exit 0
fi
count=0
for artifact in "$store"/*/; do
  artifact=$(basename "$artifact")
  # shellcheck disable=SC2053 # PATTERN is a glob
  if [ ! -d "$store/$artifact" ] || [[ $artifact != ${PATTERN:-*} ]]; then
    continue
  fi
  into=$WHERE/$artifact
  [ "$MERGE" = true ] && into=$WHERE
  mkdir -p "$into"
  cp -a "$store/$artifact/." "$into/"
  count=$((count + 1))
done
echo "downloaded $count artifacts${PATTERN:+ matching $PATTERN} into $WHERE"
