# Provisions the base image: the guest agent, the compiled 3n+1 routines, the job-mode boot
# service and the image manifest; then packs the qcow2 as a libvirt Vagrant box.

build {
  sources = ["source.qemu.guest"]

  provisioner "file" {
    sources     = [var.agent_tarball, var.packages_file, var.definition_file, "${path.root}/scripts/manifest.py", "${path.root}/scripts/fsmatrix-job.service", "${path.root}/scripts/90-fsmatrix-job.rules"]
    destination = "/tmp/"
  }

  provisioner "shell" {
    script = "${path.root}/scripts/provision.sh"
    environment_vars = [
      "FSMATRIX_AGENT_TARBALL=/tmp/${basename(var.agent_tarball)}",
      "FSMATRIX_GIT_SHA=${var.git_sha}",
      "FSMATRIX_BUILD_TIME=${var.build_time}",
      "FSMATRIX_VERSION=${var.fsmatrix_version}",
      "FSMATRIX_IMAGE_NAME=${var.image_name}",
    ]
  }

  provisioner "file" {
    direction   = "download"
    source      = "/etc/fsmatrix/image.json"
    destination = var.manifest_out
  }

  post-processor "vagrant" {
    keep_input_artifact = true
    compression_level   = 1
    output              = var.box_out
  }
}
