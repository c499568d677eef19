#!/usr/bin/env bash
# Install fsmatrix's dependencies in the current checkout (Debian packages need root).
set -euo pipefail
if [ "$(id -u)" -eq 0 ]; then
  make deps
else
  sudo --preserve-env=PATH make deps
fi
