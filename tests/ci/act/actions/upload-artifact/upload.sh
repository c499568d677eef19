#!/usr/bin/env bash
# actions/upload-artifact stand-in (action.yml): PATHS (one a line, relative to the workspace)
# into FSMATRIX_ACT_ARTIFACTS/RUN_ID/NAME. One directory: its contents; several paths: each kept
# below their least common ancestor.
set -euo pipefail
store=${FSMATRIX_ACT_ARTIFACTS:?FSMATRIX_ACT_ARTIFACTS names no artifact directory}
cd "$GITHUB_WORKSPACE"
found=()
while IFS= read -r line; do
  line=${line#"${line%%[![:space:]]*}"}
  line=${line%"${line##*[![:space:]]}"}
  if [ -n "$line" ] && [ -e "$line" ]; then
    found+=("$(realpath "$line")")
  fi
done <<< "$PATHS"
if [ "${#found[@]}" -eq 0 ]; then
  message="no files found at: $(echo "$PATHS" | xargs)"
  case "$IF_NO_FILES_FOUND" in
    error) echo "upload-artifact: $message" >&2; exit 1 ;;
    warn) echo "::warning::upload-artifact: $message; no artifact uploaded" ;;
  esac
  exit 0
fi
dest=$store/$RUN_ID/$NAME
if [ -e "$dest" ] && [ "$OVERWRITE" != true ]; then
  echo "upload-artifact: an artifact named $NAME exists in run $RUN_ID" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
if [ "${#found[@]}" -eq 1 ] && [ -d "${found[0]}" ]; then
  cp -a "${found[0]}/." "$dest/"
else
  root=$(dirname "${found[0]}")
  for path in "${found[@]}"; do
    until [ "$root" = / ] || [ "${path#"$root"/}" != "$path" ]; do
      root=$(dirname "$root")
    done
  done
  for path in "${found[@]}"; do
    relative=${path#"$root"/}
    mkdir -p "$dest/$(dirname "$relative")"
    cp -a "$path" "$dest/$relative"
  done
fi
echo "uploaded artifact $NAME: $(find "$dest" -type f | wc -l) files"
