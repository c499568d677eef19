# Boots the debootstrap base image under QEMU with the guest's network restricted: the guest can
# reach nothing outside (restrict=on), only the forwarded SSH port; the build is offline.

source "qemu" "guest" {
  iso_url          = var.base_image
  iso_checksum     = "none"
  disk_image       = true
  use_backing_file = false
  disk_size        = var.disk_size
  format           = "qcow2"
  disk_compression = true
  disk_interface   = "virtio"
  net_device       = "virtio-net"
  accelerator      = var.accelerator
  cpus             = 2
  memory           = 1024
  headless         = true
  vnc_bind_address = "127.0.0.1"
  output_directory = var.output_directory
  vm_name          = var.vm_name
  boot_wait        = "0s"

  # Any qemuargs key replaces Packer's default for it: keep id=user.0 and the SSH forward.
  qemuargs = [
    ["-netdev", "user,id=user.0,restrict=on,hostfwd=tcp:127.0.0.1:{{ .SSHHostPort }}-:22"],
    ["-cpu", "max"],
    ["-serial", "file:${var.serial_log}"],
    ["-name", "fsmatrix-packer-${var.image_name}"],
  ]

  communicator         = "ssh"
  ssh_host             = "127.0.0.1"
  ssh_username         = "root"
  ssh_private_key_file = var.ssh_private_key_file
  ssh_timeout          = "15m"
  shutdown_command     = "systemctl poweroff"
  shutdown_timeout     = "5m"
}
