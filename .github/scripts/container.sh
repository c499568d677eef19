#!/usr/bin/env bash
# fsmatrix in its container image, for the workflows (sourced by run-shard.sh and pr-gate.sh, or
# run as `container.sh build CHECKOUT` and `container.sh guest-image CHECKOUT`):
#   container_build CHECKOUT      build (or reuse) the checkout's image (`make container`) and write
#                                 its name to CHECKOUT/.fsmatrix-image
#   guest_image CHECKOUT          build (or reuse) the guest image into the runner's cache, in the
#                                 checkout's container image: the one step that needs the network
#                                 (debootstrap of the guest's base; FSMATRIX_NETWORK=host)
#   fsmatrix_in CHECKOUT ARGS...  run that checkout's fsmatrix: in its image when
#                                 FSMATRIX_IN_CONTAINER=1, else its virtualenv (CHECKOUT/.venv)
# In the image: privileged (loop devices, mounts), no network, /dev/kvm when the runner has it, the
# runner's guest-image cache and work directory as volumes, its machine id (provenance), and the
# current directory and FSMATRIX_MOUNTS (colon-separated paths) at the same paths, so that paths
# mean the same inside.
# FSMATRIX_ENGINE: podman (default) or docker; FSMATRIX_NETWORK: none (default) or host.

container_build() {
  local dir=$1 name
  name=$(make -s -C "$dir" container | tail -n 1)
  case "$name" in
    fsmatrix:*) printf '%s\n' "$name" > "$dir/.fsmatrix-image" ;;
    *) echo "make container did not print an image name (got: $name)" >&2; return 1 ;;
  esac
  echo "$dir: $name"
}

fsmatrix_in() {
  local dir=$1
  shift
  if [ "${FSMATRIX_IN_CONTAINER:-0}" != 1 ]; then
    "$dir/.venv/bin/fsmatrix" "$@"
    return
  fi
  local image cache=${FSMATRIX_CACHE:-/var/cache/fsmatrix} engine=${FSMATRIX_ENGINE:-podman}
  image=$(cat "$dir/.fsmatrix-image")
  mkdir -p "$cache" /var/tmp/fsmatrix
  local args=(run --rm --privileged "--network=${FSMATRIX_NETWORK:-none}" -v "$cache:/var/cache/fsmatrix"
    -v /var/tmp/fsmatrix:/var/tmp/fsmatrix -v "$PWD:$PWD" -w "$PWD")
  if [ -e /dev/kvm ]; then
    args+=(--device /dev/kvm)
  fi
  if [ -s /etc/machine-id ]; then
    args+=(-v /etc/machine-id:/etc/machine-id:ro)
  fi
  local path
  local -a extra=()
  IFS=: read -r -a extra <<< "${FSMATRIX_MOUNTS:-}"
  for path in "${extra[@]}"; do
    if [ -n "$path" ]; then
      args+=(-v "$path:$path")
    fi
  done
  "$engine" "${args[@]}" "$image" "$@"
}

guest_image() {
  FSMATRIX_IN_CONTAINER=1 FSMATRIX_NETWORK=host fsmatrix_in "$1" image build
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  # make container and podman need root (GitHub-hosted runners have sudo; a root runner need not).
  if [ "$(id -u)" -ne 0 ]; then
    exec sudo --preserve-env=PATH,FSMATRIX_ENGINE,FSMATRIX_CACHE bash "$0" "$@"
  fi
  case "${1:-}" in
    build) container_build "${2:?usage: container.sh build CHECKOUT}" ;;
    guest-image) guest_image "${2:?usage: container.sh guest-image CHECKOUT}" ;;
    *) echo "usage: container.sh build|guest-image CHECKOUT" >&2; exit 2 ;;
  esac
fi
