#!/bin/sh
# The container image's entrypoint: fsmatrix, after giving a privileged container device nodes for
# loop devices the kernel has not made yet. podman and docker copy the host's /dev nodes into a
# privileged container when it starts; a loop device the kernel adds later (losetup --find, when the
# existing ones are busy) appears only in the host's /dev, and losetup then fails with "No such file
# or directory". Nodes for 64 indices past the highest existing one cover that (opening a node of a
# loop device that does not exist yet makes the kernel create it).
set -eu
if [ -c /dev/loop-control ] && [ -w /dev ]; then
	highest=-1
	for dev in /sys/block/loop*; do
		[ -e "$dev" ] || continue
		index=${dev##*/loop}
		[ "$index" -gt "$highest" ] && highest=$index
	done
	index=0
	while [ "$index" -le $((highest + 64)) ]; do
		[ -e "/dev/loop$index" ] || mknod -m 0660 "/dev/loop$index" b 7 "$index" 2>/dev/null || true
		index=$((index + 1))
	done
fi
exec /opt/fsmatrix/venv/bin/fsmatrix "$@"
