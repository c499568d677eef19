#!/usr/bin/env bash
# nektos/act for tests/ci/test_act.py (`make act`; the tests call it too): built from source with
# `go install` through the Go module proxy into ACT_DIR (default: the fsmatrix cache), and reused
# when it is there. Prints the binary's path as its last line.
# The Go toolchain: ACT_GO, `go` on PATH or /usr/local/go, else Debian's golang-go (installed here). act
# needs a newer Go than Debian 12's 1.19: a Go >= 1.21 fetches the toolchain act's go.mod names
# from the module proxy by itself (GOTOOLCHAIN=auto); for an older one this script fetches that
# toolchain module (golang.org/toolchain) with `go mod download` and builds with it.
set -euo pipefail
version=v0.2.89
toolchain=go1.25.0 # act v0.2.89's go.mod: "go 1.25.0"
dir=${ACT_DIR:-${FSMATRIX_CACHE:-/var/cache/fsmatrix}/act/$version}
act=$dir/bin/act
if [ -x "$act" ] && "$act" --version 2>/dev/null | grep -qx "act version ${version#v}"; then
  echo "$act"
  exit 0
fi

find_go() {
  local candidate
  for candidate in "${ACT_GO:-}" "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

go=$(find_go) || {
  echo "act: no Go toolchain; installing Debian's golang-go" >&2
  as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    as_root=(sudo)
  fi
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends golang-go ca-certificates git > /dev/null
  go=$(find_go)
}
# "go1.19.8" -> 19: the minor version of Go 1.x.
minor=$("$go" env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "$minor" -lt 21 ]; then
  # Too old to switch toolchains: take act's from the module proxy (a module like any other; the
  # zip keeps no file modes, so the programs get their execute bits back here).
  tc_dir=$(dirname "$dir")/$toolchain
  if [ ! -x "$tc_dir/bin/go" ]; then
    echo "act: $("$go" env GOVERSION) is too old to build act; fetching $toolchain from the module proxy" >&2
    src=$("$go" mod download -json "golang.org/toolchain@v0.0.1-$toolchain.linux-amd64" |
      sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')
    rm -rf "$tc_dir.tmp"
    mkdir -p "$(dirname "$tc_dir")"
    cp -r "$src" "$tc_dir.tmp"
    chmod -R u+w "$tc_dir.tmp"
    chmod +x "$tc_dir.tmp"/bin/* "$tc_dir.tmp"/pkg/tool/*/*
    mv "$tc_dir.tmp" "$tc_dir"
  fi
  go=$tc_dir/bin/go
fi
echo "act: building nektos/act $version with $("$go" env GOVERSION) into $dir (about 2 minutes the first time)" >&2
mkdir -p "$dir/bin"
GOTOOLCHAIN=auto GOBIN="$dir/bin" "$go" install "github.com/nektos/act@$version"
"$act" --version >&2
echo "$act"
