#!/bin/bash
# Packer stage, inside the guest (offline): install the fsmatrix guest agent, compile the 3n+1
# M routines with the guest's GT.M, install the job-mode boot service, write the image manifest.
set -euo pipefail

: "${FSMATRIX_AGENT_TARBALL:?}" "${FSMATRIX_GIT_SHA:?}" "${FSMATRIX_BUILD_TIME:?}" "${FSMATRIX_VERSION:?}"

# The agent is stdlib-only: Debian's python3 finds it in dist-packages.
site=/usr/lib/python3/dist-packages
rm -rf "$site/fsmatrix"
tar -xf "$FSMATRIX_AGENT_TARBALL" -C "$site"
python3 -m compileall -q "$site/fsmatrix"
python3 -m fsmatrix.agent --version

# Compile the M routines once here, so a broken routine fails the build rather than a run, with the
# GT.M the image's definition declares (manifest.py below checks every declared tool's path too).
gtm_dist=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["tools"]["gtm_dist"])' </tmp/image-definition.json)
if [ ! -x "$gtm_dist/mumps" ]; then
	echo "the image definition declares GT.M in $gtm_dist (tools.gtm_dist), but there is no mumps there:" \
		"$(find /usr/lib/x86_64-linux-gnu/fis-gtm -maxdepth 2 -name mumps 2>/dev/null | tr '\n' ' ')" >&2
	exit 1
fi
export gtm_dist
install -d /opt/fsmatrix/routines
for routine in "$site"/fsmatrix/agent/workloads/*/*.m; do
	(cd /opt/fsmatrix/routines && "$gtm_dist/mumps" -object="$(basename "${routine%.m}").o" "$routine")
done
ls -l /opt/fsmatrix/routines

install -m 644 /tmp/fsmatrix-job.service /etc/systemd/system/fsmatrix-job.service
install -m 644 /tmp/90-fsmatrix-job.rules /etc/udev/rules.d/90-fsmatrix-job.rules
systemctl daemon-reload

install -d /etc/fsmatrix
python3 /tmp/manifest.py /tmp/packages.txt /tmp/image-definition.json /etc/fsmatrix/image.json
cat /etc/fsmatrix/image.json

# Leave no build traces; fstrim lets the compressed qcow2 drop the freed blocks.
rm -f /tmp/fsmatrix-job.service /tmp/90-fsmatrix-job.rules /tmp/manifest.py /tmp/packages.txt \
	/tmp/image-definition.json "$FSMATRIX_AGENT_TARBALL"
journalctl --rotate --vacuum-time=1s >/dev/null 2>&1 || true
fstrim -v / || true
sync
