#!/usr/bin/env bash
# actions/checkout stand-in (action.yml): REPOSITORY at REF (empty: its HEAD) into WHERE.
set -euo pipefail
source_url=$GITHUB_SERVER_URL/$REPOSITORY
dest=$GITHUB_WORKSPACE/$WHERE
mkdir -p "$dest"
git init -q "$dest"
git -C "$dest" fetch -q --tags "$source_url" '+refs/heads/*:refs/remotes/origin/*'
if [ -z "$REF" ]; then
  git -C "$dest" fetch -q "$source_url" HEAD
  commit=$(git -C "$dest" rev-parse FETCH_HEAD)
else
  commit=$(git -C "$dest" rev-parse --verify --quiet "origin/$REF^{commit}" ||
    git -C "$dest" rev-parse --verify --quiet "$REF^{commit}") || {
    echo "checkout: no branch, tag or commit '$REF' in $source_url" >&2
    exit 1
  }
fi
git -C "$dest" checkout -q --detach "$commit"
echo "checked out $REPOSITORY at $commit into $dest"
