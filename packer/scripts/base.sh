#!/bin/bash
# Base stage of a guest image, run on the host as root: debootstrap the image's Debian suite with
# its package list (both from packer/images/NAME.yaml, resolved by fsmatrix.backends.image), configure it for headless serial-console use, and write a bootable qcow2 without mounting
# anything (the filesystem is filled with `mke2fs -d`; GRUB goes in with grub-mkimage + dd, as
# grub-install needs a mounted target). The only step of the image build that uses the mirror.
#
# usage: base.sh PACKAGES_FILE DEB_CACHE_DIR WORK_DIR SSH_PUBKEY OUT_QCOW2 OUT_KERNEL DISK_MIB SUITE
set -euo pipefail

if [ "$#" -ne 8 ]; then
	echo "usage: $0 PACKAGES_FILE DEB_CACHE_DIR WORK_DIR SSH_PUBKEY OUT_QCOW2 OUT_KERNEL DISK_MIB SUITE" >&2
	exit 2
fi
packages_file=$1
deb_cache=$2
work=$3
pubkey=$4
out_qcow2=$5
out_kernel=$6
disk_mib=$7
suite=$8

mirror=${FSMATRIX_MIRROR:-http://deb.debian.org/debian}
root="$work/rootfs"
grub_dir=/usr/lib/grub/i386-pc

packages=$(sed -e 's/#.*//' "$packages_file" | awk 'NF { print $1 }' | paste -sd, -)
if [ -z "$packages" ]; then
	echo "no packages in $packages_file" >&2
	exit 2
fi

mkdir -p "$deb_cache" "$work"
rm -rf "$root"

start=$(date +%s)
echo "base: debootstrap $suite ($(echo "$packages" | tr ',' ' ' | wc -w) packages, cache $deb_cache)"
# --cache-dir keeps the downloaded .debs: a rebuild only fetches what changed.
debootstrap --variant=minbase --include="$packages" --cache-dir="$deb_cache" \
	"$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -n 30 "$work/debootstrap.log" >&2
	exit 1
}
echo "base: debootstrap took $(($(date +%s) - start)) s"

uuid=$(cat /proc/sys/kernel/random/uuid)
kernel=$(cd "$root/boot" && ls vmlinuz-*)
version=${kernel#vmlinuz-}

echo fsmatrix-guest >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tfsmatrix-guest\n' >"$root/etc/hosts"
printf 'UUID=%s\t/\text4\terrors=remount-ro\t0\t1\n' "$uuid" >"$root/etc/fstab"

# A small initramfs: only what finds and mounts the root disk (37 MB -> 8 MB, faster TCG boots).
sed -i 's/^MODULES=.*/MODULES=list/' "$root/etc/initramfs-tools/initramfs.conf"
printf '%s\n' virtio_pci virtio_blk virtio_scsi sd_mod ext4 crc32c_generic >>"$root/etc/initramfs-tools/modules"
chroot "$root" update-initramfs -u -k "$version" >"$work/initramfs.log" 2>&1 || {
	tail -n 30 "$work/initramfs.log" >&2
	exit 1
}

# QEMU's user-mode NIC (its default MAC: Packer, the image tests, Vagrant's loopback mode) gets a
# static address and no gateway: SSH port forwarding works, and the guest has no route to anything
# outside (no DHCP wait either). Any other NIC (vagrant-libvirt's management network) asks DHCP.
# Job mode has no NIC at all.
cat >"$root/etc/systemd/network/10-fsmatrix-usernet.network" <<'EOF'
[Match]
MACAddress=52:54:00:12:34:56

[Network]
Address=10.0.2.15/24
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF
cat >"$root/etc/systemd/network/20-fsmatrix-dhcp.network" <<'EOF'
[Match]
Name=en* eth*

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF
if ! systemctl --root="$root" enable systemd-networkd.service >/dev/null 2>&1; then
	echo "no systemd-networkd.service in $suite's root: add the package that has it to the image's definition" >&2
	exit 1
fi
# Nothing here waits for the network; a guest without a NIC would otherwise wait 2 min at boot.
# e2scrub_reap costs ~10 s per boot.
systemctl --root="$root" mask systemd-networkd-wait-online.service e2scrub_reap.service \
	e2scrub_all.timer apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1
# Debian's postgresql package makes a default cluster that would start at boot and run beside
# every benchmark: the pgbench workload makes its own cluster on the data disk, so drop it.
if [ -d "$root/etc/postgresql" ]; then
	for cluster in "$root"/etc/postgresql/*/*/; do
		[ -d "$cluster" ] || continue
		cluster=${cluster%/}
		pg_version=$(basename "$(dirname "$cluster")")
		chroot "$root" pg_dropcluster "$pg_version" "$(basename "$cluster")" >/dev/null 2>&1 || true
	done
	systemctl --root="$root" mask postgresql.service >/dev/null 2>&1
fi

install -d -m 700 "$root/root/.ssh"
install -m 600 "$pubkey" "$root/root/.ssh/authorized_keys"
# Root has no password: log-in is by key only (the build key, or the console with init=).
passwd --root "$root" -l root >/dev/null

# The image is compressed later: drop what the guest never needs.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
	"$root"/usr/share/man/* "$root"/usr/share/locale/*

# GRUB on the serial console, booting the one kernel straight away.
install -d "$root/boot/grub/i386-pc"
cp "$grub_dir"/*.mod "$grub_dir"/*.lst "$root/boot/grub/i386-pc/"
cat >"$root/boot/grub/grub.cfg" <<EOF
set timeout=0
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
search --no-floppy --fs-uuid --set=root $uuid
linux /boot/$kernel root=UUID=$uuid ro console=tty0 console=ttyS0,115200
initrd /boot/initrd.img-$version
boot
EOF

# Disk: MBR + GRUB core in the gap before the first partition (1 MiB) + one ext4 partition.
part_mib=$((disk_mib - 1))
raw="$work/disk.raw"
rm -f "$raw" "$work/root.ext4"
mke2fs -q -t ext4 -U "$uuid" -L fsmatrix-root -d "$root" "$work/root.ext4" "${part_mib}M"
truncate -s "${disk_mib}M" "$raw"
echo 'start=2048, type=83, bootable' | sfdisk -q --label dos "$raw"
grub-mkimage -O i386-pc -o "$work/core.img" -p '(hd0,msdos1)/boot/grub' \
	biosdisk part_msdos ext2 search search_fs_uuid normal serial terminal linux boot configfile echo test
dd if="$grub_dir/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$raw" bs=512 seek=1 conv=notrunc status=none
dd if="$work/root.ext4" of="$raw" bs=1M seek=1 conv=notrunc,sparse status=none
rm -f "$work/root.ext4"

qemu-img convert -O qcow2 "$raw" "$out_qcow2.tmp"
mv "$out_qcow2.tmp" "$out_qcow2"
cp "$root/boot/$kernel" "$out_kernel"
rm -f "$raw"
echo "base: $out_qcow2 ($version) in $(($(date +%s) - start)) s"
