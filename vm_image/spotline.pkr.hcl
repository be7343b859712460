# The spotline VM image: a Deep Learning VM image with the NVIDIA driver baked
# in (not installed at boot), and the spotline agent as a systemd service.
# Build: vm_image/build_image.sh PROJECT (what cloudbuild.yaml runs).

variable "project_id" {
  type = string
}

variable "zone" {
  type    = string
  default = "us-central1-a"
}

variable "source_image_family" {
  type        = string
  default     = "common-cu124-ubuntu-2204-py310"
  description = "Deep Learning VM family: CUDA 12.4, Python 3.10."
}

variable "source_image_project_id" {
  type    = string
  default = "deeplearning-platform-release"
}

variable "machine_type" {
  type        = string
  default     = "g2-standard-4"
  description = "Built on a GPU machine so that the driver is installed and checked."
}

variable "accelerator_type" {
  type        = string
  default     = "nvidia-tesla-t4"
  description = "Attached when machine_type has no built-in GPU (n1 machines)."
}

variable "accelerator_count" {
  type    = number
  default = 1
}

variable "image_family" {
  type    = string
  default = "spotline-agent"
}

variable "spotline_wheel" {
  type        = string
  description = "Path of the spotline wheel to install (build_image.sh builds it)."
}

locals {
  # Timestamped names in one family: VMs ask for the family, rollback is a delete.
  timestamp  = regex_replace(timestamp(), "[- TZ:]", "")
  image_name = "${var.image_family}-${local.timestamp}"
  # a2, a3 and g2 machine types come with their GPUs; others get them attached.
  # (Spelled out twice: Packer 1.6 locals cannot refer to each other.)
  accelerator_count = can(regex("^(a2|a3|g2)-", var.machine_type)) ? 0 : var.accelerator_count
  accelerator_type  = can(regex("^(a2|a3|g2)-", var.machine_type)) ? "" : "projects/${var.project_id}/zones/${var.zone}/acceleratorTypes/${var.accelerator_type}"
}

source "googlecompute" "spotline" {
  project_id              = var.project_id
  zone                    = var.zone
  source_image_family     = var.source_image_family
  source_image_project_id = [var.source_image_project_id]
  machine_type            = var.machine_type
  accelerator_type        = local.accelerator_type
  accelerator_count       = local.accelerator_count
  # GPUs cannot live-migrate: a host maintenance event must stop the VM.
  on_host_maintenance = "TERMINATE"
  disk_size           = 100
  image_name          = local.image_name
  image_family        = var.image_family
  image_description   = "spotline VM agent on ${var.source_image_family}"
  image_labels = {
    spotline = "true"
  }
  # The Deep Learning VM installs the NVIDIA driver when asked; the build waits
  # for it, so VMs from this image boot with the driver ready.
  metadata = {
    install-nvidia-driver = "True"
  }
  ssh_username = "packer"
}

build {
  sources = ["source.googlecompute.spotline"]

  provisioner "file" {
    source      = var.spotline_wheel
    destination = "/tmp/"
  }

  provisioner "file" {
    source      = "${path.root}/scripts"
    destination = "/tmp/spotline-scripts"
  }

  provisioner "file" {
    source      = "${path.root}/systemd/spotline-agent.service"
    destination = "/tmp/spotline-agent.service"
  }

  provisioner "file" {
    source      = "${path.root}/ops-agent"
    destination = "/tmp/spotline-ops-agent"
  }

  provisioner "shell" {
    execute_command = "sudo -E bash '{{ .Path }}'"
    script          = "${path.root}/scripts/install.sh"
  }
}
