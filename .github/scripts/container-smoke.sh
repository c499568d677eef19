#!/usr/bin/env bash
# ci.yml: a smoke test of a checkout's container image (built first with `container.sh build`):
# fsmatrix in it expands the quick matrix and runs one small host-backend 3n+1 cell (a loop device,
# ext4: the container is privileged), whose result must name the image it ran in.
# Usage: container-smoke.sh CHECKOUT WORK_DIR
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=FSMATRIX_ENGINE bash "$0" "$@"
fi
# shellcheck source=.github/scripts/container.sh
. "$(dirname "$0")/container.sh"
checkout=$(realpath "$1")
mkdir -p "$2"
work=$(realpath "$2")
image=$(cat "$checkout/.fsmatrix-image")
export FSMATRIX_IN_CONTAINER=1 FSMATRIX_MOUNTS="$work"
cd "$checkout"
fsmatrix_in . --version
fsmatrix_in . matrix expand matrix/quick.yaml
cat > "$work/smoke.yaml" <<'YAML'
name: smoke
axes:
  filesystem: [ext4]
  workload:
    - threen1: {start: 1, end: 20000, workers: 2, block: 5000}
defaults:
  storage.disk_size: 1G
  gtm.global_buffers: 4000
YAML
fsmatrix_in . run "$work/smoke.yaml" --backend host --results "$work/results" --run-id smoke
result=$(find "$work/results" -name 'r*.json' | head -n 1)
if [ -z "$result" ] || ! grep -q '"status": "passed"' "$result" || ! grep -q "\"name\": \"$image\"" "$result"; then
  echo "no passed result naming $image under $work/results" >&2
  exit 1
fi
echo "smoke test passed in $image: $result"
