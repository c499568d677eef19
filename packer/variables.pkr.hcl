# Inputs of the Packer stage. `fsmatrix image build` (runner/fsmatrix/image.py) sets all of them;
# the defaults only make `packer validate` meaningful on its own.

variable "base_image" {
  type        = string
  description = "The base qcow2 made by scripts/base.sh (debootstrap)."
  default     = "base.qcow2"
}

variable "disk_size" {
  type        = string
  description = "Virtual size of the disk; the base image's real size, so the box metadata is right."
  default     = "3072M"
}

variable "accelerator" {
  type        = string
  description = "kvm where a KVM guest really runs (see `fsmatrix image probe-accel`), else tcg."
  default     = "tcg"
}

variable "output_directory" {
  type    = string
  default = "output"
}

variable "vm_name" {
  type        = string
  description = "File name of the qcow2 (fsmatrix-<inputs hash>.qcow2)."
  default     = "fsmatrix.qcow2"
}

variable "ssh_private_key_file" {
  type        = string
  description = "The build key; its public half is root's authorized key in the base image."
  default     = "id_ed25519"
}

variable "agent_tarball" {
  type        = string
  description = "fsmatrix/__init__.py and fsmatrix/agent/** as a tar file."
  default     = "agent.tar"
}

variable "packages_file" {
  type        = string
  description = "The image's whole package list (packages.txt + its definition's), named packages.txt."
  default     = "packages.txt"
}

variable "definition_file" {
  type        = string
  description = "The image's definition as the manifest records it (name, suite, tools), named image-definition.json."
  default     = "image-definition.json"
}

variable "manifest_out" {
  type        = string
  description = "Where the image manifest is copied to on the host."
  default     = "image.json"
}

variable "box_out" {
  type    = string
  default = "fsmatrix.box"
}

variable "serial_log" {
  type        = string
  description = "The guest's serial console during the build."
  default     = "serial.log"
}

variable "git_sha" {
  type    = string
  default = "unknown"
}

variable "build_time" {
  type    = string
  default = "unknown"
}

variable "fsmatrix_version" {
  type    = string
  default = "unknown"
}

variable "image_name" {
  type    = string
  default = "fsmatrix"
}
